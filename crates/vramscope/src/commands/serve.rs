//! `vramscope serve`: the local web UI and the JSON API (the server lives in `src/serve/`).

use super::CmdResult;
use crate::serve as server;
use std::net::{IpAddr, SocketAddr};

/// Serves with the command line's fetch flags: the server's session (`Session`) lives as long as
/// it does and holds its uploads.
pub fn run(s: &crate::app::Session, bind: IpAddr, port: u16, allow_hub: bool) -> CmdResult {
    let session = crate::app::Session::new(s.refresh, s.verbose);
    server::serve(SocketAddr::new(bind, port), allow_hub, session)
        .map_err(|e| format!("serve: cannot listen on {bind}:{port}: {e}"))?;
    Ok(0)
}

//! `vramscope serve`: the local web UI and the JSON API (the server lives in `src/serve/`).

use super::CmdResult;
use crate::serve as server;
use std::net::{IpAddr, SocketAddr};

pub fn run(bind: IpAddr, port: u16, allow_hub: bool) -> CmdResult {
    server::serve(SocketAddr::new(bind, port), allow_hub)
        .map_err(|e| format!("serve: cannot listen on {bind}:{port}: {e}"))?;
    Ok(0)
}

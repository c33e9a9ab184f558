//! The head layout of a Mamba2 mixer as the hybrid configs spell it (`mamba_d_head`,
//! `mamba_n_groups`, `mamba_d_state`): Falcon-H1 (`FalconH1Config`), Bamba (`BambaConfig`) and
//! Granite 4.0-H (`GraniteMoeHybridConfig`) read them alike.

use super::fields::Cfg;
use crate::error::Result;
use serde_json::Value;

/// `mamba_d_head` (null or `"auto"`: the inner width over the heads), checked to tile the
/// inner width (no tensor has it: checked, as transformers' config checks it);
/// `mamba_n_groups` (1) dividing the heads; `mamba_d_state` (256). Returns (groups, d_state).
pub(super) fn mamba2_heads(cfg: &Cfg, d_inner: u64, heads: u64) -> Result<(u64, u64)> {
    let head_dim = match cfg.obj.get("mamba_d_head") {
        None | Some(Value::Null) => d_inner / heads,
        Some(Value::String(s)) if s == "auto" => d_inner / heads,
        Some(_) => cfg.size(&["mamba_d_head"], None)?,
    };
    if heads.checked_mul(head_dim) != Some(d_inner) {
        return Err(cfg.err(
            "mamba_d_head",
            format!("{heads} heads × {head_dim} is not the Mamba inner width {d_inner}"),
        ));
    }
    let groups = cfg.size(&["mamba_n_groups"], Some(1))?;
    if !heads.is_multiple_of(groups) {
        return Err(cfg.err(
            "mamba_n_groups",
            format!("{groups} does not divide mamba_n_heads {heads}"),
        ));
    }
    let d_state = cfg.size(&["mamba_d_state"], Some(256))?;
    Ok((groups, d_state))
}

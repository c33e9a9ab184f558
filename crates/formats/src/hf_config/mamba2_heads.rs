//! The head layout of a Mamba2 mixer as the hybrid configs spell it (`mamba_d_head`,
//! `mamba_n_groups`, `mamba_d_state`): Falcon-H1 (`FalconH1Config`), Bamba (`BambaConfig`) and
//! Granite 4.0-H (`GraniteMoeHybridConfig`) read them alike; and the mixer built from them,
//! which Zamba2 (`Zamba2MambaMixer`) shares.

use super::fields::Cfg;
use super::MAX_DIM;
use crate::error::Result;
use serde_json::Value;
use vramscope_core::model::{Ssm, SsmVersion};

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
    let groups = head_groups(cfg, ("mamba_n_groups", "mamba_n_heads"), heads)?;
    let d_state = cfg.size(&["mamba_d_state"], Some(256))?;
    Ok((groups, d_state))
}

/// The number of B/C groups under `keys.0` (1 when absent), which must divide the `heads` read
/// under `keys.1`: each group serves a whole number of heads (the `repeat_interleave(heads //
/// n_groups)` of transformers' `mamba2_chunk_scan` torch path, e.g. `BambaMixer.torch_forward`).
pub(super) fn head_groups(cfg: &Cfg, keys: (&str, &str), heads: u64) -> Result<u64> {
    let (key, heads_key) = keys;
    let groups = cfg.size(&[key], Some(1))?;
    if !heads.is_multiple_of(groups) {
        return Err(cfg.err(key, format!("{groups} does not divide {heads_key} {heads}")));
    }
    Ok(groups)
}

/// A Mamba2 mixer of checked widths (inner width, state, heads, groups) as an [`Ssm`]:
/// `mamba_d_conv` (4) read, no `dt_rank`; no biases, a state in the compute dtype and no chunk,
/// which the family's reader sets after. The input projection — `d_inner + conv_dim + heads`
/// wide, `conv_dim = d_inner + 2 · groups · d_state` (transformers `BambaMixer.__init__`,
/// `Zamba2MambaMixer.__init__`, `FalconH1Mixer.__init__`) — must fit what vramscope accepts.
pub(super) fn mamba2_ssm(
    cfg: &Cfg,
    d_inner: u64,
    d_state: u64,
    heads: u64,
    groups: u64,
) -> Result<Ssm> {
    let in_proj = groups
        .checked_mul(d_state)
        .and_then(|v| v.checked_mul(2))
        .and_then(|v| v.checked_add(d_inner))
        .and_then(|conv_dim| conv_dim.checked_add(d_inner + heads));
    if in_proj.is_none_or(|v| v > MAX_DIM) {
        return Err(cfg.err("mamba_d_state", "the Mamba projections are too large"));
    }
    Ok(Ssm {
        version: SsmVersion::Mamba2,
        d_inner,
        d_state,
        d_conv: cfg.size(&["mamba_d_conv"], Some(4))?,
        dt_rank: 0,
        heads,
        groups,
        conv_bias: false,
        proj_bias: false,
        state_fp32: false,
        chunk: 0,
    })
}

//! The job's `parallel`: the distributed layout, its degrees checked against each other.

use super::enums::Offload;
use super::fields::MAX_GPUS;
use super::fields::{boolean, count, object, text};
use crate::error::CoreError;
use serde::Serialize;
use serde_json::Value;

/// Distributed layout (contract `parallel`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parallel {
    pub gpus: u64,
    pub dp: u64,
    pub tp: u64,
    pub pp: u64,
    pub sp: bool,
    pub cp: u64,
    pub ep: u64,
    pub zero: u64,
    pub offload: Offload,
    pub microbatches: u64,
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel {
            gpus: 1,
            dp: 1,
            tp: 1,
            pp: 1,
            sp: false,
            cp: 1,
            ep: 1,
            zero: 0,
            offload: Offload::None,
            microbatches: 1,
        }
    }
}

pub(super) fn parse_parallel(v: Option<&Value>) -> Result<Parallel, CoreError> {
    let Some(obj) = object("parallel", v, "an object")? else {
        return Ok(Parallel::default());
    };
    let g = |k: &str, d: u64| count(&format!("parallel.{k}"), obj.get(k), d, 1, MAX_GPUS);
    let tp = g("tp", 1)?;
    let pp = g("pp", 1)?;
    let cp = g("cp", 1)?;
    let ep = g("ep", 1)?;
    let (gpus, dp) = data_parallel(obj, tp, pp, cp)?;
    if gpus > MAX_GPUS {
        return Err(CoreError::field(
            "parallel.gpus",
            format!("{gpus} is more than vramscope accepts"),
        ));
    }
    if ep > 1 && dp % ep != 0 {
        return Err(CoreError::field(
            "parallel.ep",
            format!("{ep} does not divide dp {dp}"),
        ));
    }
    let zero = count("parallel.zero", obj.get("zero"), 0, 0, 3)?;
    let offload = match text("parallel.offload", obj.get("offload"))? {
        Some(s) => Offload::parse("parallel.offload", s)?,
        None => Offload::None,
    };
    let sp = boolean("parallel.sp", obj.get("sp"), false)?;
    let microbatches = g("microbatches", 1)?;
    Ok(Parallel {
        gpus,
        dp,
        tp,
        pp,
        sp,
        cp,
        ep,
        zero,
        offload,
        microbatches,
    })
}

/// `parallel.gpus` and `parallel.dp`: either one derives the other from tp × pp × cp (the
/// model-parallel group), and both given must agree.
fn data_parallel(
    obj: &serde_json::Map<String, Value>,
    tp: u64,
    pp: u64,
    cp: u64,
) -> Result<(u64, u64), CoreError> {
    let model_par = tp.saturating_mul(pp).saturating_mul(cp);
    match (
        obj.get("gpus").filter(|v| !v.is_null()),
        obj.get("dp").filter(|v| !v.is_null()),
    ) {
        (Some(gv), Some(dv)) => {
            let gpus = count("parallel.gpus", Some(gv), 1, 1, MAX_GPUS)?;
            let dp = count("parallel.dp", Some(dv), 1, 1, MAX_GPUS)?;
            if dp.saturating_mul(model_par) != gpus {
                return Err(CoreError::field(
                    "parallel.gpus",
                    format!("{gpus} GPUs is not dp {dp} × tp {tp} × pp {pp} × cp {cp}"),
                ));
            }
            Ok((gpus, dp))
        }
        (Some(gv), None) => {
            let gpus = count("parallel.gpus", Some(gv), 1, 1, MAX_GPUS)?;
            if gpus % model_par != 0 {
                return Err(CoreError::field(
                    "parallel.gpus",
                    format!("{gpus} GPUs is not a multiple of tp {tp} × pp {pp} × cp {cp}"),
                ));
            }
            Ok((gpus, gpus / model_par))
        }
        (None, dv) => {
            let dp = count("parallel.dp", dv, 1, 1, MAX_GPUS)?;
            Ok((dp.saturating_mul(model_par), dp))
        }
    }
}

//! `optimizer.step()` as the caching allocator sees it: the states made on the first step,
//! then the step's own temporaries, whichever implementation the job runs.
//!
//! Sources (the walk's `estimate/optimizer.rs` models the same code):
//! - torch 2.x `torch/optim/adam.py` (`Adam._init_group`, `_multi_tensor_adam`,
//!   `_single_tensor_adam`; `AdamW` is `Adam` with `decoupled_weight_decay`), `sgd.py`
//!   (`_single_tensor_sgd`, `_multi_tensor_sgd`).
//! - bitsandbytes 0.50 `bitsandbytes/optim/optimizer.py` (`Optimizer8bit.step`,
//!   `get_state_buffer`, `Optimizer2State.init_state` / `update_step`) and
//!   `backends/cuda/ops.py` (`_optimizer_update_32bit_impl`,
//!   `_optimizer_update_8bit_blockwise_impl`: one kernel on the given pointers, no tensor made).

use super::super::Sink;
use super::{Live, TrainInputs};

/// What a step makes besides the states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StepKind {
    /// Nothing: SGD (foreach or for-loop: its momentum buffer is the state, every update in
    /// place), torch's fused AdamW (one kernel), bitsandbytes' 32-bit update of a small
    /// parameter.
    #[default]
    InPlace,
    /// foreach Adam/AdamW: `torch._foreach_sqrt(exp_avg_sqs)` makes one tensor per parameter
    /// (`_multi_tensor_adam`), released together after `_foreach_addcdiv_`.
    ForeachSqrt,
    /// `foreach=False` Adam/AdamW (`_single_tensor_adam`): per parameter
    /// `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` ([`adam_loop`]).
    LoopDenom,
    /// bitsandbytes' blockwise 8-bit Adam: the two 256-entry fp32 quantization maps
    /// (`name2qmap["dynamic"]`, `["udynamic"]`, made on the host by `fill_qmap`) moved to the
    /// device by the first parameter that gets 8-bit states (`init_state`:
    /// `self.name2qmap[..].to(p.device)`, a no-op afterwards); each map's bytes.
    Bnb8bitMaps(u64),
}

/// `optimizer.step()`: the states on the first step, then the implementation's temporaries.
/// torch makes every state in `_init_group` before the update; bitsandbytes makes a
/// parameter's states (`init_state`) just before its update (`update_step`) — as its updates
/// make nothing, the events are the same either way, the maps coming before the first 8-bit
/// parameter's states.
pub(super) fn optimizer<S: Sink>(s: &mut S, inp: &TrainInputs, live: &mut Live) {
    if let Some(z) = inp.zero {
        super::super::zero::step(s, z, &mut live.zero, !live.states_made);
        live.states_made = true;
        return;
    }
    if !live.states_made {
        let mut maps = match inp.step {
            StepKind::Bnb8bitMaps(b) => b,
            _ => 0,
        };
        for p in inp.params.iter().filter(|p| p.grad > 0) {
            // `absmax1` (the third state) exists only for a parameter with 8-bit states.
            if maps > 0 && p.states[2] > 0 {
                s.alloc(maps);
                s.alloc(maps);
                maps = 0;
            }
            for &b in &p.states {
                s.alloc(b);
            }
        }
        live.states_made = true;
    }
    match inp.step {
        StepKind::ForeachSqrt => foreach_sqrt(s, inp),
        StepKind::LoopDenom => adam_loop(s, inp),
        StepKind::InPlace | StepKind::Bnb8bitMaps(_) => {}
    }
}

/// foreach Adam's sqrt list, released last tensor first (the list is destroyed back to front,
/// as the H200 trace shows).
fn foreach_sqrt<S: Sink>(s: &mut S, inp: &TrainInputs) {
    let sqrt: Vec<u32> = inp
        .params
        .iter()
        .filter(|p| p.grad > 0)
        .map(|p| s.alloc(p.states[1]))
        .collect();
    for id in sqrt.into_iter().rev() {
        s.free(id);
    }
}

/// `_single_tensor_adam`, parameter by parameter (torch 2.x, `capturable=False`): `lerp_`,
/// `mul_`, `addcmul_` and AdamW's `param.mul_(1 - lr·wd)` are in place (the bias corrections
/// are Python floats, `step` a host tensor); then `exp_avg_sq.sqrt()` (a tensor of the
/// state's size), `/ bias_correction2_sqrt` (another), the sqrt dropped as the division
/// returns, `.add_(eps)` in place, and binding the result to `denom` drops the previous
/// parameter's denom; `param.addcdiv_` is in place. The last denom goes when the function
/// returns. The walk's `optimizer::adam_loop_scratch` (fresh = 2) is this peak.
fn adam_loop<S: Sink>(s: &mut S, inp: &TrainInputs) {
    let mut denom = u32::MAX;
    for p in inp.params.iter().filter(|p| p.grad > 0) {
        let sqrt = s.alloc(p.states[1]);
        let quotient = s.alloc(p.states[1]);
        s.free(sqrt);
        s.free(denom);
        denom = quotient;
    }
    s.free(denom);
}

//! The screen's model states of one GPU under a layout: the bytes per parameter of each state
//! and the sharding of each (ZeRO stage / FSDP mode over dp), as `estimate::states` keeps them,
//! applied to the first pipeline stage's share (moved out of `plan.rs`; DeepSpeed's fp32
//! ZeRO-1/2 master partition added).

use super::peft::state_bytes_per_element;
use super::{Coeffs, Layout};
use crate::job::ResolvedJob;

/// Bytes per parameter of each model state (param, grad, master, optimizer states) and the
/// sharding divisor of each (ZeRO stage / FSDP mode over `dp`) for a layout.
pub(super) struct StateWidths {
    pub(super) param: u64,
    pub(super) grad: u64,
    pub(super) master: u64,
    pub(super) states: u64,
    /// Divisors: parameters, gradients, optimizer states and master weights.
    pub(super) shard_param: u64,
    pub(super) shard_grad: u64,
    pub(super) shard_states: u64,
}

impl StateWidths {
    pub(super) fn of(l: &Layout, base: &ResolvedJob) -> Self {
        let dp = l.dp.max(1);
        let c = base.precision.compute_bytes();
        let fp32 = base.precision == crate::job::Precision::Fp32;
        // Bytes per parameter: (param, grad, master, states).
        let (param, grad, master, states) = match (l.framework, base.precision.is_mixed()) {
            ("megatron", true) => (2, 4, 4, 8),
            ("deepspeed", true) => (2, 2, 4, 8),
            // ZeRO-1/2's fp32 master partition is a clone also of an fp32 model
            // (`estimate::states` `widths`, `stage_1_and_2.py` `__init__`).
            ("deepspeed", false) if fp32 && matches!(l.zero, 1 | 2) => (4, 4, 4, 8),
            (_, true) => (4, 4, 0, 8),
            (_, false) => (c, c, 0, 2 * c),
        };
        let z = l.zero;
        let (shard_param, shard_grad, shard_states) = match l.framework {
            // FSDP shards the parameters under SHARD_GRAD_OP too (`estimate::states::profiles::shards`).
            "fsdp" => (
                if z >= 2 { dp } else { 1 },
                if z >= 2 { dp } else { 1 },
                if z >= 1 { dp } else { 1 },
            ),
            "deepspeed" => (
                if z >= 3 { dp } else { 1 },
                if z >= 2 { dp } else { 1 },
                if z >= 1 { dp } else { 1 },
            ),
            _ => (1, 1, if z >= 1 { dp } else { 1 }),
        };
        StateWidths {
            param,
            grad,
            master,
            states,
            shard_param,
            shard_grad,
            shard_states,
        }
    }
}

/// One GPU's model states under a layout, in bytes.
pub(super) struct ScreenStates {
    pub(super) params: u64,
    pub(super) grads: u64,
    pub(super) states: u64,
    pub(super) master: u64,
    /// Trainable elements on this GPU (all of its parameters, or the adapters).
    pub(super) trainable: u64,
}

/// The first stage's share of the model states: its blocks, the embeddings, the head when
/// there is one stage, divided by tp and sharded as [`StateWidths`] says. PEFT: the frozen
/// base without gradient or states; fp32 adapters with both (DeepSpeed: at the model's width,
/// with an fp32 master).
pub(super) fn screen_states(
    c: &Coeffs,
    l: &Layout,
    base: &ResolvedJob,
    w: &StateWidths,
) -> ScreenStates {
    let (tp, pp) = (l.tp, l.pp);
    let stage_layers = c.layers.div_ceil(pp);
    let (sp, sg, ss) = (w.shard_param, w.shard_grad, w.shard_states);
    match &c.peft {
        None => {
            let blocks = c.p_blocks / c.layers.max(1) * stage_layers;
            let head = if pp == 1 { c.p_head } else { 0 };
            let p = (c.p_embed + blocks + head) / tp;
            ScreenStates {
                params: p * w.param / sp,
                grads: p * w.grad / sg,
                states: p * w.states / ss,
                master: p * w.master / ss,
                trainable: p,
            }
        }
        Some(pc) => {
            let head_frozen = if pp == 1 { pc.frozen_head } else { 0 };
            let frozen =
                (pc.frozen_embed + pc.frozen_blocks / c.layers.max(1) * stage_layers + head_frozen)
                    / tp;
            let a = (pc.adapters_blocks / c.layers.max(1) * stage_layers + pc.adapters_other) / tp;
            // DeepSpeed's engine casts the adapters to the model's width and keeps them an fp32
            // master partition (`estimate::states` `Rules::engine_casts`).
            let ds = l.framework == "deepspeed";
            let aw = match base.peft.as_ref() {
                _ if ds => w.param,
                Some(p) => p.adapter_dtype.bytes(),
                None => 4,
            };
            let s = state_bytes_per_element(base.optimizer, if ds { 4 } else { aw });
            // The saved modules' copies (embeddings, head) sit on the first stage when whole.
            let (sb, se) = (pc.saved_bytes / tp, pc.saved_elements / tp);
            let sw = sb.checked_div(se).unwrap_or(0);
            ScreenStates {
                params: (frozen + aw * a + sb) / sp,
                grads: (aw * a + sb) / sg,
                states: (a * s + se * state_bytes_per_element(base.optimizer, sw)) / ss,
                master: if ds { a * w.master / ss } else { 0 },
                trainable: a + se,
            }
        }
    }
}

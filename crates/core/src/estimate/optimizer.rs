//! Optimizer state and optimizer-step scratch, tensor by tensor, as the libraries allocate them.
//!
//! Sources (read for this module):
//! - torch 2.3–2.9 `torch/optim/adam.py` (`Adam._init_group`, `_multi_tensor_adam`,
//!   `_fused_adam`); `AdamW` is `Adam` with decoupled weight decay and allocates the same.
//! - torch `torch/optim/sgd.py` (`_multi_tensor_sgd`: `momentum_buffer` = clone of the grad).
//! - bitsandbytes ≥ 0.44 `bitsandbytes/optim/optimizer.py` (`Optimizer2State.init_state`):
//!   block size 256 since bnb#1365 (2048 before), `min_8bit_size` 4096.
//! - bitsandbytes `bitsandbytes/optim/optimizer.py` `Optimizer8bit.get_state_buffer`: with
//!   `is_paged` (`PagedAdamW`, `PagedAdamW8bit`) a parameter of at least 1e5 elements gets its
//!   `state1`/`state2` from `F.get_paged` (`cudaMallocManaged`: unified memory, outside
//!   PyTorch's caching allocator), smaller ones `torch.zeros_like` as unpaged; the 8-bit
//!   `absmax1`/`absmax2` are `torch.zeros` on the device either way (read at 0.50); the 32-bit
//!   `PagedAdamW` keeps fp32 `state1`/`state2` whatever the parameter dtype
//!   (`Optimizer2State.init_state`).
//! - transformers `src/transformers/optimization.py` `Adafactor` (HF defaults: `beta1=None`,
//!   factored second moment for ≥ 2-D tensors, states in the fp32-upcast grad dtype).
//! - lion-pytorch (lucidrains) `lion_pytorch.py` `update_fn` (no foreach path).
//!
//! The `step` counters of torch's Adam/AdamW live on the host (`torch.tensor(0.0)`, "special
//! device hosting for step") unless `fused` or `capturable`; with `fused=True` each parameter
//! tensor gets a 0-dim fp32 `step` on the device. bitsandbytes keeps `step` as a Python int.

use crate::error::CoreError;
use crate::inventory::elements_of;
use crate::job::{Optimizer, OptimizerImpl};

/// bitsandbytes `min_8bit_size`: smaller tensors keep 32-bit states.
pub const BNB_MIN_8BIT_SIZE: u64 = 4096;
/// bitsandbytes blockwise 8-bit optimizer block (bnb ≥ 0.44; 2048 before).
pub const BNB_OPTIM_BLOCK: u64 = 256;
/// bitsandbytes' signed and unsigned dynamic maps (`qmap1`, `qmap2`): 256 fp32 entries each,
/// created once per optimizer and shared by every 8-bit parameter.
pub const BNB_QMAP_BYTES: u64 = 2 * 256 * 4;
/// bitsandbytes pages the states of parameters of at least this many elements
/// (`get_state_buffer`: `p.numel() < 1e5` stays unpaged).
pub const BNB_PAGED_MIN_ELEMENTS: u64 = 100_000;

/// bitsandbytes' blockwise 8-bit Adam, paged or not.
pub fn is_8bit(opt: Optimizer) -> bool {
    matches!(opt, Optimizer::AdamW8bit | Optimizer::AdamW8bitPaged)
}

/// bitsandbytes' paged optimizers: their large states live in unified memory.
pub fn is_paged(opt: Optimizer) -> bool {
    matches!(opt, Optimizer::AdamWPaged | Optimizer::AdamW8bitPaged)
}

/// Bytes of a parameter's optimizer states that a paged optimizer puts in unified memory
/// (evictable to host RAM under pressure): for a parameter of at least
/// [`BNB_PAGED_MIN_ELEMENTS`] elements, the states `get_state_buffer` makes (`state1`,
/// `state2`: `F.get_paged`), none otherwise or for an unpaged optimizer. The 8-bit optimizer's
/// `absmax1`/`absmax2` are plain `torch.zeros` on the device (bitsandbytes 0.50
/// `Optimizer2State.init_state`): PyTorch's allocator holds them even when paged.
pub fn paged_state_bytes(opt: Optimizer, shape: &[u64]) -> Result<u64, CoreError> {
    if !(is_paged(opt) && numel(shape)? >= BNB_PAGED_MIN_ELEMENTS) {
        return Ok(0);
    }
    Ok(state_tensors(opt, shape, 4)?
        .iter()
        .filter(|t| is_state_buffer(t.name))
        .map(|t| t.bytes)
        .sum())
}

/// The states bitsandbytes makes through `get_state_buffer` (paged when large).
fn is_state_buffer(name: &str) -> bool {
    matches!(name, "state1" | "state2")
}

/// One device allocation an optimizer keeps for a parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTensor {
    /// The key in the optimizer's per-parameter state dict.
    pub name: &'static str,
    pub bytes: u64,
}

fn overflow(what: &str) -> CoreError {
    CoreError::Overflow {
        what: format!("optimizer {what}"),
    }
}

fn numel(shape: &[u64]) -> Result<u64, CoreError> {
    elements_of(shape).ok_or_else(|| overflow("state size"))
}

fn times(a: u64, b: u64) -> Result<u64, CoreError> {
    a.checked_mul(b).ok_or_else(|| overflow("state size"))
}

fn check_width(state_bytes: u64) -> Result<(), CoreError> {
    if (1..=8).contains(&state_bytes) {
        Ok(())
    } else {
        Err(CoreError::field(
            "optimizer",
            format!("state element width must be 1 to 8 bytes (got {state_bytes})"),
        ))
    }
}

/// The bytes of the first four state tensors [`state_tensors`] gives for one parameter of
/// `shape` (0 where the optimizer keeps fewer), as the allocator stream allocates them: a
/// state a paged optimizer puts in unified memory ([`paged_state_bytes`]: `cudaMallocManaged`,
/// outside PyTorch's caching allocator) is 0.
pub fn first_state_bytes(opt: Optimizer, shape: &[u64], width: u64) -> Result<[u64; 4], CoreError> {
    let paged = paged_state_bytes(opt, shape)? > 0;
    let mut s = [0u64; 4];
    for (k, t) in state_tensors(opt, shape, width)?
        .into_iter()
        .take(4)
        .enumerate()
    {
        s[k] = if paged && is_state_buffer(t.name) {
            0
        } else {
            t.bytes
        };
    }
    Ok(s)
}

/// The per-parameter state tensors for one parameter of `shape`. `state_bytes` is the width of
/// a state element where the library follows the parameter dtype (torch's `zeros_like(p)`:
/// 4 for fp32 parameters, 2 for pure-bf16 training); bitsandbytes and HF Adafactor ignore it
/// (their states are fp32 or uint8 whatever the parameter dtype).
pub fn state_tensors(
    opt: Optimizer,
    shape: &[u64],
    state_bytes: u64,
) -> Result<Vec<StateTensor>, CoreError> {
    check_width(state_bytes)?;
    let n = numel(shape)?;
    let full = times(n, state_bytes)?;
    let st = |name, bytes| StateTensor { name, bytes };
    Ok(match opt {
        Optimizer::None | Optimizer::Sgd => vec![],
        Optimizer::SgdMomentum => vec![st("momentum_buffer", full)],
        Optimizer::Adam | Optimizer::AdamW => vec![st("exp_avg", full), st("exp_avg_sq", full)],
        // `_init_group`: `torch.zeros((), dtype=_get_scalar_dtype(is_fused=True))` = fp32.
        Optimizer::AdamWFused => vec![st("exp_avg", full), st("exp_avg_sq", full), st("step", 4)],
        // `Optimizer2State` with `optim_bits=32`: two fp32 buffers.
        Optimizer::AdamWPaged => {
            let s = times(n, 4)?;
            vec![st("state1", s), st("state2", s)]
        }
        Optimizer::AdamW8bit | Optimizer::AdamW8bitPaged => {
            if n < BNB_MIN_8BIT_SIZE {
                let s = times(n, 4)?;
                vec![st("state1", s), st("state2", s)]
            } else {
                let absmax = times(n.div_ceil(BNB_OPTIM_BLOCK), 4)?;
                vec![
                    st("state1", n),
                    st("state2", n),
                    st("absmax1", absmax),
                    st("absmax2", absmax),
                ]
            }
        }
        Optimizer::Adafactor => {
            let mut v = if shape.len() >= 2 {
                // exp_avg_sq_row: shape[:-1]; exp_avg_sq_col: shape[:-2] + shape[-1:].
                let k = shape.len();
                let row = numel(&shape[..k - 1])?;
                let col = times(numel(&shape[..k - 2])?, shape[k - 1])?;
                vec![
                    st("exp_avg_sq_row", times(row, 4)?),
                    st("exp_avg_sq_col", times(col, 4)?),
                ]
            } else {
                vec![st("exp_avg_sq", times(n, 4)?)]
            };
            // `state["RMS"] = self._rms(p_data_fp32)`: a 0-dim fp32 tensor kept per parameter.
            v.push(st("RMS", 4));
            v
        }
        Optimizer::Lion => vec![st("exp_avg", full)],
    })
}

/// Bytes of the optimizer state of one parameter tensor (the sum of [`state_tensors`]).
pub fn state_bytes(opt: Optimizer, shape: &[u64], state_bytes: u64) -> Result<u64, CoreError> {
    state_tensors(opt, shape, state_bytes)?
        .iter()
        .try_fold(0u64, |acc, t| acc.checked_add(t.bytes))
        .ok_or_else(|| overflow("state size"))
}

/// State held once per optimizer rather than per parameter: bitsandbytes' two 256-entry fp32
/// quantization maps, moved to the device when the first tensor gets 8-bit states.
pub fn shared_state_bytes<'a>(opt: Optimizer, shapes: impl IntoIterator<Item = &'a [u64]>) -> u64 {
    let any_8bit = is_8bit(opt)
        && shapes
            .into_iter()
            .any(|s| elements_of(s).is_some_and(|n| n >= BNB_MIN_8BIT_SIZE));
    if any_8bit {
        BNB_QMAP_BYTES
    } else {
        0
    }
}

/// Optimizer state of a whole set of trainable tensors: per-tensor states plus shared maps.
pub fn model_state_bytes(
    opt: Optimizer,
    shapes: &[&[u64]],
    state_bytes_per_elem: u64,
) -> Result<u64, CoreError> {
    let mut total = shared_state_bytes(opt, shapes.iter().copied());
    for s in shapes {
        total = total
            .checked_add(state_bytes(opt, s, state_bytes_per_elem)?)
            .ok_or_else(|| overflow("state size"))?;
    }
    Ok(total)
}

/// Whether the optimizer keeps a `step` tensor per parameter on the device (torch fused).
pub fn step_on_device(opt: Optimizer) -> bool {
    opt == Optimizer::AdamWFused
}

/// A run of `count` alike trainable tensors: their shape and parameter element width (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run<'a> {
    pub shape: &'a [u64],
    pub width: u64,
    pub count: u64,
}

/// Peak bytes of temporaries that one `optimizer.step()` allocates for one parameter group, on
/// top of parameters, gradients and states. `tensors` are the group's trainable tensors in
/// parameter order, each with its parameter element width (bytes). See [`step_scratch_runs`].
pub fn step_scratch_bytes(opt: Optimizer, tensors: &[(&[u64], u64)]) -> Result<u64, CoreError> {
    let runs: Vec<Run> = tensors
        .iter()
        .map(|&(shape, width)| Run {
            shape,
            width,
            count: 1,
        })
        .collect();
    step_scratch_runs(opt, &runs)
}

/// [`step_scratch_bytes`] of tensors given as runs of alike tensors, in parameter order (only
/// Adafactor's figure depends on the order; the others may be given tallies in any order).
///
/// - `adam`/`adamw` (torch foreach, the CUDA default): [`adam_foreach_scratch`].
/// - `adamw-fused`, `adamw-8bit`, the paged bitsandbytes optimizers, `sgd`, `sgd-momentum`
///   (default `weight_decay=0`, no Nesterov): in-place kernels, nothing.
/// - `lion`: [`lion_scratch`]; `adafactor`: [`adafactor_scratch`].
pub fn step_scratch_runs(opt: Optimizer, runs: &[Run]) -> Result<u64, CoreError> {
    step_scratch_runs_with(opt, OptimizerImpl::Foreach, runs)
}

/// Whether an implementation's scratch depends on the parameters' order (it walks them one
/// at a time): then [`step_scratch_runs_with`] must be given the runs in parameter order.
pub fn scratch_follows_order(opt: Optimizer, imp: OptimizerImpl) -> bool {
    opt == Optimizer::Adafactor
        || (imp != OptimizerImpl::Foreach && matches!(opt, Optimizer::Adam | Optimizer::AdamW))
}

/// [`step_scratch_runs`] for an implementation: `for-loop` and `hf` Adam/AdamW walk the
/// parameters one at a time ([`adam_loop_scratch`]); SGD's loop is in place like its foreach
/// path; the other optimizers have one implementation.
pub fn step_scratch_runs_with(
    opt: Optimizer,
    imp: OptimizerImpl,
    runs: &[Run],
) -> Result<u64, CoreError> {
    let sized = runs
        .iter()
        .filter(|r| r.count > 0)
        .map(|r| {
            check_width(r.width)?;
            Ok((numel(r.shape)?, r.width, r.count))
        })
        .collect::<Result<Vec<(u64, u64, u64)>, CoreError>>()?;
    match opt {
        Optimizer::None
        | Optimizer::Sgd
        | Optimizer::SgdMomentum
        | Optimizer::AdamWFused
        | Optimizer::AdamW8bit
        | Optimizer::AdamWPaged
        | Optimizer::AdamW8bitPaged => Ok(0),
        Optimizer::Adam | Optimizer::AdamW => match imp {
            OptimizerImpl::Foreach => adam_foreach_scratch(&sized),
            OptimizerImpl::ForLoop => adam_loop_scratch(&sized, 2),
            OptimizerImpl::Hf => adam_loop_scratch(&sized, 1),
        },
        Optimizer::Lion => lion_scratch(&sized),
        Optimizer::Adafactor => adafactor_scratch(&sized),
    }
}

fn scratch_overflow() -> CoreError {
    overflow("step scratch")
}

/// torch foreach Adam: `_multi_tensor_adam` allocates `exp_avg_sq_sqrt =
/// torch._foreach_sqrt(exp_avg_sqs)` for a whole device/dtype group at once (every other list
/// op is in place; bias corrections are Python floats; `Adam` with weight decay makes a
/// grad-sized copy that is deleted before the sqrt). Groups are processed in turn and the next
/// sqrt list is allocated before the previous one is released, so with several dtypes the two
/// largest groups are counted together (exact for two, an upper bound beyond, as torch's
/// grouping order is not specified). `sized`: (elements, width, count) runs.
fn adam_foreach_scratch(sized: &[(u64, u64, u64)]) -> Result<u64, CoreError> {
    // Bytes of exp_avg_sq per element width (a stand-in for the dtype group).
    let mut groups: Vec<(u64, u64)> = Vec::new();
    for &(n, b, count) in sized {
        let bytes = n
            .checked_mul(b)
            .and_then(|x| x.checked_mul(count))
            .ok_or_else(scratch_overflow)?;
        match groups.iter_mut().find(|(w, _)| *w == b) {
            Some(g) => g.1 = g.1.checked_add(bytes).ok_or_else(scratch_overflow)?,
            None => groups.push((b, bytes)),
        }
    }
    let mut sizes: Vec<u64> = groups.into_iter().map(|(_, s)| s).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes
        .iter()
        .take(2)
        .try_fold(0u64, |a, &s| a.checked_add(s))
        .ok_or_else(scratch_overflow)
}

/// Adam/AdamW one parameter at a time: each parameter's `denom` stays bound until the next
/// parameter's replaces it, so at parameter i its `fresh` new temporaries of its own size live
/// beside the previous parameter's denom: peak max_i(s_{i-1} + fresh · s_i), s the bytes of
/// one state of the parameter (the moments follow the parameter's dtype).
/// - torch `foreach=False` (`torch/optim/adam.py` `_single_tensor_adam`, torch 2.x; AdamW is
///   Adam with `decoupled_weight_decay`, `param.mul_(1 - lr·wd)` in place): `lerp_`, `mul_`,
///   `addcmul_` in place, then `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`
///   — the sqrt and the quotient live together: fresh = 2. (Adam's default weight decay is 0:
///   no `grad.add(param)` copy.)
/// - transformers 4.x `transformers.optimization.AdamW.step` (src/transformers/optimization.py,
///   removed in transformers 5): `exp_avg.mul_().add_()`, `exp_avg_sq.mul_().addcmul_()`,
///   `denom = exp_avg_sq.sqrt().add_(eps)`, `p.addcdiv_`, `p.add_(p, alpha=-lr·wd)`: fresh = 1.
///
/// Within a run of alike tensors the previous one is the run's own from the second on.
fn adam_loop_scratch(sized: &[(u64, u64, u64)], fresh: u64) -> Result<u64, CoreError> {
    let mut peak = 0u64;
    let mut prev = 0u64;
    for &(n, b, count) in sized {
        let s = n.checked_mul(b).ok_or_else(scratch_overflow)?;
        let own = s.checked_mul(fresh).ok_or_else(scratch_overflow)?;
        peak = peak.max(own.checked_add(prev).ok_or_else(scratch_overflow)?);
        if count > 1 {
            peak = peak.max(own.checked_add(s).ok_or_else(scratch_overflow)?);
        }
        prev = s;
    }
    Ok(peak)
}

/// lion-pytorch `update_fn`, one tensor at a time: `exp_avg.clone().mul_(b1).add(grad, ...)`
/// holds two parameter-sized tensors at once.
fn lion_scratch(sized: &[(u64, u64, u64)]) -> Result<u64, CoreError> {
    sized.iter().try_fold(0u64, |peak, &(n, b, _)| {
        Ok(peak.max(
            n.checked_mul(b)
                .and_then(|x| x.checked_mul(2))
                .ok_or_else(scratch_overflow)?,
        ))
    })
}

/// HF Adafactor, one tensor at a time: `update = grad**2 + eps` and the later
/// `torch.mul(r_factor, c_factor)` / `-update` hold two fp32 tensors of the parameter's size,
/// while the previous parameter's `update` is still referenced until it is rebound; 16-bit
/// parameters add the fp32 copies `grad.float()` and `p.float()`. In a run of alike tensors the
/// previous `update` is the run's own from the second tensor on.
fn adafactor_scratch(sized: &[(u64, u64, u64)]) -> Result<u64, CoreError> {
    let mut peak = 0u64;
    let mut prev_update = 0u64;
    for &(n, b, count) in sized {
        let f32_full = n.checked_mul(4).ok_or_else(scratch_overflow)?;
        let copies = if b == 4 { 2 } else { 4 };
        let own = f32_full.checked_mul(copies).ok_or_else(scratch_overflow)?;
        let first = own.checked_add(prev_update).ok_or_else(scratch_overflow)?;
        peak = peak.max(first);
        if count > 1 {
            peak = peak.max(own.checked_add(f32_full).ok_or_else(scratch_overflow)?);
        }
        prev_update = f32_full;
    }
    Ok(peak)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SQ: [u64; 2] = [4096, 4096];
    const SQ_N: u64 = 16_777_216; // 4096 * 4096

    #[test]
    fn adam_family_on_a_square_matrix() {
        // exp_avg + exp_avg_sq, fp32: 2 * 4 * 16,777,216.
        assert_eq!(state_bytes(Optimizer::AdamW, &SQ, 4).unwrap(), 134_217_728);
        assert_eq!(state_bytes(Optimizer::Adam, &SQ, 4).unwrap(), 134_217_728);
        // Pure bf16: states follow the parameter dtype.
        assert_eq!(state_bytes(Optimizer::AdamW, &SQ, 2).unwrap(), 67_108_864);
        // Fused adds a 0-dim fp32 `step` on the device.
        assert_eq!(
            state_bytes(Optimizer::AdamWFused, &SQ, 4).unwrap(),
            134_217_728 + 4
        );
        assert!(step_on_device(Optimizer::AdamWFused) && !step_on_device(Optimizer::AdamW));
    }

    #[test]
    fn sgd_and_lion() {
        assert_eq!(state_bytes(Optimizer::Sgd, &SQ, 4).unwrap(), 0);
        assert_eq!(state_bytes(Optimizer::None, &SQ, 4).unwrap(), 0);
        assert_eq!(
            state_bytes(Optimizer::SgdMomentum, &SQ, 4).unwrap(),
            4 * SQ_N
        );
        assert_eq!(state_bytes(Optimizer::Lion, &SQ, 2).unwrap(), 2 * SQ_N);
    }

    #[test]
    fn bitsandbytes_8bit() {
        // uint8 state1 + state2, one fp32 absmax per 256 elements for each: 2 * (n + 4n/256).
        assert_eq!(
            state_bytes(Optimizer::AdamW8bit, &SQ, 4).unwrap(),
            2 * (16_777_216 + 262_144)
        );
        // The qmaps are shared, once per optimizer: 2 * 256 * 4 bytes.
        assert_eq!(shared_state_bytes(Optimizer::AdamW8bit, [&SQ[..]]), 2048);
        // Below min_8bit_size (4096 elements): two fp32 states.
        assert_eq!(
            state_bytes(Optimizer::AdamW8bit, &[100], 2).unwrap(),
            2 * 4 * 100
        );
        assert_eq!(
            state_bytes(Optimizer::AdamW8bit, &[4095], 4).unwrap(),
            8 * 4095
        );
        assert_eq!(
            shared_state_bytes(Optimizer::AdamW8bit, [&[4095u64][..]]),
            0
        );
        // 4096 elements is 8-bit: 2 * 4096 + 2 * 16 blocks * 4 bytes.
        assert_eq!(
            state_bytes(Optimizer::AdamW8bit, &[4096], 4).unwrap(),
            8192 + 128
        );
        // A partial last block still gets its absmax: 4097 elements -> 17 blocks.
        assert_eq!(
            state_bytes(Optimizer::AdamW8bit, &[4097], 4).unwrap(),
            2 * 4097 + 2 * 17 * 4
        );
    }

    /// Paged optimizers page what `get_state_buffer` makes for a parameter of at least 1e5
    /// elements: the 32-bit one's two fp32 states (8 B per element), the 8-bit one's two
    /// uint8 states (2 B per element) but not its absmax (`torch.zeros` on the device:
    /// 2 · 65,536 blocks · 4 B, which the stream allocates); below 1e5 elements nothing.
    #[test]
    fn paged_states_are_the_state_buffers() {
        assert_eq!(
            paged_state_bytes(Optimizer::AdamWPaged, &SQ).unwrap(),
            8 * SQ_N
        );
        assert_eq!(
            paged_state_bytes(Optimizer::AdamW8bitPaged, &SQ).unwrap(),
            2 * SQ_N
        );
        assert_eq!(
            first_state_bytes(Optimizer::AdamW8bitPaged, &SQ, 2).unwrap(),
            [0, 0, 65_536 * 4, 65_536 * 4]
        );
        assert_eq!(
            paged_state_bytes(Optimizer::AdamW8bitPaged, &[99_999]).unwrap(),
            0
        );
        assert_eq!(paged_state_bytes(Optimizer::AdamW8bit, &SQ).unwrap(), 0);
        // Unpaged 8-bit: all four on the device.
        assert_eq!(
            first_state_bytes(Optimizer::AdamW8bit, &SQ, 2).unwrap(),
            [SQ_N, SQ_N, 65_536 * 4, 65_536 * 4]
        );
    }

    #[test]
    fn adafactor_factors() {
        // Row [4096] and column [11008] vectors in fp32, plus the 0-dim fp32 RMS.
        assert_eq!(
            state_bytes(Optimizer::Adafactor, &[4096, 11008], 2).unwrap(),
            4 * (4096 + 11008) + 4
        );
        // 1-D: a full exp_avg_sq.
        assert_eq!(
            state_bytes(Optimizer::Adafactor, &[768], 4).unwrap(),
            4 * 768 + 4
        );
        // 3-D [E, r, c]: row = E*r, col = E*c.
        assert_eq!(
            state_bytes(Optimizer::Adafactor, &[8, 64, 32], 4).unwrap(),
            4 * (8 * 64 + 8 * 32) + 4
        );
    }

    #[test]
    fn bad_widths_and_overflow_are_errors() {
        assert!(state_bytes(Optimizer::AdamW, &SQ, 0).is_err());
        assert!(state_bytes(Optimizer::AdamW, &SQ, 16).is_err());
        assert!(state_bytes(Optimizer::AdamW, &[u64::MAX, 2], 4).is_err());
        assert!(state_bytes(Optimizer::AdamW, &[1 << 62], 4).is_err());
        assert!(step_scratch_bytes(Optimizer::Lion, &[(&[1u64 << 62][..], 4)]).is_err());
    }

    /// GPT-2 small (124,439,808 parameters in 148 tensors), shapes as in its checkpoint.
    fn gpt2_shapes() -> Vec<Vec<u64>> {
        let mut v = vec![vec![50257, 768], vec![1024, 768]]; // wte, wpe
        for _ in 0..12 {
            v.push(vec![768]); // ln_1.weight
            v.push(vec![768]); // ln_1.bias
            v.push(vec![768, 2304]); // attn.c_attn.weight (Conv1D)
            v.push(vec![2304]);
            v.push(vec![768, 768]); // attn.c_proj.weight
            v.push(vec![768]);
            v.push(vec![768]); // ln_2.weight
            v.push(vec![768]); // ln_2.bias
            v.push(vec![768, 3072]); // mlp.c_fc.weight
            v.push(vec![3072]);
            v.push(vec![3072, 768]); // mlp.c_proj.weight
            v.push(vec![768]);
        }
        v.push(vec![768]); // ln_f.weight
        v.push(vec![768]); // ln_f.bias
        v
    }

    #[test]
    fn gpt2_whole_model() {
        let shapes = gpt2_shapes();
        let refs: Vec<&[u64]> = shapes.iter().map(|s| s.as_slice()).collect();
        assert_eq!(refs.len(), 148);
        let params: u64 = refs.iter().map(|s| s.iter().product::<u64>()).sum();
        assert_eq!(params, 124_439_808);

        assert_eq!(model_state_bytes(Optimizer::Sgd, &refs, 4).unwrap(), 0);
        // Adam fp32: 8 bytes per parameter.
        assert_eq!(
            model_state_bytes(Optimizer::Adam, &refs, 4).unwrap(),
            995_518_464
        );
        // AdamW-8bit, by hand:
        //  2-D tensors (all >= 4096 elements, all multiples of 256):
        //    wte 38,597,376 + wpe 786,432 + 12 * (1,769,472 + 589,824 + 2,359,296 * 2)
        //    = 124,318,464 elements -> 2 bytes + 2 * 4 / 256 bytes each = 252,521,880
        //  1-D tensors (all < 4096 elements): 12 * 9,984 + 1,536 = 121,344 -> 8 bytes each
        //    = 970,752
        //  qmaps: 2,048
        assert_eq!(
            model_state_bytes(Optimizer::AdamW8bit, &refs, 4).unwrap(),
            252_521_880 + 970_752 + 2_048
        );
    }

    #[test]
    fn adam_scratch_is_one_sqrt_of_v() {
        let shapes = gpt2_shapes();
        let fp32: Vec<(&[u64], u64)> = shapes.iter().map(|s| (s.as_slice(), 4)).collect();
        // One fp32 sqrt(v) per parameter: the measurement notes' 20 B/param = 16 + 4.
        assert_eq!(
            step_scratch_bytes(Optimizer::AdamW, &fp32).unwrap(),
            4 * 124_439_808
        );
        assert_eq!(step_scratch_bytes(Optimizer::AdamWFused, &fp32).unwrap(), 0);
        assert_eq!(step_scratch_bytes(Optimizer::AdamW8bit, &fp32).unwrap(), 0);
        assert_eq!(
            step_scratch_bytes(Optimizer::SgdMomentum, &fp32).unwrap(),
            0
        );
        // Two dtype groups are alive together at the second group's sqrt.
        let mixed: [(&[u64], u64); 3] = [(&[10, 10], 4), (&[100], 2), (&[5], 4)];
        assert_eq!(
            step_scratch_bytes(Optimizer::Adam, &mixed).unwrap(),
            (100 + 5) * 4 + 100 * 2
        );
    }

    #[test]
    fn runs_of_alike_tensors_count_as_the_tensors_one_by_one() {
        let run = |shape: &'static [u64], width, count| Run {
            shape,
            width,
            count,
        };
        // Adam: three fp32 [10, 10] tensors' sqrt(v): 3 × 100 × 4 bytes.
        assert_eq!(
            step_scratch_runs(Optimizer::AdamW, &[run(&[10, 10], 4, 3)]).unwrap(),
            1200
        );
        // Adafactor, three bf16 [4096, 4096] in a row: the first holds 4 fp32 copies (4f,
        // f = 4 × SQ_N bytes), each later one 4f plus its predecessor's update f.
        let f = 4 * SQ_N;
        assert_eq!(
            step_scratch_runs(Optimizer::Adafactor, &[run(&SQ, 2, 3)]).unwrap(),
            5 * f
        );
        // A run of one is the tensor alone; an empty run is nothing.
        assert_eq!(
            step_scratch_runs(Optimizer::Adafactor, &[run(&SQ, 2, 1), run(&[1], 2, 0)]).unwrap(),
            4 * f
        );
    }

    /// One parameter at a time, the previous parameter's `denom` still bound: transformers'
    /// AdamW holds s_{i-1} + s_i (its `sqrt(v).add_(eps)`), torch's `foreach=False` s_{i-1} +
    /// 2·s_i (`sqrt(v)` and the quotient by the bias correction).
    #[test]
    fn adam_loops_hold_one_parameter_at_a_time() {
        let run = |shape: &'static [u64], width, count| Run {
            shape,
            width,
            count,
        };
        // fp32 [1000, 10] (40,000 B) then three fp32 [100] (400 B each), then fp32 [5000]
        // (20,000 B).
        let runs = [
            run(&[1000, 10], 4, 1),
            run(&[100], 4, 3),
            run(&[5000], 4, 1),
        ];
        // hf: max(40,000; 40,000 + 400; 400 + 400; 400 + 20,000) = 40,400.
        assert_eq!(
            step_scratch_runs_with(Optimizer::AdamW, OptimizerImpl::Hf, &runs).unwrap(),
            40_400
        );
        // for-loop: max(2·40,000; 40,000 + 800; 400 + 800; 400 + 40,000) = 80,000.
        assert_eq!(
            step_scratch_runs_with(Optimizer::AdamW, OptimizerImpl::ForLoop, &runs).unwrap(),
            80_000
        );
        // foreach: one sqrt(v) of every parameter, 40,000 + 1,200 + 20,000.
        assert_eq!(
            step_scratch_runs_with(Optimizer::Adam, OptimizerImpl::Foreach, &runs).unwrap(),
            61_200
        );
        // SGD's loop is in place like its foreach path; fused has one kernel.
        for opt in [Optimizer::SgdMomentum, Optimizer::AdamWFused] {
            assert_eq!(
                step_scratch_runs_with(opt, OptimizerImpl::ForLoop, &runs).unwrap(),
                0
            );
        }
        assert!(scratch_follows_order(Optimizer::AdamW, OptimizerImpl::Hf));
        assert!(!scratch_follows_order(
            Optimizer::AdamW,
            OptimizerImpl::Foreach
        ));
        assert!(!scratch_follows_order(
            Optimizer::Sgd,
            OptimizerImpl::ForLoop
        ));
    }

    #[test]
    fn lion_and_adafactor_scratch() {
        let t: [(&[u64], u64); 2] = [(&[4096, 4096], 2), (&[4096], 2)];
        // clone + add result of the largest tensor, bf16.
        assert_eq!(
            step_scratch_bytes(Optimizer::Lion, &t).unwrap(),
            2 * 2 * SQ_N
        );
        // bf16 [4096,4096]: grad.float(), p.float(), grad**2 and +eps: 4 fp32 copies.
        // Then [4096]: 4 fp32 copies of 4096 + the previous update (fp32 4096x4096) alive.
        let first = 4 * 4 * SQ_N;
        let second = 4 * 4 * 4096 + 4 * SQ_N;
        assert_eq!(
            step_scratch_bytes(Optimizer::Adafactor, &t).unwrap(),
            first.max(second)
        );
        // fp32 parameters: no upcast copies, two fp32 temporaries.
        let f: [(&[u64], u64); 1] = [(&[4096, 4096], 4)];
        assert_eq!(
            step_scratch_bytes(Optimizer::Adafactor, &f).unwrap(),
            2 * 4 * SQ_N
        );
    }
}

//! The optimizer steps the allocator stream writes beside torch's foreach ones: torch's
//! `foreach=False` loop (`torch/optim/adam.py` `_single_tensor_adam`, `sgd.py`
//! `_single_tensor_sgd`, torch 2.x) and bitsandbytes 0.50's AdamW8bit, PagedAdamW and
//! PagedAdamW8bit (`bitsandbytes/optim/optimizer.py`). Every figure is derived by hand below
//! from those sources, never read off the stream.

mod common;

use common::stream_steps::{events_in, signed_sizes, stream_and_walk, stream_of, tiny_llama};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::Phase;

/// The one-layer tiny Llama (`tiny_llama`: hidden 256, k/v 128 wide, MLP 768, vocabulary
/// 8192, untied) at batch 1 × 40 with `optimizer`, `optimizer_impl` and `precision`.
fn tiny(optimizer: &str, imp: &str, precision: &str) -> Value {
    json!({"model": {"hf_config": tiny_llama(1)}, "batch": 1, "seq": 40,
           "precision": precision, "optimizer": optimizer, "optimizer_impl": imp})
}

/// The tiny Llama's parameters' element counts in the stream's parameter order (the
/// inventory's: the embeddings, the block's two RMSNorm weights, q, k, v, o, gate, up, down,
/// the final norm, the untied head): 8192·256, 256, 256, 256·256, 128·256, 128·256, 256·256,
/// 3 × 768·256, 256, 8192·256.
const TINY: [u64; 12] = [
    2_097_152, 256, 256, 65_536, 32_768, 32_768, 65_536, 196_608, 196_608, 196_608, 256, 2_097_152,
];

/// `_single_tensor_adam` per parameter of state size s: `exp_avg_sq.sqrt()` (+s), `/
/// bias_correction2_sqrt` (+s), the sqrt dropped as the division returns (−1), binding
/// `denom` drops the previous parameter's (−1, none before the first); the last denom goes
/// as the function returns (−1).
fn loop_denoms(sizes: &[u64]) -> Vec<i64> {
    let mut v = Vec::new();
    for (i, &s) in sizes.iter().enumerate() {
        v.extend([s as i64, s as i64, -1]);
        if i > 0 {
            v.push(-1);
        }
    }
    v.push(-1);
    v
}

/// fp32 AdamW with `foreach=False`: the first step's `_init_group` makes `exp_avg` and
/// `exp_avg_sq` (`zeros_like`, 4 B per element) for each parameter in order (`step` a host
/// tensor), then the loop's denominators; the second step only the loop.
#[test]
fn adamw_for_loop_writes_each_parameters_denominator_in_turn() {
    let s = stream_of(&tiny("adamw", "for-loop", "fp32"));
    let sizes: Vec<u64> = TINY.iter().map(|n| n * 4).collect();
    let states: Vec<i64> = sizes.iter().flat_map(|&b| [b as i64, b as i64]).collect();
    let first = [states, loop_denoms(&sizes)].concat();
    assert_eq!(signed_sizes(&events_in(&s, Phase::Optimizer(0))), first);
    assert_eq!(
        signed_sizes(&events_in(&s, Phase::Optimizer(1))),
        loop_denoms(&sizes)
    );
}

/// SGD with momentum, `foreach=False`: `_single_tensor_sgd` makes each momentum buffer as
/// `torch.clone(grad).detach()` on the first step (4 B per element, in order) and updates
/// everything in place afterwards (`buf.mul_().add_()`, `param.add_(buf)`).
#[test]
fn sgd_for_loop_clones_the_momentum_once() {
    let s = stream_of(&tiny("sgd-momentum", "for-loop", "fp32"));
    let first: Vec<i64> = TINY.iter().map(|n| (n * 4) as i64).collect();
    assert_eq!(signed_sizes(&events_in(&s, Phase::Optimizer(0))), first);
    assert!(events_in(&s, Phase::Optimizer(1))
        .iter()
        .all(|e| signed_sizes(&[*e]).is_empty()));
}

/// Llama-3.2-1B, bf16-mixed (fp32 parameters and states), AdamW `foreach=False`: the step's
/// peak is the loop's at the embedding (128,256 × 2,048 × 4 B = 1,050,673,152 B, twice, the
/// first parameter: nothing before it), on top of the parameters, gradients and states; the
/// stream's peak meets the walk's (`optimizer::adam_loop_scratch`) within 0.02 %.
#[test]
fn llama_1b_for_loop_meets_the_walk() {
    let job = json!({"model": "llama-3.2-1b", "batch": 1, "seq": 1024,
                     "precision": "bf16-mixed", "optimizer": "adamw",
                     "optimizer_impl": "for-loop"});
    let (stream, walk) = stream_and_walk(&job);
    assert!(
        (stream as f64 / walk as f64 - 1.0).abs() < 2e-4,
        "{stream} {walk}"
    );
}

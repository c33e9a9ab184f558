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

/// bitsandbytes' AdamW8bit on the tiny Llama in bf16 (`Optimizer8bit.step`: per parameter
/// `init_state` then `update_step`, whose blockwise kernel makes nothing). The first
/// parameter with 8-bit states (the embeddings, 2,097,152 ≥ `min_8bit_size` 4096 elements)
/// first moves the two 256-entry fp32 maps to the device (`name2qmap[..].to(p.device)`:
/// 1,024 B each); a parameter of n ≥ 4096 elements gets `state1`, `state2` (uint8, n B each)
/// and `absmax1`, `absmax2` (fp32, ⌈n / 256⌉ · 4 B each); one below (the 256-element norms)
/// two fp32 states (`zeros_like(p, dtype=float32)`: 1,024 B each). Nothing on the second step.
#[test]
fn adamw_8bit_makes_its_states_per_parameter() {
    let s = stream_of(&tiny("adamw-8bit", "foreach", "bf16"));
    let mut want: Vec<i64> = vec![1024, 1024];
    for n in TINY {
        if n < 4096 {
            want.extend([(n * 4) as i64; 2]);
        } else {
            want.extend([n as i64, n as i64]);
            want.extend([(n.div_ceil(256) * 4) as i64; 2]);
        }
    }
    assert_eq!(signed_sizes(&events_in(&s, Phase::Optimizer(0))), want);
    assert!(signed_sizes(&events_in(&s, Phase::Optimizer(1))).is_empty());
}

/// PagedAdamW8bit: as AdamW8bit, but `get_state_buffer` takes `state1` and `state2` of a
/// parameter of at least 1e5 elements from `F.get_paged` (`cudaMallocManaged`, outside
/// PyTorch's allocator: no event): the embeddings and head (2,097,152) and gate/up/down
/// (196,608) keep only their absmax (`torch.zeros`, on the device); q, k, v, o (65,536,
/// 32,768) all four. PagedAdamW (32 bit): two fp32 states per parameter below 1e5 elements
/// (the norms: 1,024 B; q and o: 262,144 B; k and v: 131,072 B), none above; no maps.
#[test]
fn paged_states_of_large_parameters_are_no_events() {
    let s = stream_of(&tiny("adamw-8bit-paged", "foreach", "bf16"));
    let mut want: Vec<i64> = vec![1024, 1024];
    for n in TINY {
        let absmax = (n.div_ceil(256) * 4) as i64;
        match n {
            n if n < 4096 => want.extend([(n * 4) as i64; 2]),
            n if n < 100_000 => want.extend([n as i64, n as i64, absmax, absmax]),
            _ => want.extend([absmax, absmax]),
        }
    }
    assert_eq!(signed_sizes(&events_in(&s, Phase::Optimizer(0))), want);
    let s = stream_of(&tiny("adamw-paged", "foreach", "bf16"));
    let want: Vec<i64> = TINY
        .iter()
        .filter(|&&n| n < 100_000)
        .flat_map(|&n| [(n * 4) as i64; 2])
        .collect();
    assert_eq!(signed_sizes(&events_in(&s, Phase::Optimizer(0))), want);
}

/// The stream's peak less the walk's, and the walk's.
fn gap(job: &Value) -> (f64, f64) {
    let (stream, walk) = stream_and_walk(job);
    (stream as f64 - walk as f64, walk as f64)
}

/// Real-sized bitsandbytes jobs (Llama-3.2-1B, pure bf16, b1 × 1024: the peak in the
/// backward), and the pure-bf16 for-loop AdamW: the stream's peak less the walk's is within
/// 0.02 % of the walk's peak of that gap under plain SGD (no states, no step temporaries:
/// the pure-bf16 backward's own stream-vs-walk gap, 8.65 MB full and 4.26 MB under QLoRA,
/// which these optimizers do not touch; their states are the walk's to the byte, e.g.
/// AdamW8bit's 2,510,653,440 B). The QLoRA job is the common recipe: NF4 with double
/// quantization, rank 16 on q and v, PagedAdamW8bit.
#[test]
fn llama_1b_bitsandbytes_meets_the_walk() {
    let job = |opt: &str, imp: &str, qlora: bool| {
        let mut j = json!({"model": "llama-3.2-1b", "batch": 1, "seq": 1024,
                           "precision": "bf16", "optimizer": opt, "optimizer_impl": imp});
        if qlora {
            j["peft"] = json!({"method": "qlora", "rank": 16});
        }
        j
    };
    let full = gap(&job("sgd", "foreach", false)).0;
    let lora = gap(&job("sgd", "foreach", true)).0;
    for (opt, imp, qlora, base) in [
        ("adamw-8bit", "foreach", false, full),
        ("adamw-paged", "foreach", false, full),
        ("adamw", "for-loop", false, full),
        ("adamw-8bit-paged", "foreach", true, lora),
    ] {
        let (g, walk) = gap(&job(opt, imp, qlora));
        assert!((g - base).abs() < 2e-4 * walk, "{opt} {imp}: {g} vs {base}");
    }
}

/// The layouts: a DDP rank steps whole parameters as one GPU does — its optimizer phase is
/// the single GPU's, event for event; FSDP2's DTensor shards (a FULL_SHARD rank of two) keep
/// the packing heuristic for the loop and for bitsandbytes.
#[test]
fn ddp_writes_these_steps_and_fsdp_refuses_them() {
    for (opt, imp, precision) in [
        ("adamw", "for-loop", "fp32"),
        ("adamw-8bit", "foreach", "bf16"),
    ] {
        let single = tiny(opt, imp, precision);
        let mut ddp = single.clone();
        ddp["parallel"] = json!({"dp": 2});
        for step in 0..2 {
            let phase = Phase::Optimizer(step);
            assert_eq!(
                signed_sizes(&events_in(&stream_of(&ddp), phase)),
                signed_sizes(&events_in(&stream_of(&single), phase))
            );
        }
        let mut fsdp = single;
        fsdp["framework"] = json!("fsdp");
        fsdp["parallel"] = json!({"dp": 2, "zero": 3});
        let written = |job: &Value| {
            let (input, resolved) = common::prepared_json(job);
            vramscope_core::estimate::alloc_events::step_stream(&input, &resolved)
                .unwrap()
                .is_some()
        };
        assert!(!written(&fsdp), "{opt} {imp}");
        // The same rank with foreach AdamW is written: the optimizer is what keeps it out.
        fsdp["optimizer"] = json!("adamw");
        fsdp["optimizer_impl"] = json!("foreach");
        assert!(written(&fsdp));
    }
}

//! One rank of DeepSpeed ZeRO-1/2 (`framework: deepspeed`, `parallel.zero` 1 or 2) through
//! the allocator stream (`alloc_events/zero.rs`). Every size below is derived by hand from
//! DeepSpeed 0.19.6's `runtime/zero/stage_1_and_2.py` (`DeepSpeedZeroOptimizer`: `__init__`,
//! `setup_buckets`, `reduce_independent_p_g_buckets_and_remove_grads`, `reduce_ipg_grads`,
//! `allreduce_bucket`, `copy_grads_in_partition`, `independent_gradient_partition_epilogue`,
//! `has_overflow_partitioned_grads_serial`, `get_grad_norm_direct`, `step`) and its defaults
//! (`runtime/zero/config.py`: `reduce_bucket_size` 5e8 elements, `contiguous_gradients`,
//! no `overlap_comm` below stage 3), never read off the stream.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{Event, Phase, Stream};

/// Llama-3.1-8B, bf16-mixed AdamW, b1 × 4096 on eight H100s, ZeRO `stage`.
fn llama8b(stage: u64) -> Value {
    json!({
        "model": "llama-3.1-8b", "framework": "deepspeed", "precision": "bf16-mixed",
        "optimizer": "adamw", "batch": 1, "seq": 4096, "gpu": "h100",
        "parallel": {"gpus": 8, "dp": 8, "zero": stage}
    })
}

/// A small Llama whose sizes are not multiples of the alignment: hidden 250 (5 heads of 50,
/// 5 KV heads), MLP 768, vocabulary 8192, untied, two blocks, on `dp` GPUs.
fn tiny(stage: u64, dp: u64, precision: &str) -> Value {
    json!({
        "model": {"hf_config": {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 250, "intermediate_size": 768, "num_hidden_layers": 2,
            "num_attention_heads": 5, "num_key_value_heads": 5, "head_dim": 50,
            "vocab_size": 8192, "max_position_embeddings": 4096, "hidden_act": "silu",
            "tie_word_embeddings": false, "torch_dtype": "bfloat16"}},
        "framework": "deepspeed", "precision": precision, "optimizer": "adamw",
        "batch": 1, "seq": 40, "parallel": {"gpus": dp, "dp": dp, "zero": stage}
    })
}

/// The tiny model's parameters in `model.parameters()` order (the flat buffer's), by hand:
/// the embeddings 8192·250 = 2,048,000; per block q, k, v, o 250·250 = 62,500 each, gate,
/// up, down 768·250 = 192,000 each, then its two norms of 250 (826,500); the final norm 250;
/// the head 2,048,000. N = 2 · 2,048,000 + 2 · 826,500 + 250 = 5,749,250.
const N: u64 = 5_749_250;
const VOCAB_MATRIX: u64 = 2_048_000;

/// `phase`'s allocations of at least `floor` bytes as +bytes and the frees of such blocks as
/// −bytes, in order.
fn signed(s: &Stream, phase: Phase, floor: u64) -> Vec<i64> {
    signed_in(s, &[phase], floor)
}

/// [`signed`] over the events of any of `phases`, in order (a step's micro-batches
/// interleave their forwards and backwards).
fn signed_in(s: &Stream, phases: &[Phase], floor: u64) -> Vec<i64> {
    let mut size = vec![0u64; s.ids()];
    let (mut inside, mut out) = (false, Vec::new());
    for e in &s.events {
        match *e {
            Event::Phase(p) => inside = phases.contains(&p),
            Event::Alloc { id, bytes } => {
                size[id as usize] = bytes;
                if inside && bytes >= floor {
                    out.push(bytes as i64);
                }
            }
            Event::Free { id } => {
                let b = size[id as usize];
                if inside && b >= floor {
                    out.push(-(b as i64));
                }
            }
            _ => {}
        }
    }
    out
}

/// [`signed`] of the tiny model's stream (ZeRO `stage` over `dp` ranks in `precision`).
fn tiny_events(stage: u64, dp: u64, precision: &str, phase: Phase, floor: u64) -> Vec<i64> {
    signed(
        &common::stream_steps::stream_of(&tiny(stage, dp, precision)),
        phase,
        floor,
    )
}

/// The flat buffer and the partition (`__init__`): N padded to a multiple of 2 × world
/// (`nccl_start_alignment_factor` 2: `align_dense_tensors`): over 2 ranks N mod 4 = 2, so
/// F = 5,749,252 and P = 2,874,626; over 4 ranks N mod 8 = 2, F = 5,749,256, P = 1,437,314.
/// The load's allocations of at least 1 MiB after the two vocabulary matrices (2,048,000 · 2
/// = 4,096,000 B each, bf16 as the engine casts the model): the flat buffer (F · 2; its 2- or
/// 6-element pad is a few bytes), the partition's bf16 clone (P · 2) and its fp32 master
/// (P · 4), the clone freed, `initialize_optimizer_states`' fp32 gradient (P · 4) made and
/// dropped. Between them every parameter's own storage is freed (re-pointed into the flat
/// buffer). Under fp32 (dp 2) the clone is the master (P · 4 = 11,498,504), no cast.
/// Measured on the CPU (`validation/cpu-measured-zero.json`, `init`): the same allocations
/// from the flat buffer on (the profiler records no free of a storage made before it started).
#[test]
fn init_flattens_and_makes_the_fp32_partition() {
    let load = |stage, dp, precision| tiny_events(stage, dp, precision, Phase::Load, 1 << 20);
    // (the matrices, F · w, P · 2, P · 4) over 2 and 4 ranks.
    let (m, f, c, p) = (4_096_000i64, 11_498_504i64, 5_749_252i64, 11_498_504i64);
    let want = [m, m, f, -m, -m, c, p, -c, p, -p];
    assert_eq!(load(2, 2, "bf16-mixed"), want);
    let (f, c, p) = (11_498_512i64, 2_874_628i64, 5_749_256i64);
    let want = [m, m, f, -m, -m, c, p, -c, p, -p];
    assert_eq!(load(1, 4, "bf16-mixed"), want);
    // fp32: the matrices 8,192,000 B, the flat buffer F · 4 = 22,997,008, the master P · 4.
    let (m, f, p) = (8_192_000i64, 22_997_008i64, 11_498_504i64);
    assert_eq!(load(2, 2, "fp32"), [m, m, f, -m, -m, p, p, -p]);
}

/// The backward's allocations and frees of at least 3 MiB (the steady step; seq 40 keeps the
/// logits under it), bf16 over 2 ranks: the head's gradient (4,096,000), the IPG bucket at
/// the first hook (`setup_buckets`: 5e8 · 2 = 1,000,000,000 B, whatever the model's size),
/// the embeddings' gradient (4,096,000). Stage 2 copies each gradient into the bucket at its
/// hook and frees it; stage 1 keeps them to `reduce_gradients`, which copies them in module
/// order (the embeddings' first). The bucket never fills (N < 5e8): the epilogue's
/// `reduce_ipg_grads` flattens all N (N · 2 = 11,498,500 B, freed on return), then
/// `copy_grads_in_partition` allocates `grads_in_partition` once: rank 0's partition
/// [0, 2,874,626) holds the embeddings, block 0 and block 1's `q_proj` (it starts at
/// 2,874,500), whole: 2,048,000 + 826,500 + 62,500 = 2,937,000 elements, 5,874,000 B. Then
/// `_release_ipg_buffers` frees the bucket. Measured on the CPU (DeepSpeed 0.19.8, gloo,
/// `validation/cpu-measured-zero.json`, stage 2): the same nine events.
#[test]
fn backward_fills_one_bucket_and_reduces_it_in_the_epilogue() {
    let backward = |stage| tiny_events(stage, 2, "bf16-mixed", Phase::Backward(1), 3 << 20);
    let (m, ipg, flat, part) = (4_096_000i64, 1_000_000_000i64, 11_498_500i64, 5_874_000i64);
    assert_eq!(2 * N as i64, flat);
    assert_eq!(backward(2), [m, ipg, -m, m, -m, flat, -flat, part, -ipg]);
    assert_eq!(backward(1), [m, ipg, m, -m, -m, flat, -flat, part, -ipg]);
}

/// Two micro-batches (`gradient_accumulation_steps: 2`), bf16 over 2 ranks, the step's
/// allocations and frees of at least 3 MiB across both, sizes as in
/// [`backward_fills_one_bucket_and_reduces_it_in_the_epilogue`]. ZeRO-2
/// (`partition_gradients`) reduces after every micro-batch: the first as with one
/// micro-batch but that its `grads_in_partition` outlives the epilogue (`all_grad_tensors`
/// holds its views: not the boundary, no `averaged_gradients`); the second makes the bucket
/// again (`_release_ipg_buffers` cleared `ready_for_gradients`) and a fresh
/// `grads_in_partition` (`self.grads_in_partition` was set to `None`), added into the first's
/// and freed as the epilogue returns, after the bucket. ZeRO-1 reduces at the boundary only
/// (`engine.allreduce_gradients`): the first micro-batch keeps the head's and the
/// embeddings' gradients as `.grad` and the bucket (`setup_buckets` runs once); the second
/// makes each gradient again, adds it in place and frees it (`AccumulateGrad`), then
/// `reduce_gradients` copies the two kept ones into the bucket (freed) and the epilogue runs
/// as with one micro-batch. Measured on the CPU (`-gas2` runs): the same events.
#[test]
fn accumulation_reduces_each_micro_batch_under_zero2_and_at_the_boundary_under_zero1() {
    let steps = |stage: u64| {
        let mut job = tiny(stage, 2, "bf16-mixed");
        job["grad_accum"] = json!(2);
        let s = common::stream_steps::stream_of(&job);
        signed_in(&s, &[Phase::Forward(1), Phase::Backward(1)], 3 << 20)
    };
    let (m, ipg, flat, part) = (4_096_000i64, 1_000_000_000i64, 11_498_500i64, 5_874_000i64);
    let first = [m, ipg, -m, m, -m, flat, -flat, part, -ipg];
    let second = [m, ipg, -m, m, -m, flat, -flat, part, -ipg, -part];
    assert_eq!(steps(2), [&first[..], &second[..]].concat());
    assert_eq!(
        steps(1),
        [m, ipg, m, m, -m, m, -m, -m, -m, flat, -flat, part, -ipg]
    );
}

/// The step (steady state: the states exist), allocations and frees of at least 1 MiB over
/// 2 ranks, bf16, stage 2. The overflow check (`has_inf_or_nan`, `amax`/`amin`) makes
/// scalars only. `get_grad_norm_direct` takes each gradient view in fp64 (8n): 16,384,000 for
/// the embeddings (2,048,000 elements), 1,536,000 for each of block 0's gate, up and down
/// (192,000), the smaller ones under 1 MiB. Then `flatten` (P · 2 = 5,749,252),
/// `.to(float32)` (P · 4 = 11,498,504), the flat freed, `averaged_gradients[i] = None` frees
/// `grads_in_partition` (5,874,000), foreach AdamW's `_foreach_sqrt` of the partition
/// (11,498,504), the fp32 gradient freed. Over 4 ranks the partition is the embeddings' first
/// P = 1,437,314 elements alone (block 0 starts at 2,048,000), `grads_in_partition` the whole
/// embeddings (4,096,000 B).
#[test]
fn step_takes_the_norm_then_steps_the_fp32_partition() {
    let step = |dp| tiny_events(2, dp, "bf16-mixed", Phase::Optimizer(1), 1 << 20);
    let mlp = 1_536_000i64;
    assert_eq!(
        step(2),
        [
            16_384_000,
            -16_384_000,
            mlp,
            -mlp,
            mlp,
            -mlp,
            mlp,
            -mlp,
            5_749_252,
            11_498_504,
            -5_749_252,
            -5_874_000,
            11_498_504,
            -11_498_504,
            -11_498_504
        ]
    );
    let p = 1_437_314i64;
    assert_eq!(
        step(4),
        [
            8 * p,
            -8 * p,
            2 * p,
            4 * p,
            -2 * p,
            -(2 * VOCAB_MATRIX as i64),
            4 * p,
            -4 * p,
            -4 * p
        ]
    );
}

/// The stream's peak allocated equals the walk's within 0.1 % on Llama-3.1-8B over 8 GPUs,
/// ZeRO-1 and ZeRO-2 (measured +0.0044 % both: 60,974,292,992 B stream, 60,971,579,904 B
/// walk, at the loss's backward, before the first hook makes the bucket), and the report
/// carries the allocator's figures.
#[test]
fn llama8b_stream_meets_walk() {
    for stage in [1, 2] {
        let (stream, walk) = common::stream_steps::stream_and_walk(&llama8b(stage));
        let d = stream as f64 / walk as f64 - 1.0;
        assert!(
            d.abs() < 0.001,
            "zero {stage}: stream {stream} walk {walk} {:+.4} %",
            d * 100.0
        );
        let report = common::run_job(llama8b(stage));
        assert!(report.per_gpu.allocator.is_some_and(|a| a.segments > 0));
    }
}

/// Accumulating over four micro-batches, Llama-3.1-8B over 8 GPUs, ZeRO-1 and ZeRO-2: the
/// stream's peak allocated equals the walk's within 0.02 %, the walk charging the boundary
/// micro-batch with what the earlier ones leave (ZeRO-1: every `.grad` and the bucket;
/// ZeRO-2: the first's `grads_in_partition`). Measured: ZeRO-1 +0.0039 % (78,035,156,992 B
/// stream, 78,032,102,400 B walk), ZeRO-2 +0.0043 % (63,098,740,736 B, 63,096,027,648 B).
#[test]
fn llama8b_accumulating_stream_meets_walk() {
    for stage in [1, 2] {
        let mut job = llama8b(stage);
        job["grad_accum"] = json!(4);
        let (stream, walk) = common::stream_steps::stream_and_walk(&job);
        let d = stream as f64 / walk as f64 - 1.0;
        assert!(
            d.abs() < 0.0002,
            "zero {stage}: stream {stream} walk {walk} {:+.4} %",
            d * 100.0
        );
    }
}

/// The other covered variants meet the walk within 1 % (measured: Llama-3.2-1B fp32 ZeRO-2
/// over 4 GPUs b2 × 1024 −0.087 %, its fp32 master partition in both; bf16-mixed +0.007 %;
/// fused AdamW under full checkpointing, ZeRO-1, +0.101 %; Qwen2.5-0.5B (biases, tied)
/// ZeRO-2 over 2 GPUs −0.000 %; the tiny model in fp32 +0.130 % and over 4 ranks +0.035 %,
/// where the 1-2 GB bucket dominates).
#[test]
fn covered_variants_meet_the_walk() {
    let one_b = |precision: &str, zero: u64| {
        json!({"model": "llama-3.2-1b", "framework": "deepspeed", "precision": precision,
            "optimizer": "adamw", "batch": 2, "seq": 1024,
            "parallel": {"gpus": 4, "dp": 4, "zero": zero}})
    };
    let mut full = one_b("bf16-mixed", 1);
    full["optimizer"] = json!("adamw-fused");
    full["checkpointing"] = json!("full");
    let qwen = json!({"model": "qwen2.5-0.5b", "framework": "deepspeed",
        "precision": "bf16-mixed", "optimizer": "adamw", "batch": 4, "seq": 1024,
        "parallel": {"gpus": 2, "dp": 2, "zero": 2}});
    for job in [
        one_b("fp32", 2),
        one_b("bf16-mixed", 2),
        full,
        qwen,
        tiny(2, 2, "fp32"),
        tiny(1, 4, "bf16-mixed"),
    ] {
        common::stream_steps::assert_stream_meets_walk(&job);
    }
}

/// The stream against DeepSpeed 0.19.8 run on the CPU (`scripts/measure_zero_cpu.py`,
/// `validation/cpu-measured-zero.json`: rank 0 of 2, gloo; ZeRO-2 and ZeRO-1 in bf16, ZeRO-2
/// in fp32, and ZeRO-2 and ZeRO-1 in bf16 over 2 micro-batches, `-gas2`), allocations and
/// frees in order:
///
/// - `deepspeed.initialize`, every block of at least 128 KiB from the flat buffer on (the
///   profiler records no free of a storage made before it started, so the parameters' own
///   frees are left out of both);
/// - the steady step's forwards and backwards (each micro-batch's), every block of at least
///   3 MiB (the gradients outside the blocks, the bucket, the epilogue's flattened copy and
///   `grads_in_partition`; below that the CPU's own kernels' scratch differs from CUDA's);
/// - `engine.step()`, every block of at least 128 KiB, less two blocks of the flat buffer's
///   size (F · w) made and freed after the fp32 gradient is freed, where
///   `all_gather_dp_groups` runs `all_gather_into_tensor` over gloo: the profiler puts them
///   under `c10d::_allgather_base_` and `gloo:all_gather`; NCCL gathers into the flat buffer in
///   place.
#[test]
fn cpu_measured_deepspeed_events() {
    let record: Value = common::validation("cpu-measured-zero.json");
    // The LoRA runs (`-lora`) are `zero_lora_stream.rs`'s.
    let runs = record["runs"].as_object().unwrap();
    let runs: Vec<_> = runs.iter().filter(|(n, _)| !n.ends_with("-lora")).collect();
    assert_eq!(runs.len(), 5);
    for (name, run) in runs {
        let precision = if run["bf16"] == true {
            "bf16-mixed"
        } else {
            "fp32"
        };
        let stage = run["stage"].as_u64().unwrap();
        let mut job = tiny(stage, 2, precision);
        job["grad_accum"] = run["gas"].as_u64().unwrap_or(1).into();
        let s = common::stream_steps::stream_of(&job);
        let measured = |key: &str| -> Vec<i64> {
            let v: Vec<i64> = serde_json::from_value(run[key].clone()).unwrap();
            v
        };
        let floor = run["floor"].as_u64().unwrap();
        // Init: from the flat buffer (the first allocation of F · w) on, frees of earlier
        // blocks left out.
        let width = if precision == "fp32" { 4 } else { 2 };
        let flat = 5_749_252 * width;
        let load = signed(&s, Phase::Load, floor);
        let at = load.iter().position(|&d| d == flat).unwrap();
        let made_before: Vec<i64> = load[..at].iter().filter(|d| **d > 0).copied().collect();
        let mut init: Vec<i64> = load[at..].to_vec();
        for b in made_before {
            if let Some(k) = init.iter().position(|&d| d == -b) {
                init.remove(k);
            }
        }
        assert_eq!(init, measured("init"), "{name}: init");
        let big =
            |v: Vec<i64>| -> Vec<i64> { v.into_iter().filter(|d| d.abs() >= 3 << 20).collect() };
        assert_eq!(
            big(signed_in(
                &s,
                &[Phase::Forward(1), Phase::Backward(1)],
                3 << 20
            )),
            big(measured("backward")),
            "{name}: forward and backward"
        );
        let mut step = measured("step");
        for _ in 0..2 {
            let k = step.iter().rposition(|&d| d == flat).unwrap();
            assert_eq!(step.remove(k + 1), -flat);
            step.remove(k);
        }
        assert_eq!(signed(&s, Phase::Optimizer(1), floor), step, "{name}: step");
    }
}

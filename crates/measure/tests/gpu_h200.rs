//! `analyze` on the two H200 snapshots in `../shared/fixtures/gpu-h200/` (its README; made by
//! `validation/gpu/run_one.py` + `snapshots.py`): history recorded from before the context
//! probe (a zeros, then one bf16 and one fp32 1024² matmul: the main thread's cuBLAS handle
//! and its workspace), the model built with `AutoModelForCausalLM.from_config` under
//! `with torch.device("cuda")`, `empty_cache()`, then one warm-up and one measured step:
//! `zero_grad(set_to_none=True)` → forward (HF loss) → backward → `AdamW(foreach=True).step()`.
//!
//! Every expected figure is derived below from the model's config and PyTorch's rules, or read
//! off the run's results line (`results-h200-2026-12-04.jsonl`), never from this crate.

use std::path::PathBuf;
use vramscope_measure::analysis::FrameGroup;
use vramscope_measure::{analyze_file, Analysis};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/fixtures/gpu-h200/"
);
const MIB: u64 = 1 << 20;
const GPT2: &str = "gpt2-snap-fp32-adamw-eager-b4s512";
const SMOLLM2: &str = "smollm2-snap-bf16mix-adamw-sdpa-b4s512";

fn path(spec: &str) -> PathBuf {
    PathBuf::from(DIR).join(format!("snapshot-{spec}.pickle"))
}

fn analysis(spec: &str) -> Analysis {
    let path = path(spec);
    assert!(
        path.exists(),
        "missing {} (the shared fixtures live beside the worktree)",
        path.display()
    );
    analyze_file(&path).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The run's results line for `spec`.
fn result(spec: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(PathBuf::from(DIR).join("results-h200-2026-12-04.jsonl"))
        .expect("results file");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "result" && v["id"] == spec)
        .unwrap_or_else(|| panic!("no result line for {spec}"))
}

/// GPT-2 (124M: vocab 50257, 1024 positions, d 768, 12 layers, d_ff 3072), lm_head tied to
/// wte (counted once). Per layer: ln_1 and ln_2 (weight + bias, 2·768 each), c_attn
/// (768·2304 + 2304), attn c_proj (768·768 + 768), c_fc (768·3072 + 3072), mlp c_proj
/// (3072·768 + 768); then wte, wpe and ln_f.
fn gpt2_params() -> u64 {
    let d = 768;
    let layer =
        2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d);
    50257 * d + 1024 * d + 12 * layer + 2 * d
}

/// SmolLM2-135M (Llama: vocab 49152, d 576, 30 layers, 9 heads of 64, 3 KV heads → k/v 192
/// wide, d_ff 1536, no biases), embeddings tied. Per layer: q and o (576²), k and v
/// (576·192), gate, up and down (576·1536), two RMSNorm weights (576); a final norm.
fn smollm2_params() -> u64 {
    let (d, kv, ff) = (576, 192, 1536);
    let layer = 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d;
    49152 * d + 30 * layer + d
}

#[test]
fn the_parameter_counts_are_the_runs() {
    assert_eq!(gpt2_params(), 124_439_808);
    assert_eq!(smollm2_params(), 134_515_008);
    assert_eq!(result(GPT2)["params_total"], gpt2_params());
    assert_eq!(result(SMOLLM2)["params_total"], smollm2_params());
}

/// What the record's own dump says of the blocks built by `from_config` and still allocated
/// at its end (the weights live to the end): (count, bytes of their blocks), read off the
/// dump's `segments`, not the trace, and without the replay.
fn built_blocks(spec: &str) -> (usize, u64) {
    let bytes = std::fs::read(path(spec)).expect("the snapshot");
    let snap = vramscope_measure::read_snapshot_bytes(&bytes).expect("a snapshot");
    let built: Vec<u64> = snap
        .segments
        .iter()
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == vramscope_measure::snapshot::BlockState::ActiveAllocated)
        .filter(|b| snap.stack(b.stack).any(|f| f.name == "from_config"))
        .map(|b| b.size)
        .collect();
    (built.len(), built.iter().sum())
}

/// A phase of a step of the run's results line: (allocated at its start, at its end), as
/// `torch.cuda.memory_allocated` read them (blocks).
fn phase(spec: &str, step: u64, name: &str) -> (u64, u64) {
    let r = result(spec);
    let p = r["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["step"] == step)
        .flat_map(|s| s["phases"].as_array().expect("phases").iter())
        .find(|p| p["phase"] == name)
        .unwrap_or_else(|| panic!("{spec}: no phase {name} in step {step}"));
    let at = |k: &str| p[k].as_u64().expect("bytes");
    (at("start_allocated"), at("end_allocated"))
}

/// The bytes AdamW's first step left allocated: its states (exp_avg and exp_avg_sq, made by
/// `_init_group` on the first step; foreach's temporaries are freed by the phase's end), in
/// blocks, from the run's own readings around step 1's optimizer phase.
fn adamw_state_blocks(spec: &str) -> u64 {
    let (start, end) = phase(spec, 1, "optimizer");
    end - start
}

/// The measured step's `.grad` blocks, from the run's readings: what step 2 left allocated
/// at the end of its optimizer phase beyond what its `zero_grad(set_to_none=True)` had left
/// (the forward's and backward's transients are freed by then, AdamW's states were made in
/// step 1, and the gradients stay until the next `zero_grad`).
fn grad_blocks(spec: &str) -> u64 {
    let (_, after_zero_grad) = phase(spec, 2, "zero_grad");
    let (_, after_step) = phase(spec, 2, "optimizer");
    after_step - after_zero_grad
}

/// The largest `peak_allocated` over every phase of every step of the run's results line.
fn max_phase_peak(spec: &str) -> u64 {
    let r = result(spec);
    r["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .flat_map(|s| s["phases"].as_array().expect("phases").iter())
        .map(|p| p["peak_allocated"].as_u64().expect("a phase's peak"))
        .max()
        .expect("a phase")
}

/// What both records must show whatever the model: the peak where the run measured it and
/// the allocator's own peak reserved (read off the results line), at most 2 % unattributed,
/// the cuBLAS workspaces as temporaries, and no site named by the unwinder.
fn common(spec: &str, a: &Analysis) {
    let measured = &result(spec)["measured"];
    assert_eq!(
        a.per_gpu.peaks.peak_phase.as_deref(),
        Some("backward"),
        "{spec}"
    );
    assert_eq!(
        a.per_gpu.peaks.peak_reserved,
        measured["peak_reserved"].as_u64(),
        "{spec}"
    );
    let peak = a.per_gpu.peaks.peak_allocated.unwrap();
    // `peak_allocated` is what `max_memory_allocated` reads: the allocator's blocks (its
    // `allocated_bytes` grows by `block->size` in `alloc_found_block`), which the trace's
    // request sizes fall short of. The run reset the peak before each phase: the record
    // covers every step, so its peak is the largest phase peak of all the steps.
    assert_eq!(peak, max_phase_peak(spec), "{spec}");
    assert_eq!(Some(peak), measured["peak_allocated"].as_u64(), "{spec}");
    let c = &a.per_gpu.components;
    assert_eq!(
        c.base.allocated() + c.unattributed,
        peak,
        "{spec}: the components add up to the peak"
    );
    assert!(
        a.per_gpu.components.unattributed * 50 <= peak,
        "{spec}: {} of {peak} B unattributed",
        a.per_gpu.components.unattributed
    );
    // Two handles, two workspaces of 32 MiB on Hopper (aten/src/ATen/cuda/CublasHandlePool.cpp
    // `getChosenWorkspaceSize`: 32 MiB for compute capability 9.x): the main thread's, taken
    // by the probe's first matmul (run_one.py `probe_context`), and the autograd thread's,
    // taken by its first matmul in the warm-up backward. Both stay allocated to the end.
    let frames = &a.top_frames;
    let probe = frames
        .iter()
        .find(|f| f.site.ends_with("probe_context"))
        .expect("the probe's workspace live at the peak");
    assert_eq!((probe.bytes, probe.category), (32 * MIB, "temporaries"));
    let autograd = frames
        .iter()
        .find(|f| f.site.starts_with("cuBLAS workspace:"))
        .expect("the autograd thread's workspace live at the peak");
    assert_eq!(
        (autograd.bytes, autograd.category, autograd.site.as_str()),
        (
            32 * MIB,
            "temporaries",
            "cuBLAS workspace: at::cuda::getCurrentCUDABlasHandle (MmBackward0)"
        )
    );
    let sites = frames
        .iter()
        .map(|f| f.site.as_str())
        .chain(a.top_allocations.iter().map(|t| t.site.as_str()));
    for s in sites {
        assert!(
            !s.contains("torch::unwind") && !s.is_empty(),
            "{spec}: site {s:?}"
        );
    }
}

/// What both records show of a training step beyond its weights (`weights`: the bytes they
/// requested), asserted; returns AdamW's state blocks.
/// - AdamW's exp_avg and exp_avg_sq: one fp32 tensor each per parameter tensor, 2 × the
///   weights requested; their blocks as the run's own readings have them.
/// - The .grad of every weight, held over the step (as many bytes as the weights requested,
///   in blocks as the run read them); none at the peak: the measured step's
///   zero_grad(set_to_none=True) dropped them and the peak is the loss's backward (dlogits).
/// - Unattributed: input_ids and labels (4 × 512 int64 = 16,384 B each, run_one.py
///   `train_steps`) and torchaudio's module-level EPSILON (a 0-d fp32 tensor, 4 B) made under
///   the device context while transformers imported it during from_config, in a block of
///   kMinBlockSize = 512 B (`round_size`); the inputs' 16,384 B are multiples of 512, split
///   from a small-pool segment with more than 512 B left.
fn assert_states_grads_and_inputs(spec: &str, a: &Analysis, weights: u64) -> u64 {
    let c = &a.per_gpu.components.base;
    let states = adamw_state_blocks(spec);
    assert!(states >= 2 * weights, "{spec}: states {states}");
    assert_eq!(c.optimizer_states, states, "{spec}");
    let grads = grad_blocks(spec);
    assert!(grads >= weights, "{spec}: grads {grads}");
    assert_eq!(a.per_gpu.model_states.gradients, grads, "{spec}");
    assert_eq!(c.gradients, 0, "{spec}");
    assert_eq!(
        a.per_gpu.components.unattributed,
        2 * 16_384 + 512,
        "{spec}"
    );
    states
}

/// Checks that the peak's parameters and the step's parameter state are both `blocks`; the
/// site group the parameters were built at (for the caller's count).
fn assert_parameters_are(a: &Analysis, blocks: u64) -> &FrameGroup {
    assert_eq!(a.per_gpu.components.base.parameters, blocks);
    assert_eq!(a.per_gpu.model_states.parameters, blocks);
    a.top_frames
        .iter()
        .find(|f| f.category == "parameters")
        .expect("a site group of parameters")
}

#[test]
fn gpt2_fp32_weights_built_under_the_device_context_are_parameters() {
    let a = analysis(GPT2);
    common(GPT2, &a);
    // fp32: 4 B per parameter. Every tensor's bytes are 768·4 = 3,072 B times an integer, a
    // multiple of 512, so the allocator's rounding (c10/cuda/CUDACachingAllocator.cpp
    // `round_size`) adds nothing: 497,759,232 B requested.
    let weights = 4 * gpt2_params();
    assert_eq!(weights, 497_759_232);
    // The blocks hold one remainder more. wte (50257·768·4 = 154,389,504 B) is the first
    // weight built, with nothing cached: a request of 10 MiB or more gets a segment of its
    // size rounded up to 2 MiB (`get_allocation_size`): 74 · 2 MiB = 155,189,248 B, and the
    // 799,744 B left is ≤ kSmallSize (1 MiB), so `should_split` keeps it in the block.
    // Every other weight is below 10 MiB and is split from a 20 MiB segment with more than
    // 1 MiB left, or fills a split remainder exactly. `max_memory_allocated` counts blocks.
    let blocks = weights + (155_189_248 - 154_389_504);
    // The record's dump agrees: the blocks `from_config` built, still allocated at its end,
    // are the weights' and torchaudio's EPSILON (4 B in a 512 B block, see below).
    assert_eq!(built_blocks(GPT2), (148 + 1, blocks + 512));
    // The weights are 148 tensors: wte, wpe, 12 layers × 12, ln_f's two (lm_head is wte).
    let built = assert_parameters_are(&a, blocks);
    assert_eq!((built.count, built.bytes), (148, blocks));
    let states = assert_states_grads_and_inputs(GPT2, &a, weights);
    assert_eq!(a.per_gpu.model_states.optimizer_states, states);
}

#[test]
fn smollm2_weights_and_rotary_buffers_are_parameters() {
    let a = analysis(SMOLLM2);
    common(SMOLLM2, &a);
    // bf16 autocast keeps fp32 parameters: 4 B each, 538,060,032 B as requested. The trace
    // records requested sizes: the 61 RMSNorm weights (576·4 = 2,304 B) sit in 2,560 B blocks
    // (`round_size` to 512), and weights built from cached blocks keep remainders of up to
    // 1 MiB that `should_split` does not split off: `max_memory_allocated` counts the blocks.
    let weights = 4 * smollm2_params();
    assert_eq!(weights, 538_060_032);
    // The blocks, as the record's own dump has them (see `built_blocks`): the weights, the
    // two buffers and torchaudio's EPSILON (4 B in a 512 B block).
    let (count, built_bytes) = built_blocks(SMOLLM2);
    assert_eq!(count, 272 + 2 + 1);
    let blocks = built_bytes - 512;
    assert!(blocks > weights + 2 * 128 + 61 * 256, "{blocks}");
    // LlamaRotaryEmbedding's two buffers (inv_freq and its copy original_inv_freq: head_dim/2
    // = 32 fp32 = 128 B each) are built with the weights and live as long; the allocator
    // cannot tell a buffer from a weight, so they count with the parameters.
    let buffers = 2 * 128;
    assert!(blocks > weights + buffers);
    // 1 embedding + 30 × 9 + the final norm = 272 weights, and the 2 buffers.
    let built = assert_parameters_are(&a, blocks);
    assert_eq!(built.count, 272 + 2);
    assert_states_grads_and_inputs(SMOLLM2, &a, weights);
}

/// `allocator` on both records: the trace replayed through the allocator model exactly (the
/// histories start before the first tensor), the peak reserved as `max_memory_reserved`
/// measured it, fragmentation from the run's own peaks, and the what-ifs bounded by what any
/// setting must hold.
fn replayed(spec: &str) {
    let a = analysis(spec);
    let m = &result(spec)["measured"];
    let (alloc, reserved) = (
        m["peak_allocated"].as_u64().unwrap(),
        m["peak_reserved"].as_u64().unwrap(),
    );
    let x = a
        .allocator
        .as_ref()
        .expect("a trace: the allocator section");
    assert!(x.exact && x.complete_history, "{spec}: {x:?}");
    assert_eq!(x.replayed_peak_reserved, reserved, "{spec}");
    assert_eq!(x.recorded_peak_reserved, Some(reserved), "{spec}");
    assert_eq!(
        x.alloc_conf, "",
        "{spec}: the run set no PYTORCH_CUDA_ALLOC_CONF"
    );
    // 1 − max_memory_allocated / max_memory_reserved, both as the run measured them.
    let f = 1.0 - alloc as f64 / reserved as f64;
    assert!(
        (x.fragmentation - f).abs() < 1e-9,
        "{spec}: {}",
        x.fragmentation
    );
    let keys: Vec<&str> = x.whatif.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "expandable_segments",
            "max_split_size_mb:128",
            "max_split_size_mb:512"
        ]
    );
    // No setting reserves less than the bytes allocated at the peak.
    for (k, &v) in &x.whatif {
        assert!(v >= alloc, "{spec}: {k} reserves {v} < {alloc} allocated");
    }
    assert!(x.whatif_baseline >= alloc);
    // Expandable segments can give back at most the reserve over allocated at the peak
    // (measured: reserved − allocated); here they give back some: each step frees the loss's
    // ~390 MiB logits blocks and the backward's transients and asks again in other sizes,
    // which fixed segments hold apart and pages do not.
    let saving = x
        .expandable_saving()
        .expect("expandable segments reserve less");
    assert!(saving < reserved - alloc, "{spec}: {saving}");
}

#[test]
fn both_traces_replay_exactly_with_their_what_ifs() {
    replayed(GPT2);
    replayed(SMOLLM2);
}

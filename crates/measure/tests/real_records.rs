//! Regression set on real users' records: the files in `../shared/fixtures/real-snapshots/`
//! (read there, never copied: they are data from public repositories; its README says what
//! each run was and `sources.tsv` where each file comes from).
//!
//! Expected figures come from what the run was — the model's parameter count × bytes, the
//! optimizer's state size — derived in the comments, never from this crate's output.
//! Measured model states are block sizes: the caching allocator rounds a request up (to 512 B,
//! and large ones to 2 MiB multiples, c10/cuda/CUDACachingAllocator.cpp `round_size` and
//! `get_allocation_size`), so they may exceed `params × bytes` by a little; 3% bounds it.

mod common;

use std::path::PathBuf;
use vramscope_measure::infer::Confidence;
use vramscope_measure::{analyze_file, Analysis};

const GIB: f64 = (1u64 << 30) as f64;
const MIB: u64 = 1 << 20;

fn real(name: &str) -> Analysis {
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/real-snapshots/"
    ))
    .join(name);
    assert!(
        path.exists(),
        "missing real record {} (the shared fixtures live beside the worktree)",
        path.display()
    );
    analyze_file(&path).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Parameters of the CS336 assignment-1 Transformer LM (cs336_basics/model.py): token
/// embedding V·d, per layer q/k/v/o (4·d²), SwiGLU w1/w2/w3 (3·d·d_ff) and two RMSNorm
/// weights (2·d), a final RMSNorm (d) and an untied LM head (d·V); no biases. V = 10,000.
fn cs336_params(d: u64, layers: u64, d_ff: u64) -> u64 {
    let v = 10_000;
    2 * v * d + layers * (4 * d * d + 3 * d * d_ff + 2 * d) + d
}

/// CS336 "small": d 768, 12 layers, d_ff 3072 → 15,360,000 + 12·9,438,720 + 768
/// = 128,625,408 parameters.
fn small() -> u64 {
    cs336_params(768, 12, 3072)
}
/// CS336 "medium": d 1024, 24 layers, d_ff 4096 → 20,480,000 + 24·16,779,264 + 1024
/// = 423,183,360 parameters (the README's figure).
fn medium() -> u64 {
    cs336_params(1024, 24, 4096)
}
/// CS336 "xl": d 1600, 48 layers, d_ff 6400 → 32,000,000 + 48·40,963,200 + 1600
/// = 1,998,235,200 parameters in 48·9 + 3 = 435 tensors.
fn xl() -> u64 {
    cs336_params(1600, 48, 6400)
}
/// CS336 "2.7B": d 2560, 32 layers, d_ff 10240 → 51,200,000 + 32·104,862,720 + 2560
/// = 3,406,809,600 parameters (the README's figure) in 32·9 + 3 = 291 tensors.
fn b27() -> u64 {
    cs336_params(2560, 32, 10240)
}

#[test]
fn cs336_parameter_counts_match_the_readme() {
    assert_eq!(medium(), 423_183_360);
    assert_eq!(b27(), 3_406_809_600);
}

/// `measured` within 3% of `expected` (bytes).
fn near(what: &str, measured: u64, expected: u64) {
    let r = measured as f64 / expected as f64;
    assert!(
        (0.97..=1.03).contains(&r),
        "{what}: measured {:.3} GiB, expected {:.3} GiB ({:+.1}%)",
        measured as f64 / GIB,
        expected as f64 / GIB,
        (r - 1.0) * 100.0
    );
}

/// Unattributed bytes under 5% of the peak.
fn mostly_attributed(name: &str, a: &Analysis) {
    let peak = a.per_gpu.peaks.peak_allocated.unwrap();
    let u = a.per_gpu.components.unattributed;
    assert!(
        u * 20 < peak,
        "{name}: {:.3} GiB of {:.3} GiB unattributed",
        u as f64 / GIB,
        peak as f64 / GIB
    );
}

/// fp32 training with AdamW: weights 4 B, gradients 4 B, moments m and v 8 B per parameter.
/// Each state as held over the step: `model_states` (its level held for a window of events)
/// or, when more, what is live at the peak (states created at the step's very end).
fn fp32_adamw(name: &str, n: u64) -> Analysis {
    let a = real(name);
    let s = &a.per_gpu.model_states;
    let c = &a.per_gpu.components.base;
    let p = s.parameters.max(c.parameters);
    let g = s.gradients.max(c.gradients);
    let o = s.optimizer_states.max(c.optimizer_states);
    near(&format!("{name} parameters"), p, 4 * n);
    near(&format!("{name} gradients"), g, 4 * n);
    near(&format!("{name} optimizer states"), o, 8 * n);
    mostly_attributed(name, &a);
    a
}

#[test]
fn cs336_2_7b_full_steps_with_weights_from_before_recording() {
    for name in [
        "kkaitlyn111__cs336-a2__memory_files__memory_ctx128_fullstep.pickle",
        "kkaitlyn111__cs336-a2__memory_ctx128_fullstep_v1.pickle",
        "kkaitlyn111__cs336-a2__memory_files__memory_ctx512_fullstep_.pickle",
    ] {
        let a = fp32_adamw(name, b27());
        // The weights were built before recording: inferred from the 291 gradients' sizes.
        let w = a
            .inferences
            .iter()
            .find(|x| x.category == "parameters")
            .unwrap_or_else(|| panic!("{name}: no inference of the weights"));
        assert_eq!(w.basis, "gradient sizes");
        assert_eq!(w.blocks, 291, "{name}");
        assert_eq!(w.confidence, Confidence::High);
        assert_eq!(a.confidence.get("parameters"), Some(&Confidence::High));
        assert!(a.warnings.iter().any(|l| l.starts_with("weights inferred")));
    }
}

#[test]
fn cs336_medium_hand_written_adamw_replacing_its_state() {
    // The optimizer writes new m and v each step (optimizer.py:76/77) and frees last step's
    // (:73/:74, allocated before recording): both are optimizer states, not temporaries.
    let a = fp32_adamw("Wedsonlin__a2__medium_128_training.pickle", medium());
    assert_eq!(a.per_gpu.peaks.peak_phase.as_deref(), Some("optimizer"));
    // At the optimizer's peak both old and new moments are partly live: m and v of all
    // parameters, plus the one tensor being replaced.
    near(
        "optimizer states at the peak",
        a.per_gpu.components.base.optimizer_states,
        8 * medium(),
    );
    let a = fp32_adamw("Wedsonlin__a2__medium_512_training.pickle", medium());
    near(
        "optimizer states at the backward peak",
        a.per_gpu.components.base.optimizer_states,
        8 * medium(),
    );
}

#[test]
fn forward_only_records_show_their_weights() {
    // (file, parameters × bytes): fp32 weights built before recording, forward only.
    let cases = [
        (
            "kkaitlyn111__cs336-a2__memory_files__memory_ctx512_forward_mixed.pickle",
            4 * b27(),
        ),
        (
            "kkaitlyn111__cs336-a2__memory_ctx512_forward_v1.pickle",
            4 * b27(),
        ),
        (
            "kkaitlyn111__cs336-a2__memory_small_forward.pickle",
            4 * small(),
        ),
        ("Wedsonlin__a2__medium_128_inference.pickle", 4 * medium()),
        ("Wedsonlin__a2__medium_1024_inference.pickle", 4 * medium()),
        (
            "silmont2000__a2__memory_forward_fp32_128.pickle",
            4 * small(),
        ),
        // bf16 autocast keeps fp32 parameters.
        (
            "silmont2000__a2__memory_forward_bf16_128.pickle",
            4 * small(),
        ),
    ];
    for (name, bytes) in cases {
        let a = real(name);
        near(name, a.per_gpu.components.base.parameters, bytes);
        assert_eq!(
            a.per_gpu.peaks.peak_phase.as_deref(),
            Some("forward"),
            "{name}"
        );
        // Inferred from residence alone: said to be a low-confidence guess.
        assert_eq!(a.confidence.get("parameters"), Some(&Confidence::Low));
    }
}

#[test]
fn compiled_forward_activations_are_activations_in_forward() {
    // torch.compile of the 2.7B model at batch 4, S 512: the README reads the blocks traced
    // at the peak, all under CompiledFunction.forward: 64 × 128 MiB (B·H·S²·4 B = 4·32·512²·4),
    // 96 × 80 MiB (B·S·d_ff·4 = 4·512·10240·4) and 259 × 20 MiB (B·S·d·4 = 4·512·2560·4).
    let a = real("kkaitlyn111__cs336-a2__memory_ctx512_forward_v1.pickle");
    assert_eq!(a.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
    let saved = 64 * 128 * MIB + 96 * 80 * MIB + 259 * 20 * MIB;
    near(
        "compiled activations",
        a.per_gpu.components.base.activations,
        saved,
    );
    assert!(a.per_gpu.components.base.gradients < 64 * MIB);

    // The same at S 128 after an xl model's warm-up left its weights and .grad resident
    // (435 blocks each, the xl's 48·9 + 3 tensors): weights = xl + 2.7B, gradients = xl.
    // The README: 3.91 GiB traced at the peak, all under CompiledFunction.forward (saved
    // activations, and inductor buffers freed within the same forward).
    let a = real("kkaitlyn111__cs336-a2__memory_2.7b_forward.pickle");
    assert_eq!(a.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
    let c = &a.per_gpu.components.base;
    near("2.7B + xl weights", c.parameters, 4 * (xl() + b27()));
    near("xl gradients", c.gradients, 4 * xl());
    near(
        "compiled forward",
        c.activations + c.temporaries,
        (3.91 * GIB) as u64,
    );

    // CS336 small compiled, batch 4, S 128: README: 0.48 GiB traced in the forward, of which
    // the first matmul's cuBLAS workspace (32 MiB, its stack names
    // at::cuda::getCurrentCUDABlasHandle) is a temporary, the rest activations.
    let a = real("kkaitlyn111__cs336-a2__memory_small_forward.pickle");
    assert_eq!(a.per_gpu.peaks.peak_phase.as_deref(), Some("forward"));
    let c = &a.per_gpu.components.base;
    assert_eq!(c.temporaries, 32 * MIB);
    near(
        "small compiled activations",
        c.activations + c.temporaries,
        (0.48 * GIB) as u64,
    );
    assert_eq!(a.per_gpu.components.base.gradients, 0);
}

#[test]
fn forward_and_backward_with_grads_from_a_warm_up() {
    // CS336 small, forward + backward, no optimizer: the weights and their .grad from the
    // warm-up step are resident (pairs of equal sizes), 4 B × params each.
    let name = "MAGMA27__assignment2-systems__memory_snapshot.pickle";
    let a = real(name);
    let s = &a.per_gpu.model_states;
    near("small weights", s.parameters, 4 * small());
    near("small gradients", s.gradients, 4 * small());
    assert_eq!(s.optimizer_states, 0);
    assert_eq!(a.confidence.get("parameters"), Some(&Confidence::Medium));
    mostly_attributed(name, &a);
}

#[test]
fn attention_micro_benchmark_has_no_model() {
    // silmont2000's attention benchmark: no nn.Module parameters, backward included.
    let name = "silmont2000__a2__mem_snapshot.pickle";
    let a = real(name);
    assert_eq!(a.per_gpu.model_states.parameters, 0);
    mostly_attributed(name, &a);
}

#[test]
fn weights_with_allocation_stacks_stay_parameters() {
    // jogregoire: the UNet's weights were allocated while recording, in model.py __init__.
    let a = real("jogregoire__How-Diffusion-Models-Work__my_snapshot.pickle");
    assert!(a.per_gpu.components.base.parameters > 0);
    assert!(a.inferences.iter().all(|x| x.category != "parameters"));
}

#[test]
fn resident_weights_of_inference_records_are_parameters() {
    // Maphsge4's runs keep their weights resident from before recording and load more at
    // `forward_load` while recording; nothing of size is left unattributed.
    for name in [
        "Maphsge4__select_n__snapshot_04d383c.pickle",
        "Maphsge4__select_n__snapshot_1f2f548.pickle",
    ] {
        let a = real(name);
        assert!(a.per_gpu.components.base.parameters > 0, "{name}");
        mostly_attributed(name, &a);
    }
}

#[test]
fn records_without_a_trace_say_so_and_infer_nothing() {
    // enabled="state" snapshots (2.x dicts without trace entries) and the 1.13 segment list.
    for (name, kind) in [
        (
            "kkaitlyn111__cs336-a2__memory_snapshot.pickle",
            "cuda_snapshot",
        ),
        (
            "Maphsge4__select_n__snapshot_b890bc5.pickle",
            "cuda_snapshot",
        ),
        (
            "Muduard__LayoutEditing__dump_snapshot_cd67cea.pickle",
            "cuda_snapshot",
        ),
        (
            "Muduard__LayoutEditing__memory_snapshot.pkl",
            "cuda_snapshot_1_13",
        ),
    ] {
        let a = real(name);
        assert_eq!(a.source.kind, kind, "{name}");
        assert!(a.inferences.is_empty(), "{name}");
        assert!(
            a.warnings
                .iter()
                .any(|w| w.starts_with("no allocation trace")),
            "{name}"
        );
    }
}

#[test]
fn a_diffusion_run_with_a_trace_reads() {
    // Muduard 413b2eb: a ≥ 2.1 dict with a trace; LCM diffusion steps under lcm_diffusion_step.
    let a = real("Muduard__LayoutEditing__dump_snapshot_413b2eb.pickle");
    assert_eq!(a.source.kind, "cuda_snapshot");
    assert!(a.per_gpu.components.base.activations > 0);
}

#[test]
fn an_empty_record_says_recording_was_off() {
    let a = real("angelolmn__HitsBE__my_snapshot_empty.pickle");
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(0));
    assert!(common::warns_of(
        &a.warnings,
        "was memory history recording on"
    ));
}

#[test]
fn resnet50_profiler_timeline() {
    // HTA's memory timeline: ResNet-50 (25,557,032 parameters, torchvision) in fp32 = 102.2 MB,
    // SGD with momentum keeps one buffer per parameter: the same again.
    let a = real("HTA__memory_analysis__memory_timeline.raw.json.gz");
    let s = &a.per_gpu.model_states;
    near("ResNet-50 weights", s.parameters, 4 * 25_557_032);
    near("SGD momentum", s.optimizer_states, 4 * 25_557_032);
}

#[test]
fn chrome_trace_counts_what_was_allocated_before_profiling() {
    // HTA's V100 DDP rank-1 trace, read with Python's json module: over its CUDA [memory]
    // events (device 1) max(args["Total Allocated"]) is 6.1742 GiB and the min 3.8153 GiB
    // (at most that stayed allocated throughout, from before profiling).
    let a = real("more/HTA__df_index_resolver__v100_ddp_rank1_chrome_trace.json.gz");
    let peak = a.per_gpu.peaks.peak_allocated.unwrap();
    near("peak = max Total Allocated", peak, (6.1742 * GIB) as u64);
    let before = a.per_gpu.components.before_recording;
    assert!(before > 0 && before <= (3.8153 * GIB) as u64 + MIB);
    // Max Total Reserved over the same events: 11.9043 GiB.
    near(
        "peak reserved",
        a.per_gpu.peaks.peak_reserved.unwrap(),
        (11.9043 * GIB) as u64,
    );
    mostly_attributed("HTA chrome trace", &a);
}

#[test]
fn expandable_segments_read() {
    // Constructor-Sun: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (segment_map events).
    // Allocated blocks lie inside mapped memory: the peak allocated cannot exceed reserved.
    let a = real("more/Constructor-Sun__code_location__memory_snapshot.pickle");
    let g = &a.per_gpu;
    assert!(g.peaks.peak_allocated.unwrap() > 0);
    assert!(g.peaks.peak_allocated.unwrap() <= g.peaks.peak_reserved.unwrap());
}

#[test]
fn a_kv_cache_copy_of_cache_utils_is_kv_cache() {
    // LfieLike/SketchKV2: KIVI-style quantized KV cache in the repo's own copy of
    // transformers' cache module (models/cache_utils_V2.py `update_new`, one block per site
    // for each of the model's 32 layers) over a Llama-2-7B in fp16, resident from before
    // recording: 6,738,415,616 parameters × 2 B = 12.55 GiB.
    let a = real("more/LfieLike__SketchKV2__my_snapshot.pickle");
    let c = &a.per_gpu.components.base;
    assert!(c.kv_cache > c.activations);
    near("Llama-2-7B fp16 weights", c.parameters, 2 * 6_738_415_616);
}

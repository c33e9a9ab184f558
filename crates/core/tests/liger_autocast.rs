//! Liger's fused linear cross-entropy under autocast (`loss: "chunked"`, `bf16-mixed`):
//! `liger::autocast_transient` in the walk and `alloc_events/fused_ce.rs` in the stream, for
//! release 0.8.2 on the job's torch and GPU (`liger::autocast_addmm`).

mod common;

use common::stream_steps::{events_in, signed_sizes, stream_and_walk, stream_of, tiny_llama};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{Event, Phase};

fn llama(model: &str, torch: &str) -> Value {
    json!({
        "model": model, "precision": "bf16-mixed", "optimizer": "adamw",
        "batch": 2, "seq": 2048, "gpu": "h200", "loss": "chunked", "torch_version": torch
    })
}

/// The stream's peak within 0.1 % of the walk's: Llama-3.2-1B and 3B, bf16-mixed, b2 × 2048,
/// on an H200, with torch 2.15 (the in-place `addmm`) and 2.7 (`mm(...).float()`).
#[test]
fn stream_meets_walk_within_a_thousandth() {
    for model in ["llama-3.2-1b", "llama-3.2-3b"] {
        for gpu in ["2.15", "2.7"] {
            let (s, w) = stream_and_walk(&llama(model, gpu));
            let d = s as f64 / w as f64 - 1.0;
            eprintln!(
                "{model} torch {gpu}: stream {s} walk {w} {:+.4} %",
                d * 100.0
            );
            assert!(d.abs() < 0.001, "{model} {gpu}: {s} vs {w}");
        }
    }
}

/// The one-layer Llama (hidden 256, vocabulary 8192, untied) in bf16-mixed (fp32 weights) at
/// batch 1 × 64, on an H200 with torch `torch`.
fn one_layer(torch: &str) -> Value {
    json!({
        "model": {"hf_config": tiny_llama(1)}, "precision": "bf16-mixed", "optimizer": "adamw",
        "batch": 1, "seq": 64, "gpu": "h200", "loss": "chunked", "torch_version": torch
    })
}

/// The fused loss's forward at 1 × 64 under autocast, as `fused_linear_cross_entropy_forward`
/// runs it (the order of `scripts/measure_liger_autocast_cpu.py`'s record,
/// `validation/cpu-measured-liger-autocast.jsonl`): the padded and shifted labels (65·8 = 520,
/// 64·8 = 512 B), `grad_input` in the input's fp32 (64·256·4 = 65,536), `grad_weight` fp32
/// (8192·256·4 = 8,388,608), `loss_1d` (256), the mask (64), the count (8, freed); chunks of
/// next_power_of_2(⌈64 / ⌈8192/256⌉⌉) = 2 rows, 32 of them, each: the input rows' 16-bit cast
/// (2·256·2 = 1,024) and the transposed weight's (8192·256·2 = 4,194,304, a view: never
/// cached), the 16-bit logits (2·8192·2 = 32,768), both casts freed; the first chunk caches the
/// weight's own 16-bit copy (4,194,304) for `grad_logits_chunk @ weight`; its 16-bit product
/// (1,024, freed); the previous chunk's logits dropped (`grad_logits_t` rebound); then the
/// weight step. torch 2.15 (`addmm`): the last input cast dropped, a new one (1,024) held.
/// torch 2.7 (`mm(...).float()`): the input cast for `mm` (1,024), the 16-bit product
/// (4,194,304), the cast freed, the fp32 copy (8,388,608), both freed. The end: the summed loss
/// (4 B), the last logits, the held cast, the cached weight copy, `loss_1d`, the mask and both
/// labels freed.
#[test]
fn forward_events_under_autocast() {
    for torch in ["2.15", "2.7"] {
        let addmm = torch == "2.15";
        let s = stream_of(&one_layer(torch));
        let ev = events_in(&s, Phase::Forward(1));
        let at = ev
            .iter()
            .position(|e| matches!(*e, Event::Alloc { bytes: 520, .. }))
            .expect("the padded labels");
        let mut want: Vec<i64> = vec![520, 512, 65_536, 8_388_608, 256, 64, 8, -1];
        let step: Vec<i64> = if addmm {
            vec![1_024]
        } else {
            vec![1_024, 4_194_304, -1, 8_388_608, -1, -1]
        };
        for k in 0..32 {
            want.extend([1_024, 4_194_304, 32_768, -1, -1]);
            if k == 0 {
                want.extend([4_194_304, 1_024, -1]);
            } else {
                want.extend([1_024, -1, -1]);
                if addmm {
                    want.push(-1);
                }
            }
            want.extend(&step);
        }
        want.push(4);
        want.extend([-1; 5]);
        if addmm {
            want.push(-1);
        }
        want.push(-1);
        assert_eq!(
            signed_sizes(&ev[at..at + want.len()]),
            want,
            "torch {torch}"
        );
    }
}

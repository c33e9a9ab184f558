//! A vision-language training step through the allocator stream (issue 30): Gemma 3's SigLIP
//! tower, projector and merge written as events (`estimate/vision_events.rs`,
//! `alloc_events/tower.rs`), against the walk and against hand derivations from transformers
//! 5.24's `modeling_gemma3.py` / `modeling_siglip.py`.

mod common;

use common::stream_steps::stream_and_walk;
use serde_json::{json, Value};

/// Gemma-3-4B-it's config.json (the formats crate's fixture).
fn gemma3_4b() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../formats/tests/fixtures/vlm/gemma-3-4b-it.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn real_job(precision: &str, extra: Value) -> Value {
    let mut job = json!({
        "model": {"hf_config": gemma3_4b()}, "task": "train", "batch": 1, "seq": 2048,
        "precision": precision, "optimizer": "adamw", "gpu": "h100",
        "images": {"count": 1, "width": 896, "height": 896}
    });
    for (k, v) in extra.as_object().unwrap() {
        job[k] = v.clone();
    }
    job
}

/// Gemma-3-4B b1 × 2048 with one 896 × 896 image (256 image tokens): the stream's peak
/// allocated meets the walk's within 0.1 %, bf16-mixed and bf16, trained, frozen tower, and
/// under full checkpointing.
#[test]
fn gemma3_4b_stream_meets_the_walk() {
    for precision in ["bf16-mixed", "bf16"] {
        for extra in [
            json!({}),
            json!({"freeze": ["vision"]}),
            json!({"checkpointing": "full"}),
        ] {
            let (stream, walk) = stream_and_walk(&real_job(precision, extra.clone()));
            let d = stream as f64 / walk as f64 - 1.0;
            eprintln!(
                "{precision} {extra}: stream {stream} walk {walk} {:+.4} %",
                d * 100.0
            );
            assert!(d.abs() < 0.001, "{precision} {extra}: {:+.4} %", d * 100.0);
        }
    }
}

#[test]
fn scratch_print() {
    for precision in ["bf16-mixed", "bf16"] {
        let mut j = real_job(precision, json!({"seq": 2304}));
        j.as_object_mut().unwrap().remove("images");
        let (stream, walk) = stream_and_walk(&j);
        eprintln!(
            "text-only {precision}: stream {stream} walk {walk} {:+.4} %",
            (stream as f64 / walk as f64 - 1.0) * 100.0
        );
        for extra in [
            json!({}),
            json!({"freeze": ["vision"]}),
            json!({"checkpointing": "full"}),
        ] {
            let (stream, walk) = stream_and_walk(&real_job(precision, extra.clone()));
            eprintln!(
                "{precision} {extra}: stream {stream} walk {walk} {:+.4} %",
                (stream as f64 / walk as f64 - 1.0) * 100.0
            );
        }
    }
}

#[test]
fn scratch_phases() {
    use vramscope_core::estimate::alloc_events::Event;
    for extra in [
        json!({"seq": 2304, "images": null}),
        json!({"freeze": ["vision"]}),
        json!({}),
    ] {
        let s = common::stream_steps::stream_of(&real_job("bf16-mixed", extra.clone()));
        let mut live: i128 = 0;
        let mut sizes = std::collections::HashMap::new();
        let mut peak = (0i128, String::new());
        let mut phase = String::new();
        for (i, e) in s.events.iter().enumerate() {
            match *e {
                Event::Alloc { id, bytes } => {
                    sizes.insert(id, bytes);
                    live += bytes as i128;
                    if live > peak.0 {
                        peak = (live, format!("{phase} ev {i}"));
                    }
                }
                Event::Free { id } => {
                    live -= sizes[&id] as i128;
                }
                Event::Phase(p) => {
                    eprintln!("  {extra} {p:?} starts at live {live}");
                    phase = format!("{p:?}");
                }
                _ => {}
            }
        }
        eprintln!("{extra}: peak {peak:?} events {}", s.events.len());
    }
}

#[test]
fn scratch_tower() {
    for p in ["bf16-mixed", "bf16"] {
        let job = real_job(p, json!({}));
        let (input, resolved) = common::prepared_json(&job);
        let spec = input.spec.as_ref().unwrap();
        let resolved = vramscope_core::estimate::vision::with_images(Some(spec), &resolved)
            .unwrap()
            .into_owned();
        let mut w = Vec::new();
        let plan = vramscope_core::estimate::activations::forward(spec, &resolved, &mut w).unwrap();
        let t = plan.events.as_ref().unwrap().tower.clone().unwrap();
        let b = &t.block;
        let mut net: i128 = 0;
        let mut input_freed = false;
        for e in &b.forward {
            let slot = e.slot();
            let bytes = b.sizes[slot as usize] as i128;
            if e.is_free() {
                if slot == b.input {
                    input_freed = true;
                } else {
                    net -= bytes;
                }
            } else {
                net += bytes;
            }
        }
        let copies: u64 = b.copies.iter().map(|&c| b.sizes[c as usize]).sum();
        eprintln!("{p}: per block net {net} input_freed {input_freed} copies {copies}; layers {} embeddings {} inputs_kept {} proj_kept {} walk_kept {} stream tower kept {}",
        t.layers, t.embeddings, t.inputs_kept, t.projector_kept, t.walk_kept,
        t.embeddings as i128 + net * t.layers as i128 + t.inputs_kept as i128 + t.projector_kept as i128);
    }
}

#[test]
fn scratch_cpu() {
    for f in ["fp32", "bf16mixed", "frozen"] {
        let job: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("/tmp/g3m/jobs/{f}.json")).unwrap(),
        )
        .unwrap();
        let (stream, walk) = stream_and_walk(&job);
        let w = common::CPU_MISSING_WORKSPACES;
        eprintln!("{f}: stream {} walk {}", stream - w, walk - w);
    }
}

//! The advice list's order against its own figures: by cost, ties by modelled time, and no
//! change ahead of one its figures show 30× faster (issue #32's example: ZeRO-Offload at
//! +2,703 % listed before pure bf16 at −10 %).

use serde_json::{json, Value};
use vramscope_core::advice::{advise, Advice};
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

fn advice(job: &Value) -> Vec<Advice> {
    let job: Job = serde_json::from_value(job.clone()).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let max = model.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let j = job.resolve(max).unwrap();
    advise(&model.into_input(), &j).unwrap()
}

/// No pair of the list contradicts its rank: a later entry is never 30× faster than an earlier
/// one, and of equal points the earlier is no slower.
fn consistent(list: &[Advice]) {
    let t = |a: &Advice| a.time_cost.map(|c| 1.0 + c);
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            if let (Some(ta), Some(tb)) = (t(a), t(b)) {
                assert!(
                    ta < 30.0 * tb,
                    "{:?} ({ta}) ranks before {:?} ({tb})",
                    a.flags,
                    b.flags
                );
                if a.cost == b.cost {
                    assert!(ta <= tb, "{:?} vs {:?}", a.flags, b.flags);
                }
            }
        }
    }
}

/// Llama-3.1-8B full fine-tune, bf16-mixed AdamW, batch 1 × 2048 on one H100 80 GB: the
/// cheapest fitting changes are 8-bit AdamW (7 points), ZeRO-Offload (8) and pure bf16 (9).
/// Their own time figures: offload's CPU update makes a token take 28× longer, bf16 0.9× —
/// 31× apart — so bf16 is listed before offload, after 8-bit AdamW (0.85×).
#[test]
fn offload_is_not_cheaper_than_a_thirty_times_faster_change() {
    let list = advice(&json!({"model": "llama-3.1-8b", "task": "train",
        "precision": "bf16-mixed", "gpu": "h100-80gb", "batch": 1, "seq": 2048}));
    let flags: Vec<String> = list.iter().map(|a| a.flags.join(" ")).collect();
    let at = |s: &str| flags.iter().position(|f| f.contains(s));
    let (bf16, offload) = (at("--precision bf16").unwrap(), at("--offload").unwrap());
    assert!(bf16 < offload, "{flags:?}");
    let o = &list[offload];
    let b = &list[bf16];
    assert!((1.0 + o.time_cost.unwrap()) >= 30.0 * (1.0 + b.time_cost.unwrap()));
    assert!(
        o.cost < b.cost,
        "offload still scores fewer points: the time moved it"
    );
    consistent(&list);
}

/// Other jobs' lists hold the rule too: a 70B LoRA, an inference job under vLLM, a small full
/// fine-tune on a small card.
#[test]
fn other_lists_are_consistent() {
    for job in [
        json!({"model": "llama-3.1-70b", "task": "train", "precision": "bf16",
               "gpu": "h100-80gb", "batch": 1, "seq": 2048, "peft": {"method": "lora", "rank": 16}}),
        json!({"model": "llama-3.1-8b", "task": "infer", "framework": "vllm",
               "gpu": "rtx4090-24gb", "seq": 8192, "batch": 8}),
        json!({"model": "qwen2.5-0.5b", "task": "train", "precision": "fp32",
               "gpu": "rtx3090-24gb", "batch": 16, "seq": 2048}),
    ] {
        consistent(&advice(&job));
    }
}

//! The advice list's order against its own figures: by cost, ties by modelled time, and no
//! change ahead of one its figures show 30× faster (issue #32's example: ZeRO-Offload at
//! +2,703 % listed before pure bf16 at −10 %).

mod common;

use serde_json::{json, Value};
use vramscope_core::advice::{advise, Advice};
use vramscope_core::job::Job;

fn advice(job: &Value) -> Vec<Advice> {
    let job: Job = serde_json::from_value(job.clone()).unwrap();
    let (input, j) = common::prepared(&job);
    advise(&input, &j).unwrap()
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

/// The issue's job: Llama-3.1-8B full fine-tune, bf16-mixed AdamW, batch 1 × 2048 on one H100
/// 80 GB. The cheapest fitting changes are 8-bit AdamW (7 points), ZeRO-Offload (8) and pure
/// bf16 (9). The issue's list put offload at +2,703 % before bf16 at −10 % under the old step
/// model (28× and 0.9×: 31× apart, against the 30× rule). Under the step model checked on the
/// H200 (issue #32: the foreach AdamW step memory-bound, ~0.3 s of a ~0.5 s step), offload's
/// CPU update (DeepSpeed's 8.2 s per 11.6 B parameters: ≈ 5.7 s for 8 B) makes a step about
/// 12× longer and bf16's 2-byte states make it shorter: under 30× apart, so the points decide.
/// What must hold is the rule itself on the list the job gets, whatever the figures.
#[test]
fn the_issues_job_lists_no_change_its_own_figures_contradict() {
    let list = advice(&json!({"model": "llama-3.1-8b", "task": "train",
        "precision": "bf16-mixed", "gpu": "h100-80gb", "batch": 1, "seq": 2048}));
    let flags: Vec<String> = list.iter().map(|a| a.flags.join(" ")).collect();
    let at = |s: &str| flags.iter().position(|f| f.contains(s));
    let (bf16, offload) = (at("--precision bf16").unwrap(), at("--offload").unwrap());
    // Offload's CPU update is slower than the GPU's step whatever the model's rates.
    assert!(list[offload].time_cost.unwrap() > 1.0, "{flags:?}");
    // Pure bf16 halves the optimizer's bytes: never slower than bf16-mixed.
    assert!(list[bf16].time_cost.unwrap() < 0.0, "{flags:?}");
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

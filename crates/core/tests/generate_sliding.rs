//! Sliding-window layers' cache in HF `generate` (issue 34) against the CPU measurement
//! `validation/cpu-measured-generate-swa.json` (`scripts/measure_generate_swa_cpu.py`: torch
//! 2.15.0, transformers 5.24.0; SDPA, and eager at a 2,048-token prompt; tiny fp32 Mistral, 4 layers, and Gemma-3 text, 6 layers of
//! which the 6th is global; hidden 512, MLP 1024, 8 heads and 8 k/v heads of 64, window 128,
//! batch 2). One layer's keys (or values) per token: 8 · 64 · 4 B · 2 sequences = 4,096 B.

mod common;

use serde_json::Value;
use vramscope_core::job::Job;

/// The job of one measured run.
fn job_of(rec: &Value, run: &Value) -> Job {
    let name = run["model"].as_str().unwrap();
    serde_json::from_value(serde_json::json!({
        "model": {"hf_config": rec["hf_configs"][name]}, "task": "infer",
        "batch": rec["batch"], "seq": run["prompt"], "new_tokens": run["new_tokens"],
        "precision": rec["precision"], "attention": run["attention"]}))
    .unwrap()
}

/// What transformers' cache held when the call returned, read off the record and derived by
/// hand from `cache_utils.py` (`DynamicSlidingWindowLayer.update` keeps a view of its
/// `torch.cat`): after the prefill alone (1 new token, no decode forward) every layer's keys
/// storage is the whole 1,024-token prompt, 1,024 · 4,096 = 4,194,304 B, the sliding layers'
/// too although their keys are 127 tokens long; after a decode step a sliding layer's storage
/// is the cat of its 127 kept tokens and the new one, 128 · 4,096 = 524,288 B, and the global
/// layer's the whole 1,024 + 3 = 1,027 tokens, 4,206,592 B (64-token prompt, 256 new: 319
/// tokens, 1,306,624 B). `kv::generate_layers` says the same.
#[test]
fn cache_storage_after_prefill_and_decode() {
    let rec: Value = common::validation("cpu-measured-generate-swa.json");
    let want = |prompt: u64, new: u64, global: bool| match (prompt, new, global) {
        (1024, 1, _) => 4_194_304,
        (2048, 1, _) => 8_388_608,
        (_, _, false) => 524_288,
        (1024, 4, true) => 4_206_592,
        (64, 256, true) => 1_306_624,
        other => panic!("no hand figure for {other:?}"),
    };
    for run in rec["runs"].as_array().unwrap() {
        let (prompt, new) = (
            run["prompt"].as_u64().unwrap(),
            run["new_tokens"].as_u64().unwrap(),
        );
        let (model, job) = common::prepared(&job_of(&rec, run));
        let layers =
            vramscope_core::estimate::kv::generate_layers(model.spec.as_ref().unwrap(), &job);
        let recorded = run["cache_at_return"].as_array().unwrap();
        assert_eq!(layers.len(), recorded.len());
        for (l, r) in layers.iter().zip(recorded) {
            let global = r["class"] == "DynamicLayer";
            assert_eq!(l.window.is_none(), global);
            assert_eq!(
                r["keys_storage_bytes"].as_u64().unwrap(),
                want(prompt, new, global)
            );
            assert_eq!(l.bytes_after(prompt, new - 1), want(prompt, new, global));
        }
    }
}

/// The call's peak over its start, the stream's (`alloc_events/infer.rs`) and the walk's
/// (`simulate.rs`, the report's `peak_allocated`), against the record, within 1.5 %; the
/// prefill peaks at 1,024 and 2,048 tokens, SDPA and eager, within the prompt's bookkeeping
/// bytes.
///
/// By hand, from the record's live tensors at its peak (the profiler's allocations, grouped by
/// size and op) and `cache_utils.py`. SDPA, prompt 1,024 (1 or 4 new tokens; the prefill is the
/// peak in both, the first decode step giving back what it makes): the last layer's MLP, with
/// every layer's cache at the whole prompt — Mistral 8 · 4 MiB of cache + 2 · 4 MiB residual
/// hidden states + 3 · 8 MiB MLP intermediates (2 · 1,024 · 1,024 · 4) + 4 MiB `inputs_embeds` +
/// 4 MiB norm output + cos/sin 2 · 512 KiB + the sliding mask 1 MiB (`bitwise_and`, bool 1,024²:
/// `[1, 1, p, p]`, no padding) = 77,594,624 (measured 77,631,488: 36,864 B of small tensors
/// more); Gemma-3 12 · 4 MiB of cache + 4 · 4 MiB + 3 · 8 MiB + two cos/sin pairs (local and
/// global rotary, 4 · 512 KiB) + 1 MiB mask = 95,420,416 (measured 95,457,792). Prompt 2,048,
/// every size doubled and the mask 2,048² = 4,194,304: Mistral 8 · 8 MiB + 2 · 8 MiB + 3 · 16
/// MiB + 8 + 8 MiB + 2 · 1 MiB + 4 MiB = 157,286,400 (measured 157,356,032), Gemma-3 12 · 8 MiB +
/// 4 · 8 MiB + 3 · 16 MiB + 4 · 1 MiB + 4 MiB = 192,937,984 (measured 193,008,128). The small
/// tensors the estimate leaves out are the prompt's int64 bookkeeping (two `[b, p]` tensors,
/// 2 · 2 · 2,048 · 8 = 65,536 B at 2,048) and a few 512 B blocks: at most 2 · b · p · 8 + 8 KiB.
/// Prompt 64, 256 new (the last decode step is the peak): Mistral 8 · 524,288 of cache + a
/// sliding layer's two new cats (keys and values made before either old one is freed) 2 ·
/// 524,288 = 5,242,880 (measured 5,302,272); Gemma-3 10 · 524,288 plus the global layer's values
/// `torch.cat` (new keys and values of 319 tokens, old values of 318) 2 · 1,306,624 + 1,302,528
/// = 9,158,656 (measured 9,219,584). Eager, prompt 2,048: the last layer's scores (`bmm`) and
/// scaled scores (`mul`), 2 · 8 · 2,048² · 4 = 268,435,456 each, the cache, the float masks `[b,
/// 1, p, p]` fp32 (`where`: 33,554,432 each; Mistral one, Gemma-3 two, full and sliding), four
/// 8 MiB hidden-sized tensors (embeddings — Gemma-3's scaled by √hidden —, the layer's input,
/// its norm output, the rotated queries) and the cos/sin pairs: Mistral 2 · 268,435,456 +
/// 67,108,864 + 33,554,432 + 4 · 8,388,608 + 2,097,152 = 673,185,792 (measured 673,256,448);
/// Gemma-3 2 · 268,435,456 + 100,663,296 + 2 · 33,554,432 + 4 · 8,388,608 + 4,194,304 =
/// 742,391,808 (measured 742,462,976).
///
/// The tolerance: what is left unmodelled is a decode step's bookkeeping (about 50 KB, 0.97 % of
/// the 5.3 MB decode peaks) — 1.5 % holds it. Under eager attention the stream and the walk
/// each missed the hand figure by one hidden-sized tensor (8,388,608 B, 1.25 % of 673 MB) until
/// the layer's cache was made where `cache.update` runs, before the scores, from the rotated
/// keys and values it replaces (`blocks/attention.rs`, `prefill_walk.rs`: the stream had made
/// it after the block, the walk held every layer's from the call's start beside the projected
/// keys and values): −1.26 % / +1.24 % (Mistral, stream / walk) and −1.14 % / +1.12 % (Gemma-3)
/// before, the hand figures now. Without the masks and Gemma-3's second rotary pair (before this
/// change) the 2,048 SDPA prefills read −2.7 % (Mistral, 4 MiB mask) and −3.3 % (Gemma-3, 4 MiB
/// mask + 2 MiB of rotary), the eager ones −6.24 % / −3.75 % (Mistral, stream / walk) and
/// −10.46 % / −8.20 % (Gemma-3: the float masks and the rotary pair): the test fails on them. Before issue 34's cache change the walk's prefill counted each sliding layer's cache
/// at the window, 4,096 · 2 · (1,024 − 128) = 7,340,032 B less per sliding layer: 29,360,128 for
/// Mistral, 36,700,160 for Gemma-3 (the walk read −39.2 % and −40.7 %); and the stream grew
/// every layer with every decode token (at the 256-token decode peaks +121.9 % and +84.3 %).
#[test]
fn generate_peak_within_1_5_percent() {
    let rec: Value = common::validation("cpu-measured-generate-swa.json");
    for run in rec["runs"].as_array().unwrap() {
        let job = job_of(&rec, run);
        let want = run["peak_over_call_start"].as_u64().unwrap() as f64;
        let stream = common::stream_call_peak(&job) as f64;
        let r = common::estimate_job(&job);
        // The walk's start: the weights, the prompt's ids and mask, the BLAS workspace; it
        // places the prefill's cache at its start, which the call makes.
        let start = &r.timeline[0];
        let before = start.allocated - start.by_category.get("kv_cache").copied().unwrap_or(0);
        let walk = (r.per_gpu.peaks.peak_allocated.unwrap() - before) as f64;
        let name = format!(
            "{} {} p={} n={}",
            run["model"], run["attention"], run["prompt"], run["new_tokens"]
        );
        println!(
            "{name}: measured {want} stream {stream} ({:+.2} %) walk {walk} ({:+.2} %)",
            100.0 * (stream / want - 1.0),
            100.0 * (walk / want - 1.0)
        );
        assert!(
            (stream / want - 1.0).abs() < 0.015,
            "{name}: stream {stream} vs {want}"
        );
        assert!(
            (walk / want - 1.0).abs() < 0.015,
            "{name}: walk {walk} vs {want}"
        );
        let prompt = run["prompt"].as_u64().unwrap();
        if prompt >= 1024 {
            // The prefill peaks: only the prompt's bookkeeping is left out.
            let budget = (2 * rec["batch"].as_u64().unwrap() * prompt * 8 + 8192) as f64;
            assert!(
                want - stream >= 0.0 && want - stream <= budget,
                "{name}: stream"
            );
            assert!(want - walk >= 0.0 && want - walk <= budget, "{name}: walk");
        }
    }
}

/// The walk's decode marks on Mistral, prompt 1,024, 4 new (4 sliding layers, 4,096 B per token
/// of a layer's keys): at the first decode step layer 0's update makes its keys and values of
/// 128 tokens (2 · 524,288 B) while every layer still holds the prompt, 8 · 4,194,304 =
/// 33,554,432 B of cache; at the last step each layer holds 128 tokens, 8 · 524,288 =
/// 4,194,304 B.
#[test]
fn walk_marks_the_first_and_last_decode_steps() {
    let rec: Value = common::validation("cpu-measured-generate-swa.json");
    let r = common::estimate_job(&job_of(&rec, &rec["runs"][1]));
    let kv_at = |label: &str| {
        let p = r.timeline.iter().find(|p| p.label == label).unwrap();
        p.by_category.get("kv_cache").copied().unwrap_or(0)
    };
    assert_eq!(kv_at("first decode step"), 33_554_432);
    assert_eq!(kv_at("last decode step"), 4_194_304);
    // Both steps' transients are one sliding layer's two 128-token cats: the totals differ by
    // the cache alone, 33,554,432 − 4,194,304.
    let total = |label: &str| {
        r.timeline
            .iter()
            .find(|p| p.label == label)
            .unwrap()
            .allocated
    };
    assert_eq!(
        total("first decode step") - total("last decode step"),
        29_360_128
    );
}

//! The job's `reserve` (contract: bytes the user keeps free for other applications, subtracted
//! from capacity in `fit`): the fit check and the searches judge a job against
//! capacity − reserve. The bounds are derived by hand from vLLM's budget, not read off the
//! estimator.

mod common;

use common::{device_total_at, prepared_json};
use serde_json::json;
use vramscope_core::estimate::estimate;
use vramscope_core::fit::fit;

const GIB: u64 = 1 << 30;

/// vLLM on an A100 80GB (81,920 MiB = 80 GiB as nvidia-smi reports it) at
/// gpu_memory_utilization 0.9 takes weights + KV pool + profile peak + CUDA graphs + non-torch
/// = 0.9 × 80 GiB = 72 GiB less the part of one KV block that did not fill a whole block
/// (llama-3-8b: 16 tokens × 131,072 B = 2 MiB). So its device total lies in
/// (72 GiB − 2 MiB, 72 GiB] and its headroom in [8 GiB, 8 GiB + 2 MiB): a reserve of 8 GiB
/// still fits, one of 8.5 GiB (more than the headroom) does not, and the report says by how
/// much less than 8 GiB + 2 MiB − 8.5 GiB it is short.
#[test]
fn a_reserve_past_the_headroom_does_not_fit() {
    let job = |reserve: u64| {
        json!({"model": "llama-3-8b", "task": "infer", "framework": "vllm",
               "gpu": "a100-80gb", "engine": {"gpu_memory_utilization": 0.9},
               "reserve": reserve})
    };
    let (model, j) = prepared_json(&job(0));
    let r = estimate(&model, &j).unwrap();
    let total = r.per_gpu.peaks.device_total.unwrap();
    assert!(
        total <= 72 * GIB && total > 72 * GIB - 2 * (1 << 20),
        "{total}"
    );
    let f = r.fit.unwrap();
    assert!(f.fits);
    assert_eq!(f.reserve, 0);

    let (model, j) = prepared_json(&job(8 * GIB));
    let f = estimate(&model, &j).unwrap().fit.unwrap();
    assert!(f.fits, "8 GiB reserved leaves 72 GiB");
    assert_eq!((f.target.capacity, f.reserve), (80 * GIB, 8 * GIB));
    assert!(f.headroom >= 0 && f.headroom < 2 << 20, "{}", f.headroom);

    let (model, j) = prepared_json(&job(8 * GIB + GIB / 2));
    let f = estimate(&model, &j).unwrap().fit.unwrap();
    assert!(!f.fits, "8.5 GiB reserved leaves 71.5 GiB");
    // headroom = 71.5 GiB − total, with total in (72 GiB − 2 MiB, 72 GiB].
    assert!(f.headroom <= -((GIB / 2) as i64) + (2 << 20) && f.headroom >= -((GIB / 2) as i64));
}

/// fit for vLLM with a reserve and no utilization of the user's: vLLM's default 0.9 would take
/// 72 GiB of 80 but 10 GiB reserved leaves 70 GiB, so the launch asks for
/// ⌊100 × 70 / 80⌋ / 100 = 0.87 of the GPU; the pool shrinks, and with it the concurrent
/// sequences; the job at the emitted utilization fits with the reserve kept.
#[test]
fn vllm_fit_lowers_the_utilization_to_keep_the_reserve() {
    let job = |reserve: u64| {
        json!({"model": "llama-3-8b", "task": "infer", "framework": "vllm",
               "gpu": "a100-80gb", "seq": 4096, "reserve": reserve})
    };
    let (model, plain) = prepared_json(&job(0));
    let without = fit(&model, &plain).unwrap();
    let (model, kept) = prepared_json(&job(10 * GIB));
    let with = fit(&model, &kept).unwrap();
    assert_eq!(with.reserve, 10 * GIB);
    let l = with.launch.as_ref().unwrap();
    let i = l
        .argv
        .iter()
        .position(|a| a == "--gpu-memory-utilization")
        .unwrap();
    assert_eq!(l.argv[i + 1], "0.87");
    assert!(l.why["--gpu-memory-utilization"].contains("reserved"));
    assert!(with.max_batch.unwrap() < without.max_batch.unwrap());
    let mut at = kept.clone();
    at.set_engine("gpu_memory_utilization", json!(0.87))
        .unwrap();
    let f = estimate(&model, &at).unwrap().fit.unwrap();
    assert!(f.fits && f.headroom >= 0, "{f:?}");
}

/// With the user's own utilization 0.9 (72 GiB of 80, by the bound above) and 79 GiB reserved
/// (1 GiB left), vLLM cannot keep the reserve free: nothing fits, and the note says why; a
/// reserve of the whole GPU is the same answer, not an error.
#[test]
fn vllm_past_the_reserve_fits_nothing() {
    for (reserve, util) in [(79 * GIB, Some(0.9)), (80 * GIB, None)] {
        let mut job = json!({"model": "llama-3-8b", "task": "infer", "framework": "vllm",
                             "gpu": "a100-80gb", "seq": 4096, "reserve": reserve});
        if let Some(u) = util {
            job["engine"] = json!({ "gpu_memory_utilization": u });
        }
        let (model, j) = prepared_json(&job);
        let f = fit(&model, &j).unwrap();
        assert_eq!((f.max_batch, f.max_context), (None, None), "{reserve}");
        assert!(
            f.notes.iter().any(|n| n.contains("reserved free")),
            "{:?}",
            f.notes
        );
    }
}

/// fit's searches judge against capacity − reserve: GPT-2 training on a T4, the largest batch
/// without a reserve no longer fits once the reserve exceeds its headroom (by one byte), and
/// the batch found with the reserve is the edge of what is left.
#[test]
fn fit_max_batch_shrinks_with_a_reserve() {
    let job = |reserve: u64| json!({"model": "gpt2", "gpu": "t4-16gb", "reserve": reserve});
    let (model, plain) = prepared_json(&job(0));
    let cap = vramscope_core::gpu::find("t4-16gb").unwrap().memory_bytes;
    let b = fit(&model, &plain).unwrap().max_batch.unwrap();
    let total = |j, batch| device_total_at(&model, j, batch);
    let reserve = cap - total(&plain, b) + 1;
    let (_, kept) = prepared_json(&job(reserve));
    let with = fit(&model, &kept).unwrap();
    let b2 = with.max_batch.unwrap();
    assert!(b2 < b, "{b2} < {b}");
    assert!(total(&kept, b2) <= cap - reserve && total(&kept, b2 + 1) > cap - reserve);
    assert!(with.max_seq.unwrap() <= fit(&model, &plain).unwrap().max_seq.unwrap());
}

/// `plan` screens and confirms layouts against capacity − reserve: with all of the GPU
/// reserved nothing fits; with a reserve one byte past the smallest screened total's headroom,
/// no listed layout is over what the reserve leaves, and fewer layouts fit.
#[test]
fn plan_screens_against_what_the_reserve_leaves() {
    let plan = |reserve: u64| {
        let (model, j) = prepared_json(&json!({"model": "gpt2", "seq": 1024, "reserve": reserve}));
        let g = vramscope_core::gpu::find("a100-80gb").unwrap();
        vramscope_core::plan::plan(&model, &j, 1, g, 2, 10).unwrap()
    };
    let cap = 80 * GIB;
    let free = plan(0);
    assert!(free.fitting > 0);
    assert_eq!(free.reserve, 0);
    assert_eq!(plan(cap).fitting, 0, "nothing fits in 0 bytes");
    // The largest screened total among the listed layouts: reserving one byte more than its
    // headroom leaves it out.
    let biggest = free
        .best
        .iter()
        .map(|c| c.scored.device_total)
        .max()
        .unwrap();
    let reserve = cap - biggest + 1;
    let p = plan(reserve);
    assert_eq!(p.reserve, reserve);
    assert!(p.fitting < free.fitting, "{} < {}", p.fitting, free.fitting);
    for c in p.best.iter().chain(&p.best_per_framework) {
        assert!(c.scored.device_total <= cap - reserve);
        if let Some(t) = c.estimate.as_ref().and_then(|e| e.peaks.device_total) {
            assert!(t <= cap - reserve);
        }
    }
}

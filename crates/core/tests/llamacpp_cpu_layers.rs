//! llama.cpp with every layer in host RAM (`-ngl 0`): the weights and the KV cache stay on the
//! host, and the GPU holds only the compute buffer of the ops the CUDA backend still takes from
//! a micro-batch of at least 32 tokens (`ggml-cuda.cu` `ggml_backend_cuda_device_offload_op`),
//! with the weights a split copies in (`engines::llamacpp_split`). Worked by hand below.

mod common;

use serde_json::{json, Value};
use vramscope_core::job::Job;
use vramscope_core::report::Report;

fn report(job: &Value) -> Report {
    let job: Job = serde_json::from_value(job.clone()).unwrap();
    common::estimate_job(&job)
}

fn job(ngl: u64, seq: u64, new_tokens: u64) -> Value {
    json!({"model": "llama-3.1-8b", "task": "infer", "framework": "llama.cpp",
           "gpu": "rtx4090-24gb", "seq": seq, "new_tokens": new_tokens,
           "engine": {"n_gpu_layers": ngl}})
}

/// Llama-3.1-8B, one 4096-token context (4000 + 96). One block's weights at 2 B:
/// q, o 4096 × 4096 = 16777216 each, k, v 4096 × 1024 = 4194304 each, gate, up, down 4096 ×
/// 14336 = 58720256 each, two norms of 4096: 218112000 parameters = 436224000 B, the most one
/// split copies in. The KV, 32 layers × 8 KV heads × 128 × 2 × 2 B = 131072 B per token ×
/// 4096 = 536870912 B, all in host RAM.
#[test]
fn ngl_0_keeps_only_the_compute_buffer_on_the_gpu() {
    let cpu = report(&job(0, 4000, 96));
    let gpu = report(&job(33, 4000, 96));
    let (c, g) = (&cpu.per_gpu.components, &gpu.per_gpu.components);
    assert_eq!(c.parameters, 0);
    assert_eq!(c.kv_cache, 0);
    assert_eq!(c.temporaries, g.temporaries + 436_224_000);
    assert!(
        c.cuda_context > 0,
        "the CUDA backend still runs the big ops"
    );
    let e = cpu.engine.as_ref().unwrap();
    assert_eq!(e["layers_on_gpu"], 0);
    assert_eq!(e["host_kv"], 536_870_912u64);
    assert_eq!(
        cpu.per_gpu.peaks.device_total,
        Some(c.temporaries + c.cuda_context)
    );
}

/// A context of 24 tokens (16 + 8) makes micro-batches of 24 < 32 tokens: no op reaches the
/// GPU, which holds nothing.
#[test]
fn ngl_0_with_small_batches_leaves_the_gpu_empty() {
    let r = report(&job(0, 16, 8));
    let c = &r.per_gpu.components;
    assert_eq!((c.parameters, c.kv_cache, c.temporaries), (0, 0, 0));
    assert_eq!(c.cuda_context, 0);
}

//! The embeddings' own backward node (`EmbeddingBackward0`), in the stream and the walk.
//!
//! The engine's `call_function` (`torch/csrc/autograd/engine.cpp`, torch 2.x) owns a node's
//! input gradients in its local `inputs` until it returns; `evaluate_function` then adds the
//! node's outputs into the next node's input buffer. So inside `embedding_dense_backward` the
//! embeddings' output gradient (`[b, s, h]`) lives beside the weight gradient it makes, and a
//! tied weight's sum with the head's contribution comes after that gradient is gone. The
//! rotary cos/sin the blocks' multiplies saved go with the first block's backward.
//!
//! Measured on the CPU (transformers 5.24, torch 2.15, `../shared/measure/memprof.py`'s
//! timeline rounded to 512 B, steady step), the two-layer model of [`job`]: tied, the step's
//! peak is the sum's `add`, 71,836,160 B, and the 49,152-B input gradient is destroyed between
//! `embedding_dense_backward`'s `zeros` and that `add`; untied, 71,885,312 B at the `zeros`.
//! Each is the hand figure below plus 1,536 B that neither the stream nor the walk writes (the
//! loss scalar, its `ones_like` seed and a 64-B input: 512 B each).

mod common;

use common::stream_steps::{stream_and_walk, stream_of, tiny_llama};
use common::CPU_MISSING_WORKSPACES;
use serde_json::{json, Value};
use std::collections::HashMap;
use vramscope_core::estimate::alloc_events::{Event, Phase, Stream};

/// One cuBLAS workspace (the autograd thread's, made in the backward); the context's is left
/// out of [`backward_live`].
const BACKWARD_WORKSPACE: u64 = CPU_MISSING_WORKSPACES / 2;

/// The vocabulary matrix: 32,000 · 256 · 2 B.
const VH: u64 = 16_384_000;

/// A two-layer Llama (hidden 256, 4 heads of 64, 2 KV heads, MLP 768, vocabulary 32,000) in
/// pure bf16 under SGD at batch 1 × 96, SDPA, `tied` or not.
fn job(tied: bool) -> Value {
    let mut cfg = tiny_llama(2);
    cfg["vocab_size"] = json!(32_000);
    cfg["tie_word_embeddings"] = json!(tied);
    json!({"model": {"hf_config": cfg}, "batch": 1, "seq": 96, "precision": "bf16",
           "optimizer": "sgd"})
}

/// The bytes besides the vocabulary matrices at the embeddings' backward of [`job`]: the
/// blocks' parameters and their gradients, each layer q, o 256·256·2 = 131,072, k, v
/// 256·128·2 = 65,536, gate, up, down 256·768·2 = 393,216, two norms 512: 1,573,888, so
/// 3,147,776 for two; the final norm 512 (parameter and gradient); the ids and labels, 96·8 =
/// 768 B each, 1,024 rounded: 2 · 3,147,776 + 2 · 512 + 2,048 = 6,298,624.
const REST: u64 = 6_298_624;

/// The stream's live bytes (each request rounded to 512 B, as CUDA's `allocated_bytes`
/// counts them; the context's allocations left out) after each event of step 1's backward.
fn backward_live(s: &Stream) -> Vec<(Event, u64)> {
    let (mut live, mut phase, mut out) = (HashMap::new(), None, Vec::new());
    for &e in &s.events {
        match e {
            Event::Phase(p) => phase = Some(p),
            Event::Alloc { id, bytes } if phase != Some(Phase::Context) => {
                live.insert(id, bytes.div_ceil(512) * 512);
            }
            Event::Free { id } => {
                live.remove(&id);
            }
            _ => {}
        }
        if phase == Some(Phase::Backward(1)) {
            out.push((e, live.values().sum()));
        }
    }
    out
}

/// The walk's last backward point named `label`, net of the two cuBLAS workspaces.
fn walk_point(job: &Value, label: &str) -> u64 {
    let r = common::run_job(job.clone());
    let p = r
        .timeline
        .iter()
        .rev()
        .find(|p| p.phase == "backward" && p.label == label);
    p.unwrap().allocated - CPU_MISSING_WORKSPACES
}

/// Tied: the sum's moment holds the weight, the head's contribution, the `zeros` and the sum
/// (4 · VH = 65,536,000) and [`REST`]: 71,834,624 B; not the input gradient (96·256·2 =
/// 49,152) nor the rotary cos/sin (2 · 96·64·2 = 24,576), which the stream held (+73,728).
/// It is the step's peak in both.
#[test]
fn a_tied_sum_holds_no_input_gradient() {
    let want = 4 * VH + REST;
    assert_eq!(want, 71_834_624);
    let j = job(true);
    let live = backward_live(&stream_of(&j));
    let max = live.iter().map(|x| x.1).max().unwrap();
    assert_eq!(max, want + BACKWARD_WORKSPACE);
    let peak = common::run_job(j.clone())
        .per_gpu
        .peaks
        .peak_allocated
        .unwrap();
    assert_eq!(peak - CPU_MISSING_WORKSPACES, want);
    assert_eq!(walk_point(&j, "embeddings"), want);
}

/// Untied: inside `embedding_dense_backward` the weight and the head (2 · VH), their
/// gradients so far (the head's) and the `zeros` (2 · VH), the input gradient 49,152 and
/// [`REST`]: 71,883,776 B — the walk lacked the input gradient (−49,152).
#[test]
fn an_untied_embedding_backward_holds_its_input_gradient() {
    let want = 4 * VH + 49_152 + REST;
    assert_eq!(want, 71_883_776);
    let j = job(false);
    let live = backward_live(&stream_of(&j));
    let at = live
        .iter()
        .rposition(|(e, _)| matches!(*e, Event::Alloc { bytes: VH, .. }))
        .expect("the embedding's weight gradient");
    assert_eq!(live[at].1, want + BACKWARD_WORKSPACE);
    assert_eq!(walk_point(&j, "embeddings"), want);
}

/// Llama-3.2-1B (tied, vocabulary 128,256, hidden 2048) in pure bf16, batch 1 × 1024, SGD, on
/// an H100: the peak is the tied sum, where the stream's tensors are now the walk's. What the
/// allocator model adds is the vocabulary matrices' blocks: 128,256 · 2048 · 2 = 525,336,576 B
/// = 501 MiB, a segment rounded to 2 MiB (`kRoundLarge`) of 502 MiB whose 1 MiB remainder is
/// not split (not above `kSmallSize`), so `allocated_bytes` counts 502 MiB for each of the
/// four live: +4 MiB (before: +8,650,752, the input gradient 1024·2048·2 = 4 MiB and the
/// rotary cos/sin 2 · 1024·64·2 = 256 KiB besides).
#[test]
fn llama_1b_bf16_stream_meets_the_walk_but_for_unsplit_blocks() {
    let j = json!({"model": "llama-3.2-1b", "precision": "bf16", "optimizer": "sgd",
                   "batch": 1, "seq": 1024, "gpu": "h100-80gb"});
    let (stream, walk) = stream_and_walk(&j);
    assert_eq!(stream - walk, 4 << 20);
}

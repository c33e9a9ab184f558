//! Selective checkpointing over eager attention in the allocator stream (`tape/selective.rs`):
//! the attention core — `repeat_kv` to the context's transpose — run under
//! `torch.utils.checkpoint` (non-reentrant, early stop), its saved tensors dropped in the forward
//! and recomputed before its newest saving node in backward. Each expected sequence below is
//! derived by hand from autograd's rules (`derivatives.yaml`) and `checkpoint.py`, never read
//! off the stream.

mod common;

use common::stream_steps::{stream_and_walk, stream_of, tiny_llama};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{Event, Phase, Stream};

/// Every allocation (+bytes) and free (−bytes of the tensor freed) with its phase, in order.
fn signed_bytes(s: &Stream) -> Vec<(Option<Phase>, i64)> {
    let mut bytes = vec![0i64; s.ids()];
    let mut phase = None;
    let mut out = Vec::new();
    for &e in &s.events {
        match e {
            Event::Alloc { id, bytes: b } => {
                bytes[id as usize] = b as i64;
                out.push((phase, b as i64));
            }
            Event::Free { id } => out.push((phase, -bytes[id as usize])),
            Event::Phase(p) => phase = Some(p),
            Event::EmptyCache => {}
        }
    }
    out
}

/// The one-layer Llama (hidden 256, 4 heads of 64, 2 KV heads, MLP 768, vocabulary 8192) in
/// bf16, eager attention, batch 1 × 80, with `checkpointing`.
fn tiny(checkpointing: &str) -> Value {
    json!({"model": {"hf_config": tiny_llama(1)}, "batch": 1, "seq": 80, "precision": "bf16",
        "optimizer": "adamw", "checkpointing": checkpointing, "attention": "eager"})
}

/// A score-sized tensor of the tiny job: 4 heads · 80² = 25,600 elements, bf16 51,200 B and
/// fp32 102,400 B (no other tensor of the step has either size: hidden fp32 81,920, MLP
/// 122,880, q 40,960).
const S: i64 = 51_200;
const F: i64 = 102_400;

/// The score-sized events of `phase`.
fn scores_in(s: &Stream, phase: Phase) -> Vec<i64> {
    signed_bytes(s)
        .into_iter()
        .filter(|&(p, b)| p == Some(phase) && (b.abs() == S || b.abs() == F))
        .map(|(_, b)| b)
        .collect()
}

/// `eager_attention_forward` in bf16: `q @ k_rep.T` (S), `* scaling` (S, the scores freed),
/// `+ mask` (S, freed), `softmax(dtype=float32)`: the fp32 cast of its input (F, freed) and
/// the probabilities (F), `.to(bf16)` (S). Un-checkpointed, softmax saves its output and the
/// `probs @ v` matmul its input, so the forward ends with both live. Checkpointed, nothing is
/// saved: the fp32 probabilities go after the cast reads them, the bf16 ones after `@ v`.
///
/// Backward, checkpointed: the transpose's node needs nothing; `probs @ v`'s node unpacks its
/// saved probabilities, which recomputes the core up to it — the forward's six allocations
/// again, the matmul's own output not made (early stop: its inputs are packed before its
/// kernel runs). Then, as un-checkpointed: `@ v` makes the probabilities' gradient (S) and
/// releases them (S); the cast's node makes the fp32 gradient (F) and frees the bf16 one;
/// softmax makes its input's gradient (F), frees its output's (F) and releases its output (F);
/// the input cast makes the bf16 gradient (S) and frees the fp32 one (F); the mask's add and
/// the scaling each make their input's gradient (S) and free their output's (S); `q @ k_rep.T`
/// frees the scores' gradient (S).
#[test]
fn the_core_is_recomputed_before_its_backward() {
    let forward_core = [S, S, -S, S, -S, F, -S, F, -F, S];
    let backward_core = [S, -S, F, -S, F, -F, -F, S, -F, S, -S, S, -S, -S];
    let plain = stream_of(&tiny("none"));
    let selective = stream_of(&tiny("selective"));
    for step in 0..2 {
        assert_eq!(scores_in(&plain, Phase::Forward(step)), forward_core);
        assert_eq!(scores_in(&plain, Phase::Backward(step)), backward_core);
        let mut forward = forward_core.to_vec();
        forward.extend([-F, -S]);
        assert_eq!(scores_in(&selective, Phase::Forward(step)), forward);
        let mut backward = forward_core.to_vec();
        backward.extend(backward_core);
        assert_eq!(scores_in(&selective, Phase::Backward(step)), backward);
    }
}

/// What the checkpointed forward leaves for backward, against the plain one: less the core's
/// saved tensors — `repeat_kv`'s k and v (80·256·2 = 40,960 B each), the fp32 and bf16
/// probabilities (102,400 and 51,200) — and more the checkpoint's inputs the plain block does
/// not keep, k and v before `repeat_kv` (80·128·2 = 20,480 each; q is the scores matmul's saved
/// input either way), and the eager mask the checkpoints hold (1·1·80·80·2 = 12,800 B, bf16):
/// 235,520 − 40,960 − 12,800 = 181,760 B fewer.
#[test]
fn the_checkpoint_keeps_its_inputs_not_the_core() {
    let live_at_backward = |s: &Stream| -> i64 {
        signed_bytes(s)
            .into_iter()
            .take_while(|&(p, _)| p != Some(Phase::Backward(1)))
            .map(|(_, b)| b)
            .sum()
    };
    let plain = live_at_backward(&stream_of(&tiny("none")));
    let selective = live_at_backward(&stream_of(&tiny("selective")));
    assert_eq!(plain - selective, 181_760);
}

/// The stream's peak allocated against the walk's on real-sized jobs, within 0.1 % (measured
/// here: Llama-3.2-1B bf16-mixed b1 × 2048 −0.0001 %, the same b4 × 1024 over two micro-batches
/// +0.006 %, b1 × 8192 +0.041 %, Llama-3.1-8B bf16 b1 × 2048
/// +0.0001 %, GPT-2 fp32 b8 × 1024 +0.015 %).
#[test]
fn selective_stream_meets_the_walk() {
    let llama = |model: &str, precision: &str, batch: u64, seq: u64| {
        json!({"model": model, "precision": precision, "optimizer": "adamw", "batch": batch,
            "seq": seq, "gpu": "h100", "attention": "eager", "checkpointing": "selective"})
    };
    let mut accum = llama("llama-3.2-1b", "bf16-mixed", 4, 1024);
    accum["grad_accum"] = json!(2);
    for job in [
        llama("llama-3.2-1b", "bf16-mixed", 1, 2048),
        accum,
        llama("llama-3.2-1b", "bf16-mixed", 1, 8192),
        llama("llama-3.1-8b", "bf16", 1, 2048),
        llama("gpt2", "fp32", 8, 1024),
    ] {
        let (stream, walk) = stream_and_walk(&job);
        let d = stream as f64 / walk as f64 - 1.0;
        println!("{} {}: {:+.4} %", job["model"], job["seq"], d * 100.0);
        assert!(d.abs() < 0.001, "stream {stream} walk {walk} {:+.3} %", d * 100.0);
    }
}

//! Two jobs issue 30 adds to the allocator stream. Selective checkpointing over eager attention
//! (`tape/selective.rs`): the attention core — `repeat_kv` to the context's transpose — run
//! under `torch.utils.checkpoint` (non-reentrant, early stop), its saved tensors dropped in the
//! forward and recomputed before its newest saving node in backward. torchtune's chunked output
//! under autocast (`alloc_events/chunked_loss.rs`). Each expected sequence below is derived by
//! hand from autograd's rules (`derivatives.yaml`), `checkpoint.py` and autocast's casts, never
//! read off the stream.

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
            Event::EmptyCache | Event::Stream(_) => {}
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
///
/// Measured on the CPU (`validation/cpu-measured-selective.json`, this model and job): the
/// same allocations, the recomputation where derived, with two differences the tapes share
/// with the plain eager block: the masked scores are freed when Python rebinds `attn_weights`
/// (after the bf16 probabilities exist), and the mask's `add` passes its gradient through (no
/// `S` made and freed).
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
/// 235,520 − 40,960 − 12,800 = 181,760 B fewer. Measured on the CPU: 176,064 B fewer, the
/// checkpoint also saving the CPU RNG state (5,056 B, host memory under CUDA) and small tensors.
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
        assert!(
            d.abs() < 0.001,
            "stream {stream} walk {walk} {:+.3} %",
            d * 100.0
        );
    }
}

/// The one-layer Llama (hidden 256, vocabulary 8192, untied) under bf16-mixed at batch 1 × 64
/// with torchtune's chunked output: eight chunks of 8 rows. Under autocast each chunk's linear
/// casts, at the first chunk only, the fp32 head weight (`cached_cast`: one bf16 copy, 8192·256·2 =
/// 4,194,304 B, saved by every chunk's matmul) and its fp32 input rows to bf16 (8·256·2 =
/// 4,096 B, saved by the matmul); the logits are bf16 (8·8192·2 = 131,072 B).
/// Backward, the projections last chunk first: the first makes the weight copy's bf16
/// gradient (4,194,304, autograd's buffer), each later one its own, added and freed — the
/// second into a new sum (`InputBuffer::accumulate` may not steal the buffered view); each
/// matmul's bf16 input gradient (4,096) is cast to fp32 (8,192) by the chunk's
/// `ToCopyBackward`; the first chunk's matmul, the last to run, releases the weight copy; then
/// the weight's `ToCopyBackward` makes the fp32 `.grad` (8192·256·4 = 8,388,608) from the
/// buffer, which goes. (Allocations of at least 4 MiB in backward; the token embedding's
/// gradient comes last.) The same sequence measured on the CPU (torch 2.15 CPU autocast, bf16:
/// a 256 → 8192 `nn.Linear` over `tensor_split` chunks and `cross_entropy(l.float())`), but
/// that the weight's copy is made before the first chunk's input cast.
#[test]
fn chunked_output_under_autocast() {
    let job = json!({"model": {"hf_config": tiny_llama(1)}, "batch": 1, "seq": 64,
        "precision": "bf16-mixed", "optimizer": "adamw", "loss": "chunked-output"});
    let s = stream_of(&job);
    let copy = 4_194_304i64;
    let workspace = signed_bytes(&s)[0].1;
    for step in 0..2 {
        let ev: Vec<i64> = signed_bytes(&s)
            .into_iter()
            .filter(|&(p, _)| p == Some(Phase::Forward(step)))
            .map(|(_, b)| b)
            .collect();
        let at = ev
            .iter()
            .position(|&b| b == copy)
            .expect("the weight's copy");
        let mut want = vec![copy, 4_096, 131_072];
        for _ in 1..8 {
            want.extend([4_096, 131_072]);
        }
        assert_eq!(ev[at..at + want.len()], want[..], "step {step}");
        let big: Vec<i64> = signed_bytes(&s)
            .into_iter()
            .filter(|&(p, b)| p == Some(Phase::Backward(step)) && b.abs() >= copy)
            .map(|(_, b)| b)
            .collect();
        let mut want = vec![copy];
        if step == 0 {
            // The autograd thread's first matmul: its cuBLAS workspace, the context's block.
            want.push(workspace);
        }
        // The second contribution is summed into a new tensor, both parts freed; the six
        // later ones are added into that sum in place.
        want.extend([copy, copy, -copy, -copy]);
        for _ in 2..8 {
            want.extend([copy, -copy]);
        }
        want.extend([-copy, 8_388_608, -copy]);
        // Last, the token embedding's own fp32 gradient (8192·256·4).
        want.push(8_388_608);
        assert_eq!(big, want, "step {step}");
    }
}

/// The chunked output under autocast against the walk, within 0.1 % (measured here:
/// Llama-3.2-3B bf16-mixed b2 × 4096 +0.015 %, Llama-3.2-1B b1 × 2048 +0.0001 %, Llama-3.1-8B
/// b1 × 4096 +0.0000 %). (Qwen2.5-0.5B b4 × 1024 is 0.21 % over the walk with and without
/// autocast alike: the chunked output's own gap, not autocast's.)
#[test]
fn chunked_output_under_autocast_meets_the_walk() {
    for (model, batch, seq) in [
        ("llama-3.2-3b", 2, 4096),
        ("llama-3.2-1b", 1, 2048),
        ("llama-3.1-8b", 1, 4096),
    ] {
        let job = json!({"model": model, "precision": "bf16-mixed", "optimizer": "adamw",
            "batch": batch, "seq": seq, "gpu": "h100", "loss": "chunked-output"});
        let (stream, walk) = stream_and_walk(&job);
        let d = stream as f64 / walk as f64 - 1.0;
        println!("{model}: {:+.4} %", d * 100.0);
        assert!(
            d.abs() < 0.001,
            "stream {stream} walk {walk} {:+.3} %",
            d * 100.0
        );
    }
}

//! The allocator stream of the jobs issue 30's coverage item adds: QLoRA (bitsandbytes 4-bit
//! base weights under LoRA adapters) and LLM.int8 (bitsandbytes 0.50.1 `Linear8bitLt` under
//! LoRA; its kernels are CUDA's, so nothing here is measured). Each expected figure is derived by hand below from the
//! source's rules (bitsandbytes `functional.py` / `autograd/_functions.py`, PEFT
//! `tuners/lora/bnb.py`), never read off the stream.

mod common;

use common::stream_steps::{
    allocs_in, assert_stream_meets_walk, big_allocs, events_in, index_of, signed_sizes, stream_of,
    tiny_llama,
};
use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{Event, Phase, Stream};

/// A one-layer Llama (hidden 256, 4 heads of 64, 2 KV heads: k and v 256 → 128; MLP 768,
/// vocabulary 8192, untied) trained in bf16 under QLoRA (NF4 with double quantization,
/// rank 16 on all seven projections, no dropout) at batch 1 × 40. Sequence 40 keeps every
/// activation a multiple of 40 elements, so no activation has a dequantized weight's size.
fn tiny_qlora(weights: &str) -> Value {
    json!({
        "model": {"hf_config": tiny_llama(1)},
        "batch": 1, "seq": 40, "precision": "bf16", "optimizer": "adamw",
        "weights": weights,
        "peft": {"method": "qlora", "rank": 16, "alpha": 32, "dropout": 0.0,
                 "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    })
}

/// Each projection's dequantization, forward in module order and backward newest first:
/// `dequantize_4bit` under double quantization makes the fp32 absmax (n/64 · 4 B), then the
/// bf16 weight (n · 2 B). q and o: n = 256·256 = 65,536 → 4,096 and 131,072; k and v:
/// 256·128 = 32,768 → 2,048 and 65,536; gate, up, down: 256·768 = 196,608 → 12,288 and
/// 393,216. `MatMul4Bit.backward` dequantizes again for `grad_A`: down, up, gate, o, v, k, q.
#[test]
fn qlora_dequantizes_each_projection_in_forward_and_backward() {
    let s = stream_of(&tiny_qlora("nf4-dq"));
    let sizes = [4096, 131_072, 2048, 65_536, 12_288, 393_216];
    let (q, k, o, m) = (
        [4096, 131_072],
        [2048, 65_536],
        [4096, 131_072],
        [12_288, 393_216],
    );
    let forward: Vec<u64> = [q, k, k, o, m, m, m].concat();
    let backward: Vec<u64> = [m, m, m, o, k, k, q].concat();
    for step in 0..2 {
        let of_sizes = |b| sizes.contains(&b);
        assert_eq!(allocs_in(&s, Phase::Forward(step), of_sizes), forward);
        assert_eq!(allocs_in(&s, Phase::Backward(step), of_sizes), backward);
    }
}

/// q_proj's forward, event by event: the absmax (4,096) and weight (131,072) dequantized, the
/// matmul's output (40·256·2 = 20,480), both dequantized tensors dropped as the op returns,
/// then PEFT's defensive `result.clone()` (20,480 again) before the adapter's first op.
#[test]
fn a_projection_forward_in_order() {
    let s = stream_of(&tiny_qlora("nf4-dq"));
    let forward = events_in(&s, Phase::Forward(1));
    let at = forward
        .iter()
        .position(|e| matches!(*e, Event::Alloc { bytes: 4096, .. }))
        .expect("q_proj's absmax");
    let ev = &forward[at..at + 6];
    let (Event::Alloc { id: absmax, .. }, Event::Alloc { id: w, bytes: wb }) = (ev[0], ev[1])
    else {
        panic!("{ev:?}")
    };
    assert_eq!(wb, 131_072);
    assert!(
        matches!(ev[2], Event::Alloc { bytes: 20_480, .. }),
        "{ev:?}"
    );
    assert_eq!(ev[3], Event::Free { id: absmax });
    assert_eq!(ev[4], Event::Free { id: w });
    assert!(
        matches!(ev[5], Event::Alloc { bytes: 20_480, .. }),
        "{ev:?}"
    );
}

/// What the load leaves (requested bytes at `empty_cache()`): the bf16 embeddings and head
/// 2 · 8192·256·2 = 8,388,608, three RMSNorm weights 3 · 512 = 1,536; the seven 4-bit
/// weights as `quantize_4bit` keeps them (packed n/2, uint8 absmax n/64, fp32 nested absmax
/// per 256 blocks, the 4 B offset, the 64 B code): q and o 32,768 + 1,024 + 16 + 4 + 64 =
/// 33,876, k and v 16,384 + 512 + 8 + 68 = 16,972, gate, up and down 98,304 + 3,072 + 48 +
/// 68 = 101,492 — 406,172 — and the shared 1 KiB dynamic code; the fp32 adapters
/// r·(in + out)·4: q and o 16·512·4 = 32,768, k and v 16·384·4 = 24,576, gate, up, down
/// 16·1024·4 = 65,536 — 311,296. Total 9,108,636. Without double quantization the 4-bit
/// weights keep the fp32 absmax and no nested state: q and o 32,768 + 4,096 + 64 = 36,928,
/// k and v 16,384 + 2,048 + 64 = 18,496, the MLP's 98,304 + 12,288 + 64 = 110,656: 442,816,
/// no dynamic code: 9,144,256.
#[test]
fn the_load_keeps_the_packed_weights_and_their_state() {
    for (weights, want) in [("nf4-dq", 9_108_636u64), ("nf4", 9_144_256)] {
        let s = stream_of(&tiny_qlora(weights));
        assert_eq!(loaded_bytes(&s), want, "{weights}");
    }
}

/// The requested bytes live at the load's `empty_cache()`, less the context's cuBLAS
/// workspace (the job's GPU's: none here, 0 B or a block).
fn loaded_bytes(s: &Stream) -> u64 {
    let mut live = std::collections::HashMap::new();
    for e in &s.events {
        match *e {
            Event::Alloc { id, bytes } => {
                live.insert(id, bytes);
            }
            Event::Free { id } => {
                live.remove(&id);
            }
            Event::EmptyCache => break,
            _ => {}
        }
    }
    live.values().sum::<u64>() - s.alloc_sizes().next().unwrap()
}

/// The walk charges each quantized block the largest dequantized matrix on top of its forward
/// and backward (`activations.rs`); the stream makes and frees each one where bitsandbytes
/// does. Both are the same tensors, so their peaks agree as for the covered unquantized jobs
/// (measured here: the one-layer model +0.44 % / +0.41 % — the load's transient 16-bit
/// weight and the context's cuBLAS blocks weigh there —, Llama-3.1-8B b2 × 2048 +0.001 %,
/// with full checkpointing +0.004 %; torchtune's chunked output loss on Llama-3.2-3B bf16
/// b2 × 4096 +0.019 %; Liger's fused loss on Llama-3.1-8B bf16 b2 × 2048 +0.000 %; one DDP
/// rank of Llama-3.2-1B bf16-mixed on 8 GPUs, b4 × 1024, +0.006 %): held
/// within 1 %; QLoRA after PEFT's `prepare_model_for_kbit_training` (`kbit_prepare`) too, its
/// fp32 residual stream in pure bf16 (+0.007 %) and under autocast (+0.006 %), and the
/// CPU-measured unquantized base cast whole under autocast (−0.004 %).
/// Under LoRA the fused loss's head is frozen, and Liger makes no `grad_weight`
/// (`torch.zeros_like(weight) if weight.requires_grad else None`); the walk
/// (`stages::loss_chunked`, `stages::head_trains`) now leaves it out too, so that job is held
/// within 1 % as well (before the walk counted it: the stream was 2.18 %, 898 MB, below).
#[test]
fn stream_peaks_against_the_walk() {
    let eight_b = json!({
        "model": "llama-3.1-8b", "weights": "nf4-dq", "precision": "bf16", "optimizer": "adamw",
        "batch": 2, "seq": 2048, "gpu": "h100",
        "peft": {"method": "qlora", "rank": 16, "alpha": 32, "dropout": 0.05,
                 "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    });
    let mut full = eight_b.clone();
    full["checkpointing"] = json!("full");
    // PEFT's prepare_model_for_kbit_training: embed_tokens, lm_head and the 65 norms in fp32
    // (2,101,878,784 B more in both; `kbit_prepare.rs`), checkpointing full by default.
    let mut kbit = eight_b.clone();
    kbit["kbit_prepare"] = json!(true);
    // Under autocast too: the fp32 stream, each `Linear4bit`'s copies to bf16 and back to fp32.
    let mut kbit_mixed = kbit.clone();
    kbit_mixed["precision"] = json!("bf16-mixed");
    // An unquantized base cast whole (the CPU-measured two-layer Llama, under autocast: each
    // frozen fp32 weight's per-call 16-bit copy).
    let cases: Vec<Value> = common::validation("cpu-measured-kbit-prepare.json");
    let mut kbit_whole = cases[0]["job"].clone();
    kbit_whole["precision"] = json!("bf16-mixed");
    kbit_whole["checkpointing"] = json!("none");
    let chunked = json!({
        "model": "llama-3.2-3b", "precision": "bf16", "optimizer": "adamw-fused",
        "batch": 2, "seq": 4096, "gpu": "a100-80gb", "loss": "chunked-output"
    });
    let fused = json!({
        "model": "llama-3.1-8b", "precision": "bf16", "optimizer": "adamw",
        "batch": 2, "seq": 2048, "gpu": "h200", "loss": "chunked"
    });
    let ddp = json!({
        "model": "llama-3.2-1b", "precision": "bf16-mixed", "optimizer": "adamw",
        "batch": 4, "seq": 1024, "gpu": "h100", "parallel": {"dp": 8}
    });
    // LLM.int8 (`Linear8bitLt`, threshold 6.0) under LoRA, no checkpointing.
    let mut int8 = eight_b.clone();
    int8["weights"] = json!("int8");
    int8["peft"]["method"] = json!("lora");
    let mut fused_lora = fused.clone();
    fused_lora["peft"] = json!({"method": "lora", "rank": 16, "alpha": 32,
        "targets": ["q_proj", "v_proj"]});
    for job in [
        tiny_qlora("nf4-dq"),
        tiny_qlora("nf4"),
        eight_b,
        full,
        kbit,
        kbit_mixed,
        kbit_whole,
        chunked,
        fused,
        fused_lora,
        ddp,
        int8,
        tiny_int8(),
    ] {
        assert_stream_meets_walk(&job);
    }
}

/// A small Llama trained in bf16-mixed at batch 2 × 256, with `checkpointing` and `attention`.
fn small(checkpointing: &str, attention: &str) -> Value {
    json!({
        "model": {"hf_config": tiny_llama(2)},
        "batch": 2, "seq": 256, "precision": "bf16-mixed", "optimizer": "adamw",
        "checkpointing": checkpointing, "attention": attention
    })
}

/// Selective checkpointing recomputes a block's attention core (scores, probabilities,
/// attention dropout: `activations.rs`). SDPA without attention dropout saves none of those
/// (its kernel keeps q, k, v, the output and the log-sum-exp), so nothing is dropped or
/// recomputed: the step is the un-checkpointed one, event for event. (Over eager attention:
/// `alloc_stream_selective.rs`.)
#[test]
fn selective_checkpointing_without_a_core_is_the_plain_step() {
    let plain = stream_of(&small("none", "sdpa"));
    let selective = stream_of(&small("selective", "sdpa"));
    assert_eq!(plain.events, selective.events);
}

/// `small`'s model cut to one layer, un-checkpointed over SDPA, at batch 1 × `seq` in
/// `precision`.
fn one_layer(seq: u64, precision: &str) -> Value {
    let mut job = small("none", "sdpa");
    job["model"]["hf_config"]["num_hidden_layers"] = json!(1);
    job["batch"] = json!(1);
    job["seq"] = json!(seq);
    job["precision"] = json!(precision);
    job
}

/// torchtune's chunked output and loss on a one-layer Llama (hidden 256, vocabulary 8192,
/// untied) in bf16 at batch 1 × 64: eight chunks of 8 rows (`torch.chunk`, ⌈64/8⌉). Each
/// chunk's bf16 logits 8·8192·2 = 131,072 B, all made first (the list); then per chunk the
/// fp32 upcast and the saved log-softmax, 8·8192·4 = 262,144 B each. In backward the losses
/// run first, last chunk first: the two fp32 gradients and the bf16 dlogits (262,144,
/// 262,144, 131,072) per chunk; then each projection: the first makes the head's `.grad`
/// (8192·256·2 = 4,194,304 B, kept), the other seven a contribution of the same size added
/// and freed, the second into a new sum of that size. (Allocations of at least 100 KiB; the block's smaller tensors fall below.)
#[test]
fn chunked_output_loss_chunk_by_chunk() {
    let mut job = one_layer(64, "bf16");
    job["loss"] = json!("chunked-output");
    let s = stream_of(&job);
    let (logit, fp32, head) = (131_072u64, 262_144u64, 4_194_304u64);
    let mut forward = vec![logit; 8];
    for _ in 0..8 {
        forward.extend([fp32, fp32]);
    }
    let mut backward = Vec::new();
    for _ in 0..8 {
        backward.extend([fp32, fp32, logit]);
    }
    // The first projection's backward is the autograd thread's first matmul: its cuBLAS
    // workspace, the same block as the context's (the stream's first allocation), on step 0;
    // on step 1 it exists already.
    let workspace = big_allocs(&s, Phase::Context, 1)[0];
    // The second projection's contribution is summed into a new tensor (autograd's buffered
    // first one is a view it may not steal: measured on the CPU, `InputBuffer::accumulate`),
    // the later ones into that sum in place.
    backward.extend([head; 9]);
    // The final norm's saved tensors come first, one block as in the standard loss's stream
    // (whose first allocation of at least 100 KiB in the forward is the same).
    let mut standard = job.clone();
    standard["loss"] = json!("standard");
    let head_kept = big_allocs(&stream_of(&standard), Phase::Forward(1), 100 << 10)[0];
    for step in 0..2 {
        let f = big_allocs(&s, Phase::Forward(step), 100 << 10);
        assert_eq!(f[0], head_kept);
        assert_eq!(f[1..], forward[..]);
        let mut want = backward.clone();
        if step == 0 {
            want.insert(25, workspace);
        }
        let b = big_allocs(&s, Phase::Backward(step), 100 << 10);
        assert_eq!(b[..want.len()], want[..]);
    }
    // Live after the head's backward: a chunked loss holds one chunk's fp32 pair at most,
    // where the whole loss holds the logits' (64·8192·4 = 2 MiB each).
    assert_stream_meets_walk(&job);
}

/// Liger's fused linear cross-entropy on the one-layer Llama (hidden 256, vocabulary 8192,
/// untied, bf16) at batch 1 × 96: ⌈V/H⌉ = 32, chunks of next_power_of_2(⌈96/32⌉) = 4 rows,
/// 24 of them. After the head stage's kept tensors: transformers' padded labels 97·8 = 776 B
/// and shifted 96·8 = 768; `grad_input` 96·256·2 = 49,152; `grad_weight` 8192·256·2 =
/// 4,194,304; `loss_1d` 96·4 = 384; the bool mask 96; the count's int64 8 (freed); then per
/// chunk the logits 4·8192·2 = 65,536 (the previous chunk freed after the new one exists) and
/// the input-gradient product 4·256·2 = 2,048 (freed), and the weight gradient's step of
/// Liger 0.6.2 on (`grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()`): the
/// bf16 product 8192·256·2 = 4,194,304 and its fp32 copy 8192·256·4 = 8,388,608, the product
/// freed as `.float()` returns, the copy after the add; the summed loss (4 B); the last chunk,
/// `loss_1d`, the mask and both labels freed. The backward makes only `torch.tensor(1.0)` (4 B,
/// freed) and the final norm's weight gradient (256·2 = 512) before the block's: the head's
/// `.grad` is `grad_weight` itself.
#[test]
fn fused_linear_cross_entropy_chunk_by_chunk() {
    let mut job = one_layer(96, "bf16");
    job["loss"] = json!("chunked");
    let s = stream_of(&job);
    let weight_step = [4_194_304, 8_388_608, -1, -1];
    for step in 0..2u8 {
        let ev = events_in(&s, Phase::Forward(step));
        let at = ev
            .iter()
            .position(|e| matches!(*e, Event::Alloc { bytes: 776, .. }))
            .expect("the padded labels");
        let mut want: Vec<i64> = vec![776, 768, 49_152, 4_194_304, 384, 96, 8, -1];
        want.extend([65_536, 2_048, -1]);
        want.extend(weight_step);
        for _ in 1..24 {
            want.extend([65_536, -1, 2_048, -1]);
            want.extend(weight_step);
        }
        want.extend([4, -1, -1, -1, -1, -1]);
        // Every event of the window is an allocation or a free (as many sizes as events).
        let got = signed_sizes(&ev[at..at + want.len()]);
        assert_eq!(got, want, "step {step}");
        // Backward: the comparison's scalar, then the final norm's gradient first.
        let b = big_allocs(&s, Phase::Backward(step), 1);
        assert_eq!(b[..2], [4, 512]);
    }
    assert_stream_meets_walk(&job);
}

/// The same loss in fp32 at batch 1 × 96 (chunks of 4 rows, 24 of them): the logits
/// 4·8192·4 = 131,072, the input-gradient product 4·256·4 = 4,096, and the weight gradient's
/// fp32 product 8192·256·4 = 8,388,608 alone (`.float()` on an fp32 tensor returns it, no
/// copy), freed after the add. Under LoRA (the head frozen: `grad_weight` is `None`) no chunk
/// has a weight step: logits and input product only.
#[test]
fn fused_linear_cross_entropy_weight_step_by_dtype_and_head() {
    let mut job = one_layer(96, "fp32");
    job["loss"] = json!("chunked");
    let chunk_of = |job: &Value, logits: i64| -> Vec<i64> {
        let s = stream_of(job);
        let ev = events_in(&s, Phase::Forward(1));
        let at = ev
            .iter()
            .rposition(|e| matches!(*e, Event::Alloc { bytes, .. } if bytes == logits as u64))
            .expect("the last chunk's logits");
        signed_sizes(&ev[at..at + 6])
    };
    assert_eq!(
        chunk_of(&job, 131_072),
        [131_072, -1, 4_096, -1, 8_388_608, -1]
    );
    let mut lora = one_layer(96, "bf16");
    lora["loss"] = json!("chunked");
    lora["peft"] = json!({"method": "lora", "rank": 8, "alpha": 16, "targets": ["q_proj"]});
    // The last chunk, then the summed loss (4 B) and the function's frees.
    assert_eq!(chunk_of(&lora, 65_536), [65_536, -1, 2_048, -1, 4, -1]);
    assert_stream_meets_walk(&job);
}

/// One rank of DDP on two GPUs: the one-layer Llama (hidden 256, 2 KV heads of 64, MLP 768,
/// vocabulary 8192, untied) in fp32 at batch 1 × 40. Its parameters, fp32: embeddings and
/// head 2 · 8192·256·4 = 16,777,216; q and o 2 · 256²·4 = 524,288; k and v 2 · 256·128·4 =
/// 262,144; the MLP 3 · 256·768·4 = 2,359,296; three norms 3 · 1,024: 19,926,016 B. DDP's
/// construction broadcasts them in buckets of at least 250 MiB — one, flattened (19,926,016,
/// freed) — and makes the reducer's first-iteration bucket of every gradient (19,926,016,
/// kept); then the batch (input ids and labels, int64 40·8 = 320 B each, which the plan counts
/// as the 512 B blocks they take). The second forward rebuilds the buckets in the order the gradients
/// became ready: the one freed, then the head's gradient first (8,388,608 ≥ 1 MiB closes the
/// first bucket), every other gradient in one bucket under 25 MiB (11,537,408).
#[test]
fn ddp_rank_buckets() {
    let mut job = one_layer(40, "fp32");
    job["parallel"] = json!({"dp": 2});
    let s = stream_of(&job);
    let sizes = signed_sizes;
    let empty = index_of(&s, Event::EmptyCache);
    let zero = index_of(&s, Event::Phase(Phase::ZeroGrad(0)));
    assert_eq!(
        sizes(&s.events[empty..zero]),
        [19_926_016, -1, 19_926_016, 512, 512]
    );
    let fwd = index_of(&s, Event::Phase(Phase::Forward(1)));
    assert_eq!(sizes(&s.events[fwd..fwd + 4]), [-1, 8_388_608, 11_537_408]);
    // The first forward rebuilds nothing: the same step without DDP starts alike.
    let mut single = job.clone();
    single["parallel"] = json!({"dp": 1});
    let one = stream_of(&single);
    let first = |s: &Stream| {
        let at = index_of(s, Event::Phase(Phase::Forward(0)));
        sizes(&s.events[at..at + 20])
    };
    assert_eq!(first(&s), first(&one));
    assert_stream_meets_walk(&job);
}

/// `tiny_qlora`'s job (one layer, batch 1 × 40, bf16, rank 16 on all seven projections)
/// with LLM.int8 base weights under plain LoRA.
fn tiny_int8() -> Value {
    let mut job = tiny_qlora("int8");
    job["peft"]["method"] = json!("lora");
    job
}

/// q_proj's forward under LLM.int8 (`MatMul8bitLt.forward`, bitsandbytes 0.50.1), event by
/// event, for its input `A` of M = 40 rows × K = 256 (bf16, 20,480 B) and N = 256 outputs:
/// `A.to(torch.float16)` 40·256·2 = 20,480; `int8_vectorwise_quant`: `row_stats` 40·4 = 160,
/// `out_row` 40·256 = 10,240, the threshold's `A.abs()` 20,480 and the bool mask 10,240 (the
/// `abs` freed), `outliers.any()` 1 B (freed), `outliers.any(dim=0)` 256 (freed after
/// `argwhere`, whose indices are data-dependent and written at 0 B), then the fp16 copy and
/// the mask freed as the call returns; `int8_linear_matmul`'s int32 product 40·256·4 =
/// 40,960, `int8_mm_dequant`'s fp16 20,480 and its bf16 copy 20,480, the int32 and fp16
/// freed; `addmm`'s output 20,480 and the bf16 copy freed; the forward returns and the
/// quantized input and its scales go. Nothing saves `A` but `ctx.tensors`: not freed.
/// Under fp16 `A.to(torch.float16)` and `out.to(A.dtype)` return their tensor: no copy of
/// the input (whose free at the call's return is then no free), no copy of the product.
#[test]
fn an_int8_projection_forward_in_order() {
    let fp16: Vec<i64> = vec![
        160, 10_240, 20_480, 10_240, -1, 1, -1, 256, -1, -1, 40_960, 20_480, -1, 20_480, -1, -1, -1,
    ];
    for (precision, want) in [("bf16", Q_PROJ_FORWARD.to_vec()), ("fp16", fp16)] {
        let mut job = tiny_int8();
        job["precision"] = json!(precision);
        let s = stream_of(&job);
        for step in 0..2 {
            let forward = signed_sizes(&events_in(&s, Phase::Forward(step)));
            let found = forward.windows(want.len()).any(|w| w == want);
            assert!(found, "{precision} step {step}: {forward:?}");
        }
    }
}

/// The sizes of one projection's forward on the tiny model in bf16
/// (`an_int8_projection_forward_in_order`).
const Q_PROJ_FORWARD: [i64; 21] = [
    20_480, 160, 10_240, 20_480, 10_240, -1, 1, -1, 256, -1, -1, -1, 40_960, 20_480, 20_480, -1,
    -1, 20_480, -1, -1, -1,
];

/// Where q_proj's forward (`Q_PROJ_FORWARD`) starts among a phase's allocations and frees.
fn q_proj_at(signed: &[i64]) -> Option<usize> {
    signed
        .windows(Q_PROJ_FORWARD.len())
        .position(|w| w == Q_PROJ_FORWARD)
}

/// Each projection's backward (`MatMul8bitLt.backward`, frozen weight: `grad_A` only) copies
/// `CB` to the input's dtype (N·K·2 B: q and o 256·256·2 = 131,072, k and v 128·256·2 =
/// 65,536, gate, up and down 768·256·2 = 393,216) and makes the fp32 scale
/// `SCB.unsqueeze(1).mul(1/127)` (N·4: q, o and down 1,024, k and v 512, gate and up 3,072),
/// newest projection first: down, up, gate, o, v, k, q. The forward dequantizes nothing.
#[test]
fn int8_dequantizes_cb_in_backward_only() {
    let s = stream_of(&tiny_int8());
    let cb = [131_072u64, 65_536, 393_216];
    let m = 393_216;
    for step in 0..2 {
        let of_cb = |b| cb.contains(&b);
        assert_eq!(
            allocs_in(&s, Phase::Forward(step), of_cb),
            Vec::<u64>::new()
        );
        assert_eq!(
            allocs_in(&s, Phase::Backward(step), of_cb),
            [m, m, m, 131_072, 65_536, 65_536, 131_072]
        );
        let backward = events_in(&s, Phase::Backward(step));
        let at = backward
            .iter()
            .position(|e| matches!(*e, Event::Alloc { bytes: 393_216, .. }))
            .unwrap();
        assert!(
            matches!(backward[at + 1], Event::Alloc { bytes: 1_024, .. }),
            "down_proj's scale (N = 256): {:?}",
            &backward[at..at + 4]
        );
    }
}

/// What the LLM.int8 load leaves: the bf16 embeddings and head 2 · 8192·256·2 = 8,388,608,
/// three RMSNorm weights 3 · 512 = 1,536; each weight as `int8_vectorwise_quant` keeps it,
/// `CB` n bytes and `SCB` 4 B per output row: q and o 65,536 + 1,024 = 66,560, k and v
/// 32,768 + 512 = 33,280, gate and up 196,608 + 3,072 = 199,680, down 196,608 + 1,024 =
/// 197,632 — 796,672 in all —; the fp32 adapters 311,296 (as under QLoRA). Total 9,498,112.
#[test]
fn the_int8_load_keeps_cb_and_scb() {
    assert_eq!(loaded_bytes(&stream_of(&tiny_int8())), 9_498_112);
}

/// `MatMul8bitLt` keeps each projection's input as `ctx.tensors`, a ctx attribute that
/// autograd's release of saved tensors does not reach (checked on the CPU with a custom
/// Function: `scripts/check_ctx_lifetime.py`), so the inputs live until the graph is freed
/// after the whole backward. q_proj's input (the normed hidden state, 40·256·2 = 20,480 B,
/// made just before its fp16 copy) is freed after the backward's last allocation (the input
/// layernorm's gradients come after q_proj's node), not at q_proj's node. Under full
/// checkpointing what is held depends on the checkpoint's kind (non-reentrant: the first
/// forward's inputs held through the step; reentrant: nothing): next test.
#[test]
fn int8_inputs_live_until_the_graph_is_freed() {
    let s = stream_of(&tiny_int8());
    let (x, forward) = q_proj_input(&s);
    assert!(!forward.contains(&Event::Free { id: x }));
    assert_freed_with_the_graph(&s, x);
}

/// `x` is freed in the second step's backward after its last allocation (with the graph).
fn assert_freed_with_the_graph(s: &Stream, x: u32) {
    let backward = events_in(s, Phase::Backward(1));
    let freed = backward.iter().position(|e| *e == Event::Free { id: x });
    let last_alloc = backward
        .iter()
        .rposition(|e| matches!(*e, Event::Alloc { .. }));
    assert!(freed > last_alloc, "{freed:?} {last_alloc:?}");
}

/// The id of q_proj's input in the second step's forward (the last 20,480 B made before its
/// `MatMul8bitLt` forward), and the forward's allocations and frees.
fn q_proj_input(s: &Stream) -> (u32, Vec<Event>) {
    let forward: Vec<Event> = events_in(s, Phase::Forward(1))
        .into_iter()
        .filter(|e| matches!(*e, Event::Alloc { .. } | Event::Free { .. }))
        .collect();
    let at = q_proj_at(&signed_sizes(&forward)).expect("q_proj's forward");
    let x = forward[..at]
        .iter()
        .rev()
        .find_map(|e| match *e {
            Event::Alloc { id, bytes: 20_480 } => Some(id),
            _ => None,
        })
        .unwrap();
    (x, forward)
}

/// Under full checkpointing (the CPU's lifetimes, `scripts/check_ctx_lifetime.py`): with
/// non-reentrant checkpointing q_proj's input of the first forward (the normed hidden state,
/// 40·256·2 = 20,480 B) is not freed in the forward — `ctx.tensors` holds it — and goes after
/// the backward's last allocation, with the graph; with reentrant checkpointing the first
/// forward runs under `no_grad` and it is freed in the forward, after q_proj's forward (its
/// events are the same either way: `MatMul8bitLt.forward` runs alike).
#[test]
fn int8_under_checkpointing_holds_by_the_checkpoint_kind() {
    for reentrant in [false, true] {
        let mut job = tiny_int8();
        job["checkpointing"] = json!("full");
        job["checkpoint_reentrant"] = json!(reentrant);
        let s = stream_of(&job);
        let (x, forward) = q_proj_input(&s);
        assert_eq!(forward.contains(&Event::Free { id: x }), reentrant);
        if !reentrant {
            assert_freed_with_the_graph(&s, x);
        }
        assert_stream_meets_walk(&job);
    }
}

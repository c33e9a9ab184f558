//! One rank of FSDP2 (`fully_shard`, `parallel.zero: 3`) through the allocator stream
//! (`alloc_events/fsdp.rs`). Every size below is derived by hand from torch 2.15's
//! `_fully_shard` source (`_fsdp_param.py` `_init_sharded_param`, `_fsdp_collectives.py`
//! `foreach_all_gather` / `foreach_reduce`, `_fsdp_param_group.py` `wait_for_unshard` /
//! `post_backward`), never read off the stream.

mod common;

use serde_json::{json, Value};
use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase, Stream};

fn stream_of(job: &Value) -> Stream {
    let (input, resolved) = common::prepared_json(job);
    step_stream(&input, &resolved)
        .unwrap()
        .expect("the stream covers FSDP")
}

/// Llama-3.1-8B, bf16-mixed AdamW, b1 × 4096 on eight H100s, FULL_SHARD.
fn llama8b() -> Value {
    json!({
        "model": "llama-3.1-8b", "framework": "fsdp", "precision": "bf16-mixed",
        "optimizer": "adamw", "batch": 1, "seq": 4096, "gpu": "h100",
        "parallel": {"dp": 8, "zero": 3}
    })
}

/// A small Llama's config (hidden 256, 4 heads of 64, 2 KV heads, MLP 768, vocabulary 8192,
/// untied) with two blocks.
fn tiny(precision: &str) -> Value {
    json!({
        "model": {"hf_config": {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192,
            "max_position_embeddings": 4096, "hidden_act": "silu",
            "tie_word_embeddings": false, "torch_dtype": "bfloat16"}},
        "framework": "fsdp", "precision": precision, "optimizer": "adamw",
        "batch": 1, "seq": 40, "parallel": {"dp": 2, "zero": 3}
    })
}

/// `phase`'s allocations of at least `floor` bytes as `(stream, bytes)` and the frees of such
/// blocks as `(stream, −bytes)`, in order.
fn signed(s: &Stream, phase: Phase, floor: u64) -> Vec<(u64, i64)> {
    let mut size = vec![(0u64, 0u64); s.ids()];
    let (mut on, mut inside, mut out) = (0, false, Vec::new());
    for e in &s.events {
        match *e {
            Event::Phase(p) => inside = p == phase,
            Event::Stream(x) => on = x,
            Event::Alloc { id, bytes } => {
                size[id as usize] = (on, bytes);
                if inside && bytes >= floor {
                    out.push((on, bytes as i64));
                }
            }
            Event::Free { id } => {
                let (st, b) = size[id as usize];
                if inside && b >= floor {
                    out.push((st, -(b as i64)));
                }
            }
            Event::EmptyCache => {}
        }
    }
    out
}

/// The tiny model's sizes on rank 0 of 2 (every dim 0 even, so no padding). Per layer, shard
/// elements (half the rows): q and o 128·256 = 32,768 each; k and v 64·256 = 16,384 each;
/// gate, up, down 98,304 each; two norms 128 each: Σ 393,472. The root: the embeddings and
/// the head 4096·256 = 1,048,576 each, the final norm 128: Σ 2,097,280.
const LAYER_SHARD: i64 = 393_472;
const ROOT_SHARD: i64 = 2_097_280;

/// Steady-state forward and backward of the two-layer model under bf16-mixed
/// (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), allocations and frees of at
/// least 128 KiB as (stream, ±bytes); streams 0 default, 1 all-gather copy-in, 3
/// reduce-scatter.
///
/// - Unshard (copy-in stream): the flat bf16 cast of the shards (Σ shard · 2: root 4,194,560,
///   layer 786,944), the all-gather output (Σ shard · 2 ranks · 2: root 8,389,120, layer
///   1,573,888), the flat input freed when `foreach_all_gather` returns.
/// - Copy-out (default stream): each parameter's unsharded bf16 tensor (embeddings and head
///   8192·256·2 = 4,194,304; q and o 131,072; gate, up, down 393,216; k, v, norms smaller).
///   In forward the previous unit's all-gather output is freed first (the held
///   `all_gather_state`), this one's held; the last layer's goes when the root's forward
///   returns, after the loss (logits 40·8192·2 = 655,360, the fp32 upcast and log-softmax
///   1,310,720 each), before the caller drops the logits.
/// - Backward: the root's pre-backward prefetches layer 1; each layer's pre-backward copies
///   out (its all-gather output then freed) and prefetches the layer before. The head's bf16
///   gradient (4,194,304) and the layers' (393,216 ×3, 131,072 ×2) are autograd's.
///   Post-backward: resharded, the last reduce-scatter input freed, this one made (fp32,
///   Σ shard · 2 · 4: layer 3,147,776, root 16,778,240), the unsharded gradients freed (last
///   first: `unsharded_grads.clear()`, CPython's `list_clear`), the
///   reduce output made on the reduce-scatter stream (Σ shard · 4: 1,573,888 and 8,389,120).
///   The root's runs in the final callback, after the embeddings' gradient; the last input is
///   freed by `_end_backward_iteration`.
#[test]
fn tiny_two_layer_events_bf16_mixed() {
    let s = stream_of(&tiny("bf16-mixed"));
    let (flat, ag) = (LAYER_SHARD * 2, LAYER_SHARD * 2 * 2);
    let (root_flat, root_ag) = (ROOT_SHARD * 2, ROOT_SHARD * 2 * 2);
    let (big, q, mlp) = (4_194_304i64, 131_072i64, 393_216i64);
    let (logits, fp32_logits) = (655_360i64, 1_310_720i64);
    let unshard = |f: i64, a: i64| vec![(1, f), (1, a), (1, -f)];
    let params = |sign: i64| {
        vec![
            (0, sign * q),
            (0, sign * q),
            (0, sign * mlp),
            (0, sign * mlp),
            (0, sign * mlp),
        ]
    };
    let grads_made = [(0, mlp), (0, mlp), (0, mlp), (0, q), (0, q)];
    let mut fwd = unshard(root_flat, root_ag);
    fwd.extend([(0, big), (0, big)]);
    for held in [root_ag, ag] {
        fwd.extend(unshard(flat, ag));
        fwd.push((1, -held));
        fwd.extend(params(1));
        fwd.extend(params(-1));
    }
    fwd.extend([
        (0, logits),
        (0, fp32_logits),
        (0, fp32_logits),
        (0, -fp32_logits),
        (1, -ag),
        (0, -logits),
    ]);
    assert_eq!(signed(&s, Phase::Forward(1), 131_072), fwd);

    let (rs_in, rs_out) = (LAYER_SHARD * 2 * 4, LAYER_SHARD * 4);
    let mut bwd = unshard(flat, ag);
    // nll_loss and log-softmax backward, dlogits cast back, the head's bf16 gradient.
    bwd.extend([
        (0, fp32_logits),
        (0, fp32_logits),
        (0, -fp32_logits),
        (0, -fp32_logits),
        (0, logits),
        (0, -fp32_logits),
        (0, big),
        (0, -logits),
    ]);
    for layer in [1, 0] {
        bwd.extend(params(1));
        bwd.push((1, -ag));
        if layer == 1 {
            bwd.extend(unshard(flat, ag));
        }
        bwd.extend(grads_made);
        bwd.extend(params(-1));
        if layer == 0 {
            bwd.push((0, -rs_in));
        }
        bwd.push((0, rs_in));
        // The gradients freed by `list.clear()`, last first.
        bwd.extend([(0, -mlp), (0, -mlp), (0, -mlp), (0, -q), (0, -q)]);
        bwd.push((3, rs_out));
    }
    // The embeddings' gradient; the root's post-backward.
    bwd.extend([
        (0, big),
        (0, -big),
        (0, -big),
        (0, -rs_in),
        (0, ROOT_SHARD * 2 * 4),
        (0, -big),
        (0, -big),
        (3, ROOT_SHARD * 4),
        (0, -ROOT_SHARD * 2 * 4),
    ]);
    assert_eq!(signed(&s, Phase::Backward(1), 131_072), bwd);
    // zero_grad(set_to_none=True) frees the three reduce outputs the sharded gradients view.
    assert_eq!(
        signed(&s, Phase::ZeroGrad(1), 131_072),
        [(3, -rs_out), (3, -rs_out), (3, -ROOT_SHARD * 4)]
    );
}

/// Without mixed precision (fp32) the shards are the all-gather inputs themselves (no flat
/// cast) and everything is 4 bytes: the root's all-gather output Σ shard · 2 · 4 =
/// 16,778,240, the embeddings' and head's unsharded 8192·256·4 = 8,388,608 each; layer 0's
/// output 3,147,776, then the root's freed, then q 65,536·4 = 262,144 and gate
/// 196,608·4 = 786,432 (allocations of at least 256 KiB).
#[test]
fn tiny_fp32_gathers_the_shards_themselves() {
    let s = stream_of(&tiny("fp32"));
    let got = signed(&s, Phase::Forward(1), 262_144);
    let root_ag = ROOT_SHARD * 2 * 4;
    assert_eq!(
        got[..7],
        [
            (1, root_ag),
            (0, 8_388_608),
            (0, 8_388_608),
            (1, LAYER_SHARD * 8),
            (1, -root_ag),
            (0, 262_144),
            (0, 262_144)
        ]
    );
    assert_eq!(got[7], (0, 786_432));
}

/// The stream's peak allocated equals the walk's within 0.1 % on a real-sized job: both
/// charge FSDP2's buffers from the same layout (measured −0.000 %: 47,448,602,624 B stream,
/// 47,448,635,904 B walk; with full checkpointing at b4 × 4096 too), and the report carries
/// the allocator's figures.
#[test]
fn llama8b_stream_meets_walk() {
    let mut full = llama8b();
    full["checkpointing"] = json!("full");
    full["batch"] = json!(4);
    for job in [llama8b(), full] {
        let (stream, walk) = common::stream_steps::stream_and_walk(&job);
        let d = stream as f64 / walk as f64 - 1.0;
        assert!(
            d.abs() < 0.001,
            "stream {stream} walk {walk} {:+.3} %",
            d * 100.0
        );
    }
    let (input, resolved) = common::prepared_json(&llama8b());
    let report = vramscope_core::estimate::estimate(&input, &resolved).unwrap();
    let a = report
        .per_gpu
        .allocator
        .expect("per_gpu.allocator for FSDP");
    assert!(a.segments > 0);
}

/// The walk's FSDP buffers at the loss backward (its peak here), by hand: the root's unsharded
/// bf16 parameters (embeddings and head 128,256·4096·2 = 1,050,673,152 each, the final norm
/// 8,192) and the last layer prefetched (q 4096²·2 + k, v 1024·4096·2 ·2 + o 4096²·2 +
/// 3 · 14,336·4096·2 + two norms 2·4096·2 = 436,224,000): 2,537,578,496 B beside the
/// 67,108,864 B of the two cuBLAS workspaces, in place of the heuristic's
/// 2·218,112,000·2 + 218,112,000·4 = 1,744,896,000 B of `comm_buffers`.
#[test]
fn llama8b_walk_charges_fsdp_buffers_at_its_peak() {
    let report = common::run_job(llama8b());
    let peak = report.timeline.iter().max_by_key(|p| p.allocated).unwrap();
    assert_eq!(peak.label, "loss (log-softmax backward)");
    // The loss's two fp32 gradients of b·s·V (`nll_loss_backward`, log-softmax backward).
    let loss = 2 * 4096 * 128_256 * 4;
    let temporaries = peak.by_category.get("temporaries");
    assert_eq!(temporaries, Some(&(2_537_578_496 + 67_108_864 + loss)));
}

/// Cancels every allocation followed at once by the free of a block of its size (a
/// temporary), repeatedly, as a stack: what is left is the sequence of lasting blocks.
fn lasting(seq: impl IntoIterator<Item = i64>) -> Vec<i64> {
    let mut out: Vec<i64> = Vec::new();
    for d in seq {
        match out.last() {
            Some(&a) if a > 0 && d == -a => {
                out.pop();
            }
            _ => out.push(d),
        }
    }
    out
}

/// The stream against FSDP2 run on the CPU (gloo, two processes, torch 2.15: rank 0's
/// steady-state forward and backward, `scripts/measure_fsdp_cpu.py`,
/// `validation/cpu-measured-fsdp.json`), sizes and order of every block of at least 128 KiB.
/// The record has temporaries the stream leaves out, each freed right after it is made: gloo's
/// own buffers (two of the all-gather output's size per all-gather, one of the input's per
/// reduce-scatter: NCCL, on CUDA, writes in place and allocates nothing through the caching
/// allocator), the CPU's per-gradient fp32 casts in `chunk_cat_mixed_dtype` (CUDA casts
/// during the copy-in), and the CPU kernels' scratch. With those cancelled on both sides,
/// the sequences are equal, bf16-mixed and fp32 alike.
#[test]
fn cpu_record_matches_the_stream() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../validation/cpu-measured-fsdp.json"
    );
    let record: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for precision in ["bf16-mixed", "fp32"] {
        let measured = record["runs"][precision]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap());
        let s = stream_of(&tiny(precision));
        let streamed = [Phase::Forward(1), Phase::Backward(1)]
            .into_iter()
            .flat_map(|p| signed(&s, p, 131_072))
            .map(|(_, b)| b);
        assert_eq!(lasting(measured), lasting(streamed), "{precision}");
    }
}

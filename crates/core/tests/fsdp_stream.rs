//! One rank of FSDP2 (`fully_shard`, `parallel.zero: 3` FULL_SHARD and 2 SHARD_GRAD_OP, one
//! micro-batch or several, full fine-tune or LoRA) through the allocator stream
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
    signed_in(s, &[phase], floor)
}

/// [`signed`] over every phase of `phases`, in the stream's order (a step's micro-batches
/// each have a forward and a backward).
fn signed_in(s: &Stream, phases: &[Phase], floor: u64) -> Vec<(u64, i64)> {
    let mut size = vec![(0u64, 0u64); s.ids()];
    let (mut on, mut inside, mut out) = (0, false, Vec::new());
    for e in &s.events {
        match *e {
            Event::Phase(p) => inside = phases.contains(&p),
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

/// Sizes of the tiny model's blocks of at least 128 KiB under bf16-mixed
/// (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), as (stream, ±bytes); streams
/// 0 default, 1 all-gather copy-in, 3 reduce-scatter.
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
/// - SHARD_GRAD_OP (`kept`, `reshard_after_forward=False`): no layer is resharded after its
///   forward, and the backward gathers nothing (the layers are unsharded: `unshard` returns at
///   `is_unsharded`); the post-backward reshards as under FULL_SHARD.
/// - A later micro-batch (`accumulated`): the sharded `.grad` exists, so each reduce output
///   is added into it and freed when `foreach_reduce` returns.
struct Tiny {
    kept: bool,
}

const BIG: i64 = 4_194_304;
const Q: i64 = 131_072;
const MLP: i64 = 393_216;
const LOGITS: i64 = 655_360;
const FP32_LOGITS: i64 = 1_310_720;
const FLAT: i64 = LAYER_SHARD * 2;
const AG: i64 = LAYER_SHARD * 2 * 2;

impl Tiny {
    fn unshard(f: i64, a: i64) -> Vec<(u64, i64)> {
        vec![(1, f), (1, a), (1, -f)]
    }

    fn params(sign: i64) -> Vec<(u64, i64)> {
        vec![
            (0, sign * Q),
            (0, sign * Q),
            (0, sign * MLP),
            (0, sign * MLP),
            (0, sign * MLP),
        ]
    }

    fn forward(&self) -> Vec<(u64, i64)> {
        let (root_flat, root_ag) = (ROOT_SHARD * 2, ROOT_SHARD * 2 * 2);
        let mut fwd = Self::unshard(root_flat, root_ag);
        fwd.extend([(0, BIG), (0, BIG)]);
        for held in [root_ag, AG] {
            fwd.extend(Self::unshard(FLAT, AG));
            fwd.push((1, -held));
            fwd.extend(Self::params(1));
            if !self.kept {
                fwd.extend(Self::params(-1));
            }
        }
        fwd.extend(Self::loss_forward(AG));
        fwd
    }

    /// The loss's forward: the logits, their fp32 upcast and log-softmax, the upcast freed,
    /// the last layer's all-gather output (`last_ag`) released by the root's post-forward, the
    /// logits dropped.
    fn loss_forward(last_ag: i64) -> [(u64, i64); 6] {
        [
            (0, LOGITS),
            (0, FP32_LOGITS),
            (0, FP32_LOGITS),
            (0, -FP32_LOGITS),
            (1, -last_ag),
            (0, -LOGITS),
        ]
    }

    /// nll_loss and log-softmax backward, dlogits cast back, the head's bf16 gradient
    /// (`head`: 0 when frozen), dlogits freed.
    fn loss_backward(head: i64) -> Vec<(u64, i64)> {
        let mut out = vec![
            (0, FP32_LOGITS),
            (0, FP32_LOGITS),
            (0, -FP32_LOGITS),
            (0, -FP32_LOGITS),
            (0, LOGITS),
            (0, -FP32_LOGITS),
        ];
        if head > 0 {
            out.push((0, head));
        }
        out.push((0, -LOGITS));
        out
    }

    fn backward(&self, accumulated: bool) -> Vec<(u64, i64)> {
        let (rs_in, rs_out) = (LAYER_SHARD * 2 * 4, LAYER_SHARD * 4);
        let (root_in, root_out) = (ROOT_SHARD * 2 * 4, ROOT_SHARD * 4);
        let reduced = |out: i64| {
            if accumulated {
                vec![(3, out), (3, -out)]
            } else {
                vec![(3, out)]
            }
        };
        let mut bwd = if self.kept {
            Vec::new()
        } else {
            Self::unshard(FLAT, AG)
        };
        bwd.extend(Self::loss_backward(BIG));
        for layer in [1, 0] {
            if !self.kept {
                bwd.extend(Self::params(1));
                bwd.push((1, -AG));
                if layer == 1 {
                    bwd.extend(Self::unshard(FLAT, AG));
                }
            }
            bwd.extend([(0, MLP), (0, MLP), (0, MLP), (0, Q), (0, Q)]);
            bwd.extend(Self::params(-1));
            if layer == 0 {
                bwd.push((0, -rs_in));
            }
            bwd.push((0, rs_in));
            // The gradients freed by `list.clear()`, last first.
            bwd.extend([(0, -MLP), (0, -MLP), (0, -MLP), (0, -Q), (0, -Q)]);
            bwd.extend(reduced(rs_out));
        }
        // The embeddings' gradient; the root's post-backward.
        bwd.extend([(0, BIG), (0, -BIG), (0, -BIG), (0, -rs_in), (0, root_in)]);
        bwd.extend([(0, -BIG), (0, -BIG)]);
        bwd.extend(reduced(root_out));
        bwd.push((0, -root_in));
        bwd
    }
}

/// Steady-state forward and backward of the two-layer model under bf16-mixed FULL_SHARD
/// ([`Tiny`] derives each block); `zero_grad(set_to_none=True)` frees the three reduce outputs
/// the sharded gradients view.
#[test]
fn tiny_two_layer_events_bf16_mixed() {
    let s = assert_one_micro_batch(&tiny("bf16-mixed"), false);
    assert_zero_grad_frees_the_outputs(&s);
}

/// `job`'s steady-state forward and backward are [`Tiny`]'s (one micro-batch).
fn assert_one_micro_batch(job: &Value, kept: bool) -> Stream {
    let s = stream_of(job);
    let t = Tiny { kept };
    assert_eq!(signed(&s, Phase::Forward(1), 131_072), t.forward());
    assert_eq!(signed(&s, Phase::Backward(1), 131_072), t.backward(false));
    s
}

/// `zero_grad(set_to_none=True)` frees the two layers' and the root's reduce outputs.
fn assert_zero_grad_frees_the_outputs(s: &Stream) {
    let rs_out = LAYER_SHARD * 4;
    assert_eq!(
        signed(s, Phase::ZeroGrad(1), 131_072),
        [(3, -rs_out), (3, -rs_out), (3, -ROOT_SHARD * 4)]
    );
}

/// SHARD_GRAD_OP (`parallel.zero: 2`, `fully_shard(reshard_after_forward=False)`): each layer
/// stays gathered from its forward to its post-backward and the backward gathers nothing
/// ([`Tiny`]); the step starts with every unit resharded, so the forward is FULL_SHARD's less
/// the layers' reshards.
#[test]
fn tiny_shard_grad_op_keeps_layers_gathered() {
    let mut job = tiny("bf16-mixed");
    job["parallel"]["zero"] = json!(2);
    assert_one_micro_batch(&job, true);
}

/// Two micro-batches a step (`grad_accum: 2`): the first micro-batch's backward is the
/// one-micro-batch step's, the second's adds each reduce output into the sharded gradient and
/// frees it ([`Tiny`]); the forwards are alike; only the step's `zero_grad` frees the first
/// micro-batch's outputs.
#[test]
fn tiny_accumulation_reduces_every_micro_batch() {
    let mut job = tiny("bf16-mixed");
    job["grad_accum"] = json!(2);
    let s = stream_of(&job);
    let t = Tiny { kept: false };
    let fwd = t.forward();
    let (first, later) = (
        [fwd.clone(), t.backward(false)].concat(),
        [fwd, t.backward(true)].concat(),
    );
    assert_eq!(signed_in(&s, &STEP, 131_072), [first, later].concat());
    assert_zero_grad_frees_the_outputs(&s);
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
/// 47,448,635,904 B walk; with full checkpointing at b4 × 4096, under SHARD_GRAD_OP, with four
/// micro-batches and under LoRA r 16 on every projection too), and the report carries the
/// allocator's figures.
#[test]
fn llama8b_stream_meets_walk() {
    let mut full = llama8b();
    full["checkpointing"] = json!("full");
    full["batch"] = json!(4);
    let mut zero2 = llama8b();
    zero2["parallel"]["zero"] = json!(2);
    let mut accum = llama8b();
    accum["grad_accum"] = json!(4);
    let mut zero2_accum = zero2.clone();
    zero2_accum["grad_accum"] = json!(4);
    let mut lora = llama8b();
    lora["peft"] = json!({"method": "lora", "rank": 16,
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]});
    let mut zero2_lora = lora.clone();
    zero2_lora["parallel"]["zero"] = json!(2);
    for job in [llama8b(), full, zero2, accum, zero2_accum, lora, zero2_lora] {
        let (stream, walk) = common::stream_steps::stream_and_walk(&job);
        let d = stream as f64 / walk as f64 - 1.0;
        println!("stream {stream} walk {walk} {:+.4} %", d * 100.0);
        assert!(d.abs() < 0.001);
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

/// SHARD_GRAD_OP's buffers at the loss backward, by hand: the root's unsharded bf16 parameters
/// (2,101,354,496 B, above) and every layer's kept unsharded (32 · 436,224,000 =
/// 13,959,168,000 B; the last layer's all-gather output went at the root's post-forward and
/// nothing is prefetched): 16,060,522,496 B beside the two cuBLAS workspaces and the loss's
/// two fp32 gradients. The parameters are sharded as under FULL_SHARD: fp32 shards of
/// ⌈dim0 / 8⌉ rows, 8,030,261,248 · 4 / 8 = 4,015,130,624 B (every dim 0 divisible by 8).
#[test]
fn llama8b_shard_grad_op_keeps_every_layer_at_the_loss() {
    let mut job = llama8b();
    job["parallel"]["zero"] = json!(2);
    let report = common::run_job(job);
    let at = report
        .timeline
        .iter()
        .find(|p| p.label == "loss (log-softmax backward)")
        .unwrap();
    let loss = 2 * 4096 * 128_256 * 4;
    let temporaries = at.by_category.get("temporaries");
    assert_eq!(temporaries, Some(&(16_060_522_496 + 67_108_864 + loss)));
    assert_eq!(report.per_gpu.model_states.parameters, 4_015_130_624);
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

/// The tiny model under LoRA as `scripts/measure_fsdp_cpu.py --lora` runs it: r 8 on q_proj
/// and v_proj, no dropout, the base bf16 beside fp32 adapters.
fn tiny_lora() -> Value {
    let mut job = tiny("bf16-mixed");
    job["peft"] = json!({"method": "lora", "rank": 8, "targets": ["q_proj", "v_proj"],
                         "dropout": 0.0});
    job
}

/// LoRA under FSDP2, bf16-mixed, blocks of at least 128 KiB. A layer's shard is the frozen
/// base's 393,472 elements (bf16, its own all-gather input: no cast) and the adapters'
/// (fp32, cast into the flat input): q_proj's A `[8, 256]` and B `[256, 8]` 4 · 256 and
/// 128 · 8, v_proj's A `[8, 256]` and B `[128, 8]` 4 · 256 and 64 · 8: Σ 3,584, so the
/// all-gather output is (393,472 + 3,584) · 2 · 2 = 1,588,224 and the flat input 7,168 (below
/// the floor); the root's is FULL_SHARD's 8,389,120 with no flat input (nothing cast). The
/// copy-outs are FULL_SHARD's. Backward: no head, norm or embedding gradient (frozen), the
/// adapters' gradients and the layers' reduce-scatters below the floor (3,584 · 2 · 4 =
/// 28,672); the root's post-backward reduces nothing; the embeddings need no gradient, so
/// layer 0's input needs none and its post-backward runs in the final callback after the
/// root's: the root's unsharded parameters freed before layer 0's.
#[test]
fn tiny_lora_gathers_the_base_and_reduces_the_adapters() {
    let s = stream_of(&tiny_lora());
    let ag = (LAYER_SHARD + 3_584) * 2 * 2;
    let root_ag = ROOT_SHARD * 2 * 2;
    let mut fwd = vec![(1, root_ag), (0, BIG), (0, BIG)];
    for held in [root_ag, ag] {
        fwd.extend([(1, ag), (1, -held)]);
        fwd.extend(Tiny::params(1));
        fwd.extend(Tiny::params(-1));
    }
    fwd.extend(Tiny::loss_forward(ag));
    assert_eq!(signed(&s, Phase::Forward(1), 131_072), fwd);
    let mut bwd = vec![(1, ag)];
    bwd.extend(Tiny::loss_backward(0));
    bwd.extend(Tiny::params(1));
    bwd.extend([(1, -ag), (1, ag)]);
    bwd.extend(Tiny::params(-1));
    bwd.extend(Tiny::params(1));
    bwd.extend([(1, -ag), (0, -BIG), (0, -BIG)]);
    bwd.extend(Tiny::params(-1));
    assert_eq!(signed(&s, Phase::Backward(1), 131_072), bwd);
}

/// The tiny job of each CPU run in `validation/cpu-measured-fsdp.json` (`runs`' keys):
/// `scripts/measure_fsdp_cpu.py PRECISION [--no-reshard] [--accum 2]`.
fn cpu_runs() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    for precision in ["bf16-mixed", "fp32"] {
        let base = tiny(precision);
        let mut zero2 = base.clone();
        zero2["parallel"]["zero"] = json!(2);
        let mut accum2 = base.clone();
        accum2["grad_accum"] = json!(2);
        let names: [&'static str; 3] = match precision {
            "fp32" => ["fp32", "fp32 zero2", "fp32 accum2"],
            _ => ["bf16-mixed", "bf16-mixed zero2", "bf16-mixed accum2"],
        };
        out.extend(names.into_iter().zip([base, zero2, accum2]));
    }
    out.push(("bf16-mixed lora", tiny_lora()));
    out
}

/// The measured window: the second step's forwards and backwards (the CPU runs' third).
const STEP: [Phase; 2] = [Phase::Forward(1), Phase::Backward(1)];

fn record() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../validation/cpu-measured-fsdp.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The stream against FSDP2 run on the CPU (gloo, two processes, torch 2.15: rank 0's
/// steady-state forward and backward, `scripts/measure_fsdp_cpu.py`,
/// `validation/cpu-measured-fsdp.json`), sizes and order of every block of at least 128 KiB,
/// FULL_SHARD, SHARD_GRAD_OP and two micro-batches, bf16-mixed and fp32. The record leaves out
/// what the CPU path alone allocates, by the profiler's op stack (the script's `CPU_ONLY`):
/// gloo's own buffers (two of the all-gather output's size per all-gather, one of the input's
/// per reduce-scatter, the latter freed by gloo's worker, at times after FSDP's next
/// allocation: NCCL, on CUDA, writes in place and allocates nothing through the caching
/// allocator) and the per-gradient fp32 casts in `chunk_cat_mixed_dtype` (CUDA casts during the
/// copy-in). The CPU kernels' scratch is left in, each freed right after it is made: with such
/// pairs cancelled on both sides, the sequences are equal.
#[test]
fn cpu_record_matches_the_stream() {
    let record = record();
    for (name, job) in cpu_runs() {
        let measured = record["runs"][name]
            .as_array()
            .unwrap_or_else(|| panic!("{name} measured"))
            .iter()
            .map(|v| v.as_i64().unwrap());
        let s = stream_of(&job);
        let streamed = signed_in(&s, &STEP, 131_072).into_iter().map(|(_, b)| b);
        assert_eq!(lasting(measured), lasting(streamed), "{name}");
    }
}

/// The most bytes allocated at once over a sequence of ±bytes, each block rounded to 512 B as
/// the caching allocator's `allocated_bytes` counts it.
fn peak_over_start(seq: impl IntoIterator<Item = i64>) -> i64 {
    let (mut now, mut peak) = (0i64, 0i64);
    for d in seq {
        let r = (d.abs() + 511) / 512 * 512;
        now += r * d.signum();
        peak = peak.max(now);
    }
    peak
}

/// The peak allocated over the measured window's start (every allocation and free of the
/// forward and backward, the step's micro-batches all) against the stream's over the same
/// phases, within 1 %: the record's `cuda_like_peaks` leave out what gloo's collectives and
/// `chunk_cat_mixed_dtype`'s CPU casts allocate (`CPU_ONLY` in the script, matched by the
/// profiler's op stack; CUDA's path makes neither through the caching allocator).
#[test]
fn cpu_peaks_match_the_stream() {
    let record = record();
    for (name, job) in cpu_runs() {
        let measured = record["cuda_like_peaks"][name]
            .as_i64()
            .unwrap_or_else(|| panic!("{name} peak"));
        let s = stream_of(&job);
        let streamed = peak_over_start(signed_in(&s, &STEP, 0).into_iter().map(|(_, b)| b));
        let d = streamed as f64 / measured as f64 - 1.0;
        println!(
            "{name}: stream {streamed} measured {measured} {:+.3} %",
            d * 100.0
        );
        assert!(d.abs() < 0.01, "{name}");
    }
}

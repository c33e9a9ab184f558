//! Random small Llama-shaped jobs (layers, widths, batch, sequence, precision, optimizer,
//! checkpointing, gradient accumulation, `zero_grad`, QLoRA's 4-bit base weights, DDP or
//! DeepSpeed ZeRO-1/2 ranks, training or generate) under random `PYTORCH_CUDA_ALLOC_CONF`
//! settings:
//!
//! - the step's recorded stream replayed through the allocator model leaves it sound after
//!   every phase (`Allocator::check_invariants`: every free block in its pool's free set and
//!   nothing else there, blocks tiling their segments, free neighbours merged, reserved = the
//!   segments), so the free sets grouped by size (`allocator/free_set.rs`) stay in step with
//!   the blocks through a whole training step, not only through random calls;
//! - the estimate's `per_gpu.allocator` (the stream run straight through the model as it is
//!   made, no event list: `alloc_events::replay::SimSink`) is exactly what the recorded
//!   stream's replay gives.

mod common;

use proptest::prelude::*;
use serde_json::json;
use vramscope_core::allocator::{Allocator, AllocatorConfig};
use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase, Stream};
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

#[derive(Debug, Clone)]
struct Case {
    layers: u64,
    hidden: u64,
    kv_heads: u64,
    batch: u64,
    seq: u64,
    precision: &'static str,
    optimizer: &'static str,
    checkpointing: &'static str,
    infer: bool,
    tied: bool,
    alloc: &'static str,
    grad_accum: u64,
    zero_grad: &'static str,
    /// bitsandbytes 4-bit base weights under LoRA on every projection ("": none).
    qlora: &'static str,
    /// The loss kernel (the chunked ones where there is no autocast).
    loss: &'static str,
    /// Data-parallel replicas (DDP, unquantized weights only).
    dp: u64,
    /// DeepSpeed ZeRO stage (0: none) for a data-parallel job of fp32 or bf16-mixed weights
    /// (unquantized, one micro-batch: `zero.rs`; it takes the place of the QLoRA draw).
    zero: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            1u64..7,
            prop_oneof![Just(256u64), Just(512)],
            prop_oneof![Just(2u64), Just(4)],
        ),
        (
            1u64..5,
            prop_oneof![Just(64u64), Just(300), Just(1024), Just(2048)],
        ),
        (
            prop_oneof![Just("fp32"), Just("bf16"), Just("bf16-mixed")],
            prop_oneof![Just("adamw"), Just("sgd"), Just("adamw-fused")],
            prop_oneof![Just("none"), Just("full"), Just("selective")],
        ),
        (
            any::<bool>(),
            any::<bool>(),
            prop_oneof![Just(1u64), Just(2), Just(3), Just(7)],
            prop_oneof![Just("none"), Just("zeros")],
        ),
        prop_oneof![
            Just(""),
            Just("expandable_segments:True"),
            Just("max_split_size_mb:20"),
            Just("max_split_size_mb:64"),
            Just("roundup_power2_divisions:4"),
            Just("roundup_power2_divisions:[1:4,64:2,>:1],max_split_size_mb:40"),
            Just("expandable_segments:True,roundup_power2_divisions:2"),
        ],
        (
            prop_oneof![Just(""), Just("nf4"), Just("nf4-dq"), Just("fp4")],
            prop_oneof![
                Just("standard"),
                Just("chunked-output"),
                Just("chunked"),
                Just("linear-ce")
            ],
            prop_oneof![Just(1u64), Just(2), Just(8)],
            prop_oneof![Just(0u64), Just(1), Just(2)],
        ),
    )
        .prop_map(
            |(
                (layers, hidden, kv_heads),
                (batch, seq),
                (precision, optimizer, ckpt),
                (infer, tied, grad_accum, zero_grad),
                alloc,
                (qlora, loss, dp, zero),
            )| Case {
                layers,
                hidden,
                kv_heads,
                batch,
                seq,
                precision,
                optimizer,
                checkpointing: ckpt,
                infer,
                tied,
                alloc,
                grad_accum,
                zero_grad,
                qlora,
                loss,
                dp,
                zero,
            },
        )
}

fn job(c: &Case) -> Job {
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": c.hidden, "intermediate_size": c.hidden * 3,
        "num_hidden_layers": c.layers, "num_attention_heads": 4,
        "num_key_value_heads": c.kv_heads, "vocab_size": 8192,
        "max_position_embeddings": 4096, "hidden_act": "silu",
        "tie_word_embeddings": c.tied, "torch_dtype": "bfloat16"
    });
    let mut j = json!({
        "model": {"hf_config": config}, "batch": c.batch, "seq": c.seq,
        "allocator": c.alloc,
    });
    if c.infer {
        j["task"] = json!("infer");
        j["new_tokens"] = json!(8);
    } else {
        j["precision"] = json!(c.precision);
        j["optimizer"] = json!(c.optimizer);
        j["checkpointing"] = json!(c.checkpointing);
        j["grad_accum"] = json!(c.grad_accum);
        j["zero_grad"] = json!(c.zero_grad);
        if c.precision != "bf16-mixed" {
            j["loss"] = json!(c.loss);
        }
        if c.zero > 0 && c.dp > 1 && c.precision != "bf16" {
            j["framework"] = json!("deepspeed");
            j["grad_accum"] = json!(1);
            j["parallel"] = json!({"gpus": c.dp, "dp": c.dp, "zero": c.zero});
        } else if c.qlora.is_empty() {
            j["parallel"] = json!({"dp": c.dp});
        } else {
            j["weights"] = json!(c.qlora);
            j["peft"] = json!({"method": "qlora", "rank": 8, "alpha": 16, "dropout": 0.05,
                "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]});
        }
    }
    serde_json::from_value(j).expect("a valid job")
}

/// Replays `stream` under `conf`, checking the model's invariants at every phase and at the
/// end; the figures the estimate reports of it.
fn replay_checked(stream: &Stream, conf: &str) -> Result<(u64, u64, u64), TestCaseError> {
    let config = AllocatorConfig::parse(conf).expect("a valid setting");
    let mut a = Allocator::new(&config, u64::MAX);
    let mut reset = false;
    // The first phase before which an invariant is broken, and why.
    let mut broken = None;
    common::replay_each(&mut a, stream, |a, e| {
        let Event::Phase(p) = e else { return };
        if let (None, Err(why)) = (&broken, a.check_invariants()) {
            broken = Some((p, why));
        }
        if !reset && matches!(p, Phase::ZeroGrad(0) | Phase::Forward(0)) {
            a.reset_peak();
            reset = true;
        }
    });
    prop_assert_eq!(broken, None, "an invariant broken before a phase");
    prop_assert_eq!(a.check_invariants(), Ok(()), "at the end");
    let s = a.stats();
    Ok((
        s.segments.peak + s.expandable_segments,
        s.largest_free_block,
        s.num_alloc_retries,
    ))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    #[test]
    fn random_jobs_replay_soundly_and_as_estimated(c in case()) {
        let job = job(&c);
        let model = load_job_model(job.model.as_ref().unwrap()).expect("the model");
        let input = model.into_input();
        let resolved = job.resolve(Some(4096)).expect("the job resolves");
        let Some(stream) = step_stream(&input, &resolved).expect("a stream") else {
            return Err(TestCaseError::fail(format!("the stream covers {c:?}")));
        };
        let (segments, largest, retries) = replay_checked(&stream, c.alloc)?;
        let report = estimate(&input.clone(), &resolved).expect("an estimate");
        let a = report.per_gpu.allocator.expect("the allocator figures");
        prop_assert_eq!(a.segments, segments);
        prop_assert_eq!(a.largest_free_block, largest);
        prop_assert_eq!(a.num_alloc_retries, retries);
    }
}

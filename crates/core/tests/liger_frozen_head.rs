//! Liger's fused linear cross-entropy keeps the head weight's gradient only when the head
//! trains (`liger_kernel/ops/fused_linear_cross_entropy.py`,
//! `fused_linear_cross_entropy_forward`: `grad_weight = torch.zeros_like(weight) if
//! weight.requires_grad else None`). Under LoRA the head is frozen unless `modules_to_save`
//! names it.

mod common;

use serde_json::json;
use vramscope_core::estimate::blocks::{sdpa::SdpaStack, Numerics};
use vramscope_core::estimate::stages::{head_trains, loss_chunked};
use vramscope_core::job::TransformersVersion;

/// Pure bf16 (no autocast): parameters, matmul outputs and logits all 2 bytes.
fn bf16() -> Numerics {
    Numerics {
        param: 2,
        compute: 2,
        autocast: false,
        softmax_saves_input: false,
        compile: false,
        sdpa: SdpaStack::default(),
        transformers: TransformersVersion::new(5, 24, 0),
    }
}

fn llama_8b(peft: serde_json::Value) -> serde_json::Value {
    json!({
        "model": "llama-3.1-8b", "precision": "bf16", "optimizer": "adamw",
        "batch": 2, "seq": 2048, "loss": "chunked", "peft": peft
    })
}

/// Llama-3.1-8B (H 4096, V 128,256, untied head) at b2 × 2048, BT = 4096, by hand from
/// Liger's forward:
/// - `grad_input` BT·H·2 = 4096·4096·2 = 33,554,432 B;
/// - `loss_1d` BT·4 = 16,384 B;
/// - labels: `pad(labels, (0, 1))` 2·2049·8 = 32,784 B, rounded up to 512 B = 33,280 B, and
///   the shifted copy 4096·8 = 32,768 B;
/// - `grad_weight` V·H·2 = 128,256·4096·2 = 1,050,673,152 B, only when the head trains.
///
/// Frozen: 33,554,432 + 16,384 + 33,280 + 32,768 = 33,636,864 B saved;
/// trained: 33,636,864 + 1,050,673,152 = 1,084,310,016 B.
/// The forward's transient: ⌈V/H⌉ = 32, ⌈4096/32⌉ = 128 rows, a chunk of logits
/// 128·128,256·2 = 32,833,536 B. A frozen head: two chunks at once, 65,667,072 B. A trained
/// head, Liger 0.6.2 on (`grad_weight += torch.mm(...).float()`): one chunk and the bf16
/// product V·H·2 = 1,050,673,152 with its fp32 copy V·H·4 = 2,101,346,304:
/// 32,833,536 + 3,152,019,456 = 3,184,852,992 B.
#[test]
fn fused_loss_keeps_the_head_gradient_only_when_the_head_trains() {
    let lora = json!({"method": "lora", "rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"]});
    let mut saved_head = lora.clone();
    saved_head["modules_to_save"] = json!(["lm_head"]);
    let cases = [
        (json!(null), true, 1_084_310_016u64, 3_184_852_992u64),
        (lora, false, 33_636_864, 65_667_072),
        (saved_head, true, 1_084_310_016, 3_184_852_992),
    ];
    for (peft, trains, saved, transient) in cases {
        let (input, job) = common::prepared_json(&llama_8b(peft.clone()));
        let spec = input.spec.as_ref().unwrap();
        assert_eq!(head_trains(job.peft.as_ref()), trains, "{peft}");
        let loss = loss_chunked(spec, (job.batch, job.seq), bf16(), trains, true);
        assert_eq!(loss.saved, saved, "{peft}");
        assert_eq!(loss.forward_transient, transient, "{peft}");
    }
}

/// PEFT's `ModulesToSaveWrapper` deep-copies the module it names. A tied head (Llama-3.2-1B:
/// `tie_word_embeddings`) named as `lm_head` gets its own trainable copy of the weight; naming
/// the input embedding copies that module alone, and the head keeps the original, frozen
/// weight.
#[test]
fn a_tied_head_trains_only_when_named() {
    let base = |m: serde_json::Value| {
        json!({"model": "llama-3.2-1b", "precision": "bf16", "batch": 1, "seq": 128,
               "loss": "chunked",
               "peft": {"method": "lora", "rank": 8, "alpha": 16, "targets": ["q_proj"],
                        "modules_to_save": m}})
    };
    for (names, trains) in [
        (json!([]), false),
        (json!(["lm_head"]), true),
        (json!(["base_model.model.lm_head"]), true),
        (json!(["embed_tokens"]), false),
    ] {
        let (_, job) = common::prepared_json(&base(names.clone()));
        assert_eq!(head_trains(job.peft.as_ref()), trains, "{names}");
    }
}

//! `--from`: real training configs (`fixtures/recipes/`, sources in its README) read into job
//! fields. Every expected value below was read off the file by a person (the key it comes from
//! is named in the comment beside it), never copied from the reader's output.

use proptest::prelude::*;
use serde_json::{json, Value};
use vramscope_core::job::Job;
use vramscope_formats::recipes::{resolve, Input, Resolved};

fn fixture(rel: &str) -> Input {
    let path = format!(
        "{}/tests/fixtures/recipes/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    Input {
        name: rel.rsplit('/').next().unwrap().to_string(),
        text: std::fs::read_to_string(&path).expect(&path),
    }
}

/// Resolves fixtures with no file lookup (referenced files must be given).
fn from(files: &[&str]) -> Resolved {
    let inputs: Vec<Input> = files.iter().map(|f| fixture(f)).collect();
    resolve(&inputs, &|_, _| None).unwrap_or_else(|e| panic!("{files:?}: {e}"))
}

fn err(inputs: &[Input]) -> String {
    resolve(inputs, &|_, _| None)
        .expect_err("must be refused")
        .to_string()
}

fn text(name: &str, text: &str) -> Input {
    Input {
        name: name.into(),
        text: text.into(),
    }
}

fn has_note(r: &Resolved, needle: &str) -> bool {
    r.notes.iter().any(|n| n.contains(needle))
}

/// The Llama-style names of every linear layer (axolotl `lora_target_linear: true`,
/// LLaMA-Factory `lora_target: all`), written out here rather than taken from the code.
fn all_linear() -> Vec<&'static str> {
    "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj"
        .split(' ')
        .collect()
}

// ---------- DeepSpeed ----------

#[test]
fn transformers_zero2_leaves_its_autos_to_the_trainer() {
    let r = from(&["deepspeed/transformers_ds_config_zero2.json"]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "framework": "deepspeed",
            // zero_optimization.stage 2, offload_optimizer.device cpu, no offload_param
            "parallel": {"zero": 2, "offload": "optimizer"},
            // optimizer.type AdamW: DeepSpeed builds its FusedAdam
            "optimizer": "adamw-fused",
        })
    );
    // train_micro_batch_size_per_gpu, gradient_accumulation_steps, fp16/bf16 are all "auto".
    for key in [
        "train_micro_batch_size_per_gpu is \"auto\"",
        "gradient_accumulation_steps is \"auto\"",
        "bf16/fp16.enabled is \"auto\"",
    ] {
        assert!(has_note(&r, key), "{key}: {:?}", r.notes);
    }
    // reduce_bucket_size / allgather_bucket_size 2e8: no job field yet, so listed.
    assert!(has_note(
        &r,
        "read but not modelled yet: zero_optimization.reduce_bucket_size"
    ));
    assert!(has_note(
        &r,
        "read but not modelled yet: zero_optimization.allgather_bucket_size"
    ));
}

#[test]
fn transformers_zero3_fp16_offloads_everything() {
    let r = from(&["deepspeed/transformers_ds_config_zero3.json"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "framework": "deepspeed",
            // stage 3; offload_optimizer and offload_param both on device cpu
            "parallel": {"zero": 3, "offload": "optimizer+params"},
            // fp16.enabled true: 16-bit parameters with DeepSpeed's fp32 master copy
            "precision": "fp16-mixed",
            "optimizer": "adamw-fused",
        })
    );
}

#[test]
fn llamafactory_full_sft_resolves_ds_z3_autos() {
    // The recipe names examples/deepspeed/ds_z3_config.json; given beside it, it is read.
    let r = from(&[
        "llama_factory/llama3_full_sft.yaml",
        "deepspeed/ds_z3_config.json",
    ]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "meta-llama/Meta-Llama-3-8B-Instruct", // model_name_or_path
            "seq": 2048,                                     // cutoff_len
            "batch": 1,      // per_device_train_batch_size (fills DeepSpeed's "auto" micro-batch)
            "grad_accum": 2, // gradient_accumulation_steps (fills its "auto")
            "precision": "bf16-mixed", // bf16: true (fills bf16.enabled "auto")
            "checkpointing": "full",   // LLaMA-Factory's default: no disable_gradient_checkpointing
            // LLaMA-Factory checkpoints with {"use_reentrant": use_reentrant_gc}, default True
            // (hparams/model_args.py; model_utils/checkpointing.py): the recipe names neither
            "checkpoint_reentrant": true,
            "framework": "deepspeed",  // deepspeed: ...
            // ds_z3_config.json: stage 3, no offload_* sections
            "parallel": {"zero": 3, "offload": "none"},
        })
    );
    assert!(
        has_note(&r, "is read from ds_z3_config.json"),
        "{:?}",
        r.notes
    );
    assert!(
        !has_note(&r, "is \"auto\" and no other file"),
        "{:?}",
        r.notes
    );
}

#[test]
fn llamafactory_lora_with_the_offload_config() {
    let r = from(&[
        "deepspeed/llamafactory_ds_z3_offload_config.json",
        "llama_factory/llama3_lora_sft.yaml",
    ]);
    let j = Value::Object(r.job);
    assert_eq!(
        j["parallel"],
        json!({"zero": 3, "offload": "optimizer+params"})
    );
    assert_eq!(j["framework"], json!("deepspeed"));
    assert_eq!(j["batch"], json!(1)); // per_device_train_batch_size
    assert_eq!(j["grad_accum"], json!(8)); // gradient_accumulation_steps
    assert_eq!(j["precision"], json!("bf16-mixed")); // bf16: true
                                                     // finetuning_type lora, lora_rank 8, lora_target all
    assert_eq!(
        j["peft"],
        json!({"method": "lora", "rank": 8, "targets": all_linear()})
    );
}

#[test]
fn axolotl_ds_bf16_with_an_axolotl_bf16_auto() {
    // zero3_bf16_cpuoffload_all: bf16.enabled true; the recipe's bf16: auto defers to it.
    let r = from(&[
        "deepspeed/axolotl_zero3_bf16_cpuoffload_all.json",
        "axolotl/llama3_fft-8b.yaml",
    ]);
    let j = Value::Object(r.job);
    assert_eq!(j["precision"], json!("bf16-mixed"));
    assert_eq!(
        j["parallel"],
        json!({"zero": 3, "offload": "optimizer+params"})
    );
    assert_eq!(j["batch"], json!(1)); // micro_batch_size
    assert_eq!(j["grad_accum"], json!(8)); // gradient_accumulation_steps
}

// ---------- accelerate ----------

#[test]
fn accelerate_trl_deepspeed_zero3() {
    let r = from(&["accelerate/trl_deepspeed_zero3.yaml"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "framework": "deepspeed",   // distributed_type: DEEPSPEED
            "parallel": {
                "gpus": 8,              // num_processes: 8 (num_machines: 1)
                "zero": 3,              // deepspeed_config.zero_stage
                "offload": "none",      // offload_optimizer_device / offload_param_device none
            },
            "grad_accum": 1,            // deepspeed_config.gradient_accumulation_steps
            "precision": "fp16-mixed",  // mixed_precision: 'fp16'
        })
    );
}

#[test]
fn accelerate_llamafactory_fsdp_offload() {
    let r = from(&["accelerate/llamafactory_fsdp_config_offload.yaml"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "framework": "fsdp",        // distributed_type: FSDP
            "parallel": {
                "gpus": 2,              // num_processes: 2 ("the number of GPUs in all nodes")
                "zero": 3,              // fsdp_sharding_strategy: FULL_SHARD
                "offload": "optimizer+params", // fsdp_offload_params: true
            },
            "precision": "bf16-mixed",  // mixed_precision: bf16
        })
    );
}

#[test]
fn accelerate_fsdp_template() {
    let r = from(&["accelerate/accelerate_fsdp.yaml"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "framework": "fsdp",
            "parallel": {"gpus": 2, "zero": 3, "offload": "none"}, // fsdp_offload_params: false
            "precision": "bf16-mixed",
            "checkpointing": "none",    // fsdp_activation_checkpointing: false
        })
    );
}

// ---------- axolotl ----------

#[test]
fn axolotl_qlora() {
    let r = from(&["axolotl/llama3_qlora.yml"]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "NousResearch/Meta-Llama-3-8B", // base_model
            "seq": 4096,                             // sequence_len
            "batch": 2,                              // micro_batch_size
            "grad_accum": 4,                         // gradient_accumulation_steps
            // optimizer: paged_adamw_32bit (bitsandbytes PagedAdamW32bit)
            "optimizer": "adamw-paged",
            "checkpointing": "full",                 // gradient_checkpointing: true
            // no gradient_checkpointing_kwargs, unfrozen_parameters or rl: axolotl's
            // normalize_config sets {"use_reentrant": True} (utils/config/__init__.py)
            "checkpoint_reentrant": true,
            "attention": "flash",                    // flash_attention: true
            "packing": true,                         // sample_packing: true
            // adapter: qlora, lora_r 32, lora_alpha 16, lora_dropout 0.05, lora_target_linear: true
            "peft": {"method": "qlora", "rank": 32, "alpha": 16.0, "targets": all_linear(),
                     "dropout": 0.05},
        })
    );
    // load_in_4bit with qlora: the contract's qlora implies nf4-dq.
    let job: Job = serde_json::from_value(Value::Object(r.job.clone())).unwrap();
    assert_eq!(job.resolve(None).unwrap().weights, "nf4-dq");
    assert!(!has_note(&r, "sample_packing"));
    assert!(has_note(
        &r,
        "bf16 is \"auto\" and no other file gives precision"
    ));
    assert!(!r.notes.iter().any(|n| n.contains("paged_adamw_32bit")));
}

#[test]
fn axolotl_lora_8bit() {
    let r = from(&["axolotl/llama3_lora-8b.yml"]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "NousResearch/Meta-Llama-3-8B",
            "weights": "int8",          // load_in_8bit: true
            "seq": 4096,
            "batch": 2,
            "grad_accum": 4,
            "optimizer": "adamw-8bit",  // optimizer: adamw_bnb_8bit
            "checkpointing": "full",
            "checkpoint_reentrant": true, // axolotl's default kwargs, as in the QLoRA recipe
            "attention": "flash",
            "packing": true,            // sample_packing: true
            // adapter: lora, lora_r 32, lora_alpha 16, lora_dropout 0.05, lora_target_linear:
            // true, lora_modules_to_save: [embed_tokens, lm_head]
            "peft": {"method": "lora", "rank": 32, "alpha": 16.0, "targets": all_linear(),
                     "dropout": 0.05, "modules_to_save": ["embed_tokens", "lm_head"]},
        })
    );
    assert!(has_note(&r, "lora_modules_to_save embed_tokens,lm_head"));
}

#[test]
fn axolotl_full_finetune() {
    let r = from(&["axolotl/llama3_fft-8b.yaml"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "model": "meta-llama/Meta-Llama-3-8B",
            "seq": 8192,
            "batch": 1,
            "grad_accum": 8,
            // optimizer: paged_adamw_8bit
            "optimizer": "adamw-8bit-paged",
            "checkpointing": "full",
            "checkpoint_reentrant": false, // gradient_checkpointing_kwargs: use_reentrant: false
            "attention": "flash",
            "packing": true, // sample_packing: true
        })
    );
}

// ---------- LLaMA-Factory ----------

#[test]
fn llamafactory_lora_sft() {
    let r = from(&["llama_factory/llama3_lora_sft.yaml"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "model": "meta-llama/Meta-Llama-3-8B-Instruct",
            "seq": 2048,
            "batch": 1,
            "grad_accum": 8,
            "precision": "bf16-mixed",
            "checkpointing": "full",
            "checkpoint_reentrant": true, // use_reentrant_gc's default True
            "peft": {"method": "lora", "rank": 8, "targets": all_linear()},
        })
    );
}

#[test]
fn llamafactory_qlora_on_the_fly() {
    let r = from(&["llama_factory/llama3_lora_sft_otfq.yaml"]);
    assert_eq!(
        Value::Object(r.job),
        json!({
            "model": "meta-llama/Meta-Llama-3-8B-Instruct",
            // quantization_bit 4, bitsandbytes: nf4 with double quantization (LLaMA-Factory's
            // quantization_type / double_quantization defaults)
            "weights": "nf4-dq",
            "seq": 2048,
            "batch": 1,
            "grad_accum": 8,
            "precision": "bf16-mixed",
            "checkpointing": "full",
            "checkpoint_reentrant": true, // use_reentrant_gc's default True
            // no lora_rank: LLaMA-Factory's default 8
            "peft": {"method": "qlora", "rank": 8, "targets": all_linear()},
        })
    );
}

#[test]
fn a_missing_deepspeed_reference_is_said() {
    let r = from(&["llama_factory/llama3_full_sft.yaml"]);
    assert_eq!(r.job["framework"], json!("deepspeed"));
    assert!(r.job.get("parallel").is_none());
    assert!(
        has_note(&r, "examples/deepspeed/ds_z3_config.json was not found"),
        "{:?}",
        r.notes
    );
}

// ---------- torchtune ----------

#[test]
fn torchtune_lora_single_device() {
    let r = from(&["torchtune/llama3_1_8B_lora_single_device.yaml"]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "llama-3.1-8b",    // model._component_ ...lora_llama3_1_8b
            // lora_attn_modules q_proj, v_proj, output_proj; apply_lora_to_mlp (w1, w2, w3);
            // lora_dropout: 0.0; the adapters in the recipe's dtype: bf16
            "peft": {"method": "lora", "rank": 8, "alpha": 16.0,
                     "targets": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "up_proj"],
                     "dropout": 0.0, "adapter_dtype": "bf16"},
            "batch": 2,                 // batch_size
            "grad_accum": 8,            // gradient_accumulation_steps
            "optimizer": "adamw-fused", // torch.optim.AdamW, fused: True
            "loss": "linear-ce",        // LinearCrossEntropyLoss
            "precision": "bf16",        // dtype: bf16 (torchtune has no fp32 copy)
            "checkpointing": "full",    // enable_activation_checkpointing: True
            "compile": false,           // compile: False
            "activation_offload": "none", // enable_activation_offloading: False
        })
    );
    assert!(has_note(&r, "max_seq_len") || !r.job.contains_key("seq"));
}

#[test]
fn torchtune_full_single_device_with_optimizer_in_backward() {
    let r = from(&["torchtune/llama3_1_8B_full_single_device.yaml"]);
    let j = Value::Object(r.job.clone());
    assert_eq!(j["model"], json!("llama-3.1-8b")); // llama3_1_8b
    assert_eq!(j["batch"], json!(2));
    assert_eq!(j["grad_accum"], json!(1));
    assert_eq!(j["precision"], json!("bf16"));
    assert_eq!(j["checkpointing"], json!("full"));
    assert_eq!(j["loss"], json!("linear-ce")); // LinearCrossEntropyLoss
    assert!(j.get("peft").is_none());
    // bitsandbytes.optim.PagedAdamW8bit
    assert_eq!(j["optimizer"], json!("adamw-8bit-paged"));
    // optimizer_in_bwd: True
    assert_eq!(j["optimizer_in_backward"], json!(true));
    // compile: False, enable_activation_offloading: False: the recipe's word sets the fields.
    assert_eq!(j["compile"], json!(false));
    assert_eq!(j["activation_offload"], json!("none"));
    assert!(!r
        .notes
        .iter()
        .any(|n| n.contains("not modelled yet: optimizer_in_bwd")));
    // The whole file resolves to a job the estimator takes (grad_accum 1 with the hook).
    let job: Job = serde_json::from_value(j).unwrap();
    assert!(job.resolve(None).unwrap().techniques.optimizer_in_backward);
}

/// torchtune's switches as its recipes read them (`recipes/full_finetune_single_device.py`):
/// `enable_activation_offloading: True` → `activation_offload: "cpu"`, `compile: True` →
/// `compile: true`, `optimizer_in_bwd: True` → `optimizer_in_backward: true`; the file's own
/// values laid over the real single-device recipe (later files override earlier ones).
#[test]
fn torchtune_memory_switches() {
    let mut inputs = vec![fixture("torchtune/llama3_1_8B_full_single_device.yaml")];
    inputs.push(text(
        "ladder.yaml",
        "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n\
         enable_activation_offloading: True\ncompile: True\n",
    ));
    let r = resolve(&inputs, &|_, _| None).unwrap();
    let j = Value::Object(r.job.clone());
    assert_eq!(j["activation_offload"], json!("cpu"));
    assert_eq!(j["compile"], json!(true));
    assert_eq!(j["optimizer_in_backward"], json!(true));
    assert_eq!(j["checkpointing"], json!("full"));
    assert!(
        !r.notes.iter().any(|n| n.contains("not modelled yet")
            && (n.contains("offloading") || n.contains("compile"))),
        "{:?}",
        r.notes
    );
    // A later file's `False` turns them off again: stated off is a value, not silence.
    inputs.push(text(
        "off.yaml",
        "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n\
         compile: False\nenable_activation_offloading: False\noptimizer_in_bwd: False\n",
    ));
    let r = resolve(&inputs, &|_, _| None).unwrap();
    let j = Value::Object(r.job.clone());
    assert_eq!(j["compile"], json!(false));
    assert_eq!(j["activation_offload"], json!("none"));
    assert_eq!(j["optimizer_in_backward"], json!(false));
}

#[test]
fn torchtune_qlora_single_device() {
    let r = from(&["torchtune/llama3_1_8B_qlora_single_device.yaml"]);
    assert_eq!(
        Value::Object(r.job.clone()),
        json!({
            "model": "llama-3.1-8b",    // qlora_llama3_1_8b
            // lora_dropout: 0.0; dtype: bf16 (the adapters too)
            "peft": {"method": "qlora", "rank": 8, "alpha": 16.0,
                     "targets": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "down_proj", "up_proj"],
                     "dropout": 0.0, "adapter_dtype": "bf16"},
            "batch": 2,
            "grad_accum": 16,
            "optimizer": "adamw-fused",
            "precision": "bf16",
            "checkpointing": "full",
            "loss": "chunked-output", // loss: torchtune.modules.loss.CEWithChunkedOutputLoss
            "compile": false,           // compile: False
            "activation_offload": "none", // enable_activation_offloading: False
        })
    );
    assert!(!has_note(&r, "not modelled yet: loss"));
}

/// `LinearCrossEntropyLoss` with the settings its class takes (`num_output_chunks`,
/// `mask_ignored_tokens`): 8 chunks and masking are what `loss: linear-ce` models; 16 chunks
/// and no masking are read but listed as not modelled.
#[test]
fn torchtune_linear_ce_settings() {
    let cfg = |extra: &str| {
        text(
            "r.yaml",
            &format!(
                "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n\
                 loss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n{extra}"
            ),
        )
    };
    let plain = resolve(&[cfg("")], &|_, _| None).unwrap();
    assert_eq!(plain.job["loss"], json!("linear-ce"));
    assert!(!has_note(&plain, "not modelled yet: loss"));
    let other = cfg("  num_output_chunks: 16\n  mask_ignored_tokens: False\n");
    let r = resolve(&[other], &|_, _| None).unwrap();
    assert_eq!(r.job["loss"], json!("linear-ce"));
    assert!(has_note(
        &r,
        "loss num_output_chunks 16 (loss: linear-ce (8 chunks))"
    ));
    assert!(has_note(&r, "loss mask_ignored_tokens false"));
}

// ---------- TRL ----------

#[test]
fn trl_grpo_open_r1() {
    let r = from(&["trl/openr1_qwen2.5-1.5b_grpo_config_demo.yaml"]);
    let j = Value::Object(r.job.clone());
    assert_eq!(j["model"], json!("Qwen/Qwen2.5-1.5B-Instruct")); // model_name_or_path
    assert_eq!(j["attention"], json!("flash")); // attn_implementation: flash_attention_2
                                                // torch_dtype: bfloat16 with bf16: true: bf16 weights, so bf16 gradients and states
    assert_eq!(j["precision"], json!("bf16"));
    assert_eq!(j["batch"], json!(16)); // per_device_train_batch_size
    assert_eq!(j["grad_accum"], json!(4)); // gradient_accumulation_steps
    assert_eq!(j["checkpointing"], json!("full")); // gradient_checkpointing: true
                                                   // Read off the file by hand: use_vllm true with vllm_device: auto (TRL ≤ 0.16: vLLM on a
                                                   // GPU of its own, so not colocated), vllm_gpu_memory_utilization 0.7, no beta (0.04 in
                                                   // that TRL: a reference model), num_generations 16, max_prompt_length 512,
                                                   // max_completion_length 1024.
    assert_eq!(j["task"], json!("rl"));
    assert_eq!(
        j["rl"],
        json!({"algorithm": "grpo", "reference_model": true,
               "generator": {"engine": "vllm", "colocate": false, "gpu_memory_utilization": 0.7},
               "num_generations": 16, "prompt_len": 512, "completion_len": 1024})
    );
    assert!(has_note(&r, "beta not set"), "{:?}", r.notes);
    // gradient_checkpointing_kwargs: use_reentrant: false
    assert_eq!(j["checkpoint_reentrant"], json!(false));
    // The job resolves: task rl with these settings is a valid job.
    let job: Job = serde_json::from_value(j.clone()).unwrap();
    assert!(job.resolve(None).is_ok());
}

// ---------- the checkpoint's kind (checkpoint_reentrant) ----------

/// `checkpoint_reentrant` in what `files` resolve to (absent: the job's default, false).
fn kind_of(files: &[Input]) -> Option<Value> {
    let r = resolve(files, &|_, _| None).unwrap_or_else(|e| panic!("{e}"));
    r.job.get("checkpoint_reentrant").cloned()
}

/// What `files` resolve to, checked to set no `checkpoint_reentrant` and to say `note`.
fn no_kind_but_note(files: &[Input], note: &str) -> Resolved {
    let r = resolve(files, &|_, _| None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.job.get("checkpoint_reentrant"), None);
    assert!(has_note(&r, note), "{:?}", r.notes);
    r
}

/// TrainingArguments (transformers 5.24): the Trainer passes `gradient_checkpointing_kwargs or
/// None` to `activation_checkpointing_enable` (`trainer.py` `train()`), and
/// `_activation_checkpointing_enable` makes `None` `{"use_reentrant": False}`
/// (`modeling_utils.py`): no kwargs, or `{}`, is the job's own default and sets nothing. A
/// stated `use_reentrant` is taken; other keys without it reach `torch.utils.checkpoint.
/// checkpoint`, which takes `use_reentrant=True` when it is not passed (torch 2.15,
/// `utils/checkpoint.py` line 645). The kwargs may be JSON text (`_VALID_DICT_FIELDS`).
/// transformers 5.24's own name `activation_checkpointing(_kwargs)` wins over the alias.
#[test]
fn training_arguments_checkpoint_kind() {
    let ta = |extra: &str| {
        text(
            "args.json",
            &format!(r#"{{"output_dir": "o", "gradient_checkpointing": true{extra}}}"#),
        )
    };
    assert_eq!(kind_of(&[ta("")]), None);
    assert_eq!(
        kind_of(&[ta(r#", "gradient_checkpointing_kwargs": {}"#)]),
        None
    );
    let stated = r#", "gradient_checkpointing_kwargs": {"use_reentrant": true}"#;
    assert_eq!(kind_of(&[ta(stated)]), Some(json!(true)));
    let text_form = r#", "gradient_checkpointing_kwargs": "{\"use_reentrant\": true}""#;
    assert_eq!(kind_of(&[ta(text_form)]), Some(json!(true)));
    let torch_default = r#", "gradient_checkpointing_kwargs": {"preserve_rng_state": false}"#;
    assert_eq!(kind_of(&[ta(torch_default)]), Some(json!(true)));
    // every_n_layers and offload are the Trainer's own keys, popped before the call.
    let trainer_only = r#", "gradient_checkpointing_kwargs": {"every_n_layers": 1}"#;
    assert_eq!(kind_of(&[ta(trainer_only)]), None);
    let new_names = r#"{"output_dir": "o", "activation_checkpointing": true,
        "activation_checkpointing_kwargs": {"use_reentrant": true},
        "gradient_checkpointing": false}"#;
    let r = resolve(&[text("args.json", new_names)], &|_, _| None).unwrap();
    assert_eq!(r.job["checkpointing"], json!("full"));
    assert_eq!(r.job["checkpoint_reentrant"], json!(true));
    // A kind beside checkpointing off names nothing the job holds: a note, no field.
    let off = r#"{"output_dir": "o", "gradient_checkpointing": false,
        "gradient_checkpointing_kwargs": {"use_reentrant": true}}"#;
    no_kind_but_note(&[text("args.json", off)], "does not turn checkpointing on");
}

/// TRL v1.9 forces `use_reentrant` True for a PEFT model under DeepSpeed ZeRO-3 with
/// checkpointing (`sft_trainer.py` lines 1099–1116, "forced to `True`"), over the file's false.
/// The SFT config is written here with TRL's own keys; the accelerate file is the real one.
#[test]
fn trl_peft_under_zero3_is_reentrant() {
    let sft = "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_text_field: text\nuse_peft: true\n\
               gradient_checkpointing: true\n\
               gradient_checkpointing_kwargs:\n  use_reentrant: false\n";
    let files = [
        fixture("accelerate/trl_deepspeed_zero3.yaml"),
        text("sft.yaml", sft),
    ];
    let r = resolve(&files, &|_, _| None).unwrap();
    assert_eq!(r.job["checkpoint_reentrant"], json!(true));
    assert!(has_note(&r, "file's false is replaced"), "{:?}", r.notes);
    // Without the adapters TRL leaves the kwargs alone.
    let full = sft.replace("use_peft: true\n", "");
    let files = [
        fixture("accelerate/trl_deepspeed_zero3.yaml"),
        text("sft.yaml", &full),
    ];
    assert_eq!(kind_of(&files), Some(json!(false)));
    // TRL ≥ 0.22 defaults gradient_checkpointing to True (#3510, base_config.py): a file that
    // leaves it out checkpoints, and under ZeRO-3 with PEFT reentrantly.
    let unsaid = "model_name_or_path: m\ndataset_text_field: text\nuse_peft: true\n";
    let files = [
        fixture("accelerate/trl_deepspeed_zero3.yaml"),
        text("sft.yaml", unsaid),
    ];
    let r = resolve(&files, &|_, _| None).unwrap();
    assert_eq!(r.job["checkpointing"], json!("full"));
    assert_eq!(r.job["checkpoint_reentrant"], json!(true));
    let noted = has_note(&r, "TRL ≥ 0.22 defaults it to true");
    assert!(noted, "{:?}", r.notes);
}

/// axolotl's `normalize_config` sets `{"use_reentrant": True}` only with checkpointing on and
/// no kwargs, `unfrozen_parameters` or `rl` (`utils/config/__init__.py`); otherwise its
/// builder passes `{"use_reentrant": False}` (`core/builders/base.py`), the job's default.
#[test]
fn axolotl_checkpoint_kind() {
    let recipe = |extra: &str| {
        text(
            "a.yml",
            &format!("base_model: m\nsequence_len: 512\ngradient_checkpointing: true\n{extra}"),
        )
    };
    assert_eq!(kind_of(&[recipe("")]), Some(json!(true)));
    let offload = text("a.yml", "base_model: m\ngradient_checkpointing: offload\n");
    assert_eq!(kind_of(&[offload]), Some(json!(true)));
    assert_eq!(
        kind_of(&[recipe("unfrozen_parameters: ['^lm_head']\n")]),
        None
    );
    assert_eq!(kind_of(&[recipe("rl: dpo\n")]), None);
    let off = text("a.yml", "base_model: m\ngradient_checkpointing: false\n");
    assert_eq!(kind_of(&[off]), None);
}

/// LLaMA-Factory: `use_reentrant_gc` (default True) is the kind of the checkpointing it turns
/// on itself; `use_unsloth_gc`'s Function runs its forward under `no_grad` (reentrant);
/// `disable_gradient_checkpointing` leaves no kind to name.
#[test]
fn llamafactory_checkpoint_kind() {
    let recipe = |extra: &str| text("lf.yaml", &format!("finetuning_type: lora\n{extra}"));
    assert_eq!(kind_of(&[recipe("")]), Some(json!(true)));
    assert_eq!(
        kind_of(&[recipe("use_reentrant_gc: false\n")]),
        Some(json!(false))
    );
    let unsloth = "use_reentrant_gc: false\nuse_unsloth_gc: true\n";
    assert_eq!(kind_of(&[recipe(unsloth)]), Some(json!(true)));
    assert_eq!(
        kind_of(&[recipe("disable_gradient_checkpointing: true\n")]),
        None
    );
    // A later LLaMA-Factory file turning checkpointing off: the earlier file's kind goes.
    let files = [recipe(""), recipe("disable_gradient_checkpointing: true\n")];
    let r = no_kind_but_note(&files, "checkpoint_reentrant dropped");
    assert_eq!(r.job["checkpointing"], json!("none"));
}

/// torchtune wraps each layer in `checkpoint_wrapper(..., CheckpointImpl.NO_REENTRANT)`
/// (`training/activations.py`): the job's own default, so the real recipes set nothing.
#[test]
fn torchtune_checkpointing_is_the_default_kind() {
    let r = from(&["torchtune/llama3_1_8B_lora_single_device.yaml"]);
    assert_eq!(r.job["checkpointing"], json!("full"));
    assert_eq!(r.job.get("checkpoint_reentrant"), None);
}

// ---------- merging ----------

#[test]
fn contradicting_files_are_an_error_naming_both() {
    // fp16.enabled true against bf16: true.
    let e = err(&[
        fixture("deepspeed/transformers_ds_config_zero3.json"),
        fixture("llama_factory/llama3_lora_sft.yaml"),
    ]);
    assert!(e.contains("transformers_ds_config_zero3.json"), "{e}");
    assert!(e.contains("llama3_lora_sft.yaml"), "{e}");
    assert!(e.contains("precision"), "{e}");
    assert!(!e.contains('\n'));
}

#[test]
fn a_later_file_of_the_same_format_overrides() {
    let r = from(&[
        "deepspeed/transformers_ds_config_zero2.json",
        "deepspeed/transformers_ds_config_zero3.json",
    ]);
    assert_eq!(
        r.job["parallel"],
        json!({"zero": 3, "offload": "optimizer+params"})
    );
    let r = from(&[
        "deepspeed/transformers_ds_config_zero3.json",
        "deepspeed/transformers_ds_config_zero2.json",
    ]);
    assert_eq!(
        r.job["parallel"],
        json!({"zero": 2, "offload": "optimizer"})
    );
}

#[test]
fn a_stated_precision_replaces_accelerates_implied_one() {
    // accelerate says mixed_precision fp16; the LLaMA-Factory recipe states bf16: true.
    let r = from(&[
        "accelerate/trl_deepspeed_zero3.yaml",
        "llama_factory/llama3_lora_sft.yaml",
    ]);
    assert_eq!(r.job["precision"], json!("bf16-mixed"));
    // Likewise accelerate's deepspeed_config.gradient_accumulation_steps 1 against the
    // recipe's gradient_accumulation_steps 8 (the trainer's value reaches DeepSpeed).
    assert_eq!(r.job["grad_accum"], json!(8));
}

#[test]
fn deepspeed_batch_rule() {
    let ds = |t: u64| {
        text(
            "ds.json",
            &format!(
                r#"{{"train_batch_size": {t}, "train_micro_batch_size_per_gpu": 4,
                    "gradient_accumulation_steps": 2, "zero_optimization": {{"stage": 1}}}}"#
            ),
        )
    };
    let acc = |n: u64| {
        text(
            "acc.yaml",
            &format!("distributed_type: DEEPSPEED\nnum_processes: {n}\n"),
        )
    };
    // 4 × 2 × 4 GPUs = 32: consistent.
    let r = resolve(&[ds(32), acc(4)], &|_, _| None).unwrap();
    assert_eq!(r.job["parallel"]["gpus"], json!(4));
    // 4 × 2 × 8 = 64 ≠ 32: DeepSpeed's assertion.
    let e = err(&[ds(32), acc(8)]);
    assert!(e.starts_with("ds.json: train_batch_size 32"), "{e}");
    // No GPU count given: 32 / (4 × 2) = 4 GPUs.
    let r = resolve(&[ds(32)], &|_, _| None).unwrap();
    assert_eq!(r.job["parallel"]["gpus"], json!(4));
}

#[test]
fn a_referenced_file_is_fetched() {
    let ds = fixture("deepspeed/ds_z3_config.json");
    let seen = std::cell::RefCell::new(Vec::new());
    let fetch = |by: &str, path: &str| {
        seen.borrow_mut().push((by.to_string(), path.to_string()));
        Some(Ok(Input {
            name: path.to_string(),
            text: ds.text.clone(),
        }))
    };
    let r = resolve(&[fixture("llama_factory/llama3_full_sft.yaml")], &fetch).unwrap();
    assert_eq!(
        seen.into_inner(),
        vec![(
            "llama3_full_sft.yaml".to_string(),
            "examples/deepspeed/ds_z3_config.json".to_string()
        )]
    );
    assert_eq!(r.job["parallel"]["zero"], json!(3));
}

#[test]
fn each_file_gets_a_provenance_line_and_unknown_keys_are_listed() {
    let r = from(&["accelerate/trl_deepspeed_zero3.yaml"]);
    assert!(
        r.notes[0].starts_with("from trl_deepspeed_zero3.yaml (accelerate config): "),
        "{:?}",
        r.notes
    );
    let r = resolve(
        &[text(
            "t.yaml",
            "per_device_train_batch_size: 2\nfrobnicate: 3\n",
        )],
        &|_, _| None,
    )
    .unwrap();
    assert!(
        has_note(
            &r,
            "ignored (no bearing on the estimate, or not known): frobnicate"
        ),
        "{:?}",
        r.notes
    );
}

// ---------- hostile input ----------

#[test]
fn bad_input_is_one_line_naming_the_file() {
    let cases = [
        ("a.json", "{\"train_batch_size\": "),
        ("b.yaml", "- just\n- a list\n"),
        ("c.yaml", ""),
        ("d.yaml", "hello: world\n"),
        ("e.yaml", "micro_batch_size: two\nbase_model: x\n"),
        ("f.json", "{\"zero_optimization\": {\"stage\": 7}}"),
        ("g.yaml", "base_model: x\nbf16: true\nfp16: true\n"),
        ("h.json", "{\"zero_optimization\": 3}"),
        (
            "i.yaml",
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HALF_SHARD\n",
        ),
        ("j.yaml", "base_model: [1, 2]\n"),
        ("k.yaml", "a: &x [*x]\n"),
    ];
    for (name, body) in cases {
        let e = err(&[text(name, body)]);
        assert!(e.starts_with(name), "{name}: {e}");
        assert!(!e.contains('\n'), "{name}: {e}");
    }
    // A value the job's validator refuses is named with its file and key.
    let e = err(&[text("z.yaml", "base_model: x\nmicro_batch_size: 0\n")]);
    assert!(e.starts_with("z.yaml: micro_batch_size"), "{e}");
}

#[test]
fn a_yaml_alias_bomb_is_refused() {
    let mut s = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
    for i in 0..12 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        s.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    s.push_str("base_model: x\n");
    let e = err(&[text("bomb.yaml", &s)]);
    assert!(e.starts_with("bomb.yaml"), "{e}");
}

proptest! {
    /// Any text, read as any config: an answer or an error, never a panic.
    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,300}") {
        let _ = resolve(&[text("x", &s)], &|_, _| None);
    }

    /// Known keys of every format with arbitrary values: an answer or a one-line error.
    #[test]
    fn known_keys_with_any_values_never_panic(
        picks in proptest::collection::vec((0usize..KEYS.len(), 0usize..VALUES.len()), 1..12)
    ) {
        let mut body = String::new();
        for (k, v) in picks {
            body.push_str(&format!("{}: {}\n", KEYS[k], VALUES[v]));
        }
        if let Err(e) = resolve(&[text("p.yaml", &body)], &|_, _| Some(Err("no".into()))) {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }
}

proptest! {
    /// A torchtune recipe's memory switches, each stated on or off in any YAML spelling
    /// (`True`, `false`, `yes`, ...) or left out, over two files: the job's field is the last
    /// file's stated value (`compile` → true/false, `enable_activation_offloading` →
    /// "cpu"/"none", `optimizer_in_bwd` → true/false), absent only when no file states it.
    #[test]
    fn torchtune_switches_stated_on_or_off_set_the_field(
        states in proptest::collection::vec(
            (proptest::option::of(any::<bool>()), 0usize..3), 6..=6),
    ) {
        const KEYS: [&str; 3] = ["compile", "enable_activation_offloading", "optimizer_in_bwd"];
        const SPELLINGS: [[&str; 2]; 3] = [["False", "True"], ["false", "true"], ["no", "yes"]];
        let model = "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n";
        let mut inputs = Vec::new();
        for file in states.chunks(3) {
            let mut body = model.to_string();
            for (key, (state, spelling)) in KEYS.iter().zip(file) {
                if let Some(on) = state {
                    body.push_str(&format!("{key}: {}\n", SPELLINGS[*spelling][usize::from(*on)]));
                }
            }
            inputs.push(text(&format!("f{}.yaml", inputs.len()), &body));
        }
        let r = resolve(&inputs, &|_, _| None).unwrap();
        let fields = ["compile", "activation_offload", "optimizer_in_backward"];
        for (i, field) in fields.iter().enumerate() {
            let last = [states[3 + i].0, states[i].0].into_iter().flatten().next();
            let want = last.map(|on| match (i, on) {
                (1, true) => json!("cpu"),
                (1, false) => json!("none"),
                (_, on) => json!(on),
            });
            prop_assert_eq!(r.job.get(*field).cloned(), want, "{}", field);
        }
    }
}

const KEYS: &[&str] = &[
    "zero_optimization",
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
    "optimizer",
    "distributed_type",
    "num_processes",
    "mixed_precision",
    "fsdp_config",
    "deepspeed_config",
    "base_model",
    "micro_batch_size",
    "sequence_len",
    "adapter",
    "lora_r",
    "lora_target_modules",
    "load_in_4bit",
    "model_name_or_path",
    "finetuning_type",
    "cutoff_len",
    "quantization_bit",
    "lora_target",
    "model",
    "batch_size",
    "dtype",
    "optimizer_in_bwd",
    "compile",
    "num_generations",
    "use_vllm",
    "max_prompt_length",
    "max_completion_length",
    "optim",
    "per_device_train_batch_size",
    "deepspeed",
    "fsdp",
    "torch_dtype",
    "gradient_checkpointing",
    "beta",
    "packing",
    "stage",
];

const VALUES: &[&str] = &[
    "1",
    "0",
    "-3",
    "1e400",
    "2.5",
    "auto",
    "true",
    "false",
    "null",
    "\"x\"",
    "[]",
    "[1, a]",
    "{}",
    "{stage: 3}",
    "{_component_: torch.optim.AdamW, fused: true}",
    "{enabled: auto}",
    "{offload_optimizer: {device: cpu}, stage: 9}",
    "FULL_SHARD",
    "paged_adamw_8bit",
    "{fsdp_sharding_strategy: 2, fsdp_offload_params: yes}",
    "ds.json",
    "full_shard offload",
    "18446744073709551616",
    "{zero_stage: 3, deepspeed_config_file: x.json}",
];

// ---------- TrainingArguments and detection ----------

/// TrainingArguments as JSON (as `TrainingArguments.to_json_string()` writes it) and as YAML:
/// `optim` names to the contract's optimizers (transformers' `OptimizerNames`).
#[test]
fn training_arguments_optim_names() {
    let cases = [
        ("adamw_torch", "adamw"),
        ("adamw_torch_fused", "adamw-fused"),
        ("adamw_bnb_8bit", "adamw-8bit"),
        ("adafactor", "adafactor"),
        ("sgd", "sgd"),
    ];
    for (optim, want) in cases {
        let json_text = format!(
            r#"{{"output_dir": "out", "per_device_train_batch_size": 4,
                "gradient_accumulation_steps": 2, "bf16": true, "fp16": false,
                "optim": "{optim}", "gradient_checkpointing": true}}"#
        );
        let r = resolve(&[text("args.json", &json_text)], &|_, _| None).unwrap();
        assert_eq!(
            Value::Object(r.job),
            json!({"batch": 4, "grad_accum": 2, "precision": "bf16-mixed",
                   "optimizer": want, "checkpointing": "full"}),
            "{optim}"
        );
        assert!(r.notes[0].contains("(TrainingArguments)"), "{:?}", r.notes);
    }
    // paged_adamw_8bit / paged_adamw_32bit: bitsandbytes' paged optimizers.
    let r = resolve(&[text("a.yaml", "optim: paged_adamw_8bit\n")], &|_, _| None).unwrap();
    assert_eq!(r.job["optimizer"], json!("adamw-8bit-paged"));
    let r = resolve(&[text("a.yaml", "optim: paged_adamw_32bit\n")], &|_, _| {
        None
    })
    .unwrap();
    assert_eq!(r.job["optimizer"], json!("adamw-paged"));
    // An optim vramscope has no value for is listed, not dropped.
    let r = resolve(&[text("a.yaml", "optim: galore_adamw\n")], &|_, _| None).unwrap();
    assert!(r.job.get("optimizer").is_none());
    assert!(has_note(
        &r,
        "read but not modelled yet: optim galore_adamw (optimizer)"
    ));
}

/// TrainingArguments' `fsdp` string: "full_shard auto_wrap offload" is FSDP FULL_SHARD with CPU
/// offload; `fsdp_config.activation_checkpointing`.
#[test]
fn training_arguments_fsdp() {
    let y = "per_device_train_batch_size: 1\nfsdp: full_shard auto_wrap offload\n\
             fsdp_config:\n  activation_checkpointing: true\n";
    let r = resolve(&[text("args.yaml", y)], &|_, _| None).unwrap();
    assert_eq!(
        Value::Object(r.job),
        json!({"batch": 1, "framework": "fsdp", "checkpointing": "full",
               "parallel": {"zero": 3, "offload": "optimizer+params"}})
    );
}

/// The format is read from the keys, not the name: a DeepSpeed config named `train.yaml`, an
/// accelerate config named `ds.json`.
#[test]
fn detection_is_by_content() {
    let ds = fixture("deepspeed/transformers_ds_config_zero3.json");
    let acc = fixture("accelerate/accelerate_fsdp.yaml");
    let r = resolve(
        &[
            Input {
                name: "train.yaml".into(),
                text: ds.text,
            },
            Input {
                name: "ds.json".into(),
                text: acc.text,
            },
        ],
        &|_, _| None,
    );
    // The two disagree on the framework (deepspeed against FSDP): refused, naming both.
    let e = r.expect_err("deepspeed vs fsdp").to_string();
    assert!(e.contains("train.yaml and ds.json: framework"), "{e}");
    let r = resolve(
        &[Input {
            name: "ds.json".into(),
            text: fixture("accelerate/accelerate_fsdp.yaml").text,
        }],
        &|_, _| None,
    )
    .unwrap();
    assert!(
        r.notes[0].starts_with("from ds.json (accelerate config)"),
        "{:?}",
        r.notes
    );
}

/// Deep nesting (JSON and YAML, flow and block) is refused by the parsers' depth limits, not a
/// stack overflow; a duplicated key is an answer or an error, never a panic.
#[test]
fn deep_nesting_is_an_error() {
    let n = 100_000;
    let json_text = format!(
        "{{\"train_batch_size\": {}{}}}",
        "[".repeat(n),
        "]".repeat(n)
    );
    let yaml_flow = format!("base_model: {}{}\n", "[".repeat(n), "]".repeat(n));
    let mut yaml_block = String::new();
    for i in 0..1_000 {
        yaml_block.push_str(&" ".repeat(i));
        yaml_block.push_str("a:\n");
    }
    for (name, body) in [
        ("d.json", json_text),
        ("d.yaml", yaml_flow),
        ("b.yaml", yaml_block),
    ] {
        let e = err(&[text(name, &body)]);
        assert!(e.starts_with(name), "{e}");
        assert!(!e.contains('\n'));
    }
    let _ = resolve(
        &[text("dup.yaml", "base_model: a\nbase_model: b\n")],
        &|_, _| None,
    );
    // A plain scalar's apostrophe does not hide the brackets after it.
    let sneaky = format!("base_model: don't\nx: {}{}\n", "[".repeat(n), "]".repeat(n));
    let e = err(&[text("s.yaml", &sneaky)]);
    assert!(e.contains("nested deeper than 64"), "{e}");
    // Brackets inside quoted scalars and comments are text.
    let quoted = format!(
        "base_model: x\nnote: '{}'\n# {}\n",
        "[".repeat(100),
        "{".repeat(100)
    );
    assert!(resolve(&[text("q.yaml", &quoted)], &|_, _| None).is_ok());
}

/// Issue #35: apostrophes YAML reads as plain text (`-'`, `a '`, `a,'`) made the bracket scan
/// take what followed as quoted, and libyaml's scanner, working depth × tokens, took 26 s on
/// 200 kB. Each is refused within 5 s (about 10 ms here), and a recipe of a few kB whose chat
/// template holds a thousand braces still reads.
#[test]
fn plain_scalar_apostrophes_do_not_let_deep_flow_through() {
    let d = 100_000;
    let deep = format!("{}{}", "[".repeat(d), "]".repeat(d));
    for lead in ["zzz: -'", "zzz: a '", "zzz: a,'", "zzz: -\""] {
        // Deep: refused unparsed. Wide (one level, 100,000 items): parsed, linear, and no
        // recipe.
        for (body, says) in [
            (format!("{lead}\nyyy: {deep}\n"), "q.yaml: invalid YAML"),
            (
                format!("{lead}\nyyy: [{}]\n", "a,".repeat(d)),
                "q.yaml: not a config",
            ),
        ] {
            let t = std::time::Instant::now();
            let e = err(&[text("q.yaml", &body)]);
            assert!(t.elapsed() < std::time::Duration::from_secs(5), "{lead}");
            assert!(e.starts_with(says), "{lead}: {e}");
            assert!(!e.contains('\n'));
        }
    }
    // Past the depth the bracket scan allows, but under the bytes × brackets budget: 4,096
    // brackets in 8 kB. libyaml's recursion limit refuses it, quickly.
    let d = 4_096;
    let body = format!("zzz: -'\nyyy: {}{}\n", "[".repeat(d), "]".repeat(d));
    let t = std::time::Instant::now();
    let e = err(&[text("r.yaml", &body)]);
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{e}");
    // A chat template's brackets (quoted: 600 `{{` and `[`, 1,800 in all) in a 14 kB recipe
    // are text: 1,800 × 14 kB is under the budget.
    let template = "{{ message['content'] }}".repeat(600);
    let recipe = format!("base_model: x\nchat_template: \"{template}\"\n");
    assert!(recipe.len() > 14_000);
    let r = resolve(&[text("c.yaml", &recipe)], &|_, _| None);
    assert!(r.is_ok(), "{:?}", r.err());
}

/// accelerate's `deepspeed_config.deepspeed_config_file` is read through the caller's lookup,
/// with the accelerate file's name, right after it.
#[test]
fn accelerate_names_a_deepspeed_file() {
    let acc = "distributed_type: DEEPSPEED\nnum_processes: 4\nmixed_precision: bf16\n\
               deepspeed_config:\n  deepspeed_config_file: configs/zero3.json\n";
    let ds = fixture("deepspeed/transformers_ds_config_zero3.json");
    let fetch = |by: &str, path: &str| {
        assert_eq!((by, path), ("acc.yaml", "configs/zero3.json"));
        Some(Ok(Input {
            name: "configs/zero3.json".into(),
            text: ds.text.clone(),
        }))
    };
    let r = resolve(&[text("acc.yaml", acc)], &fetch).unwrap();
    // zero3.json: stage 3, both offloads, fp16.enabled true — which the stated fp16 of the
    // DeepSpeed file sets over accelerate's implied mixed_precision bf16.
    assert_eq!(
        r.job["parallel"],
        json!({"gpus": 4, "zero": 3, "offload": "optimizer+params"})
    );
    assert_eq!(r.job["precision"], json!("fp16-mixed"));
    assert!(
        has_note(
            &r,
            "deepspeed_config.deepspeed_config_file: read configs/zero3.json"
        ),
        "{:?}",
        r.notes
    );
    // A lookup that fails is an error naming the file that refers to it.
    let e = resolve(&[text("acc.yaml", acc)], &|_, _| {
        Some(Err("permission denied".into()))
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("acc.yaml: deepspeed_config.deepspeed_config_file: permission denied"),
        "{e}"
    );
}

/// A TRL DPO config (written here, keys as `dpo_config.py` names them): `max_length` is prompt
/// and completion together, so max_prompt_length 256 and max_length 768 make prompt_len 256 and
/// completion_len 768 − 256 = 512; `precompute_ref_log_probs: true` drops the reference model.
#[test]
fn trl_dpo_maps_lengths_onto_rl() {
    let text = "model_name_or_path: gpt2\nbeta: 0.1\nmax_prompt_length: 256\nmax_length: 768\n\
                precompute_ref_log_probs: true\nper_device_train_batch_size: 2\n";
    let input = vramscope_formats::recipes::Input {
        name: "dpo.yaml".into(),
        text: text.into(),
    };
    let r = vramscope_formats::recipes::resolve(&[input], &|_, _| None).unwrap();
    assert_eq!(r.job["task"], json!("rl"));
    assert_eq!(
        r.job["rl"],
        json!({"algorithm": "dpo", "reference_model": false,
               "prompt_len": 256, "completion_len": 512})
    );
    assert!(!r.job.contains_key("seq"));
    let job: Job = serde_json::from_value(Value::Object(r.job)).unwrap();
    assert_eq!(job.resolve(None).unwrap().seq, 768);
}

/// `optim: adamw_hf` names transformers 4.x's own AdamW (`transformers/optimization.py`):
/// the job's `optimizer_impl: "hf"`.
#[test]
fn training_arguments_adamw_hf_is_the_hf_implementation() {
    let r = resolve(
        &[text(
            "args.json",
            r#"{"output_dir": "out", "per_device_train_batch_size": 4, "optim": "adamw_hf"}"#,
        )],
        &|_, _| None,
    )
    .unwrap();
    assert_eq!(r.job["optimizer"], json!("adamw"));
    assert_eq!(r.job["optimizer_impl"], json!("hf"));
    let r = resolve(
        &[text(
            "args.json",
            r#"{"output_dir": "out", "per_device_train_batch_size": 4, "optim": "adamw_torch"}"#,
        )],
        &|_, _| None,
    )
    .unwrap();
    assert!(!r.job.contains_key("optimizer_impl"));
}

// ---------- the adapters' dtype and dropout ----------

/// axolotl's `peft_autocast_adapter_dtype: false` (passed to `get_peft_model` by
/// `axolotl/loaders/adapter.py`): over a bf16 base PEFT leaves the adapters in bf16; over an
/// 8-bit base (`load_in_8bit: true`, an int8 weight) they stay fp32, with a note; without the
/// key PEFT's default (nothing echoed).
#[test]
fn axolotl_adapters_without_autocast() {
    let one = |body: &str| {
        let head = "base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nlora_r: 16\n\
                    lora_dropout: 0.1\nlora_target_linear: true\n";
        resolve(&[text("a.yml", &format!("{head}{body}"))], &|_, _| None).unwrap()
    };
    let r = one("bf16: true\npeft_autocast_adapter_dtype: false\n");
    assert_eq!(r.job["peft"]["adapter_dtype"], json!("bf16"));
    assert_eq!(r.job["peft"]["dropout"], json!(0.1));
    let r = one("fp16: true\npeft_autocast_adapter_dtype: false\n");
    assert_eq!(r.job["peft"]["adapter_dtype"], json!("fp16"));
    let r = one("bf16: true\nload_in_8bit: true\npeft_autocast_adapter_dtype: false\n");
    assert!(r.job["peft"].get("adapter_dtype").is_none());
    assert!(has_note(&r, "PEFT keeps the adapters in fp32"));
    let r = one("bf16: true\n");
    assert!(r.job["peft"].get("adapter_dtype").is_none());
}

/// LLaMA-Factory's `lora_dropout` when stated (its examples leave it out).
#[test]
fn llamafactory_lora_dropout() {
    let body = "model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct\nstage: sft\n\
                finetuning_type: lora\nlora_target: all\nlora_dropout: 0.1\npure_bf16: true\n";
    let r = resolve(&[text("lf.yaml", body)], &|_, _| None).unwrap();
    assert_eq!(r.job["peft"]["dropout"], json!(0.1));
    // pure_bf16 does not change PEFT's fp32 adapters (init_adapter's get_peft_model).
    assert!(r.job["peft"].get("adapter_dtype").is_none());
}

/// A torchtune recipe in fp32 keeps PEFT-like fp32 adapters (nothing echoed); a dropout that
/// is no probability is refused when the job resolves, naming the field.
#[test]
fn torchtune_fp32_recipe_and_bad_dropout() {
    let body = |dtype: &str, dropout: &str| {
        format!(
            "model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  \
             lora_attn_modules: ['q_proj', 'v_proj']\n  lora_rank: 8\n  lora_alpha: 16\n  \
             lora_dropout: {dropout}\ndtype: {dtype}\n"
        )
    };
    let r = resolve(&[text("tt.yaml", &body("fp32", "0.0"))], &|_, _| None).unwrap();
    assert!(r.job["peft"].get("adapter_dtype").is_none());
    assert_eq!(r.job["peft"]["dropout"], json!(0.0));
    let e = err(&[text("tt.yaml", &body("bf16", "1.5"))]);
    assert!(e.contains("dropout"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

// ---------- launch scripts ----------

/// A launch script's `PYTORCH_ALLOC_CONF` (written as torchtitan's `run_train.sh` prefixes it to
/// `torchrun`) becomes the job's `allocator` beside a recipe's fields; the script's other lines
/// set nothing.
#[test]
fn launch_script_sets_the_allocator_beside_a_recipe() {
    let script = text(
        "run_train.sh",
        "#!/usr/bin/bash\nset -ex\nNGPU=${NGPU:-\"8\"}\n\
         PYTORCH_ALLOC_CONF=\"expandable_segments:True\" \\\n\
         torchrun --nproc_per_node=${NGPU} -m torchtitan.train \"$@\"\n",
    );
    let recipe = fixture("torchtune/llama3_1_8B_full_single_device.yaml");
    let r = resolve(&[recipe, script], &|_, _| None).unwrap();
    assert_eq!(r.job["allocator"], json!("expandable_segments:True"));
    // The torchtune recipe still sets its own fields (batch_size: 2 in the file).
    assert_eq!(r.job["batch"], json!(2));
    assert!(has_note(&r, "launch script"), "{:?}", r.notes);
    let job: Job = serde_json::from_value(Value::Object(r.job)).unwrap();
    assert!(job.resolve(None).unwrap().allocator.expandable_segments);
}

/// A script whose variable holds a value PyTorch refuses is an error naming the file and key.
#[test]
fn launch_script_with_a_bad_allocator_value_is_refused() {
    let script = text(
        "train.sh",
        "#!/bin/sh\nexport PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:5\n",
    );
    let e = err(&[script]);
    assert!(
        e.contains("train.sh") && e.contains("PYTORCH_CUDA_ALLOC_CONF"),
        "{e}"
    );
}

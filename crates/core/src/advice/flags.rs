//! A change of job as the CLI flags that make it and as the job fields it changes.

use crate::estimate::quant::WeightFormat;
use crate::job::{PeftMethod, ResolvedJob};
use serde_json::{Map, Value};

/// The job fields that differ from `base` to `to`, with their new values (the contract's
/// field names; `parallel` and `engine` whole).
pub fn changes(base: &ResolvedJob, to: &ResolvedJob) -> Map<String, Value> {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::to_value(base), serde_json::to_value(to))
    else {
        return Map::new();
    };
    b.into_iter().filter(|(k, v)| a.get(k) != Some(v)).collect()
}

fn push(out: &mut Vec<String>, flag: &str, value: impl ToString) {
    out.push(flag.to_string());
    out.push(value.to_string());
}

/// The flags to add to the job's command line (later flags override earlier ones) that turn
/// `base` into `to`.
pub fn flags(base: &ResolvedJob, to: &ResolvedJob) -> Vec<String> {
    let mut out = Vec::new();
    if base.precision != to.precision {
        push(&mut out, "--precision", to.precision.as_str());
    }
    if base.optimizer != to.optimizer {
        push(&mut out, "--optimizer", to.optimizer.as_str());
    }
    if base.peft != to.peft {
        peft_flags(&mut out, base, to);
    }
    let implied_weights = to
        .peft
        .as_ref()
        .is_some_and(|p| p.method == PeftMethod::Qlora)
        && to.weights.value == WeightFormat::Nf4Dq;
    if base.weights != to.weights && !implied_weights {
        push(&mut out, "--weights", to.weights.as_str());
    }
    if base.checkpointing != to.checkpointing {
        push(&mut out, "--checkpointing", to.checkpointing.as_str());
    }
    if base.attention != to.attention {
        push(&mut out, "--attention", to.attention.as_str());
    }
    if base.loss != to.loss {
        push(&mut out, "--loss", to.loss.as_str());
    }
    if base.batch != to.batch {
        push(&mut out, "--batch", to.batch);
    }
    if base.grad_accum != to.grad_accum {
        push(&mut out, "--grad-accum", to.grad_accum);
    }
    if base.seq != to.seq {
        push(&mut out, "--seq", to.seq);
    }
    if base.kv_dtype != to.kv_dtype {
        push(
            &mut out,
            "--kv-dtype",
            to.kv_dtype.as_ref().map_or("null", |k| k.as_str()),
        );
    }
    if base.framework != to.framework {
        push(&mut out, "--framework", to.framework.as_str());
    }
    if base.allocator != to.allocator {
        push(&mut out, "--alloc-conf", to.allocator.to_conf_string());
    }
    parallel_flags(&mut out, base, to);
    engine_flags(&mut out, base, to);
    out
}

/// The environment the changed job must run with, beside its flags: the caching allocator's
/// settings are `PYTORCH_CUDA_ALLOC_CONF`, read by PyTorch at start-up, not a flag of the
/// user's script (`--alloc-conf` only tells vramscope).
pub fn env(base: &ResolvedJob, to: &ResolvedJob) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    if base.allocator != to.allocator {
        out.insert(
            "PYTORCH_CUDA_ALLOC_CONF".to_string(),
            to.allocator.to_conf_string(),
        );
    }
    out
}

fn peft_flags(out: &mut Vec<String>, base: &ResolvedJob, to: &ResolvedJob) {
    let Some(p) = &to.peft else { return };
    let flag = match p.method {
        PeftMethod::Lora => "--lora",
        PeftMethod::Qlora => "--qlora",
    };
    push(out, flag, p.rank);
    let default_alpha = 2.0 * p.rank as f64;
    if p.alpha != default_alpha {
        push(out, "--lora-alpha", p.alpha);
    }
    let default_targets = ["q_proj", "k_proj", "v_proj", "o_proj"];
    let same_as_base = base.peft.as_ref().is_some_and(|b| b.targets == p.targets);
    if p.targets != default_targets && !same_as_base {
        push(out, "--lora-targets", p.targets.join(","));
    }
}

fn parallel_flags(out: &mut Vec<String>, base: &ResolvedJob, to: &ResolvedJob) {
    let (a, b) = (&base.parallel, &to.parallel);
    if a.tp != b.tp || a.gpus != b.gpus {
        // With --gpus beside it, dp is derived again from the new degrees.
        push(out, "--gpus", b.gpus);
    }
    if a.tp != b.tp {
        push(out, "--tp", b.tp);
    }
    if a.zero != b.zero {
        push(out, "--zero", b.zero);
    }
    if a.offload != b.offload {
        push(out, "--offload", b.offload.as_str());
    }
}

fn engine_flags(out: &mut Vec<String>, base: &ResolvedJob, to: &ResolvedJob) {
    for (key, flag) in [
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("max_model_len", "--max-model-len"),
        ("n_gpu_layers", "--n-gpu-layers"),
        ("mem_fraction_static", "--mem-fraction-static"),
        // SGLang's context_length and ollama's num_ctx: the CLI's --max-model-len.
        ("context_length", "--max-model-len"),
        ("num_ctx", "--max-model-len"),
    ] {
        let new = to.engine.get(key);
        if new != base.engine.get(key) {
            if let Some(v) = new {
                push(out, flag, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;
    use serde_json::json;

    fn job(v: serde_json::Value) -> ResolvedJob {
        serde_json::from_value::<Job>(v)
            .unwrap()
            .resolve(None)
            .unwrap()
    }

    /// QLoRA's nf4-dq is implied by --qlora (the CLI's help), so it is not repeated; a new GPU
    /// count carries --gpus so dp is derived again; engine settings get their own flags.
    #[test]
    fn flags_are_what_the_cli_reads() {
        let base = job(json!({}));
        let q = job(json!({"peft": {"method": "qlora", "rank": 16}}));
        assert_eq!(flags(&base, &q), ["--qlora", "16"]);
        let tp = job(json!({"framework": "megatron", "parallel": {"gpus": 8, "tp": 8}}));
        let base8 = job(json!({"parallel": {"gpus": 8}}));
        assert_eq!(
            flags(&base8, &tp),
            ["--framework", "megatron", "--gpus", "8", "--tp", "8"]
        );
        let v = job(json!({"task": "infer", "framework": "vllm"}));
        let w = job(json!({"task": "infer", "framework": "vllm",
                           "engine": {"max_model_len": 2048}, "kv_dtype": "fp8"}));
        assert_eq!(
            flags(&v, &w),
            ["--kv-dtype", "fp8", "--max-model-len", "2048"]
        );
        let c = changes(&v, &w);
        assert_eq!(c.len(), 2);
        assert_eq!(c["kv_dtype"], json!("fp8"));
        assert_eq!(c["engine"], json!({"max_model_len": 2048}));
    }
}

//! What the job is, in one line of parts: the shape of the step, precision and technique, the
//! engine, the parallel layout and the GPU.

use vramscope_core::job::{Checkpointing, Optimizer, ResolvedJob, Task};

/// One line (wrapped) saying what the job is, defaults included where they matter.
pub fn job_summary(j: &ResolvedJob) -> String {
    let mut parts = vec![j.task.as_str().to_string(), shape(j)];
    if j.grad_accum > 1 {
        parts.push(format!("grad accum {}", j.grad_accum));
    }
    parts.push(j.precision.as_str().to_string());
    if let Some(rl) = &j.rl {
        parts.push(rl_summary(rl));
    }
    if j.task != Task::Infer && j.optimizer != Optimizer::None {
        parts.push(j.optimizer.as_str().to_string());
    }
    if j.checkpointing != Checkpointing::None {
        parts.push(format!("{} checkpointing", j.checkpointing.as_str()));
    }
    parts.push(format!("{} attention", j.attention.as_str()));
    if let Some(p) = &j.peft {
        parts.push(format!("{} rank {}", p.method.as_str(), p.rank));
    }
    if j.weights != "none" {
        parts.push(format!("{} weights", j.weights));
    }
    if let Some(kv) = &j.kv_dtype {
        parts.push(format!("{kv} KV cache"));
    }
    parts.push(j.framework.as_str().to_string());
    parts.push(devices(j));
    parts.push(match &j.gpu {
        Some(g) => format!("on {g}"),
        None => "no GPU given".into(),
    });
    parts.join(" · ")
}

/// An RL step: the algorithm, generations, the generator and the reference model.
fn rl_summary(rl: &vramscope_core::job::Rl) -> String {
    let mut out = rl.algorithm.as_str().to_string();
    if let Some(n) = rl.num_generations {
        out.push_str(&format!(" ({n} generations)"));
    }
    out.push_str(&match &rl.generator {
        Some(g) if g.colocate => format!(
            ", vLLM colocated at {}{}",
            g.gpu_memory_utilization,
            if g.sleep { " with sleep mode" } else { "" }
        ),
        Some(_) => ", vLLM on its own GPUs".into(),
        None => ", the policy generates".into(),
    });
    if rl.reference_model {
        out.push_str(", reference model");
    }
    out
}

/// The step's shape: batch × sequence (inference: prompt + new tokens when it generates).
fn shape(j: &ResolvedJob) -> String {
    match j.task {
        Task::Infer if j.new_tokens > 0 => format!(
            "batch {} × ({} prompt + {} new tokens)",
            j.batch, j.seq, j.new_tokens
        ),
        Task::Rl => match &j.rl {
            Some(rl) => format!(
                "batch {} × ({} prompt + {} completion tokens)",
                j.batch, rl.prompt_len, rl.completion_len
            ),
            None => format!("batch {} × seq {}", j.batch, j.seq),
        },
        _ => format!("batch {} × seq {}", j.batch, j.seq),
    }
}

/// The GPUs and, when there is one, the parallel layout across them.
fn devices(j: &ResolvedJob) -> String {
    let p = &j.parallel;
    let mut layout = Vec::new();
    for (name, v) in [
        ("dp", p.dp),
        ("tp", p.tp),
        ("pp", p.pp),
        ("cp", p.cp),
        ("ep", p.ep),
    ] {
        if v > 1 {
            layout.push(format!("{name} {v}"));
        }
    }
    if p.sp {
        layout.push("sp".into());
    }
    if p.zero > 0 {
        layout.push(format!("zero {}", p.zero));
    }
    if p.offload.as_str() != "none" {
        layout.push(format!("offload {}", p.offload.as_str()));
    }
    if p.pp > 1 {
        layout.push(format!("{} microbatches", p.microbatches));
    }
    let gpus = if p.gpus == 1 {
        "1 GPU".to_string()
    } else {
        format!("{} GPUs", p.gpus)
    };
    if layout.is_empty() {
        gpus
    } else {
        format!("{gpus} ({})", layout.join(", "))
    }
}

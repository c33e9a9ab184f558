//! What to change when an RL job does not fit: vLLM's sleep mode, a smaller
//! `gpu_memory_utilization` (the smallest whose pool still holds the round's rollouts and one
//! request of `max_model_len`), fewer sequences per training micro-batch (the same
//! generations per step over more accumulation steps), full activation checkpointing, and
//! their pairs — each re-estimated, those that fit returned cheapest first.

use super::{Advice, ADVICE_COUNT};
use crate::error::CoreError;
use crate::estimate::rl::run;
use crate::estimate::ModelInput;
use crate::job::{Checkpointing, ResolvedJob, Rl};
use crate::report::Report;
use serde_json::{Map, Value};

/// A changed job and the flags that make it; `None` when the change does not apply.
type Changed = Option<(ResolvedJob, Vec<String>)>;

/// One change: what it does to the job, its flags, what it gives up, its cost points.
struct Change {
    name: &'static str,
    cost: u32,
    gives_up: &'static str,
    apply: fn(&ResolvedJob, &Report) -> Changed,
}

const CHANGES: [Change; 4] = [
    Change {
        name: "vllm sleep",
        cost: 1,
        gives_up: "vLLM reloads its weights from the trainer before each generation round \
                   (host-device copies)",
        apply: sleep,
    },
    Change {
        name: "vllm utilization",
        cost: 1,
        gives_up: "a smaller KV pool: no room for more completions at once than the round's",
        apply: utilization,
    },
    Change {
        name: "smaller micro-batch",
        cost: 2,
        gives_up: "twice the accumulation steps for the same generations per step (slower)",
        apply: half_batch,
    },
    Change {
        name: "full checkpointing",
        cost: 2,
        gives_up: "recomputes each layer's forward in backward (about a third slower)",
        apply: checkpointing,
    },
];

/// The cheapest changes (single, then pairs) that make the RL job fit its GPU.
pub fn advise(model: &ModelInput, job: &ResolvedJob) -> Result<Vec<Advice>, CoreError> {
    let Some(gpu) = job.gpu.as_deref() else {
        return Ok(Vec::new());
    };
    let capacity = crate::gpu::find(gpu)?.memory_bytes;
    let base = run(model, job)?;
    let mut combos: Vec<Vec<usize>> = (0..CHANGES.len()).map(|i| vec![i]).collect();
    for i in 0..CHANGES.len() {
        for j in i + 1..CHANGES.len() {
            combos.push(vec![i, j]);
        }
    }
    let mut found: Vec<Advice> = Vec::new();
    for combo in combos {
        if found.len() >= ADVICE_COUNT {
            break;
        }
        let Some((to, flags)) = apply(job, &base, &combo) else {
            continue;
        };
        let Ok(r) = run(model, &to) else { continue };
        if super::fits(&r) != Some(true) {
            continue;
        }
        let total = r.per_gpu.peaks.device_total.unwrap_or(0);
        found.push(Advice {
            flags,
            changes: changes(job, &to),
            device_total: total,
            headroom: job.usable(capacity) as i64 - total as i64,
            gives_up: combo
                .iter()
                .map(|&i| CHANGES[i].gives_up)
                .collect::<Vec<_>>()
                .join("; "),
            techniques: combo.iter().map(|&i| CHANGES[i].name.to_string()).collect(),
            cost: combo.iter().map(|&i| CHANGES[i].cost).sum(),
            time_cost: None,
            host_bytes: r.per_gpu.host_bytes,
            env: super::flags::env(job, &to),
            reserve_estimated: false,
        });
    }
    found.sort_by_key(|a| a.cost);
    Ok(found)
}

/// The changes of `combo` applied in turn, with their flags; `None` when one does not apply.
fn apply(job: &ResolvedJob, base: &Report, combo: &[usize]) -> Changed {
    let mut to = job.clone();
    let mut flags = Vec::new();
    for &i in combo {
        let (next, f) = (CHANGES[i].apply)(&to, base)?;
        to = next;
        flags.extend(f);
    }
    Some((to, flags))
}

/// The job fields that change (`rl` whole).
fn changes(base: &ResolvedJob, to: &ResolvedJob) -> Map<String, Value> {
    super::flags::changes(base, to)
}

fn rl_of(job: &ResolvedJob) -> Option<Rl> {
    job.rl.clone()
}

fn sleep(job: &ResolvedJob, _: &Report) -> Changed {
    let mut rl = rl_of(job)?;
    let g = rl.generator.as_mut().filter(|g| g.colocate && !g.sleep)?;
    g.sleep = true;
    let to = ResolvedJob {
        rl: Some(rl),
        ..job.clone()
    };
    Some((to, vec!["--vllm-sleep".into()]))
}

/// The smallest utilization (in hundredths) whose pool holds the round's rollouts and one
/// request of max_model_len: vLLM's pool is capacity × u less its weights, forward working set
/// and CUDA graphs (`engines::vllm_budget`), so u = (those + the KV needed) / capacity, plus one
/// block for the pool's rounding down to whole blocks.
fn utilization(job: &ResolvedJob, base: &Report) -> Changed {
    let mut rl = rl_of(job)?;
    let figures = base.rl.as_ref()?;
    let gen = figures.generator.as_ref()?;
    let rollouts = figures.rollouts?;
    let b = &gen.budget;
    let per_block_request = b.block_bytes * b.max_model_len.div_ceil(b.block_size.max(1));
    let needed = rollouts.kv_bytes.max(per_block_request) + b.block_bytes;
    let fixed = b.weights + b.profile_peak + b.cuda_graphs;
    let capacity = (b.usable as f64 / gen.gpu_memory_utilization).round();
    let u = ((fixed + needed) as f64 / capacity * 100.0).ceil() / 100.0;
    let g = rl.generator.as_mut().filter(|g| g.colocate)?;
    if u >= g.gpu_memory_utilization || u <= 0.0 || u >= 1.0 {
        return None;
    }
    g.gpu_memory_utilization = u;
    let to = ResolvedJob {
        rl: Some(rl),
        ..job.clone()
    };
    Some((to, vec!["--vllm-utilization".into(), format!("{u}")]))
}

fn half_batch(job: &ResolvedJob, _: &Report) -> Changed {
    if job.batch < 2 || !job.batch.is_multiple_of(2) {
        return None;
    }
    let to = ResolvedJob {
        batch: job.batch / 2,
        grad_accum: job.grad_accum * 2,
        ..job.clone()
    };
    let flags = vec![
        "--batch".into(),
        to.batch.to_string(),
        "--grad-accum".into(),
        to.grad_accum.to_string(),
    ];
    Some((to, flags))
}

fn checkpointing(job: &ResolvedJob, _: &Report) -> Changed {
    if job.checkpointing == Checkpointing::Full {
        return None;
    }
    let to = ResolvedJob {
        checkpointing: Checkpointing::Full,
        ..job.clone()
    };
    Some((to, vec!["--checkpointing".into(), "full".into()]))
}

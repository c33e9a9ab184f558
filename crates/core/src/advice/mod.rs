//! Advice: the cheapest changes that make a job fit its GPU. Combinations of the techniques in
//! [`techniques::TECHNIQUES`] (at most one per group) are walked cheapest first in the
//! documented cost order, each re-estimated by the full step simulation; the first few that fit
//! are returned as the CLI flags to add, the job fields they change, the device total and
//! headroom, and what they give up.

pub mod flags;
pub mod techniques;
pub mod whatif;

use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::ResolvedJob;
use crate::report::Report;
use serde::Serialize;
use std::collections::BTreeMap;
use techniques::{Ctx, Group, TECHNIQUES};

/// One piece of advice (the contract's `advice` entries, with extras).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// Flags to add to the job's command line.
    pub flags: Vec<String>,
    /// The job fields this changes, with their new values.
    pub changes: serde_json::Map<String, serde_json::Value>,
    pub device_total: u64,
    pub headroom: i64,
    /// One line: what this costs in quality, speed or host RAM.
    pub gives_up: String,
    /// The techniques combined.
    pub techniques: Vec<String>,
    /// Points in the cost order (`advice::techniques`): lower gives up less.
    pub cost: u32,
    /// Host RAM the changed job needs (offloaded states, llama.cpp layers on the CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_bytes: Option<u64>,
    /// Environment variables the job must run with (`PYTORCH_CUDA_ALLOC_CONF`): an
    /// environment change, not a flag of the user's script.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// How many pieces of advice a search returns.
pub const ADVICE_COUNT: usize = 3;

/// Estimates evaluated at most per search (each is a full step simulation).
const MAX_EVALUATIONS: usize = 300;

/// Whether the report's job fits its GPU (`None` without a GPU or a device total).
pub fn fits(report: &Report) -> Option<bool> {
    report.fit.as_ref().map(|f| f.fits)
}

/// Host RAM a report's job needs: offloaded model states, or llama.cpp's CPU share.
pub fn host_bytes(report: &Report) -> Option<u64> {
    report.per_gpu.host_bytes.or_else(|| {
        report
            .engine
            .as_ref()
            .and_then(|e| e.get("host_total"))
            .and_then(|v| v.as_u64())
            .filter(|b| *b > 0)
    })
}

/// What the techniques need to know about the model and GPU.
pub fn context<'a>(model: &'a ModelInput, job: &ResolvedJob) -> Ctx<'a> {
    let spec = model.spec.as_ref();
    let lora_targets = model
        .inventory
        .as_ref()
        .is_some_and(|i| i.tensors.iter().any(|t| t.name.ends_with("q_proj.weight")));
    let lm_head = spec.is_some_and(|s| {
        matches!(
            s.head,
            crate::model::Head::LanguageModel { .. } | crate::model::Head::MaskedLm { .. }
        )
    });
    let bf16 = job
        .gpu
        .as_deref()
        .and_then(|g| crate::gpu::find(g).ok())
        .is_none_or(|g| g.bf16);
    Ctx {
        spec,
        lora_targets,
        lm_head,
        bf16,
        // A checkpoint that cannot be read as a format is fixed too: nothing is swapped for it.
        weights_fixed: !crate::estimate::effective_weights(model, job)
            .is_ok_and(|w| w == job.weights.value),
    }
}

/// Applies the techniques `combo` (indices into `TECHNIQUES`, ascending) to `job`; `None` when
/// one of them does not apply after the others.
pub fn apply(job: &ResolvedJob, ctx: &Ctx, combo: &[usize]) -> Option<ResolvedJob> {
    let mut j = job.clone();
    for &i in combo {
        let t = &TECHNIQUES[i];
        if !(t.apply)(&mut j, ctx, t.param) {
            return None;
        }
    }
    Some(j)
}

/// The techniques that apply to `job` on their own, by group.
fn applicable(job: &ResolvedJob, ctx: &Ctx) -> BTreeMap<Group, Vec<usize>> {
    let mut groups: BTreeMap<Group, Vec<usize>> = BTreeMap::new();
    let mut seen: Vec<ResolvedJob> = Vec::new();
    for (i, t) in TECHNIQUES.iter().enumerate() {
        if let Some(j) = apply(job, ctx, &[i]) {
            // Two entries that make the same job (÷4 and "to 1" at batch 4): keep the cheaper.
            if !seen.contains(&j) {
                seen.push(j);
                groups.entry(t.group).or_default().push(i);
            }
        }
    }
    groups
}

/// Every combination of at most one technique per group (ascending indices).
fn combinations(groups: &BTreeMap<Group, Vec<usize>>) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![Vec::new()];
    for options in groups.values() {
        let mut next = Vec::with_capacity(out.len() * (options.len() + 1));
        for c in &out {
            next.push(c.clone());
            for &o in options {
                let mut d = c.clone();
                d.push(o);
                next.push(d);
            }
        }
        out = next;
    }
    for c in &mut out {
        c.sort_unstable();
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Sum of the techniques' points.
pub fn cost(combo: &[usize]) -> u32 {
    combo.iter().map(|&i| TECHNIQUES[i].cost).sum()
}

/// `c` gives up at least what `found` gives up in every group `found` touches.
fn dominates(c: &[usize], found: &[usize]) -> bool {
    found.iter().all(|&f| {
        c.iter().any(|&x| {
            TECHNIQUES[x].group == TECHNIQUES[f].group && TECHNIQUES[x].cost >= TECHNIQUES[f].cost
        })
    })
}

/// The strongest combination with `layout` fixed (the costliest applicable option of every
/// other group): when it does not fit, nothing with that layout does.
fn ceiling(
    groups: &BTreeMap<Group, Vec<usize>>,
    layout: Option<usize>,
    job: &ResolvedJob,
    ctx: &Ctx,
) -> Option<Vec<usize>> {
    let mut combo: Vec<usize> = layout.into_iter().collect();
    for (g, options) in groups {
        if *g == Group::Layout {
            continue;
        }
        let mut by_cost = options.clone();
        by_cost.sort_by_key(|&i| std::cmp::Reverse(TECHNIQUES[i].cost));
        for o in by_cost {
            let mut c = combo.clone();
            c.push(o);
            c.sort_unstable();
            if apply(job, ctx, &c).is_some() {
                combo = c;
                break;
            }
        }
    }
    (!combo.is_empty()).then_some(combo)
}

/// The cheapest changes (up to [`ADVICE_COUNT`]) that make `job` fit its GPU, cheapest first;
/// empty when the job has no GPU or nothing searched fits.
pub fn advise(model: &ModelInput, job: &ResolvedJob) -> Result<Vec<Advice>, CoreError> {
    if job.task == crate::job::Task::Rl {
        return crate::estimate::rl::advise(model, job);
    }
    if job.gpu.is_none() {
        return Ok(Vec::new());
    }
    let ctx = context(model, job);
    let groups = applicable(job, &ctx);
    // `None`: the estimator refuses the changed job (see the walk below for what that means).
    let evaluate = |j: &ResolvedJob| -> Option<Report> { estimate(model, j).ok() };
    // Layouts whose strongest combination does not fit are left out of the walk.
    let mut layouts: Vec<Option<usize>> = vec![None];
    layouts.extend(
        groups
            .get(&Group::Layout)
            .into_iter()
            .flatten()
            .map(|&i| Some(i)),
    );
    let mut feasible = Vec::new();
    for l in layouts {
        // A ceiling the estimator cannot evaluate prunes nothing.
        let fits_at_most = ceiling(&groups, l, job, &ctx)
            .and_then(|c| apply(job, &ctx, &c))
            .is_some_and(|j| evaluate(&j).is_none_or(|r| fits(&r) == Some(true)));
        if fits_at_most {
            feasible.push(l);
        }
    }
    let layout_of = |c: &[usize]| {
        c.iter()
            .copied()
            .find(|&i| TECHNIQUES[i].group == Group::Layout)
    };
    let mut combos: Vec<Vec<usize>> = combinations(&groups)
        .into_iter()
        .filter(|c| feasible.contains(&layout_of(c)))
        .collect();
    combos.sort_by_key(|c| (cost(c), c.len()));
    let mut found: Vec<(Vec<usize>, Advice)> = Vec::new();
    let mut evaluations = 0;
    for c in combos {
        if found.len() >= ADVICE_COUNT || evaluations >= MAX_EVALUATIONS {
            break;
        }
        if found.iter().any(|(f, _)| dominates(&c, f)) {
            continue;
        }
        let Some(j) = apply(job, &ctx, &c) else {
            continue;
        };
        evaluations += 1;
        // A combination the estimator refuses (a layout or setting it cannot model) is not
        // advice; it counts as an evaluation.
        let Some(report) = evaluate(&j) else { continue };
        if fits(&report) != Some(true) {
            continue;
        }
        let advice = describe(job, &j, &c, &report);
        found.push((c, advice));
    }
    Ok(found.into_iter().map(|(_, a)| a).collect())
}

/// The advice for the changed job `to` made by `combo`, from its report.
fn describe(base: &ResolvedJob, to: &ResolvedJob, combo: &[usize], report: &Report) -> Advice {
    let fit = report.fit.as_ref();
    // What is given up, the costliest first.
    let mut by_cost = combo.to_vec();
    by_cost.sort_by_key(|&i| std::cmp::Reverse(TECHNIQUES[i].cost));
    let mut gives: Vec<&str> = Vec::new();
    for &i in &by_cost {
        if !gives.contains(&TECHNIQUES[i].gives_up) {
            gives.push(TECHNIQUES[i].gives_up);
        }
    }
    Advice {
        flags: flags::flags(base, to),
        changes: flags::changes(base, to),
        device_total: report.per_gpu.device_total.unwrap_or(0),
        headroom: fit.map_or(0, |f| f.headroom),
        gives_up: gives.join("; "),
        techniques: combo
            .iter()
            .map(|&i| TECHNIQUES[i].name.to_string())
            .collect(),
        cost: cost(combo),
        host_bytes: host_bytes(report),
        env: flags::env(base, to),
    }
}

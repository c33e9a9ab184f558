//! Advice: the cheapest changes that make a job fit its GPU. Combinations of the techniques in
//! [`techniques::TECHNIQUES`] (at most one per group) are walked cheapest first in the
//! documented cost order, each re-estimated by the full step simulation; the first few that fit
//! are returned as the CLI flags to add, the job fields they change, the device total and
//! headroom, and what they give up.

pub(crate) mod context;
mod engine_switch;
pub mod flags;
pub mod order;
mod rl;
pub mod techniques;
pub mod whatif;

use crate::error::CoreError;
use crate::estimate::{estimate, ModelInput};
use crate::job::ResolvedJob;
pub use crate::report::Advice;
use crate::report::Report;
use std::collections::BTreeMap;
use techniques::{Ctx, Group, TECHNIQUES};

/// How many pieces of advice a search returns.
pub const ADVICE_COUNT: usize = 3;

/// Estimates evaluated at most per search (each is a full step simulation).
const MAX_EVALUATIONS: usize = 1000;

/// Whether the report's job fits its GPU (`None` without a GPU or a device total).
pub fn fits(report: &Report) -> Option<bool> {
    report.fit.as_ref().map(|f| f.fits)
}

/// Host RAM a report's job needs: offloaded model states, or llama.cpp's CPU share; plus the
/// paged optimizer states the GPU has no room for (bitsandbytes pages them to host RAM under
/// pressure: those beyond the fit's headroom, the fit leaving them out).
pub fn host_bytes(report: &Report) -> Option<u64> {
    let offloaded = report.per_gpu.host_bytes.or_else(|| {
        report
            .engine
            .as_ref()
            .and_then(|e| e.get("host_total"))
            .and_then(|v| v.as_u64())
            .filter(|b| *b > 0)
    });
    let room = report.fit.as_ref().map_or(0, |f| f.headroom.max(0) as u64);
    let paged = report
        .per_gpu
        .paged_states
        .unwrap_or(0)
        .saturating_sub(room);
    match (offloaded, paged) {
        (o, 0) => o,
        (o, p) => Some(o.unwrap_or(0).saturating_add(p)),
    }
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
        vllm_longest_request: crate::engines::engine(job.framework).longest_request(model, job),
    }
}

/// Applies the techniques `combo` (indices into `TECHNIQUES`, ascending) to `job`; `None` when
/// one of them does not apply after the others, or when the changed job is one the job's own
/// checks refuse (accumulation with the optimizer in backward, DeepSpeed with it): advice and
/// what-if rows are flags the tool accepts.
pub fn apply(job: &ResolvedJob, ctx: &Ctx, combo: &[usize]) -> Option<ResolvedJob> {
    let mut j = job.clone();
    for &i in combo {
        let t = &TECHNIQUES[i];
        if !(t.apply)(&mut j, ctx, t.param) {
            return None;
        }
    }
    j.check_combination().ok()?;
    Some(j)
}

/// Whether the host RAM the changed job needs fits the job's `host_ram` (unknown: it does).
pub fn host_ram_allows(job: &ResolvedJob, host: Option<u64>) -> bool {
    match (job.host_ram, host) {
        (Some(have), Some(need)) => need <= have,
        _ => true,
    }
}

/// Whether a changed full fine-tune still trains every weight with its model states on the
/// GPU: no adapters (LoRA, QLoRA) and no CPU offload (ZeRO-Offload/Infinity run the update on
/// the CPU, several times the step: the what-if's time column). Paged optimizer states count
/// as on the GPU: only what the GPU cannot hold spills to host RAM.
fn trains_all_on_gpu(j: &ResolvedJob) -> bool {
    j.peft.is_none() && j.parallel.offload == crate::job::Offload::None
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
        return rl::advise(model, job);
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
    let full_fine_tune = job.task == crate::job::Task::Train && trains_all_on_gpu(job);
    // The job's own rate, which each change's time is judged against.
    let base_rate = estimate(model, job)
        .ok()
        .and_then(|r| whatif::rate(&r.throughput));
    // (combination, trains every weight on the GPU, advice)
    let mut found: Vec<(Vec<usize>, bool, Advice)> = Vec::new();
    let mut evaluations = 0;
    for c in combos {
        // A full fine-tune's list also holds the cheapest entry that trains every weight on
        // the GPU, one past the count when the cheapest few train adapters or offload.
        let has_all = !full_fine_tune || found.iter().any(|(_, all, _)| *all);
        let full = found.len() >= ADVICE_COUNT;
        // Changes of the same points as the last one listed are all weighed: ties go to the
        // faster (`order`).
        let tie = full
            && found
                .get(ADVICE_COUNT - 1)
                .is_some_and(|(f, _, _)| cost(f) == cost(&c));
        if (full && has_all && !tie) || evaluations >= MAX_EVALUATIONS {
            break;
        }
        if found.iter().any(|(f, _, _)| dominates(&c, f)) {
            continue;
        }
        let Some(j) = apply(job, &ctx, &c) else {
            continue;
        };
        let all = full_fine_tune && trains_all_on_gpu(&j);
        if full && !all && !tie {
            continue;
        }
        evaluations += 1;
        // A combination the estimator refuses (a layout or setting it cannot model) is not
        // advice; it counts as an evaluation.
        let Some(report) = evaluate(&j) else { continue };
        // Nor is one that does not fit, or needs more host RAM than the job has.
        if fits(&report) != Some(true) || !host_ram_allows(job, host_bytes(&report)) {
            continue;
        }
        let mut advice = describe(job, &j, &c, &report);
        advice.time_cost = base_rate
            .zip(whatif::rate(&report.throughput))
            .map(|(base, row)| base / row - 1.0);
        found.push((c, all, advice));
    }
    if found.is_empty() {
        // A model too large for the GPU under its own engine: how it is run on one card.
        return engine_switch::advise_llamacpp(model, job);
    }
    Ok(listed(found, full_fine_tune))
}

/// The advice to list: ordered ([`order::order`]), the first [`ADVICE_COUNT`], and for a full
/// fine-tune the first that trains every weight on the GPU when none of those does.
fn listed(found: Vec<(Vec<usize>, bool, Advice)>, full_fine_tune: bool) -> Vec<Advice> {
    let ordered = order::order(found, |(_, _, a)| a);
    let mut out: Vec<Advice> = Vec::new();
    let mut has_all = !full_fine_tune;
    for (_, all, a) in ordered {
        if out.len() < ADVICE_COUNT {
            has_all |= all;
            out.push(a);
        } else if !has_all && all {
            has_all = true;
            out.push(a);
        }
    }
    out
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
        device_total: report.per_gpu.peaks.device_total.unwrap_or(0),
        headroom: fit.map_or(0, |f| f.headroom),
        gives_up: gives.join("; "),
        techniques: combo
            .iter()
            .map(|&i| TECHNIQUES[i].name.to_string())
            .collect(),
        cost: cost(combo),
        time_cost: None,
        host_bytes: host_bytes(report),
        env: flags::env(base, to),
        reserve_estimated: report.per_gpu.allocator.is_none()
            && report.per_gpu.peaks.peak_reserved.is_some()
            && !crate::engines::settings::spec(to.framework).is_some_and(|e| e.sizes_own_memory()),
    }
}

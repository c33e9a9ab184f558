//! `vramscope plan`: parallel layouts of a training job over N GPUs that fit, ranked.

use super::jobargs::JobArgs;
use super::CmdResult;
use crate::app::job::prepare;
use crate::app::plan::{plan_gpu, plan_prepared};
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, thousands};
use std::time::Instant;

pub fn run(
    s: &crate::app::Session,
    args: &JobArgs,
    json: bool,
    max_micro_batch: u64,
    top: usize,
) -> CmdResult {
    let job = args.to_job()?;
    let p = prepare(s, &job)?;
    let (model, gpu, gpus) = (&p.model, plan_gpu(&p)?, p.resolved.parallel.gpus);
    let started = Instant::now();
    let result = plan_prepared(&p, max_micro_batch, top)?;
    let elapsed = started.elapsed();
    if json {
        print_json(&result)?;
        return Ok(0);
    }
    let mut out = format!(
        "{} on {} × {} ({} each): {} layouts screened in {:.0} ms, {} fit\n",
        paint(BOLD, &model.name),
        gpus,
        gpu.id,
        bytes(gpu.memory_bytes),
        thousands(result.evaluated),
        elapsed.as_secs_f64() * 1e3,
        thousands(result.fitting)
    );
    out.push_str(&layout_table(&result.best));
    if !result.best_per_framework.is_empty() {
        out.push_str("\n  the best of each framework (ranked the same way, confirmed):");
        out.push_str(&layout_table(&result.best_per_framework));
    }
    for a in &result.advice {
        out.push_str(&format!("  {a}\n"));
    }
    if let Some(why) = &result.why {
        out.push_str(&format!("\n  {} {why}\n", paint(BOLD, "why the first:")));
    }
    out.push_str(&paint(DIM, ranked_by(result.why.is_some())));
    print(&out)?;
    Ok(0)
}

/// The footnote naming the ranking in force.
fn ranked_by(timed: bool) -> &'static str {
    if timed {
        "\n  ranked by modelled tokens per second per GPU (ties: more headroom); step time and \
         what bounds it from the step-time model (datasheet peaks × measured kernel \
         fractions); the top three are confirmed by the full step simulation\n"
    } else {
        "\n  ranked by least recomputation, smallest pipeline bubble, smallest tensor-parallel \
         degree, least communication, then the largest micro-batch (the catalog has no speeds \
         for this GPU); the top three are confirmed by the full step simulation\n"
    }
}

/// A layout's modelled step: seconds, tokens/s per GPU, what bounds it; dashes without.
fn time_cells(t: Option<&vramscope_core::throughput::layout::LayoutTime>) -> String {
    match t {
        Some(t) => format!(
            " {:>8} {:>9} {}",
            format!("{:.2} s", t.step_time_s),
            format!("{:.0}", t.tokens_per_s_per_gpu),
            t.dominant
        ),
        None => format!(" {:>8} {:>9} -", "-", "-"),
    }
}

/// Ranked layouts as a table: layout, screened and confirmed device totals, host RAM offload
/// needs per GPU.
fn layout_table(rows: &[vramscope_core::plan::Confirmed]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n  rank  framework   dp tp pp cp ep sp zero offload           ckpt       mb  m     screened   confirmed   host/GPU     step tok/s/GPU bound by\n",
    );
    for (i, c) in rows.iter().enumerate() {
        let l = &c.scored.layout;
        let confirmed = c
            .estimate
            .as_ref()
            .and_then(|p| p.peaks.device_total)
            .map_or_else(|| "-".into(), bytes);
        let host = if c.scored.host_bytes > 0 {
            bytes(c.scored.host_bytes)
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "  {:>4}  {:<10} {:>3} {:>2} {:>2} {:>2} {:>2} {:>2} {:>4} {:<17} {:<9} {:>3} {:>2} {:>12} {:>11} {:>10}{}\n",
            i + 1,
            l.framework,
            l.dp,
            l.tp,
            l.pp,
            l.cp,
            l.ep,
            if l.sp { "y" } else { "n" },
            l.zero,
            l.offload,
            l.checkpointing,
            l.micro_batch,
            l.microbatches,
            bytes(c.scored.device_total),
            confirmed,
            host,
            time_cells(c.scored.time.as_ref())
        ));
    }
    out
}

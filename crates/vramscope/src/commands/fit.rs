//! `vramscope fit`: the largest batch / sequence / context that fits the GPU, plain or
//! calibrated by a measured run (`app::fit`), as a few lines or as JSON.

use super::jobargs::JobArgs;
use super::CmdResult;
use crate::app::fit::{fit_calibrated_prepared, fit_prepared, FitWithAdvice, MeasuredFit};
use crate::app::job::prepare;
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, thousands};
use vramscope_core::fit::FitAnswer;
use vramscope_core::job::{ResolvedJob, Task};
use vramscope_measure::calibrate::{Calibrated, CalibratedFit};
use vramscope_measure::logs::fit::LogCalibratedFit;

/// " − 2.00 GiB reserved" for the job's `reserve`, or nothing.
fn reserved_text(reserve: u64) -> String {
    if reserve == 0 {
        String::new()
    } else {
        format!(" − {} reserved", bytes(reserve))
    }
}

/// A limit, or what it means that there is none.
fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "none (even 1 does not fit)".into(), thousands)
}

/// The two limits of the job's task, each followed by its `note` (empty for a plain fit):
/// train → micro-batch at the job's seq and sequence at its batch; infer → concurrent
/// sequences at its context and context at its batch.
fn limits(r: &ResolvedJob, first: (Option<u64>, String), second: (Option<u64>, String)) -> String {
    if r.task == Task::Train {
        format!(
            "  largest micro-batch at seq {}: {}{}\n  longest sequence at batch {}: {}{}\n",
            thousands(r.seq),
            show(first.0),
            first.1,
            r.batch,
            show(second.0),
            second.1
        )
    } else {
        format!(
            "  most concurrent sequences at context {}: {}{}\n  longest context at batch {}: {}{}\n",
            thousands(r.seq + r.new_tokens),
            show(first.0),
            first.1,
            r.batch,
            show(second.0),
            second.1
        )
    }
}

/// The search's notes and how many estimates it took.
fn footer(notes: &[String], evaluations: u64) -> String {
    let mut out = String::new();
    for n in notes {
        out.push_str(&format!("  {}\n", paint(DIM, n)));
    }
    out.push_str(&paint(
        DIM,
        &format!("  ({evaluations} estimates searched)\n"),
    ));
    out
}

pub fn run(s: &crate::app::Session, args: &JobArgs, json: bool) -> CmdResult {
    let job = args.to_job()?;
    let p = prepare(s, &job)?;
    let fit = fit_prepared(&p)?;
    if json {
        print_json(&fit)?;
        return Ok(0);
    }
    let FitWithAdvice { answer, advice } = fit;
    let mut out = plain(
        p.named.as_deref().unwrap_or(&p.model.name),
        &p.resolved,
        &answer,
    );
    if let Some(a) = advice {
        let report = vramscope_core::report::Report {
            advice: Some(a),
            ..vramscope_core::estimate::estimate(&p.model, &p.resolved)?
        };
        out.push_str(&crate::render::whatif::render_advice(&report));
    }
    print(&out)?;
    Ok(0)
}

/// A plain fit's lines: the GPU, the limits, the engine's layers and launch line, the notes.
fn plain(name: &str, r: &ResolvedJob, answer: &FitAnswer) -> String {
    let mut out = format!(
        "{} on {} (capacity {} as the device reports it{})\n",
        paint(BOLD, name),
        answer.target.gpu,
        bytes(answer.target.capacity),
        reserved_text(answer.reserve)
    );
    let second = match r.task {
        Task::Train => answer.max_seq,
        _ => answer.max_context,
    };
    out.push_str(&limits(
        r,
        (answer.max_batch, String::new()),
        (second, String::new()),
    ));
    out.push_str(&time_line(answer));
    if let (Some(n), Some(i)) = (answer.max_images, r.images) {
        out.push_str(&format!(
            "  most {}×{} images per sequence at seq {} and batch {}: {}\n",
            i.width,
            i.height,
            thousands(r.seq),
            r.batch,
            show(n)
        ));
    }
    if let Some(n) = answer.max_gpu_layers {
        let flag = vramscope_core::engines::layers_flag(r.framework);
        out.push_str(&format!("  most layers on the GPU ({flag}): {n}\n"));
        out.push_str(&layers_speed(flag, r, &answer.gpu_layers_speed));
    }
    if let Some(l) = &answer.launch {
        out.push_str(&format!("  launch: {}\n", paint(BOLD, &l.command)));
        for (flag, why) in &l.why {
            out.push_str(&format!("    {flag}: {}\n", paint(DIM, why)));
        }
    }
    out.push_str(&footer(&answer.notes, answer.evaluations));
    out
}

/// llama.cpp's `-ngl` trade-off: decode and prefill tokens/s and host RAM per choice (modelled
/// at the job's batch), most layers first; nothing without rows.
fn layers_speed(
    flag: &str,
    r: &ResolvedJob,
    rows: &[vramscope_core::fit_speed::LayersSpeed],
) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "  speed per {flag} at {} sequence{} (modelled; the CPU's layers at host RAM's bandwidth):\n",
        r.batch,
        if r.batch == 1 { "" } else { "s" }
    );
    out.push_str(&format!(
        "    {:>5}  {:>12}  {:>13}  {:>11}\n",
        flag, "decode tok/s", "prefill tok/s", "host RAM"
    ));
    for row in rows {
        out.push_str(&format!(
            "    {:>5}  {:>12.1}  {:>13}  {:>11}{}\n",
            row.n_gpu_layers,
            row.decode_tokens_per_s,
            thousands(row.prefill_tokens_per_s.round() as u64),
            bytes(row.host_bytes),
            if row.fits { "" } else { "  (does not fit)" }
        ));
    }
    out
}

/// The modelled time at the largest batch, one line, or nothing where it is unknown.
fn time_line(answer: &FitAnswer) -> String {
    use vramscope_core::throughput::Throughput;
    let (Some(b), Some(t)) = (answer.max_batch, &answer.throughput_at_max_batch) else {
        return String::new();
    };
    match t {
        Throughput::Train(t) => format!(
            "  at micro-batch {b}: {:.2} s per step, {} tokens/s per GPU (MFU {:.0} %, modelled)\n",
            t.step_time_s,
            thousands(t.tokens_per_s_per_gpu.round() as u64),
            100.0 * t.mfu
        ),
        Throughput::Infer(i) => format!(
            "  at {b} sequences: prefill {} tokens/s, decode {} tokens/s, one generate {:.2} s \
             ({}-bound, modelled)\n",
            thousands(i.prefill_tokens_per_s.round() as u64),
            thousands(i.decode_tokens_per_s.round() as u64),
            i.generate_s,
            i.bound
        ),
    }
}

/// `fit --measured FILE`: the search on the estimator corrected by a measured run of the job.
pub fn run_calibrated(
    s: &crate::app::Session,
    args: &JobArgs,
    file: &std::path::Path,
    json: bool,
) -> CmdResult {
    let job = args.to_job()?;
    let p = prepare(s, &job)?;
    let answer = match fit_calibrated_prepared(&p, file)? {
        MeasuredFit::Log(l) if json => return print_json(&l).map(|_| 0).map_err(Into::into),
        MeasuredFit::Log(l) => {
            print(&on_log(&p.model.name, &p.resolved, &l, file))?;
            return Ok(0);
        }
        MeasuredFit::Record(a) => *a,
    };
    if json {
        print_json(&answer)?;
        return Ok(0);
    }
    let r = &p.resolved;
    let mut out = format!(
        "{} on {} ({}{}), calibrated with {} (batch {}, seq {})\n",
        paint(BOLD, &p.model.name),
        answer.target.gpu,
        bytes(answer.target.capacity),
        reserved_text(r.reserve),
        file.display(),
        answer.measured_batch,
        thousands(answer.measured_seq)
    );
    out.push_str(&correction(&answer));
    let second = match r.task {
        Task::Train => answer.max_seq,
        _ => answer.max_context,
    };
    out.push_str(&limits(
        r,
        (answer.max_batch, rests(&answer.at_max_batch)),
        (second, rests(&answer.at_max_seq)),
    ));
    out.push_str(&footer(&answer.notes, answer.evaluations));
    print(&out)?;
    Ok(0)
}

/// The correction learned at the measured job: per category, then the unattributed bytes and
/// the allocator's reserve.
fn correction(answer: &CalibratedFit) -> String {
    let mut out = String::from("  correction learned at the measured job:\n");
    let c = &answer.calibration;
    for r in &c.rules {
        if r.estimated == 0 && r.measured == 0 {
            continue;
        }
        let how = if r.rule == "scaled" {
            format!("× {:.3}", r.scale)
        } else if r.add < 0 {
            format!("− {}", bytes(r.add.unsigned_abs()))
        } else {
            format!("+ {}", bytes(r.add as u64))
        };
        out.push_str(&format!(
            "    {:<18} estimated {:>11}  measured {:>11}  → {}\n",
            r.category,
            bytes(r.estimated),
            bytes(r.measured),
            how
        ));
    }
    if c.unattributed_fixed > 0 || c.unattributed_per_activation_byte > 0.0 {
        out.push_str(&format!(
            "    {:<18} {:.3} per activation-like byte{}\n",
            "unattributed",
            c.unattributed_per_activation_byte,
            if c.unattributed_fixed > 0 {
                format!(" + {}", bytes(c.unattributed_fixed))
            } else {
                String::new()
            }
        ));
    }
    if let Some(k) = c.reserve_ratio {
        out.push_str(&format!(
            "    {:<18} reserved = {:.3} × allocated (measured)\n",
            "allocator reserve", k
        ));
    }
    out
}

/// What the calibration moved at a limit: the prediction and its correction.
fn rests(c: &Option<Calibrated>) -> String {
    c.map(|c| {
        format!(
            "  (predicted {}; calibration {}{}, {:.1}% of it)",
            bytes(c.device_total),
            if c.correction() < 0 { "−" } else { "+" },
            bytes(c.correction().unsigned_abs()),
            c.share() * 100.0
        )
    })
    .unwrap_or_default()
}

/// `fit --measured LOG`: the limits on what the log states, each figure it took from the log
/// beside the estimate.
fn on_log(name: &str, r: &ResolvedJob, f: &LogCalibratedFit, file: &std::path::Path) -> String {
    let mut out = format!(
        "{} on {} ({}{}), on the figures of {} ({})\n",
        paint(BOLD, name),
        f.target.gpu,
        bytes(f.target.capacity),
        reserved_text(r.reserve),
        file.display(),
        f.source
    );
    out.push_str("  from the log:\n");
    for row in &f.from_log {
        out.push_str(&format!(
            "    {:<14} log {:>11}  estimated {:>11}  ({})\n",
            row.figure,
            bytes(row.log),
            row.estimated.map(bytes).unwrap_or_else(|| "—".into()),
            row.used_as
        ));
    }
    out.push_str(&limits(
        r,
        (f.max_batch, String::new()),
        (f.max_context, String::new()),
    ));
    out.push_str(&footer(&f.notes, f.evaluations));
    out
}

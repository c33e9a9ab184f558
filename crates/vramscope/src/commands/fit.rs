//! `vramscope fit`: the largest batch / sequence / context that fits the GPU.

use super::jobargs::JobArgs;
use super::CmdResult;
use crate::app::fit::{fit_calibrated_prepared, fit_prepared, FitWithAdvice};
use crate::app::job::prepare;
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, thousands};
use vramscope_core::job::Task;

/// " − 2.00 GiB reserved" for the job's `reserve`, or nothing.
fn reserved_text(reserve: u64) -> String {
    if reserve == 0 {
        String::new()
    } else {
        format!(" − {} reserved", bytes(reserve))
    }
}

pub fn run(args: &JobArgs, json: bool) -> CmdResult {
    let job = args.to_job()?;
    let p = prepare(&job)?;
    let (model, resolved) = (&p.model, &p.resolved);
    let FitWithAdvice { answer, advice } = fit_prepared(&p)?;
    if json {
        print_json(&FitWithAdvice { answer, advice })?;
        return Ok(0);
    }
    let show = |v: Option<u64>| v.map_or_else(|| "none (even 1 does not fit)".into(), thousands);
    let mut out = format!(
        "{} on {} (capacity {} as the device reports it{})\n",
        paint(BOLD, &model.name),
        answer.gpu,
        bytes(answer.capacity),
        reserved_text(answer.reserve)
    );
    if resolved.task == Task::Train {
        out.push_str(&format!(
            "  largest micro-batch at seq {}: {}\n  longest sequence at batch {}: {}\n",
            thousands(resolved.seq),
            show(answer.max_batch),
            resolved.batch,
            show(answer.max_seq)
        ));
    } else {
        out.push_str(&format!(
            "  most concurrent sequences at context {}: {}\n  longest context at batch {}: {}\n",
            thousands(resolved.seq + resolved.new_tokens),
            show(answer.max_batch),
            resolved.batch,
            show(answer.max_context)
        ));
    }
    if let Some(n) = answer.max_gpu_layers {
        out.push_str(&format!("  most layers on the GPU (-ngl): {n}\n"));
    }
    if let Some(l) = &answer.launch {
        out.push_str(&format!("  launch: {}\n", paint(BOLD, &l.command)));
        for (flag, why) in &l.why {
            out.push_str(&format!("    {flag}: {}\n", paint(DIM, why)));
        }
    }
    for n in &answer.notes {
        out.push_str(&format!("  {}\n", paint(DIM, n)));
    }
    out.push_str(&paint(
        DIM,
        &format!("  ({} estimates searched)\n", answer.evaluations),
    ));
    if let Some(a) = advice {
        let report = vramscope_core::report::Report {
            advice: Some(a),
            ..vramscope_core::estimate::estimate(model, resolved)?
        };
        out.push_str(&crate::render::whatif::render_advice(&report));
    }
    print(&out)?;
    Ok(0)
}

/// `fit --measured FILE`: the search on the estimator corrected by a measured run of the job.
pub fn run_calibrated(args: &JobArgs, file: &std::path::Path, json: bool) -> CmdResult {
    let job = args.to_job()?;
    let p = prepare(&job)?;
    let (model, resolved) = (&p.model, &p.resolved);
    let answer = fit_calibrated_prepared(&p, file)?;
    if json {
        print_json(&answer)?;
        return Ok(0);
    }
    let show = |v: Option<u64>| v.map_or_else(|| "none (even 1 does not fit)".into(), thousands);
    let mut out = format!(
        "{} on {} ({}{}), calibrated with {} (batch {}, seq {})\n",
        paint(BOLD, &model.name),
        answer.gpu,
        bytes(answer.capacity),
        reserved_text(resolved.reserve),
        file.display(),
        answer.measured_batch,
        thousands(answer.measured_seq)
    );
    out.push_str("  correction learned at the measured job:\n");
    for r in &answer.calibration.rules {
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
    if answer.calibration.unattributed_fixed > 0
        || answer.calibration.unattributed_per_activation_byte > 0.0
    {
        out.push_str(&format!(
            "    {:<18} {:.3} per activation-like byte{}\n",
            "unattributed",
            answer.calibration.unattributed_per_activation_byte,
            if answer.calibration.unattributed_fixed > 0 {
                format!(" + {}", bytes(answer.calibration.unattributed_fixed))
            } else {
                String::new()
            }
        ));
    }
    if let Some(k) = answer.calibration.reserve_ratio {
        out.push_str(&format!(
            "    {:<18} reserved = {:.3} × allocated (measured)\n",
            "allocator reserve", k
        ));
    }
    let rests = |c: &Option<vramscope_measure::calibrate::Calibrated>| {
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
    };
    if resolved.task == Task::Train {
        out.push_str(&format!(
            "  largest micro-batch at seq {}: {}{}\n  longest sequence at batch {}: {}{}\n",
            thousands(resolved.seq),
            show(answer.max_batch),
            rests(&answer.at_max_batch),
            resolved.batch,
            show(answer.max_seq),
            rests(&answer.at_max_seq)
        ));
    } else {
        out.push_str(&format!(
            "  most concurrent sequences at context {}: {}{}\n  longest context at batch {}: {}{}\n",
            thousands(resolved.seq + resolved.new_tokens),
            show(answer.max_batch),
            rests(&answer.at_max_batch),
            resolved.batch,
            show(answer.max_context),
            rests(&answer.at_max_seq)
        ));
    }
    for n in &answer.notes {
        out.push_str(&format!("  {}\n", paint(DIM, n)));
    }
    out.push_str(&paint(
        DIM,
        &format!("  ({} estimates searched)\n", answer.evaluations),
    ));
    print(&out)?;
    Ok(0)
}

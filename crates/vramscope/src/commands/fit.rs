//! `vramscope fit`: the largest batch / sequence / context that fits the GPU.

use super::estimate::prepare_job;
use super::jobargs::JobArgs;
use super::CmdResult;
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, thousands};
use vramscope_core::job::Task;

/// `fit --json`'s answer: the contract's fit, and when even 1 does not fit, the advice.
#[derive(serde::Serialize)]
pub struct FitWithAdvice {
    #[serde(flatten)]
    pub answer: vramscope_core::fit::FitAnswer,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<Vec<vramscope_core::advice::Advice>>,
}

/// The fit search, and the advice (the cheapest changes that fit) when nothing fits at 1.
/// What `fit --json` prints and `/api/fit` answers.
pub fn fit_with_advice(
    model: &vramscope_core::estimate::ModelInput,
    resolved: &vramscope_core::job::ResolvedJob,
) -> Result<FitWithAdvice, vramscope_core::CoreError> {
    let mut answer = vramscope_core::fit::fit(model, resolved)?;
    serve_by_repo(&mut answer, &model.name);
    let advice = if answer.max_batch.is_none() {
        Some(vramscope_core::advice::advise(model, resolved)?)
    } else {
        None
    };
    Ok(FitWithAdvice { answer, advice })
}

/// vLLM loads a model by its Hugging Face repo: a preset's launch line names the preset's repo
/// (`vllm serve meta-llama/Llama-3.1-8B`), not vramscope's short id.
fn serve_by_repo(answer: &mut vramscope_core::fit::FitAnswer, name: &str) {
    let (Some(l), Some(p)) = (
        answer.launch.as_mut(),
        vramscope_formats::presets::find(name),
    ) else {
        return;
    };
    if l.engine == "vllm" {
        l.command = l.command.replacen(
            &format!("vllm serve {name}"),
            &format!("vllm serve {}", p.repo),
            1,
        );
    }
}

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
    let (model, resolved, _) = prepare_job(&job)?;
    let FitWithAdvice { answer, advice } = fit_with_advice(&model, &resolved)?;
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
            ..vramscope_core::estimate::estimate(&model, &resolved)?
        };
        out.push_str(&crate::render::whatif::render_advice(&report));
    }
    print(&out)?;
    Ok(0)
}

/// `fit --measured FILE`: the search on the estimator corrected by a measured run of the job.
pub fn run_calibrated(args: &JobArgs, file: &std::path::Path, json: bool) -> CmdResult {
    let job = args.to_job()?;
    let (model, resolved, _) = prepare_job(&job)?;
    let measured = super::analyze::load(file)?;
    let answer =
        vramscope_measure::calibrate::fit_calibrated(&model, &resolved, &measured.per_gpu)?;
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

//! `vramscope fit`: the largest batch / sequence / context that fits the GPU.

use super::estimate::prepare_job;
use super::jobargs::JobArgs;
use super::CmdResult;
use crate::output::{paint, print, print_json, BOLD, DIM};
use crate::units::{bytes, thousands};
use std::process::ExitCode;
use vramscope_core::job::Task;

pub fn run(args: &JobArgs, json: bool) -> CmdResult {
    let job = args.to_job()?;
    let (model, resolved, _) = prepare_job(&job)?;
    let answer = vramscope_core::fit::fit(&model, &resolved)?;
    if json {
        print_json(&answer)?;
        return Ok(ExitCode::SUCCESS);
    }
    let show = |v: Option<u64>| v.map_or_else(|| "none (even 1 does not fit)".into(), thousands);
    let mut out = format!(
        "{} on {} ({} as the device reports it)\n",
        paint(BOLD, &model.name),
        answer.gpu,
        bytes(answer.capacity)
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
    for n in &answer.notes {
        out.push_str(&format!("  {}\n", paint(DIM, n)));
    }
    out.push_str(&paint(
        DIM,
        &format!("  ({} estimates searched)\n", answer.evaluations),
    ));
    print(&out)?;
    Ok(ExitCode::SUCCESS)
}

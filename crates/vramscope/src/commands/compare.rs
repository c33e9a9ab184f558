//! `vramscope compare [MODEL] [FLAGS] FILE`: the estimate and a measurement side by side, per
//! category, with the difference in peak allocated bytes explained as far as the record allows.
//! The job is read as `estimate` reads it (MODEL, flags, `--job`, `--from`).

use super::jobargs::{JobArgs, JobError};
use super::CmdResult;
use crate::app::Comparison;
use crate::output::{paint, print, print_json, warning_line, BOLD, HEADER};
use crate::units::bytes;
use std::path::{Path, PathBuf};

pub fn run(
    s: &crate::app::Session,
    mut args: JobArgs,
    file: Option<PathBuf>,
    json: bool,
) -> CmdResult {
    let file = measurement(&mut args, file)?;
    let cmp = crate::app::compare(
        s,
        &crate::app::CompareInput {
            job: args.to_job()?,
            path: file.clone(),
        },
    )?;
    if json {
        print_json(&cmp)?;
    } else {
        print(&render(&cmp, &file))?;
    }
    Ok(0)
}

/// The measurement is the last positional: `compare MODEL FILE`, or `compare --job J FILE` (the
/// one positional clap gives to MODEL is then the file).
fn measurement(args: &mut JobArgs, file: Option<PathBuf>) -> Result<PathBuf, JobError> {
    match (file, args.model.take()) {
        (Some(f), model) => {
            args.model = model;
            Ok(f)
        }
        (None, Some(only)) => Ok(PathBuf::from(only)),
        (None, None) => Err(JobError(
            "compare: FILE is required: the measurement (a snapshot, profiler timeline or \
             engine log), after the job (MODEL and flags, or --job FILE)"
                .into(),
        )),
    }
}

fn signed(v: i64) -> String {
    if v < 0 {
        format!("−{}", bytes(v.unsigned_abs()))
    } else {
        format!("+{}", bytes(v as u64))
    }
}

fn render(c: &Comparison, file: &Path) -> String {
    let mut s = format!(
        "{} estimate vs {}\n\n  {:<18} {:>12} {:>12} {:>13}\n",
        paint(HEADER, "Compare:"),
        file.display(),
        "at the peak",
        "estimated",
        "measured",
        "measured−est"
    );
    for r in &c.rows {
        if r.estimated == 0 && r.measured == 0 {
            continue;
        }
        s.push_str(&format!(
            "  {:<18} {:>12} {:>12} {:>13}\n",
            r.category,
            bytes(r.estimated),
            bytes(r.measured),
            signed(r.difference)
        ));
    }
    let (ea, ma) = (c.estimate.peaks.peak_allocated, c.measured.peak_allocated());
    s.push_str(&format!(
        "  {:<18} {:>12} {:>12} {:>13}\n\n",
        paint(BOLD, "peak allocated"),
        ea.map(bytes).unwrap_or_else(|| "?".into()),
        ma.map(bytes).unwrap_or_else(|| "?".into()),
        c.residual
            .peak_allocated_difference
            .map(signed)
            .unwrap_or_default()
    ));
    if let Some(src) = c.source {
        s.push_str(&format!(
            "  ({src}: a log states totals by category, not allocations; the rows are what it \
             states)\n"
        ));
        return with_warnings(s, c);
    }
    s.push_str(&paint(HEADER, "The residual:"));
    s.push('\n');
    s.push_str(&format!(
        "  unattributed in the record: {}\n",
        bytes(c.residual.unattributed)
    ));
    s.push_str(&format!(
        "  allocator reserve: estimated {}, measured {}\n",
        bytes(c.residual.allocator_reserve_estimated),
        c.residual
            .allocator_reserve_measured
            .map(bytes)
            .unwrap_or_else(|| "unknown (no allocator segments in the record)".into())
    ));
    s.push_str(&format!(
        "  CUDA context and non-PyTorch memory: estimated {}, not in the record \
         (nvidia-smi shows it)\n",
        bytes(c.residual.cuda_context_not_measured)
    ));
    with_warnings(s, c)
}

fn with_warnings(mut s: String, c: &Comparison) -> String {
    if !c.warnings.is_empty() {
        s.push('\n');
        for w in &c.warnings {
            s.push_str(&warning_line(w));
        }
    }
    s
}

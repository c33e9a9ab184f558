//! The what-if table under the estimate.

use super::terminal::gib_opt;
use vramscope_core::report::Report;

const GIB: f64 = (1u64 << 30) as f64;

/// The what-if table: each technique's device total and what it saves against the job.
pub fn render_what_if(report: &Report, rows: &[vramscope_core::fit::WhatIf]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n  what if                                   device GiB   saved GiB  fits\n",
    );
    let base = report.per_gpu.device_total;
    for r in rows {
        let name: String = r.technique.chars().take(40).collect();
        let saved = r
            .saved
            .map_or_else(|| "n/a".into(), |s| format!("{:+.2}", s as f64 / GIB));
        let fits = match r.fits {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        out.push_str(&format!(
            "  {name:<40} {:>11} {saved:>11}  {fits}\n",
            gib_opt(r.device_total)
        ));
    }
    if base.is_some() {
        out.push_str(
            "  (saved = this job's device total minus the technique's; one change at a time)\n",
        );
    }
    out
}

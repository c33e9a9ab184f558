//! The advice block ("does not fit → do this") and the what-if table under the estimate.

use super::terminal::wrap;
use crate::units::bytes;
use vramscope_core::report::Report;

/// Widest flags column before the flags get a line of their own.
const FLAGS_COLS: usize = 40;

/// Headroom below which a fit is called tight (allocator fragmentation, another process or a
/// longer batch can take it).
pub const TIGHT_HEADROOM: i64 = 1 << 30;

/// "does not fit → do this": the report's advice, cheapest first, each as the flags to add,
/// the device total and headroom, and what it gives up. Empty when the report has no advice.
pub fn render_advice(report: &Report) -> String {
    let Some(advice) = &report.advice else {
        return String::new();
    };
    let fits = report.fit.as_ref().is_some_and(|f| f.fits);
    let mut out = String::from("\n");
    if advice.is_empty() {
        out.push_str(if fits {
            "  no searched change saves enough to matter\n"
        } else {
            "  does not fit, and no combination of the searched changes fits: more GPUs\n  \
             (--gpus N with --zero 3), a larger GPU, or a smaller model\n"
        });
        return out;
    }
    out.push_str(if fits {
        "  to save memory, cheapest first (add the flags to the command):\n"
    } else {
        "  does not fit → do this, cheapest first (add the flags to the command):\n"
    });
    if advice.iter().any(|a| !a.env.is_empty()) {
        out.push_str("  (NAME=value: set it in the job's environment, before the command)\n");
    }
    for (i, a) in advice.iter().enumerate() {
        out.push_str(&format!("  {}. {}\n", i + 1, shown(&a.flags, &a.env)));
        let mut line = format!(
            "{} on the device, {} free",
            bytes(a.device_total),
            bytes(a.headroom.max(0) as u64)
        );
        if a.headroom < TIGHT_HEADROOM {
            line.push_str(" (tight)");
        }
        if let Some(h) = a.host_bytes {
            line.push_str(&format!(", {} in host RAM", bytes(h)));
        }
        line.push_str(&format!(" · gives up {}", a.gives_up));
        for l in wrap(&line, "     ", "     ") {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

/// What a change asks of the user, as shown: the environment it needs first (`K=V`, the form a
/// shell takes before the command: `PYTORCH_CUDA_ALLOC_CONF` is read by PyTorch at start-up, not
/// a flag of the script), then the flags to add, less `--alloc-conf`, which only tells vramscope
/// what the environment says.
fn shown(flags: &[String], env: &std::collections::BTreeMap<String, String>) -> String {
    let mut parts: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if f == "--alloc-conf" && !env.is_empty() {
            it.next();
            continue;
        }
        parts.push(f.clone());
    }
    parts.join(" ")
}

/// A what-if row's time cost as a signed percentage ("+33 %", "−12 %"), "-" when unknown.
fn time_cost(cost: Option<f64>) -> String {
    match cost {
        None => "-".into(),
        Some(c) if c.abs() < 0.005 => "0 %".into(),
        Some(c) => {
            let sign = if c < 0.0 { "−" } else { "+" };
            format!("{sign}{:.0} %", 100.0 * c.abs())
        }
    }
}

/// The what-if table: each technique's flags, device total and what it saves against the job.
pub fn render_what_if(report: &Report, rows: &[vramscope_core::fit::WhatIf]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n  {:<FLAGS_COLS$} {:>10} {:>11}  fits {:>7}\n",
        "what if (one change at a time)", "device", "saved", "time"
    );
    for r in rows {
        let flags = shown(&r.flags, &r.env);
        let saved = r.saved.map_or_else(
            || "n/a".into(),
            |s| {
                let sign = if s < 0 { "−" } else { "+" };
                format!("{sign}{}", bytes(s.unsigned_abs()))
            },
        );
        let fits = match r.fits {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let device = r.device_total.map_or_else(|| "n/a".into(), bytes);
        let numbers = format!(
            "{device:>10} {saved:>11}  {fits:<4} {:>7}",
            time_cost(r.time_cost)
        );
        if flags.chars().count() <= FLAGS_COLS {
            out.push_str(&format!("  {flags:<FLAGS_COLS$} {numbers}\n"));
        } else {
            for l in wrap(&flags, "  ", "    ") {
                out.push_str(&l);
                out.push('\n');
            }
            out.push_str(&format!("  {:<FLAGS_COLS$} {numbers}\n", ""));
        }
    }
    if report.per_gpu.device_total.is_some() {
        out.push_str("  (saved = this job's device total minus the change's)\n");
        if rows.iter().any(|r| !r.env.is_empty()) {
            out.push_str("  (NAME=value: an environment change, set before the command)\n");
        }
        if rows.iter().any(|r| r.time_cost.is_some()) {
            out.push_str(
                "  (time = the change's modelled time per token against this job's; − is faster)\n",
            );
        }
        if rows
            .last()
            .is_some_and(|r| r.technique.starts_with("combined"))
        {
            out.push_str(
                "  (the last row: every saving that keeps all weights trained, together)\n",
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An environment change is shown as the shell writes it, not as vramscope's own flag.
    #[test]
    fn environment_changes_are_shown_as_such() {
        let flags: Vec<String> = ["--alloc-conf", "expandable_segments:True", "--lora", "16"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let env = [(
            "PYTORCH_CUDA_ALLOC_CONF".to_string(),
            "expandable_segments:True".to_string(),
        )]
        .into_iter()
        .collect();
        assert_eq!(
            shown(&flags, &env),
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True --lora 16"
        );
        assert_eq!(shown(&flags[2..], &Default::default()), "--lora 16");
    }
}

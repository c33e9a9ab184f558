//! The advice block ("does not fit → do this") and the what-if table under the estimate.

use super::terminal::wrap;
use super::TIGHT_HEADROOM;
use crate::units::bytes;
use vramscope_core::job::Task;
use vramscope_core::report::Report;

/// Widest flags column before the flags get a line of their own.
const FLAGS_COLS: usize = 40;

/// "does not fit → do this": the report's advice, cheapest first, each as the flags to add,
/// the device total and headroom, and what it gives up. Empty when the report has no advice.
pub fn render_advice(report: &Report) -> String {
    let Some(advice) = &report.advice else {
        return String::new();
    };
    let fits = report.fit.as_ref().is_some_and(|f| f.fits);
    let mut out = String::from("\n");
    if advice.is_empty() {
        let infer = report.job.task == vramscope_core::job::Task::Infer;
        out.push_str(if fits {
            "  no searched change saves enough to matter\n"
        } else if infer {
            "  does not fit, and no combination of the searched changes fits: more GPUs\n  \
             (--gpus N --tp N), a larger GPU, or a smaller model\n"
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
        if a.reserve_estimated {
            line.push_str(" (≈: its allocator reserve is the packing estimate, not simulated)");
        }
        if a.time_cost.is_some() {
            line.push_str(&format!(", time {}", time_cost(a.time_cost)));
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

/// A signed count with thousands separators ("+67,072", "−1,024").
fn signed_thousands(n: i64) -> String {
    let sign = if n < 0 { "−" } else { "+" };
    format!("{sign}{}", crate::units::thousands(n.unsigned_abs()))
}

/// A row's middle columns: what it saves (bytes), or for an engine that preallocates its KV
/// pool (vLLM, SGLang: the device total does not move) the tokens its pool holds, their gain,
/// and (vLLM) the requests of the job's context it holds at once.
fn gain(r: &vramscope_core::fit::WhatIf, pooled: bool) -> String {
    if pooled {
        let tokens = r.kv_tokens.map_or_else(
            || "n/a".into(),
            |t| {
                let g = r
                    .kv_tokens_gained
                    .map_or_else(String::new, |g| format!(" ({})", signed_thousands(g)));
                format!("{}{g}", crate::units::thousands(t))
            },
        );
        let seqs = r
            .concurrent_requests
            .map_or_else(|| "-".into(), |n| n.to_string());
        return format!("{tokens:>22} {seqs:>5}");
    }
    let saved = r.saved.map_or_else(
        || "n/a".into(),
        |s| {
            let sign = if s < 0 { "−" } else { "+" };
            let mark = if r.reserve_estimated { "≈" } else { "" };
            format!("{mark}{sign}{}", bytes(s.unsigned_abs()))
        },
    );
    format!("{saved:>11}")
}

/// The what-if table: each technique's flags, device total and what it saves against the job
/// (for vLLM and SGLang: the tokens the KV pool holds instead).
pub fn render_what_if(report: &Report, rows: &[vramscope_core::fit::WhatIf]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let pooled = rows.iter().any(|r| r.kv_tokens.is_some());
    let middle = if pooled {
        format!("{:>22} {:>5}", "KV pool tokens", "seqs")
    } else {
        format!("{:>11}", "saved")
    };
    // A GGUF engine's layers on the CPU: what a change does to host RAM beside the device.
    let host = rows.iter().any(|r| r.host_bytes.is_some()) && report.job.task == Task::Infer;
    let host_head = if host {
        format!(" {:>10}", "host RAM")
    } else {
        String::new()
    };
    let mut out = format!(
        "\n  {:<FLAGS_COLS$} {:>10}{host_head} {middle}  fits {:>7}\n",
        "what if (one change at a time)", "device", "time"
    );
    for r in rows {
        let flags = shown(&r.flags, &r.env);
        let fits = match r.fits {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let mut device = format!("{:>10}", r.device_total.map_or_else(|| "n/a".into(), bytes));
        if host {
            let h = r.host_bytes.map_or_else(|| "0 B".into(), bytes);
            device.push_str(&format!(" {h:>10}"));
        }
        let numbers = format!(
            "{device} {}  {fits:<4} {:>7}",
            gain(r, pooled),
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
    if pooled {
        out.push_str(
            "  (the engine takes its share of the GPU whatever the job: a change gives the KV\n   \
             pool more tokens; seqs = requests of the job's context it holds at once)\n",
        );
    }
    if report.per_gpu.peaks.device_total.is_some() {
        if !pooled {
            out.push_str("  (saved = this job's device total minus the change's)\n");
        }
        if rows.iter().any(|r| r.reserve_estimated) {
            out.push_str(
                "  (≈: that change's allocator reserve is the packing estimate, not simulated:\n   \
                 a layout the allocation stream does not write yet; its saving may be\n   \
                 overstated)\n",
            );
        }
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

//! The estimate's modelled speed in one or two lines (`report.throughput`).

use crate::units::thousands;
use vramscope_core::report::Report;
use vramscope_core::throughput::Throughput;

/// Seconds in adaptive units: ms under one second, else s.
pub fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// "step 1.59 s · 10,314 tokens/s per GPU · MFU 60 % · bound by compute" and the step's
/// parts (its forward, backward and optimizer phases, then what is not hidden); nothing without
/// a modelled throughput.
pub fn lines(r: &Report, indent: &str) -> Vec<String> {
    match &r.throughput {
        Some(Throughput::Train(t)) => {
            let mut first = format!(
                "{indent}modelled step {} · {} tokens/s per GPU · MFU {:.0} % · bound by {}",
                seconds(t.step_time_s),
                thousands(t.tokens_per_s_per_gpu.round() as u64),
                t.mfu * 100.0,
                t.bound
            );
            if let Some(c) = t.cost_per_million_tokens {
                first.push_str(&format!(" · ${c:.2} per million tokens"));
            }
            let parts = [
                ("generation", t.generation_s.unwrap_or(0.0)),
                ("forward", t.forward_s),
                ("backward", t.backward_s),
                ("optimizer", t.optimizer_s),
                ("communication", t.parts.communication_s),
                ("offload", t.parts.offload_s),
                ("pipeline bubble", t.parts.bubble_s),
            ]
            .iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(n, s)| format!("{n} {}", seconds(*s)))
            .collect::<Vec<_>>()
            .join(", ");
            let mut out = vec![first, format!("{indent}  of which {parts}")];
            if let (Some(p), Some(src)) = (t.price_per_gpu_hour, &t.price_source) {
                let from = if src == "job" {
                    "--price-per-gpu-hour".to_string()
                } else {
                    src.clone()
                };
                out.push(format!("{indent}  at ${p:.2} per GPU-hour ({from})"));
            }
            out
        }
        Some(Throughput::Infer(t)) => vec![
            format!(
                "{indent}modelled prefill {} tokens/s · decode {} tokens/s (the job's batch)",
                thousands(t.prefill_tokens_per_s.round() as u64),
                thousands(t.decode_tokens_per_s.round() as u64)
            ),
            format!(
                "{indent}  one generate {}: prefill {}, then {} a token, {}-bound",
                seconds(t.generate_s),
                seconds(t.prefill_s),
                seconds(t.decode_step_s),
                t.bound
            ),
        ],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn seconds_are_adaptive() {
        assert_eq!(seconds(0.0421), "42 ms");
        assert_eq!(seconds(1.5884), "1.59 s");
    }
}

//! `vramscope analyze LOG`: the short table for an engine log or an OOM message (the JSON is
//! the measure crate's `LogReport` as it is).

use crate::output::{paint, warning_line, BOLD, HEADER};
use crate::units::bytes;
use serde_json::Value;
use vramscope_measure::logs::{LogKind, LogReport};

/// A figure or "—" when the log does not state it.
fn fig(v: Option<u64>) -> String {
    v.map(bytes).unwrap_or_else(|| "—".into())
}

fn row(s: &mut String, label: &str, v: Option<u64>) {
    if v.is_some() {
        s.push_str(&format!("  {label:<26} {:>12}\n", fig(v)));
    }
}

pub fn render(r: &LogReport, name: &str) -> String {
    let mut s = format!(
        "{} {} ({})\n\n",
        paint(HEADER, "Read from the log:"),
        name,
        r.source.name()
    );
    if let Some(o) = &r.oom {
        oom(&mut s, o);
    } else {
        engine_figures(&mut s, r);
    }
    if let Some(e) = &r.engine {
        let parts: Vec<String> = e
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k} {}", plain(v)))
            .collect();
        if !parts.is_empty() {
            s.push_str(&format!("\n  engine: {}\n", parts.join(", ")));
        }
    }
    if let Some(d) = &r.diagnosis {
        s.push_str(&format!("\n{} {d}\n", paint(BOLD, "Diagnosis:")));
    }
    if let Some(a) = &r.allocator {
        s.push_str(&allocator_line(a, r.oom.as_ref()));
    }
    if !r.warnings.is_empty() {
        s.push('\n');
        for w in &r.warnings {
            s.push_str(&warning_line(w));
        }
    }
    s
}

/// The expandable-segments advice of an OOM: the environment change and what it could give
/// back, at most.
fn allocator_line(
    a: &vramscope_measure::logs::torch_oom::AllocatorAdvice,
    o: Option<&vramscope_measure::logs::OomFigures>,
) -> String {
    let fit = match (a.request_could_fit, o.and_then(|o| o.requested)) {
        (Some(true), Some(r)) => {
            format!(", enough with the free memory for the {} asked", bytes(r))
        }
        (Some(false), Some(r)) => {
            format!(
                ", not enough even with the free memory for the {} asked",
                bytes(r)
            )
        }
        _ => String::new(),
    };
    format!(
        "{} with {} (an environment variable, set before the process starts) up to {} \
         reserved but unallocated could be used again{fit}\n",
        paint(BOLD, "Allocator:"),
        a.env,
        bytes(a.gives_back_up_to)
    )
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn oom(s: &mut String, o: &vramscope_measure::logs::OomFigures) {
    row(s, "requested", o.requested);
    row(s, "GPU capacity", o.capacity);
    row(s, "free on the GPU", o.free);
    row(s, "this process in use", o.process_in_use);
    row(s, "other processes", o.other_processes);
    row(s, "allocated by PyTorch", o.allocated);
    row(s, "reserved by PyTorch", o.reserved);
    row(s, "reserved, unallocated", o.reserved_unallocated);
}

fn engine_figures(s: &mut String, r: &LogReport) {
    let g = &r.per_gpu;
    let c = &g.components;
    if let Some(d) = &g.device {
        s.push_str(&format!("  {:<26} {:>12}\n", "busiest device", d));
    }
    row(s, "weights", c.parameters);
    row(s, "KV cache", c.kv_cache);
    row(s, "KV pool (preallocated)", g.kv_pool);
    row(s, "compute / activations", c.temporaries);
    row(s, "outside PyTorch", c.cuda_context);
    row(s, "GPU capacity", r.fit.capacity);
    if r.source != LogKind::Vllm && r.devices.len() > 1 {
        for d in &r.devices {
            s.push_str(&format!(
                "  {:<26} {:>12}\n",
                d.device,
                bytes(d.bytes.total())
            ));
        }
    }
    if let Some(l) = &r.layout {
        for (k, label) in [
            ("memory.weights.total", "ollama plan: weights"),
            ("memory.required.kv", "ollama plan: KV cache"),
            ("memory.graph.full", "ollama plan: graph"),
            ("memory.required.full", "ollama plan: all on GPU"),
            ("memory.required.partial", "ollama plan: as loaded"),
        ] {
            row(s, label, l.get(k).and_then(Value::as_u64));
        }
    }
    if let Some(h) = &r.host {
        row(s, "host: weights", h.parameters);
        row(s, "host: KV cache", h.kv_cache);
        row(s, "host: compute", h.temporaries);
    }
}

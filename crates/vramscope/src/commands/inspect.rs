//! `vramscope inspect MODEL`: the exact parameter inventory.

use super::CmdResult;
use crate::app;
use crate::app::inspect::{InspectReport, LayerRow};
use crate::output::{paint, print, print_json, warning_line, BOLD, DIM, HEADER};
use crate::units::{bytes, percent, short_count, thousands};
use comfy_table::{presets, CellAlignment, Table};
use vramscope_core::model::{AttentionKind, Head, Mlp, Positions};
use vramscope_core::Component;
use vramscope_formats::model_source::LoadedModel;

pub fn run(
    model: &str,
    json: bool,
    all_layers: bool,
    list_tensors: bool,
    assume_llama: bool,
) -> CmdResult {
    let loaded = app::inspect::load(model, assume_llama)?;
    let report = app::inspect::report(&loaded);
    if json {
        print_json(&report)?;
    } else {
        print(&human(&loaded, &report, all_layers, list_tensors))?;
    }
    Ok(0)
}

fn right(t: &mut Table, cols: &[usize]) {
    for &c in cols {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
}

fn human(m: &LoadedModel, r: &InspectReport, all_layers: bool, list_tensors: bool) -> String {
    let mut out = String::new();
    let s = &r.model;
    let arch = s
        .architecture
        .as_deref()
        .map(|a| format!(" — {a}"))
        .unwrap_or_default();
    out.push_str(&format!(
        "{}{arch} {}\n",
        paint(BOLD, &s.name),
        paint(DIM, &format!("(from {})", r.origin))
    ));
    if matches!(m.source.kind.as_str(), "hub" | "hf-cache") {
        out.push_str(&format!("  {}\n", m.source.describe()));
    }
    let total_bytes = r.tensors.iter().map(|t| t.bytes).sum::<u64>();
    let dtypes: Vec<&str> = r.by_dtype.keys().map(String::as_str).collect();
    out.push_str(&format!(
        "  {} parameters ({}), {} trainable",
        thousands(s.params_total),
        short_count(s.params_total),
        thousands(s.params_trainable)
    ));
    if !r.tensors.is_empty() {
        out.push_str(&format!(
            " · {} of weights as {}",
            bytes(total_bytes),
            dtypes.join(" + ")
        ));
    }
    out.push('\n');
    if let Some(spec) = &m.spec {
        out.push_str(&format!("  {}\n", describe(spec)));
    }
    for w in &r.warnings {
        out.push_str(&warning_line(w));
    }
    if r.tensors.is_empty() {
        out.push_str(&paint(
            DIM,
            "  (a bare parameter count: no tensors to list)\n",
        ));
        return out;
    }

    out.push_str(&format!("\n{}\n", paint(HEADER, "By component")));
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(["component", "params", "share", "bytes", "tensors"]);
    for c in Component::ALL {
        if let Some(x) = r.by_component.get(c.name()) {
            t.add_row([
                c.name().to_string(),
                thousands(x.params),
                percent(x.params, s.params_total),
                bytes(x.bytes),
                thousands(x.tensors),
            ]);
        }
    }
    right(&mut t, &[1, 2, 3, 4]);
    out.push_str(&format!("{t}\n"));

    out.push_str(&format!("\n{}\n", paint(HEADER, "By dtype")));
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(["dtype", "params", "bytes", "tensors"]);
    for (d, x) in &r.by_dtype {
        t.add_row([
            d.clone(),
            thousands(x.params),
            bytes(x.bytes),
            thousands(x.tensors),
        ]);
    }
    right(&mut t, &[1, 2, 3]);
    out.push_str(&format!("{t}\n"));

    if !r.per_layer.is_empty() {
        let n = r.per_layer.len();
        let shown: Vec<&LayerRow> = if all_layers || n <= 8 {
            r.per_layer.iter().collect()
        } else {
            r.per_layer[..3]
                .iter()
                .chain(&r.per_layer[n - 3..])
                .collect()
        };
        let title = if shown.len() < n {
            format!("Per layer ({n} layers; first and last three, --layers for all)")
        } else {
            format!("Per layer ({n} layers)")
        };
        out.push_str(&format!("\n{}\n", paint(HEADER, &title)));
        let comps: Vec<Component> = Component::ALL
            .into_iter()
            .filter(|c| {
                r.per_layer
                    .iter()
                    .any(|l| l.by_component.contains_key(c.name()))
            })
            .collect();
        let mut t = Table::new();
        t.load_style(presets::NOTHING);
        let mut header = vec!["layer".to_string(), "params".into(), "bytes".into()];
        header.extend(comps.iter().map(|c| c.name().to_string()));
        t.set_header(header);
        for (i, l) in shown.iter().enumerate() {
            if i == 3 && shown.len() < n {
                t.add_row(vec!["…".to_string()]);
            }
            let mut row = vec![l.layer.to_string(), thousands(l.params), bytes(l.bytes)];
            row.extend(comps.iter().map(|c| {
                l.by_component
                    .get(c.name())
                    .map_or("-".into(), |v| thousands(*v))
            }));
            t.add_row(row);
        }
        let cols: Vec<usize> = (1..3 + comps.len()).collect();
        right(&mut t, &cols);
        out.push_str(&format!("{t}\n"));
    }

    if list_tensors {
        out.push_str(&format!("\n{}\n", paint(HEADER, "Tensors")));
        let mut t = Table::new();
        t.load_style(presets::NOTHING);
        t.set_header(["name", "shape", "dtype", "size", "component"]);
        for x in &r.tensors {
            let shape: Vec<String> = x.shape.iter().map(u64::to_string).collect();
            t.add_row([
                x.name.clone(),
                format!("[{}]", shape.join(", ")),
                x.dtype.to_string(),
                bytes(x.bytes),
                x.component.name().to_string(),
            ]);
        }
        right(&mut t, &[3]);
        out.push_str(&format!("{t}\n"));
    }
    out
}

/// One line on the architecture: layers, width, attention, MLP, vocabulary, head, positions.
fn describe(spec: &vramscope_core::ModelSpec) -> String {
    let mut parts = vec![format!("{} layers", spec.num_layers())];
    if let Some(enc) = &spec.encoder {
        parts[0] = format!(
            "{} encoder + {} decoder layers",
            enc.layers.len(),
            spec.decoder.layers.len()
        );
    }
    parts.push(format!("hidden {}", spec.hidden_size));
    if let Some(l) = spec.all_layers().next() {
        parts.push(match l.attention.kind {
            AttentionKind::Standard {
                heads,
                kv_heads,
                head_dim,
            } => {
                let kind = if kv_heads == heads {
                    "MHA".to_string()
                } else if kv_heads == 1 {
                    "MQA".to_string()
                } else {
                    format!("GQA, {kv_heads} KV heads")
                };
                format!("{heads} heads ({kind}) × {head_dim}")
            }
            AttentionKind::Latent {
                heads,
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => format!("{heads} heads (MLA, KV latent {kv_lora_rank} + rope {qk_rope_head_dim})"),
        });
        let windows = spec
            .all_layers()
            .filter(|l| l.attention.sliding_window.is_some())
            .count();
        if windows > 0 {
            parts.push(format!(
                "sliding window {} on {windows}/{} layers",
                l.attention
                    .sliding_window
                    .or_else(|| spec.all_layers().find_map(|l| l.attention.sliding_window))
                    .unwrap_or(0),
                spec.num_layers()
            ));
        }
    }
    let moe = spec.all_layers().find_map(|l| match &l.mlp {
        Mlp::Moe(m) => Some(m),
        Mlp::Dense(_) => None,
    });
    if let Some(m) = moe {
        let moe_layers = spec
            .all_layers()
            .filter(|l| matches!(l.mlp, Mlp::Moe(_)))
            .count();
        parts.push(format!(
            "MoE {} experts × {} (top-{}){} on {moe_layers} layers",
            m.experts,
            m.expert.ffn,
            m.top_k,
            m.shared
                .as_ref()
                .map(|s| format!(" + shared {}", s.ffn))
                .unwrap_or_default()
        ));
    } else if let Some(Mlp::Dense(d)) = spec.all_layers().next().map(|l| &l.mlp) {
        parts.push(format!(
            "{} MLP {} ({})",
            if d.gated { "gated" } else { "plain" },
            d.ffn,
            d.activation
        ));
    }
    parts.push(format!("vocab {}", thousands(spec.vocab_size)));
    parts.push(
        match spec.head {
            Head::LanguageModel { tied: true, .. } | Head::MaskedLm { tied: true } => "tied head",
            Head::LanguageModel { tied: false, .. } | Head::MaskedLm { tied: false } => {
                "untied head"
            }
            Head::None { .. } => "no head",
            Head::Classifier { .. } => "classification head",
        }
        .to_string(),
    );
    parts.push(
        match spec.embedding.positions {
            Positions::Learned { .. } => "learned positions",
            Positions::Rotary { .. } => "rotary",
            Positions::Relative { .. } => "relative positions",
            Positions::None => "no position table",
        }
        .to_string(),
    );
    parts.join(" · ")
}

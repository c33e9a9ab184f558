//! `vramscope inspect MODEL`: the exact parameter inventory.

use super::CmdResult;
use crate::app;
use crate::app::inspect::{InspectReport, LayerRow};
use crate::output::{paint, print, print_json, warning_line, BOLD, DIM, HEADER};
use crate::units::{bytes, percent, short_count, thousands};
use comfy_table::{CellAlignment, Table};
use vramscope_core::model::{AttentionKind, Head, Mlp, Positions, SsmVersion};
use vramscope_core::{Component, ModelSpec};
use vramscope_formats::model_source::LoadedModel;

pub fn run(
    s: &app::Session,
    model: &str,
    json: bool,
    all_layers: bool,
    list_tensors: bool,
    assume_llama: bool,
) -> CmdResult {
    if let Some(p) = app::diffusion::pipeline_of(s, model, assume_llama)? {
        return super::inspect_pipeline::run(&p, json);
    }
    let loaded = app::inspect::load(s, model, assume_llama)?;
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

/// The terminal report: the model's lines, then the tables by component, dtype and layer, and
/// (with `--tensors`) every tensor.
fn human(m: &LoadedModel, r: &InspectReport, all_layers: bool, list_tensors: bool) -> String {
    let mut out = heading(m, r);
    if r.tensors.is_empty() {
        out.push_str(&paint(
            DIM,
            "  (a bare parameter count: no tensors to list)\n",
        ));
        return out;
    }
    out.push_str(&super::inspect_vision::components(r));
    out.push_str(&by_component(r));
    out.push_str(&by_dtype(r));
    out.push_str(&per_layer(r, all_layers));
    if list_tensors {
        out.push_str(&tensors(r));
    }
    out
}

/// Name and architecture, where it came from, the totals, one line on the architecture and the
/// reader's warnings.
fn heading(m: &LoadedModel, r: &InspectReport) -> String {
    let s = &r.model;
    let arch = s
        .architecture
        .as_deref()
        .map(|a| format!(" — {a}"))
        .unwrap_or_default();
    let mut out = format!(
        "{}{arch} {}\n",
        paint(BOLD, &s.name),
        paint(DIM, &format!("(from {})", r.origin))
    );
    if matches!(m.source.kind.as_str(), "hub" | "hf-cache") {
        out.push_str(&format!("  {}\n", m.source.describe()));
    }
    out.push_str(&format!(
        "  {} parameters ({}), {} trainable",
        thousands(s.params_total),
        short_count(s.params_total),
        thousands(s.params_trainable)
    ));
    if !r.tensors.is_empty() {
        let total_bytes = r.tensors.iter().map(|t| t.bytes).sum::<u64>();
        let dtypes: Vec<&str> = r.by_dtype.keys().map(String::as_str).collect();
        out.push_str(&format!(
            " · {} of weights as {}",
            bytes(total_bytes),
            dtypes.join(" + ")
        ));
    }
    out.push('\n');
    if let Some(spec) = &m.spec {
        out.push_str(&format!("  {}\n", describe(spec)));
        if let Some(v) = &spec.vision {
            out.push_str(&super::inspect_vision::describe(v));
        }
        out.push_str(&published_format(spec, &r.tensors));
    }
    for w in &r.warnings {
        out.push_str(&warning_line(w));
    }
    out
}

/// The weight format config.json's `quantization_config` names and the weights' bytes in it
/// (gpt-oss: MXFP4 experts, bf16 elsewhere), when it names one.
fn published_format(spec: &ModelSpec, tensors: &[vramscope_core::Tensor]) -> String {
    use vramscope_core::estimate::quant::{parse, total_bytes, QuantContext};
    let Some(q) = spec.quantization.as_deref() else {
        return String::new();
    };
    let Ok(format) = parse(q) else {
        return String::new();
    };
    match total_bytes(&format, tensors, &QuantContext::from_spec(spec)) {
        Ok(b) if !tensors.is_empty() => format!("  published as {q}: {} of weights\n", bytes(b)),
        _ => String::new(),
    }
}

/// A borderless table under a section title.
fn section(title: &str, t: &Table) -> String {
    format!("\n{}\n{t}\n", paint(HEADER, title))
}

fn by_component(r: &InspectReport) -> String {
    let mut t = crate::output::table(
        ["component", "params", "share", "bytes", "tensors"]
            .map(String::from)
            .to_vec(),
    );
    for c in Component::ALL {
        if let Some(x) = r.by_component.get(c.name()) {
            t.add_row([
                c.name().to_string(),
                thousands(x.params),
                percent(x.params, r.model.params_total),
                bytes(x.bytes),
                thousands(x.tensors),
            ]);
        }
    }
    right(&mut t, &[1, 2, 3, 4]);
    section("By component", &t)
}

fn by_dtype(r: &InspectReport) -> String {
    let mut t = crate::output::table(
        ["dtype", "params", "bytes", "tensors"]
            .map(String::from)
            .to_vec(),
    );
    for (d, x) in &r.by_dtype {
        t.add_row([
            d.clone(),
            thousands(x.params),
            bytes(x.bytes),
            thousands(x.tensors),
        ]);
    }
    right(&mut t, &[1, 2, 3]);
    section("By dtype", &t)
}

/// Every layer (with `--layers` or up to 8), else the first and last three.
fn per_layer(r: &InspectReport, all_layers: bool) -> String {
    let n = r.per_layer.len();
    if n == 0 {
        return String::new();
    }
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
    let comps: Vec<Component> = Component::ALL
        .into_iter()
        .filter(|c| {
            r.per_layer
                .iter()
                .any(|l| l.by_component.contains_key(c.name()))
        })
        .collect();
    let mut header = vec!["layer".to_string(), "params".into(), "bytes".into()];
    header.extend(comps.iter().map(|c| c.name().to_string()));
    let mut t = crate::output::table(header);
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
    section(&title, &t)
}

fn tensors(r: &InspectReport) -> String {
    let mut t = crate::output::table(
        ["name", "shape", "dtype", "size", "component"]
            .map(String::from)
            .to_vec(),
    );
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
    section("Tensors", &t)
}

/// One line on the architecture: layers, width, attention, MLP, vocabulary, head, positions.
fn describe(spec: &ModelSpec) -> String {
    let mut parts = vec![layers(spec), format!("hidden {}", spec.hidden_size)];
    if let Some(l) = spec.all_layers().next() {
        parts.push(attention(&l.attention.kind));
        if let Some(p) = &l.parallel_ssm {
            // Falcon-H1: a Mamba2 mixer beside attention in every layer.
            parts.push(format!(
                "beside it a {}",
                attention(&AttentionKind::StateSpace(p.ssm))
            ));
        }
        parts.extend(windows(spec));
        parts.extend(chunks(spec));
        if spec.all_layers().any(|l| l.attention.sinks) {
            parts.push("attention sinks".to_string());
        }
    }
    parts.extend(mlp(spec));
    parts.push(format!("vocab {}", thousands(spec.vocab_size)));
    parts.push(head(&spec.head).to_string());
    parts.push(positions(&spec.embedding.positions).to_string());
    parts.join(" · ")
}

fn layers(spec: &ModelSpec) -> String {
    match &spec.encoder {
        Some(enc) => format!(
            "{} encoder + {} decoder layers",
            enc.layers.len(),
            spec.decoder.layers.len()
        ),
        None => format!("{} layers", spec.num_layers()),
    }
}

/// Heads and how keys and values are shared (MHA, MQA, GQA) or compressed (MLA).
fn attention(kind: &AttentionKind) -> String {
    match *kind {
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
        AttentionKind::StateSpace(s) => {
            let kind = match s.version {
                SsmVersion::Mamba2 => format!("Mamba2, {} heads, {} groups", s.heads, s.groups),
                SsmVersion::FalconMamba => "FalconMamba".to_string(),
                SsmVersion::Mamba1 => "Mamba".to_string(),
                SsmVersion::Jamba => "Jamba's Mamba, Δ/B/C norms".to_string(),
                SsmVersion::ShortConv => {
                    return format!(
                        "gated short convolution (LFM2), width {}, kernel {}; conv state per \
                         sequence ({} × {}), constant in context length",
                        s.d_inner, s.d_conv, s.d_inner, s.d_conv
                    )
                }
                SsmVersion::GatedDeltaNet => {
                    return format!(
                        "gated DeltaNet (linear attention), {} value heads × {} over {} key \
                         heads × {}, conv {}; recurrent state per sequence ({} × {} per head, \
                         fp32), constant in context length",
                        s.heads,
                        s.d_inner / s.heads.max(1),
                        s.groups,
                        s.d_state,
                        s.d_conv,
                        s.d_state,
                        s.d_inner / s.heads.max(1)
                    )
                }
            };
            format!(
                "state-space mixer ({kind}) inner {} × state {}, conv {}; recurrent state \
                 per sequence, constant in context length",
                s.d_inner, s.d_state, s.d_conv
            )
        }
    }
}

/// The sliding window and how many layers have one, when any do.
fn windows(spec: &ModelSpec) -> Option<String> {
    let count = spec
        .all_layers()
        .filter(|l| l.attention.sliding_window.is_some())
        .count();
    if count == 0 {
        return None;
    }
    let first = spec.all_layers().next()?;
    Some(format!(
        "sliding window {} on {count}/{} layers",
        first
            .attention
            .sliding_window
            .or_else(|| spec.all_layers().find_map(|l| l.attention.sliding_window))
            .unwrap_or(0),
        spec.num_layers()
    ))
}

/// Llama 4's attention chunk and NoPE layers, when any layer has them.
fn chunks(spec: &ModelSpec) -> Option<String> {
    let n = spec.num_layers();
    let chunked: Vec<u64> = spec
        .all_layers()
        .filter_map(|l| l.attention.attention_chunk)
        .collect();
    let nope = spec.all_layers().filter(|l| l.attention.nope).count();
    let mut out = Vec::new();
    if let Some(c) = chunked.first() {
        out.push(format!(
            "attention chunk {c} on {}/{n} layers",
            chunked.len()
        ));
    }
    if nope > 0 {
        out.push(format!("no RoPE on {nope}/{n} layers"));
    }
    (!out.is_empty()).then(|| out.join(", "))
}

/// The experts (on how many layers) or the dense MLP of the first layer.
fn mlp(spec: &ModelSpec) -> Option<String> {
    let moe = spec.all_layers().find_map(|l| match &l.mlp {
        Mlp::Moe(m) => Some(m),
        Mlp::Dense(_) | Mlp::None => None,
    });
    if let Some(m) = moe {
        let moe_layers = spec
            .all_layers()
            .filter(|l| matches!(l.mlp, Mlp::Moe(_)))
            .count();
        return Some(format!(
            "MoE {} experts × {} (top-{}){} on {moe_layers} layers",
            m.experts,
            m.expert.ffn,
            m.top_k,
            m.shared
                .as_ref()
                .map(|s| format!(" + shared {}", s.ffn))
                .unwrap_or_default()
        ));
    }
    match spec.all_layers().next().map(|l| &l.mlp) {
        Some(Mlp::Dense(d)) => Some(format!(
            "{} MLP {} ({})",
            if d.gated { "gated" } else { "plain" },
            d.ffn,
            d.activation
        )),
        _ => None,
    }
}

fn head(h: &Head) -> &'static str {
    match h {
        Head::LanguageModel { tied: true, .. } | Head::MaskedLm { tied: true } => "tied head",
        Head::LanguageModel { tied: false, .. } | Head::MaskedLm { tied: false } => "untied head",
        Head::None { .. } => "no head",
        Head::Classifier { .. } => "classification head",
    }
}

fn positions(p: &Positions) -> &'static str {
    match p {
        Positions::Learned { .. } => "learned positions",
        Positions::Rotary { .. } => "rotary",
        Positions::Relative { .. } => "relative positions",
        Positions::None => "no position table",
    }
}

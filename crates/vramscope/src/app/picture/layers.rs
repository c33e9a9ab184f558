//! Activations each layer keeps for backward, from the forward pass of the timeline.

use super::{esc, hex, section, text, BAR_W, LEFT};
use crate::units::Unit;
use vramscope_core::report::{Category, Report};

/// Bytes each layer adds to the saved activations during the forward pass (the timeline's
/// `forward` events labelled `layer N`), when the timeline has them.
pub fn layer_activations(r: &Report) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    let mut prev: Option<u64> = None;
    for e in &r.timeline {
        let act = e.by_category.get("activations").copied().unwrap_or(0);
        if e.phase == "forward" && e.label.starts_with("layer ") {
            if let Some(p) = prev {
                rows.push((e.label.to_string(), act.saturating_sub(p)));
            }
        }
        if e.phase == "forward" {
            prev = Some(act);
        }
    }
    rows
}

pub(super) fn per_layer(r: &Report, out: &mut String, y: &mut f64) {
    let rows = layer_activations(r);
    if rows.is_empty() || rows.iter().all(|(_, b)| *b == 0) {
        return;
    }
    let max = rows.iter().map(|(_, b)| *b).max().unwrap_or(1).max(1) as f64;
    let unit = Unit::for_max(max as u64);
    section(
        out,
        y,
        &format!(
            "Per layer: activations each layer keeps for backward ({})",
            unit.name
        ),
    );
    let h = 80.0;
    let top = *y + 12.0;
    let bottom = top + h;
    let col = BAR_W / rows.len() as f64;
    out.push_str("<g id=\"per-layer\">\n");
    for (i, (label, b)) in rows.iter().enumerate() {
        let bh = *b as f64 / max * h;
        out.push_str(&format!(
            "<rect class=\"layer\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{bh:.2}\" \
             fill=\"{}\"><title>{}: {} {}</title></rect>\n",
            LEFT + i as f64 * col + col * 0.1,
            bottom - bh,
            (col * 0.8).max(0.5),
            hex(Category::Activations),
            esc(label),
            unit.fixed(*b),
            unit.name
        ));
    }
    text(
        out,
        LEFT - 6.0,
        top + 4.0,
        "text-anchor=\"end\" fill=\"#444444\"",
        &unit.fixed(max as u64),
    );
    text(
        out,
        LEFT,
        bottom + 16.0,
        "fill=\"#444444\"",
        &rows.first().map_or(String::new(), |r| r.0.clone()),
    );
    text(
        out,
        LEFT + BAR_W,
        bottom + 16.0,
        "text-anchor=\"end\" fill=\"#444444\"",
        &rows.last().map_or(String::new(), |r| r.0.clone()),
    );
    out.push_str("</g>\n");
    *y = bottom + 20.0;
}

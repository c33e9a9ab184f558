//! The stacked bar of the peak against the GPU, its legend, and a measured bar under it.

use super::labels::fit_of;
use super::measured::Measured;
use super::{bar_scale, esc, hex, section, segments, text, BAR_W, LEFT, WIDTH};
use crate::units::{bytes, Unit};
use vramscope_core::report::{Category, Fit, Report};

/// The peak's categories as one bar scaled to the GPU (or to everything used, when that is
/// more), the capacity marked, a measured bar under it, and the legend.
pub(super) fn stacked_bar(r: &Report, measured: Option<&Measured>, out: &mut String, y: &mut f64) {
    let fit = fit_of(r);
    let segs = segments(r);
    let scale = bar_scale(r).max(measured.map_or(0, Measured::used)) as f64;
    let unit = Unit::for_max(scale as u64);
    heading(r, fit.as_ref(), measured, unit, out, y);
    let top = *y + 12.0;
    let h = 40.0;
    // With a measurement the capacity line spans both bars.
    let span = if measured.is_some() { h + 34.0 } else { h };
    out.push_str(&format!(
        "<g id=\"peak-bar\" data-scale-bytes=\"{}\">\n<rect class=\"frame\" x=\"{LEFT}\" y=\"{top}\" \
         width=\"{BAR_W}\" height=\"{h}\" fill=\"#f4f4f4\" stroke=\"#999999\"/>\n",
        scale as u64
    ));
    bar_segments(r, &segs, (scale, unit), (top, h), out);
    if let Some(f) = &fit {
        capacity_mark(f, (scale, unit), top, span, out);
    }
    text(out, LEFT, top + span + 18.0, "fill=\"#444444\"", "0");
    out.push_str("</g>\n");
    if let Some(m) = measured {
        measured_bar(m, (scale, unit), top, h, out);
    }
    *y = top + span + 24.0;
    legend(r, &segs, measured, unit, out, y);
}

/// The bar's heading: the device total and the fit verdict; with a measurement, its peak.
fn heading(
    r: &Report,
    fit: Option<&Fit>,
    measured: Option<&Measured>,
    unit: Unit,
    out: &mut String,
    y: &mut f64,
) {
    let (f, u) = (|b: u64| unit.fixed(b), unit.name);
    let peak = r
        .per_gpu
        .peaks
        .device_total
        .map(|d| format!("device total {} {u}", f(d)))
        .unwrap_or_else(|| "device total n/a".into());
    let verdict = match fit {
        Some(x) if x.fits => format!(
            " · fits {} ({} {u} free)",
            x.target.gpu,
            f(x.headroom as u64)
        ),
        // Inside the capacity yet not fitting: a serving engine that would refuse to start
        // (the terminal's and the web UI's verdict say the same).
        Some(x) if x.headroom >= 0 => format!(
            " · does not fit {}: the engine would not start, although {} {u} is free (see the \
             warnings)",
            x.target.gpu,
            f(x.headroom as u64)
        ),
        Some(x) => format!(
            " · does not fit {} ({} {u} over)",
            x.target.gpu,
            f(x.headroom.unsigned_abs())
        ),
        None => " · no GPU given".into(),
    };
    section(
        out,
        y,
        &format!("Memory at the peak, by category ({u}) — {peak}{verdict}"),
    );
    if let Some(m) = measured {
        *y += 16.0;
        let mp = m.peak_allocated.map_or_else(|| "n/a".into(), f);
        text(
            out,
            20.0,
            *y,
            "fill=\"#444444\"",
            &format!("measured peak allocated {mp} {u} (the record sees the allocator only)"),
        );
    }
}

/// One rectangle per category, `scale` bytes to the bar's width, labelled when wide enough.
fn bar_segments(
    r: &Report,
    segs: &[(Category, u64)],
    (scale, unit): (f64, Unit),
    (top, h): (f64, f64),
    out: &mut String,
) {
    let mut x = LEFT;
    for (c, b) in segs {
        let w = *b as f64 / scale * BAR_W;
        out.push_str(&format!(
            "<rect class=\"segment\" data-category=\"{}\" data-bytes=\"{b}\" x=\"{x:.2}\" \
             y=\"{top}\" width=\"{w:.2}\" height=\"{h}\" fill=\"{}\"><title>{}: {} {}</title></rect>\n",
            c.name(),
            hex(*c),
            esc(super::labels::label_in(r, *c)),
            unit.fixed(*b),
            unit.name
        ));
        if w >= 44.0 {
            let fill = if matches!(
                c,
                Category::AllocatorReserve | Category::Temporaries | Category::KvCache
            ) {
                "#000000"
            } else {
                "#ffffff"
            };
            text(
                out,
                x + w / 2.0,
                top + h / 2.0 + 4.0,
                &format!("text-anchor=\"middle\" fill=\"{fill}\""),
                &unit.fixed(*b),
            );
        }
        x += w;
    }
}

/// The GPU's capacity as a red line across the bar (both bars with a measurement), labelled.
fn capacity_mark(f: &Fit, (scale, unit): (f64, Unit), top: f64, span: f64, out: &mut String) {
    let cx = LEFT + f.target.capacity as f64 / scale * BAR_W;
    out.push_str(&format!(
        "<line class=\"capacity\" x1=\"{cx:.2}\" y1=\"{}\" x2=\"{cx:.2}\" y2=\"{}\" \
         stroke=\"#cc0000\" stroke-width=\"2\"/>\n",
        top - 6.0,
        top + span + 6.0
    ));
    let label = format!(
        "{} capacity {} {}",
        f.target.gpu,
        unit.fixed(f.target.capacity),
        unit.name
    );
    // Ended at the line, unless that would run past the picture's left edge or into the axis's
    // "0" (a capacity far under what the job uses): then begun at it.
    let (anchor, lx) = if cx - text_width(&label) < LEFT + 12.0 {
        ("start", cx + 4.0)
    } else {
        ("end", cx)
    };
    text(
        out,
        lx,
        top + span + 18.0,
        &format!("class=\"capacity-label\" text-anchor=\"{anchor}\" fill=\"#cc0000\""),
        &label,
    );
}

/// About how wide 12 px DejaVu Sans text is: 7.2 px a character (0.6 em, its average advance).
pub(super) fn text_width(s: &str) -> f64 {
    s.chars().count() as f64 * 7.2
}

/// Legend: swatch, label and size, wrapped across the width; with a measurement, the
/// predicted / measured sizes side by side.
fn legend(
    r: &Report,
    segs: &[(Category, u64)],
    measured: Option<&Measured>,
    unit: Unit,
    out: &mut String,
    y: &mut f64,
) {
    let mut legend: Vec<(Category, String)> = segs
        .iter()
        .map(|(c, b)| {
            (
                *c,
                format!("{} {}", super::labels::label_in(r, *c), bytes(*b)),
            )
        })
        .collect();
    if let Some(m) = measured {
        for (c, label) in legend.iter_mut() {
            let mb = m.components.iter().find(|(k, _)| k == c).map_or(0, |x| x.1);
            label.push_str(&format!(" / {} measured", unit.fixed(mb)));
        }
        for (c, b) in &m.components {
            if !legend.iter().any(|(k, _)| k == c) {
                let mb = unit.fixed(*b);
                legend.push((*c, format!("{} 0 / {mb} {} measured", c.label(), unit.name)));
            }
        }
    }
    let mut lx = LEFT;
    *y += 16.0;
    out.push_str("<g id=\"legend\">\n");
    for (c, label) in &legend {
        let w = 22.0 + label.chars().count() as f64 * 7.0 + 18.0;
        if lx + w > WIDTH - 20.0 {
            lx = LEFT;
            *y += 20.0;
        }
        // data-label: the category's name in this report (vLLM's reserve is its KV pool), so
        // the web UI's table names it as the legend does.
        out.push_str(&format!(
            "<rect class=\"swatch\" data-category=\"{}\" data-label=\"{}\" x=\"{lx:.1}\" \
             y=\"{:.1}\" width=\"14\" height=\"14\" fill=\"{}\"/>\n",
            c.name(),
            esc(super::labels::label_in(r, *c)),
            *y - 11.0,
            hex(*c)
        ));
        text(out, lx + 20.0, *y, "", label);
        lx += w;
    }
    out.push_str("</g>\n");
}

/// The measured peak's categories as a second bar under the predicted one, on the same scale.
fn measured_bar(m: &Measured, (scale, unit): (f64, Unit), top: f64, h: f64, out: &mut String) {
    let mtop = top + h + 10.0;
    let mh = 24.0;
    out.push_str(&format!(
        "<g id=\"measured-bar\" data-scale-bytes=\"{}\">\n<rect class=\"frame\" x=\"{LEFT}\" \
         y=\"{mtop}\" width=\"{BAR_W}\" height=\"{mh}\" fill=\"#f4f4f4\" stroke=\"#999999\"/>\n",
        scale as u64
    ));
    text(
        out,
        LEFT - 4.0,
        top + h / 2.0 + 4.0,
        "text-anchor=\"end\" font-size=\"10\" fill=\"#444444\"",
        "predicted",
    );
    text(
        out,
        LEFT - 4.0,
        mtop + mh / 2.0 + 4.0,
        "text-anchor=\"end\" font-size=\"10\" fill=\"#444444\"",
        "measured",
    );
    let mut x = LEFT;
    for (c, b) in &m.components {
        let w = *b as f64 / scale * BAR_W;
        out.push_str(&format!(
            "<rect class=\"measured-segment\" data-category=\"{}\" data-bytes=\"{b}\" \
             x=\"{x:.2}\" y=\"{mtop}\" width=\"{w:.2}\" height=\"{mh}\" fill=\"{}\">\
             <title>measured {}: {} {}</title></rect>\n",
            c.name(),
            hex(*c),
            esc(c.label()),
            unit.fixed(*b),
            unit.name
        ));
        x += w;
    }
    out.push_str("</g>\n");
}

//! The report as one self-contained SVG picture (no fonts, scripts or links fetched): the
//! stacked bar of the peak against the GPU, the step timeline per category with the GPU limit
//! and the peak, the what-if chart, and the per-layer activations when the timeline has layers.
//! Colours and category order are the terminal's (`render::terminal`, `render::SHOWN`).

use super::terminal::job_summary;
use super::{fit_of, SHOWN};
use crate::units::short_count;
use vramscope_core::fit::WhatIf;
use vramscope_core::report::{Category, Report, TimelinePoint};

/// Picture width in px.
pub const WIDTH: f64 = 960.0;
/// Left edge of every chart.
pub const LEFT: f64 = 60.0;
/// Width of the stacked bar and of the timeline's plot area: `WIDTH - LEFT - 40` = 860 px.
pub const BAR_W: f64 = WIDTH - LEFT - 40.0;
const GIB: f64 = (1u64 << 30) as f64;
const FONT: &str = "font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\"";

/// Fill colour of a category: the terminal's ANSI colour (`terminal::color`) as the usual
/// xterm-like RGB, so the picture and the terminal read the same.
pub fn hex(c: Category) -> &'static str {
    match c {
        Category::Parameters => "#3465a4",       // blue
        Category::Gradients => "#06989a",        // cyan
        Category::OptimizerStates => "#75507b",  // magenta
        Category::MasterWeights => "#ad7fa8",    // bright magenta
        Category::Activations => "#4e9a06",      // green
        Category::KvCache => "#c4a000",          // yellow
        Category::Temporaries => "#8ae234",      // bright green
        Category::CudaContext => "#555753",      // bright black
        Category::AllocatorReserve => "#d3d7cf", // white
        Category::Unattributed => "#cc0000",     // red
    }
}

/// `s` safe inside XML text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn gib(b: u64) -> String {
    format!("{:.2}", b as f64 / GIB)
}

/// The stacked bar's segments: non-zero categories in the picture's order.
pub fn segments(report: &Report) -> Vec<(Category, u64)> {
    SHOWN
        .iter()
        .map(|c| (*c, report.per_gpu.components.get(*c)))
        .filter(|(_, b)| *b > 0)
        .collect()
}

/// Bytes the bar's full width stands for: the GPU's capacity, or everything used when that is
/// more (an overflowing job is drawn whole, the capacity marked inside it).
pub fn bar_scale(report: &Report) -> u64 {
    let used: u64 = segments(report).iter().map(|(_, b)| b).sum();
    let cap = fit_of(report).map_or(0, |f| f.capacity);
    used.max(cap).max(1)
}

/// What a measurement adds to the picture: the analyze report's (`vramscope analyze --json`)
/// components at the measured peak and its timeline.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Bytes by category at the measured peak, `unattributed` included; zeros left out.
    pub components: Vec<(Category, u64)>,
    pub peak_allocated: Option<u64>,
    pub timeline: Vec<TimelinePoint>,
}

/// The measured categories in the picture's order: the estimate's, then `unattributed`.
const MEASURED_ORDER: [Category; 10] = Category::ALL;

impl Measured {
    pub fn from_analysis(a: &vramscope_measure::Analysis) -> Self {
        let g = &a.per_gpu;
        Measured {
            components: MEASURED_ORDER
                .iter()
                .map(|c| (*c, g.components.get(*c)))
                .filter(|(_, b)| *b > 0)
                .collect(),
            peak_allocated: g.peak_allocated,
            timeline: a.timeline.clone(),
        }
    }

    /// Reads the analyze JSON (`{"per_gpu": {...}, "timeline": [...]}`, as `analyze --json`
    /// prints it) back; unknown categories are left out, at most `MAX_POINTS` timeline points.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        const MAX_POINTS: usize = 100_000;
        let per_gpu = v
            .get("per_gpu")
            .and_then(|p| p.as_object())
            .ok_or("measurement: no \"per_gpu\" object (send what `analyze --json` prints)")?;
        let comps = per_gpu
            .get("components")
            .and_then(|c| c.as_object())
            .ok_or("measurement: per_gpu has no \"components\" object")?;
        let cat = |name: &str| MEASURED_ORDER.iter().copied().find(|c| c.name() == name);
        let mut components = Vec::new();
        for c in MEASURED_ORDER {
            match comps.get(c.name()) {
                None | Some(serde_json::Value::Null) => {}
                Some(b) => {
                    let b = b.as_u64().ok_or_else(|| {
                        format!("measurement: components.{} is not a byte count", c.name())
                    })?;
                    if b > 0 {
                        components.push((c, b));
                    }
                }
            }
        }
        let peak_allocated = per_gpu.get("peak_allocated").and_then(|b| b.as_u64());
        let points = match v.get("timeline") {
            None | Some(serde_json::Value::Null) => &[][..],
            Some(t) => t
                .as_array()
                .ok_or("measurement: \"timeline\" is not a list")?
                .as_slice(),
        };
        if points.len() > MAX_POINTS {
            return Err(format!(
                "measurement: {} timeline points, more than {MAX_POINTS}",
                points.len()
            ));
        }
        let mut timeline = Vec::with_capacity(points.len());
        for (i, p) in points.iter().enumerate() {
            let allocated = p.get("allocated").and_then(|a| a.as_u64()).ok_or_else(|| {
                format!("measurement: timeline[{i}].allocated is not a byte count")
            })?;
            let s = |k: &str| p.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
            let by_category = p
                .get("by_category")
                .and_then(|b| b.as_object())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, b)| Some((cat(k)?.name(), b.as_u64()?)))
                        .collect()
                })
                .unwrap_or_default();
            timeline.push(TimelinePoint {
                phase: s("phase"),
                label: s("label"),
                allocated,
                by_category,
            });
        }
        Ok(Measured {
            components,
            peak_allocated,
            timeline,
        })
    }

    fn used(&self) -> u64 {
        self.components
            .iter()
            .fold(0u64, |a, (_, b)| a.saturating_add(*b))
    }
}

/// The whole picture. `what_if` rows come from `vramscope_core::fit::what_if` (empty: no chart).
pub fn render_svg(report: &Report, what_if: &[WhatIf]) -> String {
    render_svg_measured(report, what_if, None)
}

/// The picture with a measurement overlaid: a measured bar under the predicted one (same
/// colours) and the measured timeline as a line over the predicted columns.
pub fn render_svg_measured(
    report: &Report,
    what_if: &[WhatIf],
    measured: Option<&Measured>,
) -> String {
    let mut body = String::new();
    let mut y = 0.0;
    title(report, &mut body, &mut y);
    stacked_bar(report, measured, &mut body, &mut y);
    timeline(report, measured, &mut body, &mut y);
    what_if_chart(report, what_if, &mut body, &mut y);
    per_layer(report, &mut body, &mut y);
    let h = (y + 20.0).ceil();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" \
         viewBox=\"0 0 {WIDTH} {h}\" {FONT} font-size=\"12\" role=\"img\">\n\
         <title>{}</title>\n<rect width=\"{WIDTH}\" height=\"{h}\" fill=\"#ffffff\"/>\n{body}</svg>\n",
        esc(&format!("GPU memory of {}", report.model.name))
    )
}

fn text(out: &mut String, x: f64, y: f64, attrs: &str, s: &str) {
    out.push_str(&format!(
        "<text x=\"{x:.1}\" y=\"{y:.1}\"{}{attrs}>{}</text>\n",
        if attrs.is_empty() { "" } else { " " },
        esc(s)
    ));
}

fn title(r: &Report, out: &mut String, y: &mut f64) {
    let m = &r.model;
    let mut t = format!("{} · {} parameters", m.name, short_count(m.params_total));
    if m.params_trainable != m.params_total {
        t.push_str(&format!(", {} trainable", short_count(m.params_trainable)));
    }
    *y += 28.0;
    text(out, 20.0, *y, "font-size=\"18\" font-weight=\"bold\"", &t);
    // The job's settings, wrapped at about 130 characters between parts.
    let summary = job_summary(&r.job);
    let mut line = String::new();
    for part in summary.split(" · ") {
        if !line.is_empty() && line.chars().count() + part.chars().count() + 3 > 130 {
            *y += 18.0;
            text(out, 20.0, *y, "fill=\"#444444\"", &line);
            line.clear();
        }
        if !line.is_empty() {
            line.push_str(" · ");
        }
        line.push_str(part);
    }
    if !line.is_empty() {
        *y += 18.0;
        text(out, 20.0, *y, "fill=\"#444444\"", &line);
    }
}

fn section(out: &mut String, y: &mut f64, heading: &str) {
    *y += 34.0;
    text(
        out,
        20.0,
        *y,
        "font-size=\"14\" font-weight=\"bold\"",
        heading,
    );
}

fn stacked_bar(r: &Report, measured: Option<&Measured>, out: &mut String, y: &mut f64) {
    let p = &r.per_gpu;
    let fit = fit_of(r);
    let peak = p
        .device_total
        .map(|d| format!("device total {} GiB", gib(d)))
        .unwrap_or_else(|| "device total n/a".into());
    let verdict = match &fit {
        Some(f) if f.fits => format!(" · fits {} ({} GiB free)", f.gpu, gib(f.headroom as u64)),
        Some(f) => format!(
            " · does not fit {} ({} GiB over)",
            f.gpu,
            gib(f.headroom.unsigned_abs())
        ),
        None => " · no GPU given".into(),
    };
    section(
        out,
        y,
        &format!("Memory at the peak, by category (GiB) — {peak}{verdict}"),
    );
    if let Some(m) = measured {
        *y += 16.0;
        let mp = m.peak_allocated.map_or_else(|| "n/a".into(), gib);
        text(
            out,
            20.0,
            *y,
            "fill=\"#444444\"",
            &format!("measured peak allocated {mp} GiB (the record sees the allocator only)"),
        );
    }
    let segs = segments(r);
    let scale = bar_scale(r).max(measured.map_or(0, Measured::used)) as f64;
    let top = *y + 12.0;
    let h = 40.0;
    // With a measurement the capacity line spans both bars.
    let span = if measured.is_some() { h + 34.0 } else { h };
    out.push_str(&format!(
        "<g id=\"peak-bar\" data-scale-bytes=\"{}\">\n<rect class=\"frame\" x=\"{LEFT}\" y=\"{top}\" \
         width=\"{BAR_W}\" height=\"{h}\" fill=\"#f4f4f4\" stroke=\"#999999\"/>\n",
        scale as u64
    ));
    let mut x = LEFT;
    for (c, b) in &segs {
        let w = *b as f64 / scale * BAR_W;
        out.push_str(&format!(
            "<rect class=\"segment\" data-category=\"{}\" data-bytes=\"{b}\" x=\"{x:.2}\" \
             y=\"{top}\" width=\"{w:.2}\" height=\"{h}\" fill=\"{}\"><title>{}: {} GiB</title></rect>\n",
            c.name(),
            hex(*c),
            esc(super::label_in(r, *c)),
            gib(*b)
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
                &gib(*b),
            );
        }
        x += w;
    }
    if let Some(f) = &fit {
        let cx = LEFT + f.capacity as f64 / scale * BAR_W;
        out.push_str(&format!(
            "<line class=\"capacity\" x1=\"{cx:.2}\" y1=\"{}\" x2=\"{cx:.2}\" y2=\"{}\" \
             stroke=\"#cc0000\" stroke-width=\"2\"/>\n",
            top - 6.0,
            top + span + 6.0
        ));
        text(
            out,
            cx,
            top + span + 18.0,
            "text-anchor=\"end\" fill=\"#cc0000\"",
            &format!("{} capacity {} GiB", f.gpu, gib(f.capacity)),
        );
    }
    text(out, LEFT, top + span + 18.0, "fill=\"#444444\"", "0");
    out.push_str("</g>\n");
    if let Some(m) = measured {
        measured_bar(m, scale, top, h, out);
    }
    *y = top + span + 24.0;
    // Legend: swatch, label and size, wrapped across the width; with a measurement, the
    // predicted / measured sizes side by side.
    let mut legend: Vec<(Category, String)> = segs
        .iter()
        .map(|(c, b)| {
            (
                *c,
                format!("{} {}", super::label_in(r, *c), crate::units::bytes(*b)),
            )
        })
        .collect();
    if let Some(m) = measured {
        for (c, label) in legend.iter_mut() {
            let mb = m.components.iter().find(|(k, _)| k == c).map_or(0, |x| x.1);
            label.push_str(&format!(" / {} measured", gib(mb)));
        }
        for (c, b) in &m.components {
            if !legend.iter().any(|(k, _)| k == c) {
                legend.push((*c, format!("{} 0 / {} GiB measured", c.label(), gib(*b))));
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
        out.push_str(&format!(
            "<rect class=\"swatch\" data-category=\"{}\" x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" \
             height=\"14\" fill=\"{}\"/>\n",
            c.name(),
            *y - 11.0,
            hex(*c)
        ));
        text(out, lx + 20.0, *y, "", label);
        lx += w;
    }
    out.push_str("</g>\n");
}

/// The measured peak's categories as a second bar under the predicted one, on the same scale.
fn measured_bar(m: &Measured, scale: f64, top: f64, h: f64, out: &mut String) {
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
             <title>measured {}: {} GiB</title></rect>\n",
            c.name(),
            hex(*c),
            esc(c.label()),
            gib(*b)
        ));
        x += w;
    }
    out.push_str("</g>\n");
}

/// The simulated step: one stacked column per event, the GPU limit and the peak.
fn timeline(r: &Report, measured: Option<&Measured>, out: &mut String, y: &mut f64) {
    let events = &r.timeline;
    if events.is_empty() {
        return;
    }
    let mline = measured.map_or(&[][..], |m| &m.timeline[..]);
    section(
        out,
        y,
        if mline.is_empty() {
            "The step, event by event: bytes allocated by category (GiB)"
        } else {
            "The step, event by event: bytes allocated by category (GiB); the line is measured"
        },
    );
    let top = *y + 14.0;
    let h = 220.0;
    let bottom = top + h;
    let cap = fit_of(r).map(|f| f.capacity);
    let max_alloc = events
        .iter()
        .chain(mline)
        .map(|e| e.allocated)
        .max()
        .unwrap_or(0);
    let ymax = (max_alloc.max(cap.unwrap_or(0)) as f64 * 1.08).max(1.0);
    let yof = |b: f64| bottom - b / ymax * h;
    // Axis and gridlines at "nice" GiB steps.
    let step = nice_step(ymax / GIB / 5.0);
    out.push_str("<g id=\"timeline\">\n");
    let mut g = 0.0;
    while g * GIB <= ymax {
        let gy = yof(g * GIB);
        out.push_str(&format!(
            "<line x1=\"{LEFT}\" y1=\"{gy:.1}\" x2=\"{:.1}\" y2=\"{gy:.1}\" stroke=\"#e4e4e4\"/>\n",
            LEFT + BAR_W
        ));
        text(
            out,
            LEFT - 6.0,
            gy + 4.0,
            "text-anchor=\"end\" fill=\"#444444\"",
            &format!("{g:.0}"),
        );
        g += step;
    }
    let n = events.len() as f64;
    let col = BAR_W / n;
    for (i, e) in events.iter().enumerate() {
        let x = LEFT + i as f64 * col;
        let mut acc = 0.0;
        for c in SHOWN {
            let b = e.by_category.get(c.name()).copied().unwrap_or(0) as f64;
            if b <= 0.0 {
                continue;
            }
            let y1 = yof(acc + b);
            let y0 = yof(acc);
            out.push_str(&format!(
                "<rect class=\"step\" data-category=\"{}\" x=\"{x:.2}\" y=\"{y1:.2}\" \
                 width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\"/>\n",
                c.name(),
                col.max(0.5),
                (y0 - y1).max(0.0),
                hex(c)
            ));
            acc += b;
        }
    }
    // A tick where each phase starts; its name centred under its span, kept inside the plot,
    // and left out when it would run into the previous name.
    let mut spans: Vec<(&str, usize, usize)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match spans.last_mut() {
            Some((p, _, end)) if *p == e.phase => *end = i,
            _ => spans.push((&e.phase, i, i)),
        }
    }
    let mut free_from = f64::MIN;
    for (phase, first, last) in spans {
        let x = LEFT + first as f64 * col;
        out.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{bottom}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#666666\"/>\n",
            bottom + 6.0
        ));
        let w = phase.chars().count() as f64 * 7.0;
        let mid = (LEFT + (first + last + 1) as f64 / 2.0 * col)
            .clamp(LEFT + w / 2.0, LEFT + BAR_W - w / 2.0);
        if mid - w / 2.0 < free_from {
            continue;
        }
        free_from = mid + w / 2.0 + 8.0;
        text(
            out,
            mid,
            bottom + 18.0,
            "text-anchor=\"middle\" fill=\"#444444\"",
            phase,
        );
    }
    if let Some(c) = cap {
        let cy = yof(c as f64);
        out.push_str(&format!(
            "<line class=\"gpu-limit\" x1=\"{LEFT}\" y1=\"{cy:.1}\" x2=\"{:.1}\" y2=\"{cy:.1}\" \
             stroke=\"#cc0000\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
            LEFT + BAR_W
        ));
        text(
            out,
            LEFT + BAR_W,
            cy - 4.0,
            "text-anchor=\"end\" fill=\"#cc0000\"",
            &format!("GPU capacity {} GiB", gib(c)),
        );
    }
    if !mline.is_empty() {
        measured_line(mline, &yof, out);
    }
    if let Some((i, e)) = events
        .iter()
        .enumerate()
        .max_by_key(|(i, e)| (e.allocated, -(*i as i64)))
    {
        let x = LEFT + (i as f64 + 0.5) * col;
        let py = yof(e.allocated as f64);
        out.push_str(&format!(
            "<circle class=\"peak\" cx=\"{x:.1}\" cy=\"{py:.1}\" r=\"4\" fill=\"#000000\"/>\n"
        ));
        let label = format!(
            "peak {} GiB allocated: {} ({})",
            gib(e.allocated),
            e.label,
            e.phase
        );
        // Bold 12 px text is about 7.5 px a character: put it where it fits.
        let w = label.chars().count() as f64 * 7.5;
        let (anchor, lx) = if x + 8.0 + w <= WIDTH - 10.0 {
            ("start", x + 8.0)
        } else if x - 8.0 - w >= 10.0 {
            ("end", x - 8.0)
        } else {
            ("end", WIDTH - 10.0)
        };
        text(
            out,
            lx,
            (py - 8.0).max(top + 10.0),
            &format!("text-anchor=\"{anchor}\" font-weight=\"bold\""),
            &label,
        );
    }
    out.push_str("</g>\n");
    *y = bottom + 24.0;
}

/// The measured timeline as a polyline over the plot's width (its points spread evenly in
/// record order: a record's events do not match the simulation's one for one), its peak marked.
fn measured_line(points: &[TimelinePoint], yof: &dyn Fn(f64) -> f64, out: &mut String) {
    let n = points.len() as f64;
    let xy: Vec<(f64, f64)> = points
        .iter()
        .enumerate()
        .map(|(i, p)| (LEFT + (i as f64 + 0.5) / n * BAR_W, yof(p.allocated as f64)))
        .collect();
    let pts: Vec<String> = xy.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    out.push_str(&format!(
        "<polyline class=\"measured\" data-points=\"{}\" points=\"{}\" fill=\"none\" \
         stroke=\"#000000\" stroke-width=\"2\"/>\n",
        points.len(),
        pts.join(" ")
    ));
    if let Some((i, p)) = points
        .iter()
        .enumerate()
        .max_by_key(|(i, p)| (p.allocated, -(*i as i64)))
    {
        let (x, py) = xy[i];
        out.push_str(&format!(
            "<circle class=\"measured-peak\" cx=\"{x:.1}\" cy=\"{py:.1}\" r=\"4\" fill=\"#ffffff\" \
             stroke=\"#000000\" stroke-width=\"2\"/>\n"
        ));
        let label = format!("measured peak {} GiB ({})", gib(p.allocated), p.phase);
        let w = label.chars().count() as f64 * 7.0;
        let (anchor, lx) = if x + 8.0 + w <= WIDTH - 10.0 {
            ("start", x + 8.0)
        } else {
            ("end", x - 8.0)
        };
        text(
            out,
            lx,
            py + 16.0,
            &format!("text-anchor=\"{anchor}\""),
            &label,
        );
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
        .max(1.0)
}

fn what_if_chart(r: &Report, rows: &[WhatIf], out: &mut String, y: &mut f64) {
    if rows.is_empty() {
        return;
    }
    section(
        out,
        y,
        "What if: device total with one change (GiB; green fits the GPU, red does not)",
    );
    let cap = fit_of(r).map(|f| f.capacity);
    let mut all: Vec<(String, Option<u64>, Option<bool>)> = vec![(
        "this job".into(),
        r.per_gpu.device_total,
        fit_of(r).map(|f| f.fits),
    )];
    all.extend(
        rows.iter()
            .map(|w| (w.technique.clone(), w.device_total, w.fits)),
    );
    let max = all
        .iter()
        .filter_map(|(_, t, _)| *t)
        .chain(cap)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let label_w = 300.0;
    let x0 = 20.0 + label_w;
    let w_max = WIDTH - x0 - 90.0;
    let top = *y + 10.0;
    out.push_str("<g id=\"what-if\">\n");
    for (i, (name, total, fits)) in all.iter().enumerate() {
        let ry = top + i as f64 * 20.0;
        text(
            out,
            x0 - 8.0,
            ry + 12.0,
            "text-anchor=\"end\"",
            &name.chars().take(44).collect::<String>(),
        );
        let fill = match fits {
            Some(true) => "#4e9a06",
            Some(false) => "#cc0000",
            None => "#888a85",
        };
        match total {
            Some(t) => {
                let w = *t as f64 / max * w_max;
                out.push_str(&format!(
                    "<rect class=\"what-if\" x=\"{x0}\" y=\"{ry:.1}\" width=\"{w:.2}\" height=\"15\" \
                     fill=\"{fill}\" fill-opacity=\"{}\"/>\n",
                    if i == 0 { "1" } else { "0.75" }
                ));
                text(out, x0 + w + 6.0, ry + 12.0, "", &gib(*t));
            }
            None => text(out, x0, ry + 12.0, "fill=\"#888888\"", "n/a"),
        }
    }
    let bottom = top + all.len() as f64 * 20.0;
    if let Some(c) = cap {
        let cx = x0 + c as f64 / max * w_max;
        out.push_str(&format!(
            "<line class=\"gpu-limit\" x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{bottom:.1}\" \
             stroke=\"#cc0000\" stroke-dasharray=\"6 4\"/>\n",
            top - 4.0
        ));
        text(
            out,
            cx,
            bottom + 14.0,
            "text-anchor=\"middle\" fill=\"#cc0000\"",
            &format!("capacity {} GiB", gib(c)),
        );
    }
    out.push_str("</g>\n");
    *y = bottom + 18.0;
}

/// Bytes each layer adds to the saved activations during the forward pass (the timeline's
/// `forward` events labelled `layer N`), when the timeline has them.
pub fn layer_activations(r: &Report) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    let mut prev: Option<u64> = None;
    for e in &r.timeline {
        let act = e.by_category.get("activations").copied().unwrap_or(0);
        if e.phase == "forward" && e.label.starts_with("layer ") {
            if let Some(p) = prev {
                rows.push((e.label.clone(), act.saturating_sub(p)));
            }
        }
        if e.phase == "forward" {
            prev = Some(act);
        }
    }
    rows
}

fn per_layer(r: &Report, out: &mut String, y: &mut f64) {
    let rows = layer_activations(r);
    if rows.is_empty() || rows.iter().all(|(_, b)| *b == 0) {
        return;
    }
    section(
        out,
        y,
        "Per layer: activations each layer keeps for backward (GiB)",
    );
    let max = rows.iter().map(|(_, b)| *b).max().unwrap_or(1).max(1) as f64;
    let h = 80.0;
    let top = *y + 12.0;
    let bottom = top + h;
    let col = BAR_W / rows.len() as f64;
    out.push_str("<g id=\"per-layer\">\n");
    for (i, (label, b)) in rows.iter().enumerate() {
        let bh = *b as f64 / max * h;
        out.push_str(&format!(
            "<rect class=\"layer\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{bh:.2}\" \
             fill=\"{}\"><title>{}: {} GiB</title></rect>\n",
            LEFT + i as f64 * col + col * 0.1,
            bottom - bh,
            (col * 0.8).max(0.5),
            hex(Category::Activations),
            esc(label),
            gib(*b)
        ));
    }
    text(
        out,
        LEFT - 6.0,
        top + 4.0,
        "text-anchor=\"end\" fill=\"#444444\"",
        &gib(max as u64),
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

#[cfg(test)]
mod tests {
    use super::*;
    use quick_xml::events::Event;
    use vramscope_core::report::{Components, Fit, TimelinePoint};

    const G: u64 = 1 << 30;

    /// A real report (gpt2 on a T4) with the peak's categories replaced by round figures, so the
    /// expected widths can be worked out by hand: 4 + 2 + 1 + 0.5 = 7.5 GiB used.
    fn report(capacity: u64) -> Report {
        let job: vramscope_core::job::Job =
            serde_json::from_str(r#"{"model": "gpt2", "batch": 2, "gpu": "t4-16gb"}"#).unwrap();
        let mut r = crate::commands::estimate::estimate_job(&job).unwrap();
        r.per_gpu.components = Components {
            parameters: 4 * G,
            optimizer_states: 2 * G,
            activations: G,
            cuda_context: G / 2,
            ..Components::default()
        };
        r.fit = Some(Fit {
            gpu: "t4-16gb".into(),
            capacity,
            fits: capacity >= 15 * G / 2,
            headroom: capacity as i64 - (15 * G / 2) as i64,
            reserve: 0,
        });
        r
    }

    type Elem = (String, Vec<(String, String)>);

    /// Every element (name, attributes) and every text node of a well-formed document; panics
    /// on malformed XML (mismatched or unclosed tags, bad attributes).
    fn parse(svg: &str) -> (Vec<Elem>, Vec<String>) {
        let mut reader = quick_xml::Reader::from_str(svg);
        let mut elems = Vec::new();
        let mut texts = Vec::new();
        let mut open = 0i64;
        loop {
            let ev = reader.read_event().expect("well-formed XML");
            if let Event::Start(_) = ev {
                open += 1;
            }
            match ev {
                Event::Start(e) | Event::Empty(e) => {
                    let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                    let attrs = e
                        .attributes()
                        .map(|a| {
                            let a = a.expect("well-formed attribute");
                            (
                                String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                                String::from_utf8(a.value.to_vec()).unwrap(),
                            )
                        })
                        .collect();
                    elems.push((name, attrs));
                }
                Event::End(_) => open -= 1,
                Event::Text(t) => texts.push(String::from_utf8(t.to_vec()).unwrap()),
                Event::Eof => break,
                _ => {}
            }
        }
        assert_eq!(open, 0, "every element closed");
        (elems, texts)
    }

    fn attr<'a>(e: &'a Elem, k: &str) -> Option<&'a str> {
        e.1.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    fn num(e: &Elem, k: &str) -> f64 {
        attr(e, k).unwrap().parse().unwrap()
    }

    /// The peak bar's segments: (category, x, width).
    fn segments_of(svg: &str) -> Vec<(String, f64, f64)> {
        parse(svg)
            .0
            .iter()
            .filter(|e| e.0 == "rect" && attr(e, "class") == Some("segment"))
            .map(|e| {
                (
                    attr(e, "data-category").unwrap().to_string(),
                    num(e, "x"),
                    num(e, "width"),
                )
            })
            .collect()
    }

    #[test]
    fn one_rect_per_category_with_width_proportional_to_bytes() {
        // 16 GiB GPU, 7.5 GiB used: the bar's 860 px stand for 16 GiB, so 4 GiB is 215 px,
        // 2 GiB 107.5, 1 GiB 53.75 and 0.5 GiB 26.875, laid end to end from x = 60.
        let svg = render_svg(&report(16 * G), &[]);
        let segs = segments_of(&svg);
        let want = [
            ("parameters", 60.0, 215.0),
            ("optimizer_states", 275.0, 107.5),
            ("activations", 382.5, 53.75),
            ("cuda_context", 436.25, 26.875),
        ];
        assert_eq!(segs.len(), want.len(), "{segs:?}");
        for ((c, x, w), (wc, wx, ww)) in segs.iter().zip(want) {
            assert_eq!(c, wc);
            assert!((x - wx).abs() <= 1.0, "{c}: x {x} vs {wx}");
            assert!((w - ww).abs() <= 1.0, "{c}: width {w} vs {ww}");
        }
        // Same colours as the terminal's categories (blue, magenta, green, bright black).
        for (c, colour) in [
            ("parameters", "#3465a4"),
            ("optimizer_states", "#75507b"),
            ("activations", "#4e9a06"),
        ] {
            assert!(svg.contains(&format!(
                "data-category=\"{c}\" data-bytes=\"{}\"",
                match c {
                    "parameters" => 4 * G,
                    "optimizer_states" => 2 * G,
                    _ => G,
                }
            )));
            assert!(svg.contains(&format!("fill=\"{colour}\"")), "{c}");
        }
    }

    #[test]
    fn an_overflowing_job_is_drawn_whole_with_the_capacity_inside() {
        // 4 GiB GPU, 7.5 GiB used: 860 px stand for 7.5 GiB (114.67 px a GiB); 4 GiB = 458.67
        // px, so the capacity line sits at x = 60 + 458.67 = 518.67 (the parameters' end).
        let svg = render_svg(&report(4 * G), &[]);
        let segs = segments_of(&svg);
        let widths: Vec<f64> = segs.iter().map(|s| s.2).collect();
        for (w, want) in widths.iter().zip([458.67, 229.33, 114.67, 57.33]) {
            assert!((w - want).abs() <= 1.0, "{widths:?}");
        }
        let (elems, _) = parse(&svg);
        let cap = elems
            .iter()
            .find(|e| attr(e, "class") == Some("capacity"))
            .unwrap();
        assert!((num(cap, "x1") - 518.67).abs() <= 1.0);
        assert!(svg.contains("does not fit t4-16gb (3.50 GiB over)"));
    }

    #[test]
    fn labels_legend_timeline_and_what_if_are_present() {
        let r = report(16 * G);
        let rows = vec![WhatIf {
            technique: "gradient checkpointing".into(),
            flags: vec!["--checkpointing".into(), "full".into()],
            change: "checkpointing full".into(),
            peak_allocated: Some(3 * G),
            device_total: Some(4 * G),
            saved: Some((7 * G / 2) as i64),
            fits: Some(true),
        }];
        let svg = render_svg(&r, &rows);
        let (elems, texts) = parse(&svg);
        let all = texts.join("\n");
        for label in [
            "gpt2 · 124.4 M parameters",
            "parameters 4.00 GiB",
            "optimizer states 2.00 GiB",
            "activations 1.00 GiB",
            "CUDA context 512.0 MiB",
            "t4-16gb capacity 16.00 GiB",
            "gradient checkpointing",
            "forward",
            "backward",
        ] {
            assert!(all.contains(label), "missing {label:?} in {all}");
        }
        assert!(all.contains("batch 2"), "job settings in the title");
        assert!(all.contains("peak "), "peak annotated");
        assert!(elems.iter().any(|e| attr(e, "class") == Some("gpu-limit")));
        // One legend swatch per non-zero category, in the terminal's order.
        let swatches: Vec<&str> = elems
            .iter()
            .filter(|e| attr(e, "class") == Some("swatch"))
            .map(|e| attr(e, "data-category").unwrap())
            .collect();
        assert_eq!(
            swatches,
            [
                "parameters",
                "optimizer_states",
                "activations",
                "cuda_context"
            ]
        );
        // The what-if chart: the job itself plus one row.
        let bars = elems
            .iter()
            .filter(|e| attr(e, "class") == Some("what-if"))
            .count();
        assert_eq!(bars, 2);
    }

    #[test]
    fn names_are_escaped() {
        let mut r = report(16 * G);
        r.model.name = "a<b>&\"c\"\u{1}".into();
        let svg = render_svg(&r, &[]);
        parse(&svg);
        assert!(svg.contains("a&lt;b&gt;&amp;&quot;c&quot;"));
    }

    fn point(phase: &str, allocated: u64) -> TimelinePoint {
        TimelinePoint {
            phase: phase.into(),
            label: String::new(),
            allocated,
            by_category: Default::default(),
        }
    }

    fn measured_rects(svg: &str) -> Vec<(String, f64, f64)> {
        parse(svg)
            .0
            .iter()
            .filter(|e| e.0 == "rect" && attr(e, "class") == Some("measured-segment"))
            .map(|e| {
                (
                    attr(e, "data-category").unwrap().to_string(),
                    num(e, "x"),
                    num(e, "width"),
                )
            })
            .collect()
    }

    #[test]
    fn measured_bar_and_line_overlay_the_prediction() {
        // Measured 4 + 2 + 1 (unattributed) = 7 GiB on the 16 GiB bar: 860 px / 16 GiB =
        // 53.75 px a GiB, so 215, 107.5 and 53.75 px from x = 60.
        let m = Measured {
            components: vec![
                (Category::Parameters, 4 * G),
                (Category::Activations, 2 * G),
                (Category::Unattributed, G),
            ],
            peak_allocated: Some(7 * G),
            timeline: vec![
                point("forward", 5 * G),
                point("backward", 7 * G),
                point("optimizer", 6 * G),
            ],
        };
        let r = report(16 * G);
        let plain = render_svg(&r, &[]);
        let svg = render_svg_measured(&r, &[], Some(&m));
        assert!(measured_rects(&plain).is_empty());
        assert!(!plain.contains("polyline"));
        let want = [
            ("parameters", 60.0, 215.0),
            ("activations", 275.0, 107.5),
            ("unattributed", 382.5, 53.75),
        ];
        let got = measured_rects(&svg);
        assert_eq!(got.len(), 3, "{got:?}");
        for ((c, x, w), (wc, wx, ww)) in got.iter().zip(want) {
            assert_eq!(c, wc);
            assert!(
                (x - wx).abs() <= 1.0 && (w - ww).abs() <= 1.0,
                "{c}: {x} {w}"
            );
        }
        // The predicted bar is unchanged by the overlay.
        assert_eq!(segments_of(&svg), segments_of(&plain));
        // Same colour per category in both bars; unattributed in its own (red).
        assert!(
            svg.contains("data-category=\"unattributed\" data-bytes=\"1073741824\" x=\"382.50\"")
        );
        assert!(svg.contains(&format!("fill=\"{}\"", hex(Category::Unattributed))));
        let (elems, texts) = parse(&svg);
        let all = texts.join("\n");
        for label in [
            "predicted",
            "measured",
            "measured peak allocated 7.00 GiB",
            "parameters 4.00 GiB / 4.00 measured",
            "optimizer states 2.00 GiB / 0.00 measured",
            "unattributed 0 / 1.00 GiB measured",
            "measured peak 7.00 GiB (backward)",
        ] {
            assert!(all.contains(label), "missing {label:?} in {all}");
        }
        // Three points spread evenly: x = 60 + (i + 0.5) / 3 × 860.
        let line = elems
            .iter()
            .find(|e| e.0 == "polyline" && attr(e, "class") == Some("measured"))
            .expect("the measured line");
        let xs: Vec<f64> = attr(line, "points")
            .unwrap()
            .split(' ')
            .map(|p| p.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(xs.len(), 3);
        for (x, want) in xs.iter().zip([203.33, 490.0, 776.67]) {
            assert!((x - want).abs() <= 0.1, "{xs:?}");
        }
    }

    #[test]
    fn a_measurement_over_the_capacity_widens_the_scale() {
        // 20 GiB measured on a 16 GiB GPU: 860 px stand for 20 GiB (43 px a GiB), so the
        // predicted parameters' 4 GiB are 172 px and the capacity line sits at 60 + 688.
        let m = Measured {
            components: vec![(Category::Activations, 20 * G)],
            ..Measured::default()
        };
        let svg = render_svg_measured(&report(16 * G), &[], Some(&m));
        assert!((segments_of(&svg)[0].2 - 172.0).abs() <= 0.5);
        assert!((measured_rects(&svg)[0].2 - 860.0).abs() <= 0.5);
        let (elems, _) = parse(&svg);
        let cap = elems
            .iter()
            .find(|e| attr(e, "class") == Some("capacity"))
            .unwrap();
        assert!((num(cap, "x1") - 748.0).abs() <= 0.5);
    }

    #[test]
    fn measured_from_analyze_json() {
        let v = serde_json::json!({
            "per_gpu": {"components": {"parameters": 10, "gradients": 0, "unattributed": 3,
                                        "cuda_context": 0}, "peak_allocated": 13},
            "timeline": [{"phase": "forward", "label": "x", "allocated": 13,
                          "by_category": {"parameters": 10, "bogus": 1}}]
        });
        let m = Measured::from_json(&v).unwrap();
        assert_eq!(
            m.components,
            [(Category::Parameters, 10), (Category::Unattributed, 3)]
        );
        assert_eq!(m.peak_allocated, Some(13));
        assert_eq!(m.timeline[0].by_category.len(), 1);
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"per_gpu": {"components": {"parameters": -1}}}),
            serde_json::json!({"per_gpu": {"components": {}}, "timeline": [{"allocated": "x"}]}),
            serde_json::json!({"per_gpu": {"components": {}}, "timeline": 3}),
        ] {
            assert!(Measured::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(3.2), 5.0);
        assert_eq!(nice_step(12.0), 20.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }
}

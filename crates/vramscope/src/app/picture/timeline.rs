//! The simulated step as stacked columns, event by event, with the phases, the GPU limit, the
//! peak and a measured line over them.

use super::labels::{fit_of, SHOWN};
use super::measured::Measured;
use super::{hex, section, text, BAR_W, HALO, LEFT, WIDTH};
use crate::units::{bytes, Unit};
use vramscope_core::report::{Report, TimelinePoint};

/// The plot's frame: its top, height and bottom in px, the bytes its height stands for, and
/// the unit its axis and labels are in (the one its height reaches).
struct Plot {
    top: f64,
    h: f64,
    bottom: f64,
    ymax: f64,
    unit: Unit,
}

impl Plot {
    /// The y of `b` bytes.
    fn y(&self, b: f64) -> f64 {
        self.bottom - b / self.ymax * self.h
    }
}

/// The simulated step: one stacked column per event, the GPU limit and the peak.
pub(super) fn timeline(r: &Report, measured: Option<&Measured>, out: &mut String, y: &mut f64) {
    let events = &r.timeline;
    if events.is_empty() {
        return;
    }
    let mline = measured.map_or(&[][..], |m| &m.timeline[..]);
    let cap = fit_of(r).map(|f| f.target.capacity);
    let max_alloc = events
        .iter()
        .chain(mline)
        .map(|e| e.allocated)
        .max()
        .unwrap_or(0);
    let ymax = y_scale(max_alloc, cap);
    let unit = Unit::for_max(ymax as u64);
    let u = unit.name;
    section(
        out,
        y,
        &if mline.is_empty() {
            format!("The step, event by event: bytes allocated by category ({u})")
        } else {
            format!(
                "The step, event by event: bytes allocated by category ({u}); the line is measured"
            )
        },
    );
    if let Some(c) = cap.filter(|c| *c as f64 > ymax) {
        capacity_above(c, out, y);
    }
    let top = *y + 14.0;
    let h = 220.0;
    let plot = Plot {
        top,
        h,
        bottom: top + h,
        ymax,
        unit,
    };
    out.push_str("<g id=\"timeline\">\n");
    y_axis(&plot, out);
    let col = BAR_W / events.len() as f64;
    step_columns(events, col, &plot, out);
    phase_ticks(events, col, plot.bottom, out);
    if let Some(c) = cap.filter(|c| *c as f64 <= ymax) {
        gpu_limit(c, &plot, out);
    }
    if !mline.is_empty() {
        measured_line(mline, &plot, out);
    }
    peak_mark(events, col, &plot, out);
    out.push_str("</g>\n");
    *y = plot.bottom + 24.0;
}

/// Bytes the plot's height stands for: the step's tallest column (allocated or measured) with
/// 8 % room above it, reaching up to the GPU's capacity only when that is within twice the
/// tallest column, so a small job on a large GPU fills the plot instead of lying along its
/// floor (a 5.9 GiB step on a 141 GiB H200 would use 4 % of the height); a capacity above the
/// plot is said under the heading instead (`capacity_above`).
fn y_scale(max_alloc: u64, cap: Option<u64>) -> f64 {
    let job = max_alloc as f64;
    let reach = match cap {
        Some(c) if (c as f64) <= 2.0 * job => job.max(c as f64),
        _ => job,
    };
    (reach * 1.08).max(1.0)
}

/// Gridlines and their labels at "nice" steps of the plot's unit.
fn y_axis(plot: &Plot, out: &mut String) {
    let unit = plot.unit.bytes as f64;
    let step = nice_step(plot.ymax / unit / 5.0);
    let mut g = 0.0;
    while g * unit <= plot.ymax {
        let gy = plot.y(g * unit);
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
}

/// One column per event, its categories stacked in the picture's order.
fn step_columns(events: &[TimelinePoint], col: f64, plot: &Plot, out: &mut String) {
    for (i, e) in events.iter().enumerate() {
        let x = LEFT + i as f64 * col;
        let mut acc = 0.0;
        for c in SHOWN {
            let b = e.by_category.get(c.name()).copied().unwrap_or(0) as f64;
            if b <= 0.0 {
                continue;
            }
            let y1 = plot.y(acc + b);
            let y0 = plot.y(acc);
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
}

/// A tick where each phase starts; its name centred under its span, kept inside the plot,
/// and left out when it would run into the previous name.
fn phase_ticks(events: &[TimelinePoint], col: f64, bottom: f64, out: &mut String) {
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
}

/// The GPU's capacity as a dashed red line across the plot, labelled.
fn gpu_limit(capacity: u64, plot: &Plot, out: &mut String) {
    let cy = plot.y(capacity as f64);
    out.push_str(&format!(
        "<line class=\"gpu-limit\" x1=\"{LEFT}\" y1=\"{cy:.1}\" x2=\"{:.1}\" y2=\"{cy:.1}\" \
         stroke=\"#cc0000\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
        LEFT + BAR_W
    ));
    text(
        out,
        LEFT + BAR_W,
        cy - 4.0,
        &format!("text-anchor=\"end\" fill=\"#cc0000\" {HALO}"),
        &format!(
            "GPU capacity {} {}",
            plot.unit.fixed(capacity),
            plot.unit.name
        ),
    );
}

/// A capacity above the plot's scale, said on its own line under the heading (red, as the
/// capacity line would be).
fn capacity_above(capacity: u64, out: &mut String, y: &mut f64) {
    *y += 16.0;
    text(
        out,
        LEFT,
        *y,
        "class=\"gpu-limit-above\" fill=\"#cc0000\"",
        &format!(
            "\u{25b2} GPU capacity {} is above this plot, which is scaled to the step",
            bytes(capacity)
        ),
    );
}

/// The first event with the most bytes allocated: a dot and a label where it fits.
fn peak_mark(events: &[TimelinePoint], col: f64, plot: &Plot, out: &mut String) {
    let Some((i, e)) = events
        .iter()
        .enumerate()
        .max_by_key(|(i, e)| (e.allocated, -(*i as i64)))
    else {
        return;
    };
    let x = LEFT + (i as f64 + 0.5) * col;
    let py = plot.y(e.allocated as f64);
    out.push_str(&format!(
        "<circle class=\"peak\" cx=\"{x:.1}\" cy=\"{py:.1}\" r=\"4\" fill=\"#000000\"/>\n"
    ));
    let label = format!(
        "peak {} {} allocated: {} ({})",
        plot.unit.fixed(e.allocated),
        plot.unit.name,
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
        (py - 8.0).max(plot.top + 10.0),
        &format!("text-anchor=\"{anchor}\" font-weight=\"bold\" {HALO}"),
        &label,
    );
}

/// The measured timeline as a polyline over the plot's width (its points spread evenly in
/// record order: a record's events do not match the simulation's one for one), its peak marked.
fn measured_line(points: &[TimelinePoint], plot: &Plot, out: &mut String) {
    let n = points.len() as f64;
    let xy: Vec<(f64, f64)> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                LEFT + (i as f64 + 0.5) / n * BAR_W,
                plot.y(p.allocated as f64),
            )
        })
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
        let label = format!(
            "measured peak {} {} ({})",
            plot.unit.fixed(p.allocated),
            plot.unit.name,
            p.phase
        );
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
            &format!("text-anchor=\"{anchor}\" {HALO}"),
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

#[cfg(test)]
mod tests {
    use super::nice_step;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(3.2), 5.0);
        assert_eq!(nice_step(12.0), 20.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }
}

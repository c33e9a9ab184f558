//! The what-if chart: the device total with one change, against the GPU.

use super::{section, text, WIDTH};
use crate::render::fit_of;
use crate::units::Unit;
use vramscope_core::fit::WhatIf;
use vramscope_core::report::Report;

/// Left column of the chart, for the change's name.
const LABEL_W: f64 = 300.0;
/// Where the bars start.
const X0: f64 = 20.0 + LABEL_W;

/// One bar per change (this job first), green when it fits the GPU and red when not, the GPU's
/// capacity as a dashed line.
pub(super) fn what_if_chart(r: &Report, rows: &[WhatIf], out: &mut String, y: &mut f64) {
    if rows.is_empty() {
        return;
    }
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
    let unit = Unit::for_max(max as u64);
    section(
        out,
        y,
        &format!(
            "What if: device total with one change ({}; green fits the GPU, red does not)",
            unit.name
        ),
    );
    let w_max = WIDTH - X0 - 90.0;
    let top = *y + 10.0;
    out.push_str("<g id=\"what-if\">\n");
    for (i, (name, total, fits)) in all.iter().enumerate() {
        let ry = top + i as f64 * 20.0;
        let bar = total.map(|t| (t, t as f64 / max * w_max));
        row(
            out,
            ry,
            name,
            bar.map(|(t, w)| (unit.fixed(t), w)),
            *fits,
            i == 0,
        );
    }
    let bottom = top + all.len() as f64 * 20.0;
    if let Some(c) = cap {
        let cx = X0 + c as f64 / max * w_max;
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
            &format!("capacity {} {}", unit.fixed(c), unit.name),
        );
    }
    out.push_str("</g>\n");
    *y = bottom + 18.0;
}

/// One change: its name, and its bar (its figure, width in px) or "n/a"; the job itself opaque.
fn row(
    out: &mut String,
    ry: f64,
    name: &str,
    bar: Option<(String, f64)>,
    fits: Option<bool>,
    this_job: bool,
) {
    text(
        out,
        X0 - 8.0,
        ry + 12.0,
        "text-anchor=\"end\"",
        &name.chars().take(44).collect::<String>(),
    );
    let fill = match fits {
        Some(true) => "#4e9a06",
        Some(false) => "#cc0000",
        None => "#888a85",
    };
    match bar {
        Some((t, w)) => {
            out.push_str(&format!(
                "<rect class=\"what-if\" x=\"{X0}\" y=\"{ry:.1}\" width=\"{w:.2}\" height=\"15\" \
                 fill=\"{fill}\" fill-opacity=\"{}\"/>\n",
                if this_job { "1" } else { "0.75" }
            ));
            text(out, X0 + w + 6.0, ry + 12.0, "", &t);
        }
        None => text(out, X0, ry + 12.0, "fill=\"#888888\"", "n/a"),
    }
}

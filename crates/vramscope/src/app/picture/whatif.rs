//! The what-if chart: the device total with one change, against the GPU.

use super::labels::fit_of;
use super::{section, text, WIDTH};
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
    let cap = fit_of(r).map(|f| f.target.capacity);
    let mut all: Vec<(String, Option<u64>, Option<bool>)> = vec![(
        "this job".into(),
        r.per_gpu.peaks.device_total,
        fit_of(r).map(|f| f.fits),
    )];
    all.extend(
        rows.iter()
            .map(|w| (w.technique.clone(), w.device_total, w.fits)),
    );
    let tallest = all.iter().filter_map(|(_, t, _)| *t).max().unwrap_or(0);
    // Scaled to the bars, as the step plot is (`timeline::y_scale`): the capacity takes part
    // only when it is within twice the longest bar, else it is said, not drawn.
    let drawn_cap = cap.filter(|c| *c <= tallest.saturating_mul(2));
    let max = tallest.max(drawn_cap.unwrap_or(0)).max(1) as f64;
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
    let mut ry = top;
    for (i, (name, total, fits)) in all.iter().enumerate() {
        let lines = wrap(name, LABEL_CHARS);
        let bar = total.map(|t| (t, t as f64 / max * w_max));
        row(
            out,
            ry,
            &lines,
            bar.map(|(t, w)| (unit.fixed(t), w)),
            *fits,
            i == 0,
        );
        ry += 20.0 + 14.0 * (lines.len() - 1) as f64;
    }
    let bottom = ry;
    if let Some(c) = cap.filter(|c| drawn_cap != Some(*c)) {
        text(
            out,
            X0 + w_max,
            bottom + 14.0,
            "class=\"capacity-beyond\" text-anchor=\"end\" fill=\"#cc0000\"",
            &format!("capacity {}: beyond this scale", crate::units::bytes(c)),
        );
    }
    if let Some(c) = drawn_cap {
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

/// Characters of a change's name on one line of the label column: its 300 px less the 8 px
/// gap, at about 6.6 px a character of 12 px DejaVu Sans in mixed case (Chromium drew the 38
/// characters of "ZeRO-Offload: optimizer states in host" 229 px wide: 6.0 px each).
const LABEL_CHARS: usize = 44;

/// `s` in lines of at most `max` characters, broken between words (a word longer than a line
/// on a line of its own, whole): a change's name is shown whole, never cut.
fn wrap(s: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

/// One change: its name (one line or more), and its bar (its figure, width in px) or "n/a"
/// beside the first line; the job itself opaque.
fn row(
    out: &mut String,
    ry: f64,
    name: &[String],
    bar: Option<(String, f64)>,
    fits: Option<bool>,
    this_job: bool,
) {
    for (k, line) in name.iter().enumerate() {
        text(
            out,
            X0 - 8.0,
            ry + 12.0 + 14.0 * k as f64,
            "class=\"what-if-label\" text-anchor=\"end\"",
            line,
        );
    }
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

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn long_names_wrap_between_words_and_keep_every_character() {
        // 58 characters: "ZeRO-Infinity: optimizer states and" is 35, adding " parameters" makes 46 > 40,
        // so the break falls before "parameters".
        let name = "ZeRO-Infinity: optimizer states and parameters in host RAM";
        assert_eq!(
            wrap(name, 40),
            [
                "ZeRO-Infinity: optimizer states and",
                "parameters in host RAM"
            ]
        );
        assert_eq!(wrap("this job", 40), ["this job"]);
        let long = "a".repeat(50);
        assert_eq!(wrap(&long, 40), [long]);
    }
}

//! The report as one self-contained SVG picture (no fonts, scripts or links fetched): the
//! stacked bar of the peak against the GPU, the step timeline per category with the GPU limit
//! and the peak, the what-if chart, and the per-layer activations when the timeline has layers.
//! Colours and category order are the terminal's (`labels::SHOWN`); `render::svg` re-exports this.

mod bar;
mod layers;
mod measured;
mod timeline;
mod whatif;

pub use measured::Measured;

pub mod labels;
pub mod summary;

use crate::units::short_count;
use labels::{fit_of, SHOWN};
use summary::job_summary;
use vramscope_core::fit::WhatIf;
use vramscope_core::report::{Category, Report};

/// Picture width in px.
pub const WIDTH: f64 = 960.0;
/// Left edge of every chart.
pub const LEFT: f64 = 60.0;
/// Width of the stacked bar and of the timeline's plot area: `WIDTH - LEFT - 40` = 860 px.
pub const BAR_W: f64 = WIDTH - LEFT - 40.0;
/// A white outline behind a label drawn over the plot's columns (the capacity, the peak), so it
/// reads over any colour.
pub(crate) const HALO: &str =
    "stroke=\"#ffffff\" stroke-width=\"3\" stroke-linejoin=\"round\" paint-order=\"stroke\"";
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
    let cap = fit_of(report).map_or(0, |f| f.target.capacity);
    used.max(cap).max(1)
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
    bar::stacked_bar(report, measured, &mut body, &mut y);
    timeline::timeline(report, measured, &mut body, &mut y);
    whatif::what_if_chart(report, what_if, &mut body, &mut y);
    layers::per_layer(report, &mut body, &mut y);
    let h = (y + 20.0).ceil();
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{h}\" \
         viewBox=\"0 0 {WIDTH} {h}\" {FONT} font-size=\"12\" role=\"img\">\n\
         <title>{}</title>\n<rect width=\"{WIDTH}\" height=\"{h}\" fill=\"#ffffff\"/>\n{body}</svg>\n",
        esc(&format!("GPU memory of {}", report.model.name))
    )
}

pub(crate) fn text(out: &mut String, x: f64, y: f64, attrs: &str, s: &str) {
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

pub(crate) fn section(out: &mut String, y: &mut f64, heading: &str) {
    *y += 34.0;
    text(
        out,
        20.0,
        *y,
        "font-size=\"14\" font-weight=\"bold\"",
        heading,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use quick_xml::events::Event;
    use vramscope_core::report::{Components, Fit, TargetGpu, TimelinePoint};

    const G: u64 = 1 << 30;

    /// A real report (gpt2 on a T4) with the peak's categories replaced by round figures, so the
    /// expected widths can be worked out by hand: 4 + 2 + 1 + 0.5 = 7.5 GiB used.
    fn report(capacity: u64) -> Report {
        let job: vramscope_core::job::Job =
            serde_json::from_str(r#"{"model": "gpt2", "batch": 2, "gpu": "t4-16gb"}"#).unwrap();
        let mut r = crate::app::job::estimate_job(&crate::app::Session::default(), &job).unwrap();
        r.per_gpu.components = Components {
            parameters: 4 * G,
            optimizer_states: 2 * G,
            activations: G,
            cuda_context: G / 2,
            ..Components::default()
        };
        r.fit = Some(Fit {
            target: TargetGpu {
                gpu: "t4-16gb".into(),
                capacity,
            },
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

    /// The rects of `class`: (category, x, width).
    fn rects_of(svg: &str, class: &str) -> Vec<(String, f64, f64)> {
        parse(svg)
            .0
            .iter()
            .filter(|e| e.0 == "rect" && attr(e, "class") == Some(class))
            .map(|e| {
                (
                    attr(e, "data-category").unwrap().to_string(),
                    num(e, "x"),
                    num(e, "width"),
                )
            })
            .collect()
    }

    /// Where the capacity line stands on the bar (its `x1`).
    fn capacity_x(svg: &str) -> f64 {
        let (elems, _) = parse(svg);
        let cap = elems
            .iter()
            .find(|e| attr(e, "class") == Some("capacity"))
            .expect("a capacity line");
        num(cap, "x1")
    }

    /// The peak bar's segments: (category, x, width).
    fn segments_of(svg: &str) -> Vec<(String, f64, f64)> {
        rects_of(svg, "segment")
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
        assert!((capacity_x(&svg) - 518.67).abs() <= 1.0);
        assert!(svg.contains("does not fit t4-16gb (3.50 GiB over)"));
    }

    /// A serving engine that would refuse to start inside the capacity (issue 31: the header
    /// said "4.50 GiB over" where 4.50 GiB was free): 12 GiB capacity − 7.5 GiB used = 4.50
    /// GiB free, and the header says so, as the terminal does.
    #[test]
    fn an_engine_that_would_not_start_is_not_drawn_as_over() {
        let mut r = report(12 * G);
        if let Some(f) = r.fit.as_mut() {
            f.fits = false;
        }
        let svg = render_svg(&r, &[]);
        assert!(
            svg.contains(
                "does not fit t4-16gb: the engine would not start, although 4.50 GiB is free"
            ),
            "{svg}"
        );
        assert!(!svg.contains("over)"));
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
            step_time_s: None,
            time_cost: None,
            kv_tokens: None,
            kv_tokens_gained: None,
            concurrent_requests: None,
            host_bytes: None,
            env: Default::default(),
            reserve_estimated: false,
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
        // The step plot names the capacity: its line's label, or the line saying it is above
        // the plot (gpt2's step is under half of 16 GiB).
        assert!(all.contains("GPU capacity 16.00 GiB"), "{all}");
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
            phase: phase.to_string().into(),
            label: "".into(),
            allocated,
            by_category: Default::default(),
        }
    }

    /// The y axis's tick labels: the timeline's `<text>` at `LEFT - 6` anchored at the end.
    fn y_ticks(svg: &str) -> Vec<&str> {
        svg.split("<text x=\"54.0\" ")
            .skip(1)
            .filter_map(|t| {
                let (attrs, rest) = t.split_once('>')?;
                let tick = attrs.ends_with("text-anchor=\"end\" fill=\"#444444\"");
                tick.then(|| rest.split_once("</text>").map(|x| x.0))?
            })
            .collect()
    }

    #[test]
    fn a_tiny_models_charts_are_in_mib_not_zero_gib() {
        // A 4 MiB step with no GPU: parameters 3 MiB, then 1 MiB of activations in backward.
        const M: u64 = 1 << 20;
        let mut r = report(16 * G);
        r.fit = None;
        r.job.gpu = None;
        r.per_gpu.components = Components {
            parameters: 3 * M,
            activations: M,
            ..Components::default()
        };
        r.per_gpu.peaks.device_total = Some(5 * M);
        let mut fwd = point("forward", 3 * M);
        fwd.by_category.insert("parameters", 3 * M);
        let mut bwd = point("backward", 4 * M);
        bwd.by_category.insert("parameters", 3 * M);
        bwd.by_category.insert("activations", M);
        bwd.label = "layer 0".into();
        r.timeline = vec![fwd, bwd];
        let svg = render_svg(&r, &[]);
        // The plot's top is 1.08 × 4 MiB = 4.32 MiB (< 1 GiB, ≥ 1 MiB): MiB. Ticks every
        // nice_step(4.32 / 5 = 0.864) = 1 MiB from 0 while ≤ 4.32: 0, 1, 2, 3, 4 (the GiB axis
        // had one tick, 0).
        assert_eq!(y_ticks(&svg), ["0", "1", "2", "3", "4"]);
        assert!(svg.contains("bytes allocated by category (MiB)"), "{svg}");
        assert!(svg.contains("peak 4.00 MiB allocated: layer 0 (backward)"));
        // The bar fills 4 MiB (no GPU): MiB, its segments 3.00 and 1.00 (645 and 215 px wide,
        // both labelled), the device total 5.00 MiB.
        assert!(svg.contains("Memory at the peak, by category (MiB) — device total 5.00 MiB"));
        let texts = parse(&svg).1;
        assert!(texts.iter().any(|t| t == "3.00") && texts.iter().any(|t| t == "1.00"));
        assert!(!svg.contains("0.00 GiB"), "{svg}");
    }

    /// The report with a two-event step: forward 5 GiB, backward 6 GiB, all activations.
    fn stepped(capacity: u64) -> Report {
        let mut r = report(capacity);
        let mut fwd = point("forward", 5 * G);
        fwd.by_category.insert("activations", 5 * G);
        let mut bwd = point("backward", 6 * G);
        bwd.by_category.insert("activations", 6 * G);
        r.timeline = vec![fwd, bwd];
        r
    }

    /// The step's columns' heights in px, in order.
    fn column_heights(svg: &str) -> Vec<f64> {
        parse(svg)
            .0
            .iter()
            .filter(|e| e.0 == "rect" && attr(e, "class") == Some("step"))
            .map(|e| num(e, "height"))
            .collect()
    }

    #[test]
    fn a_small_step_on_a_large_gpu_fills_the_plot_and_names_the_capacity() {
        // A 6 GiB step on a 140 GiB GPU: the capacity is over twice the step, so the 220 px
        // plot stands for 6 × 1.08 = 6.48 GiB: the 6 GiB column is 220 × 6 / 6.48 = 203.7 px
        // (scaled to the capacity × 1.08 it would be 220 × 6 / 151.2 = 8.7 px, a flat line).
        let svg = render_svg(&stepped(140 * G), &[]);
        let h = column_heights(&svg);
        assert_eq!(h.len(), 2, "{h:?}");
        assert!((h[1] - 203.7).abs() <= 0.1, "{h:?}");
        assert!((h[0] - 220.0 * 5.0 / 6.48).abs() <= 0.1, "{h:?}");
        // Ticks every nice_step(6.48 / 5 = 1.296) = 2 GiB: 0, 2, 4, 6.
        assert_eq!(y_ticks(&svg), ["0", "2", "4", "6"]);
        // The capacity is said (in the CLI's units: 140.0 GiB), not drawn off the plot.
        let (elems, texts) = parse(&svg);
        assert!(!elems.iter().any(|e| attr(e, "class") == Some("gpu-limit")));
        assert!(
            texts
                .iter()
                .any(|t| t.contains("GPU capacity 140.0 GiB is above this plot")),
            "{texts:?}"
        );
    }

    #[test]
    fn a_capacity_within_twice_the_step_is_drawn_across_it() {
        // 10 GiB ≤ 2 × 6 GiB: the plot stands for 10 × 1.08 = 10.8 GiB; the 6 GiB column is
        // 220 × 6 / 10.8 = 122.2 px and the capacity line 220 × 10 / 10.8 = 203.7 px above the
        // floor (the floor: the column's top plus its height).
        let svg = render_svg(&stepped(10 * G), &[]);
        let (elems, texts) = parse(&svg);
        let col = elems
            .iter()
            .filter(|e| e.0 == "rect" && attr(e, "class") == Some("step"))
            .nth(1)
            .unwrap();
        assert!((num(col, "height") - 122.2).abs() <= 0.1);
        let floor = num(col, "y") + num(col, "height");
        let limit = elems
            .iter()
            .find(|e| attr(e, "class") == Some("gpu-limit"))
            .expect("the capacity line");
        assert!((floor - num(limit, "y1") - 203.7).abs() <= 0.1);
        assert!(!texts.iter().any(|t| t.contains("above this plot")));
    }

    #[test]
    fn the_capacity_label_is_never_cut_at_the_left_edge() {
        for (capacity, anchor, x) in [
            // 1 GiB GPU, 7.5 GiB used: the line at 60 + 860 / 7.5 = 174.67 px; its label
            // "t4-16gb capacity 1.00 GiB" (25 characters, ~180 px) ended there would begin left
            // of the picture, so it begins at the line: x = 178.67, anchored at its start.
            (G, "start", 178.67),
            // 4 GiB: the line at 518.67 px, room for the label to its left: ended at the line.
            (4 * G, "end", 518.67),
        ] {
            let svg = render_svg(&report(capacity), &[]);
            let (elems, _) = parse(&svg);
            let label = elems
                .iter()
                .find(|e| attr(e, "class") == Some("capacity-label"))
                .unwrap();
            assert_eq!(attr(label, "text-anchor"), Some(anchor), "{capacity}");
            assert!((num(label, "x") - x).abs() <= 0.1, "{capacity}");
        }
    }

    /// The what-if chart's bars (width px) and whether its capacity line is drawn, for a job of
    /// 6 GiB on the device and one change to 4 GiB.
    fn what_if_bars(capacity: u64) -> (Vec<f64>, bool, String) {
        let mut r = report(capacity);
        r.per_gpu.peaks.device_total = Some(6 * G);
        let rows = vec![WhatIf {
            technique: "full checkpointing".into(),
            flags: vec!["--checkpointing".into(), "full".into()],
            change: "checkpointing full".into(),
            peak_allocated: Some(3 * G),
            device_total: Some(4 * G),
            saved: Some(2 * G as i64),
            fits: Some(true),
            step_time_s: None,
            time_cost: None,
            env: Default::default(),
            kv_tokens: None,
            kv_tokens_gained: None,
            concurrent_requests: None,
            host_bytes: None,
            reserve_estimated: false,
        }];
        let svg = render_svg(&r, &rows);
        let (elems, texts) = parse(&svg);
        let bars = elems
            .iter()
            .filter(|e| attr(e, "class") == Some("what-if"))
            .map(|e| num(e, "width"))
            .collect();
        let line = svg
            .split("<g id=\"what-if\">")
            .nth(1)
            .is_some_and(|g| g.contains("class=\"gpu-limit\""));
        (bars, line, texts.join("\n"))
    }

    #[test]
    fn the_what_if_chart_is_scaled_to_its_bars_on_a_large_gpu() {
        // Bars run over WIDTH − 320 − 90 = 550 px. On 140 GiB (over twice the longest bar, 6
        // GiB) they stand for 6 GiB: 550 and 550 × 4 / 6 = 366.67 px, the capacity said.
        let (bars, line, texts) = what_if_bars(140 * G);
        assert!(
            (bars[0] - 550.0).abs() <= 0.01 && (bars[1] - 366.67).abs() <= 0.01,
            "{bars:?}"
        );
        assert!(!line);
        assert!(
            texts.contains("capacity 140.0 GiB: beyond this scale"),
            "{texts}"
        );
        // On 10 GiB (within twice 6) the bars stand for 10 GiB: 330 and 220 px, the line at
        // the end.
        let (bars, line, texts) = what_if_bars(10 * G);
        assert!(
            (bars[0] - 330.0).abs() <= 0.01 && (bars[1] - 220.0).abs() <= 0.01,
            "{bars:?}"
        );
        assert!(line && !texts.contains("beyond this scale"));
    }

    fn measured_rects(svg: &str) -> Vec<(String, f64, f64)> {
        rects_of(svg, "measured-segment")
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
        assert!((capacity_x(&svg) - 748.0).abs() <= 0.5);
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
}

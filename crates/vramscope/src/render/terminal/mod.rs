//! The estimate in the terminal: a header, the breakdown table, the fit verdict, and one stacked
//! bar of the GPU (the "one picture", [`bar`]) with its legend. Lines stay within 80 columns.

mod bar;
mod speed;

pub use crate::app::picture::summary::job_summary;

use super::{fit_of, SHOWN};
use crate::units::{bytes, short_count};
use anstyle::{AnsiColor, Color, Style};
use bar::picture;
use vramscope_core::report::Report;

/// Widest line the rendering produces.
pub const MAX_LINE: usize = 80;
const INDENT: &str = "  ";

const BOLD: Style = Style::new().bold();
const DIM: Style = Style::new().dimmed();
const GOOD: Style = Style::new()
    .bold()
    .fg_color(Some(Color::Ansi(AnsiColor::Green)));
const BAD: Style = Style::new()
    .bold()
    .fg_color(Some(Color::Ansi(AnsiColor::Red)));
const WARN: Style = Style::new()
    .bold()
    .fg_color(Some(Color::Ansi(AnsiColor::Yellow)));

fn paint(on: bool, style: Style, text: &str) -> String {
    if on && !text.is_empty() {
        format!("{style}{text}{style:#}")
    } else {
        text.to_string()
    }
}

/// Words of `text` in lines of at most `MAX_LINE` columns, each starting with `indent`; a word
/// longer than a line (a path) is cut.
pub(crate) fn wrap(text: &str, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        let need = word.chars().count() + usize::from(!empty);
        if !empty && line.chars().count() + need > MAX_LINE {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        let mut chars: Vec<char> = word.chars().collect();
        loop {
            let room = MAX_LINE.saturating_sub(line.chars().count()).max(1);
            if chars.len() <= room {
                line.extend(chars.iter());
                break;
            }
            line.extend(chars.drain(..room));
            lines.push(std::mem::replace(&mut line, rest.to_string()));
        }
        empty = false;
    }
    if !empty || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// `text` split at `sep` and packed into lines of at most `MAX_LINE` columns, breaking only
/// between parts (a part too long for a line is word-wrapped on its own).
fn wrap_parts(text: &str, sep: &str, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for part in text.split(sep) {
        let candidate = if line.is_empty() {
            format!("{indent}{part}")
        } else {
            format!("{line}{sep}{part}")
        };
        if candidate.chars().count() <= MAX_LINE {
            line = candidate;
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        let mut pieces = wrap(part, indent, indent);
        line = pieces.pop().unwrap_or_default();
        lines.extend(pieces);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// The report for a terminal: `width` is the bar's length in cells (kept within 10..=76 so no
/// line passes 80 columns), `color` whether ANSI styles may be used.
pub fn render_estimate(report: &Report, width: usize, color: bool) -> String {
    let mut out: Vec<String> = Vec::new();
    header(report, color, &mut out);
    out.push(String::new());
    table(report, &mut out);
    out.push(String::new());
    fit_line(report, color, &mut out);
    out.extend(speed::lines(report, INDENT));
    out.extend(picture(report, width, color));
    for w in &report.warnings {
        let lines = wrap(w, "warning: ", "         ");
        for (i, l) in lines.into_iter().enumerate() {
            if i == 0 {
                out.push(format!(
                    "{}{}",
                    paint(color, WARN, "warning:"),
                    &l["warning:".len()..]
                ));
            } else {
                out.push(l);
            }
        }
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}

fn header(r: &Report, color: bool, out: &mut Vec<String>) {
    let m = &r.model;
    let mut title = m.name.clone();
    if let Some(a) = &m.architecture {
        title.push_str(&format!(" — {a}"));
    }
    title.push_str(&format!(" · {} parameters", short_count(m.params_total)));
    if m.params_trainable != m.params_total {
        title.push_str(&format!(", {} trainable", short_count(m.params_trainable)));
    }
    for (i, l) in wrap(&title, "", "  ").into_iter().enumerate() {
        // The name (first line) in bold; continuation lines plain.
        out.push(if i == 0 { paint(color, BOLD, &l) } else { l });
    }
    for l in wrap_parts(&job_summary(&r.job), " · ", INDENT) {
        out.push(paint(color, DIM, &l));
    }
}

fn table(r: &Report, out: &mut Vec<String>) {
    let p = &r.per_gpu;
    let sum: u64 = SHOWN.iter().map(|c| p.components.get(*c)).sum();
    let (base, base_name) = match (p.peaks.device_total, p.peaks.peak_allocated) {
        (Some(d), _) if d > 0 => (d, "device"),
        (_, Some(a)) if a > 0 => (a, "allocated"),
        _ => (sum, "total"),
    };
    // Adaptive units (a 123 K-parameter model is KiB, not 0.00 GiB); exact bytes are in --json.
    let row = |label: &str, b: Option<u64>, share: &str| {
        format!(
            "{INDENT}{label:<20}  {:>11}  {share:>9}",
            b.map_or_else(|| "n/a".to_string(), bytes)
        )
        .trim_end()
        .to_string()
    };
    out.push(format!(
        "{INDENT}{:<20}  {:>11}  {:>9}",
        "at the peak",
        "",
        format!("% {base_name}")
    ));
    for c in SHOWN {
        let b = p.components.get(c);
        if b > 0 {
            let share = if base > 0 {
                format!("{:.1}%", b as f64 * 100.0 / base as f64)
            } else {
                "-".into()
            };
            out.push(row(super::label_in(r, c), Some(b), &share));
        }
    }
    if sum == 0 {
        out.push(format!("{INDENT}(no bytes attributed)"));
    }
    out.push(format!("{INDENT}{}", "─".repeat(20 + 2 + 11 + 2 + 9)));
    out.push(row("peak allocated", p.peaks.peak_allocated, ""));
    out.push(row("peak reserved", p.peaks.peak_reserved, ""));
    out.push(row("device total", p.peaks.device_total, ""));
    if let Some(kv) = p.kv_pool {
        out.push(row("KV pool (engine)", Some(kv), ""));
        let pool = vramscope_core::fit::pool_text(r);
        if let Some((_, holds)) = pool.split_once(", ") {
            out.extend(wrap(&format!("  {holds}"), INDENT, INDENT));
        }
    }
    // Bytes a layer keeps for backward: meaningful for training only (inference saves none).
    if let Some(a) = p.peaks.activation_bytes_per_layer.filter(|a| *a > 0) {
        out.push(row("activations/layer", Some(a), ""));
    }
    if let Some(phase) = &p.peaks.peak_phase {
        out.push(format!("{INDENT}peak during: {phase}"));
    }
    // An RL step: each phase's own device total (the peak is the larger).
    for ph in r.rl.iter().flat_map(|f| &f.phases) {
        out.push(row(
            &format!("{} phase", ph.phase),
            Some(ph.device_total),
            "device total",
        ));
    }
}

/// The capacity a fit is judged against: "24.00 GiB", or with the job's reserve
/// "24.00 GiB − 2.00 GiB reserved".
pub fn capacity_text(f: &vramscope_core::report::Fit) -> String {
    if f.reserve == 0 {
        bytes(f.target.capacity)
    } else {
        format!(
            "{} − {} reserved",
            bytes(f.target.capacity),
            bytes(f.reserve)
        )
    }
}

fn fit_line(r: &Report, color: bool, out: &mut Vec<String>) {
    match fit_of(r) {
        Some(f) if f.fits && f.headroom < super::TIGHT_HEADROOM => {
            let text = format!(
                "fits {}, but tight: {} free of {} (under 1 GiB: fragmentation or another \
                 process can push it over)",
                f.target.gpu,
                bytes(f.headroom.max(0) as u64),
                capacity_text(&f)
            );
            for l in wrap(&text, INDENT, INDENT) {
                out.push(paint(color, WARN, &l));
            }
        }
        Some(f) if f.fits => {
            let text = format!(
                "fits {}: {} free of {}",
                f.target.gpu,
                bytes(f.headroom.max(0) as u64),
                capacity_text(&f)
            );
            out.push(format!("{INDENT}{}", paint(color, GOOD, &text)));
        }
        Some(f) if f.headroom >= 0 => {
            let text = format!(
                "does not fit {}: the engine would not start (see the warning), although \
                 {} of {} is free",
                f.target.gpu,
                bytes(f.headroom as u64),
                capacity_text(&f)
            );
            for l in wrap(&text, INDENT, INDENT) {
                out.push(paint(color, BAD, &l));
            }
        }
        Some(f) => {
            let text = format!(
                "does not fit {}: {} over its {}",
                f.target.gpu,
                bytes(f.headroom.unsigned_abs()),
                capacity_text(&f)
            );
            out.push(format!("{INDENT}{}", paint(color, BAD, &text)));
        }
        None => out.push(paint(
            color,
            DIM,
            &format!("{INDENT}no GPU given: add --gpu ID to check the fit (`vramscope gpus`)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::bar::{bar_cells, color, fill, picture, FREE, FULL};
    use super::*;
    use serde_json::json;
    use vramscope_core::job::Job;
    use vramscope_core::report::Category;
    use vramscope_core::report::{Components, Fit, ModelStates, PeakFigures, PerGpu, TargetGpu};
    use vramscope_core::ModelSummary;

    const G: u64 = 1 << 30;

    /// A report built by hand: 72 GiB of capacity so one cell of a 72-cell bar is 1 GiB.
    fn report(components: Components, capacity: Option<u64>, warnings: Vec<String>) -> Report {
        let job: Job = serde_json::from_value(json!({"model": "hand-built"})).unwrap();
        let job = job.resolve(Some(4096)).unwrap();
        let total: u64 = SHOWN.iter().map(|c| components.get(*c)).sum();
        Report {
            model: ModelSummary::from_params("hand-built", 1_000_000),
            job,
            per_gpu: PerGpu {
                components,
                model_states: ModelStates::default(),
                peaks: PeakFigures {
                    activation_bytes_per_layer: None,
                    peak_allocated: Some(components.allocated()),
                    peak_reserved: None,
                    device_total: Some(total),
                    peak_phase: Some("backward".into()),
                },
                kv_pool: None,
                host_bytes: None,
                rank: None,
                paged_states: None,
                allocator: None,
            },
            timeline: Vec::new(),
            fit: capacity.map(|c| Fit {
                target: TargetGpu {
                    gpu: "test-72gb".into(),
                    capacity: c,
                },
                fits: total <= c,
                headroom: c as i64 - total as i64,
                reserve: 0,
            }),
            warnings,
            engine: None,
            advice: None,
            rl: None,
            throughput: None,
        }
    }

    fn bar_line(text: &str) -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with("  │"))
            .expect("a bar line");
        line.trim_start_matches("  │")
            .trim_end_matches('│')
            .to_string()
    }

    /// The estimate of `c` drawn 72 cells wide for a 72 GiB GPU: one cell a GiB.
    fn on_72_gib(c: Components, colour: bool) -> String {
        render_estimate(&report(c, Some(72 * G), vec![]), 72, colour)
    }

    /// Some bytes in every category the picture shows.
    fn every_category() -> Components {
        Components {
            parameters: 3 * G,
            gradients: 3 * G,
            optimizer_states: 6 * G,
            master_weights: G,
            activations: 5 * G,
            kv_cache: G / 3,
            temporaries: G / 2,
            cuda_context: G / 2,
            allocator_reserve: G / 4,
        }
    }

    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn half_the_gpu_is_half_the_bar() {
        // 36 of 72 GiB parameters → 36 of 72 cells; 18 GiB gradients → 18 cells; 18 free.
        let c = Components {
            parameters: 36 * G,
            gradients: 18 * G,
            ..Default::default()
        };
        let text = on_72_gib(c, false);
        let bar = bar_line(&text);
        let expected = format!("{}{}{}", "█".repeat(36), "▓".repeat(18), "·".repeat(18));
        assert_eq!(bar, expected);

        // With colour the same split, up to the one cell a partial block may share.
        let text = strip_ansi(&on_72_gib(c, true));
        let bar = bar_line(&text);
        assert_eq!(bar.chars().count(), 72);
        let full = bar.chars().filter(|ch| *ch == FULL).count();
        assert!((53..=55).contains(&full), "{bar}");
        assert_eq!(bar.chars().filter(|ch| *ch == FREE).count(), 18, "{bar}");
    }

    #[test]
    fn partial_cells_split_in_eighths() {
        // 36.5 GiB on a 72-GiB scale = 292 eighths: 36 full cells and a half block, whose
        // background is the next category's colour.
        let c = Components {
            parameters: 36 * G + G / 2,
            gradients: 35 * G + G / 2,
            ..Default::default()
        };
        let cells = bar_cells(
            &[
                (Category::Parameters, c.parameters),
                (Category::Gradients, c.gradients),
            ],
            72 * G,
            72,
            true,
        );
        assert_eq!(cells.iter().filter(|c| c.ch == FULL).count(), 71);
        assert_eq!(cells[36].ch, '▌');
        assert_eq!(
            cells[36].style,
            Style::new()
                .fg_color(Some(color(Category::Parameters)))
                .bg_color(Some(color(Category::Gradients)))
        );
    }

    #[test]
    fn overflow_is_drawn_whole_with_the_capacity_marked() {
        // 144 GiB on a 72-GiB GPU: the bar is scaled to 144 GiB, the capacity is at cell 36.
        let c = Components {
            parameters: 72 * G,
            optimizer_states: 72 * G,
            ..Default::default()
        };
        let text = on_72_gib(c, false);
        let bar = bar_line(&text);
        assert_eq!(bar, format!("{}{}", "█".repeat(36), "▒".repeat(36)));
        let axis = text
            .lines()
            .skip_while(|l| !l.starts_with("  │"))
            .nth(1)
            .unwrap();
        assert_eq!(axis.find('^'), Some(2 + 1 + 36), "{axis}");
        assert!(
            text.contains("does not fit test-72gb: 72.00 GiB over"),
            "{text}"
        );
        assert!(text.contains("over capacity by 72.00 GiB"), "{text}");
    }

    #[test]
    fn lines_fit_80_columns_and_plain_output_has_no_escapes() {
        let c = every_category();
        let long = "a warning long enough to need wrapping because it goes on and on about \
                    a path /very/long/path/that/cannot/be/broken/at/a/space/anywhere/in/it/at/all/really"
            .to_string();
        for cap in [None, Some(80 * G), Some(8 * G)] {
            for width in [1, 40, 72, 500] {
                for color in [false, true] {
                    let text = render_estimate(&report(c, cap, vec![long.clone()]), width, color);
                    if !color {
                        assert!(!text.contains('\x1b'), "escape without colour:\n{text}");
                    }
                    for l in strip_ansi(&text).lines() {
                        assert!(
                            l.chars().count() <= MAX_LINE,
                            "{} cols: {l}",
                            l.chars().count()
                        );
                    }
                }
            }
        }
        assert!(render_estimate(&report(c, None, vec![]), 72, true).contains('\x1b'));
    }

    #[test]
    fn every_category_is_in_the_legend_with_its_own_fill() {
        let c = every_category();
        let fills: std::collections::HashSet<char> = SHOWN.iter().map(|c| fill(*c)).collect();
        assert_eq!(fills.len(), SHOWN.len());
        assert!(!fills.contains(&FREE));
        for color in [false, true] {
            let lines = picture(&report(c, Some(80 * G), vec![]), 72, color);
            let legend = strip_ansi(&lines[3..].join("\n"));
            for cat in SHOWN {
                let entry = if color {
                    format!("██ {} ", cat.label())
                } else {
                    format!("{0}{0} {1} ", fill(cat), cat.label())
                };
                assert!(legend.contains(&entry), "{entry} missing from\n{legend}");
            }
            assert!(legend.contains("·· free"), "{legend}");
        }
        // A category with no bytes is not listed.
        let only = Components {
            parameters: G,
            ..Default::default()
        };
        let legend = picture(&report(only, None, vec![]), 72, false)[3..].join("\n");
        assert!(
            legend.contains("parameters") && !legend.contains("gradients"),
            "{legend}"
        );
    }

    #[test]
    fn no_gpu_scales_to_the_total() {
        let c = Components {
            parameters: 3 * G,
            activations: G,
            ..Default::default()
        };
        let text = render_estimate(&report(c, None, vec![]), 72, false);
        // 3/4 of 72 cells = 54.
        assert_eq!(
            bar_line(&text),
            format!("{}{}", "█".repeat(54), "#".repeat(18))
        );
        assert!(text.contains("no GPU given"), "{text}");
    }
}

//! `vramscope analyze FILE`: a PyTorch memory record in, the measured breakdown at the peak out
//! (the contract's `{"per_gpu", "timeline"}` plus top allocations, sites and fragmentation).

use super::CmdResult;
use crate::output::{paint, print, print_json, warning_line, BOLD, DIM, HEADER};
use crate::units::{bytes, percent, thousands};
use std::path::Path;
use vramscope_core::report::Category;
use vramscope_measure::analysis::CATS;
use vramscope_measure::logs::Measured;
use vramscope_measure::Analysis;

/// A record or a log, from a file or (`-`) from stdin (streamed as far as its kind allows;
/// errors call it `stdin`).
fn load_any(path: &Path) -> Result<Measured, Box<dyn std::error::Error>> {
    if path.as_os_str() == "-" {
        let stdin = std::io::stdin().lock();
        return Ok(crate::app::analyze::analyze_stream(stdin, "stdin")?);
    }
    Ok(crate::app::analyze::analyze_path(path)?)
}

pub fn run(path: &Path, json: bool) -> CmdResult {
    let a = match load_any(path)? {
        Measured::Record(a) => *a,
        Measured::Log(l) if json => return print_json(&l).map(|_| 0).map_err(Into::into),
        Measured::Log(l) => {
            print(&super::logview::render(&l, &path.display().to_string()))?;
            return Ok(0);
        }
    };
    if json {
        print_json(&a)?;
    } else {
        print(&render(&a, path))?;
    }
    Ok(0)
}

/// The terminal report of a record: the peak, the categories at the peak, what was inferred,
/// the largest allocations and sites, the segments, the OOMs and the warnings.
fn render(a: &Analysis, path: &Path) -> String {
    let mut s = heading(a, path);
    s.push_str(&categories(a));
    s.push_str(&render_inferences(a));
    s.push_str(&top_allocations(a));
    s.push_str(&top_frames(a));
    s.push_str(&fragmentation(a));
    s.push_str(&allocator(a));
    for o in &a.ooms {
        s.push_str(&format!(
            "OOM: asked for {} with {} free on the device at {}\n",
            bytes(o.requested),
            o.device_free.map(bytes).unwrap_or_else(|| "?".into()),
            o.site
        ));
    }
    s.push_str(&warnings(a));
    s
}

/// What was read, and the peaks.
fn heading(a: &Analysis, path: &Path) -> String {
    let g = &a.per_gpu;
    format!(
        "{} {} ({}, {} events{})\n\n  peak allocated {}   peak reserved {}   peak phase {}\n\n",
        paint(HEADER, "Measured memory:"),
        path.display(),
        a.source.kind,
        thousands(a.source.events as u64),
        a.source
            .device
            .map(|d| format!(", device {d}"))
            .unwrap_or_default(),
        paint(BOLD, &bytes(g.peaks.peak_allocated.unwrap_or(0))),
        g.peaks
            .peak_reserved
            .map(bytes)
            .unwrap_or_else(|| "unknown".into()),
        g.peaks.peak_phase.as_deref().unwrap_or("unknown")
    )
}

/// The bytes of each model state held over the step (its maximum), for the `held` column.
fn held(g: &vramscope_measure::MeasuredPerGpu, c: Category) -> Option<u64> {
    let m = &g.model_states;
    match c {
        Category::Parameters => Some(m.parameters),
        Category::Gradients => Some(m.gradients),
        Category::OptimizerStates => Some(m.optimizer_states),
        Category::MasterWeights => Some(m.master_weights),
        _ => None,
    }
}

/// One row per category live at the peak (or held over the step), then the bytes allocated
/// before recording and the allocator's reserve.
fn categories(a: &Analysis) -> String {
    let g = &a.per_gpu;
    let peak = g.peaks.peak_allocated.unwrap_or(0);
    let mut s = format!(
        "  {:<20} {:>12} {:>7}   {:>12}   {}\n",
        "at the peak", "bytes", "share", "held (max)", "confidence"
    );
    for c in CATS {
        let (v, held) = (g.components.get(c), held(g, c));
        if v == 0 && held.unwrap_or(0) == 0 {
            continue;
        }
        s.push_str(&format!(
            "  {:<20} {:>12} {:>7}   {:>12}   {}\n",
            c.label(),
            bytes(v),
            percent(v, peak),
            held.map(bytes).unwrap_or_default(),
            a.confidence.get(c.name()).map(|x| x.name()).unwrap_or("")
        ));
    }
    let before = g.components.before_recording;
    if before > 0 {
        s.push_str(&format!(
            "  {:<20} {:>12} {:>7}\n",
            "before recording",
            bytes(before),
            percent(before, peak)
        ));
    }
    if g.peaks.peak_reserved.is_some() {
        s.push_str(&format!(
            "  {:<20} {:>12}\n",
            "allocator reserve",
            bytes(g.components.base.allocator_reserve)
        ));
    }
    s
}

fn top_allocations(a: &Analysis) -> String {
    titled_list(
        "Largest allocations live at the peak:",
        &a.top_allocations,
        |t| {
            format!(
                "  {:>12}  {:<17} {:<10} {}\n",
                bytes(t.bytes),
                t.category,
                t.phase,
                paint(DIM, &t.site)
            )
        },
    )
}

fn top_frames(a: &Analysis) -> String {
    titled_list("Live at the peak, by site:", &a.top_frames, |f| {
        format!(
            "  {:>12}  {:>5}×  {:<17} {}\n",
            bytes(f.bytes),
            f.count,
            f.category,
            paint(DIM, &f.site)
        )
    })
}

/// `title` over one `line` per item, after a blank line; nothing when there are no items.
fn titled_list<T>(title: &str, items: &[T], line: impl Fn(&T) -> String) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut s = format!("\n{}\n", paint(HEADER, title));
    for item in items {
        s.push_str(&line(item));
    }
    s
}

/// The allocator's segments at the end of the record, when it has them.
fn fragmentation(a: &Analysis) -> String {
    let Some(f) = &a.fragmentation else {
        return String::new();
    };
    format!(
        "\n{} {} segments, {} reserved: {} allocated, {} pending free, {} cached free \
         ({:.1}%, largest block {}), {} rounding inside allocated blocks\n",
        paint(HEADER, "Segments at the end:"),
        f.segments,
        bytes(f.reserved),
        bytes(f.allocated),
        bytes(f.active_pending_free),
        bytes(f.external_free),
        f.external_fraction * 100.0,
        bytes(f.largest_free_block),
        bytes(f.internal_free)
    )
}

/// The allocator replay's advice (`vramscope_measure::allocator_section`): one line when
/// `expandable_segments:True` would have reserved less, and what a trace that starts mid-run
/// leaves unknown.
fn allocator(a: &Analysis) -> String {
    let Some(x) = &a.allocator else {
        return String::new();
    };
    let mut s = String::new();
    if let Some(saving) = x.expandable_saving() {
        s.push_str(&format!(
            "\n{} with expandable_segments:True this run would have reserved {} less \
             (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, an environment variable set \
             before the process starts)\n",
            paint(HEADER, "Allocator:"),
            bytes(saving)
        ));
    }
    if !x.complete_history {
        let head = if s.is_empty() { "\n" } else { "" };
        s.push_str(&format!(
            "{head}{} {}\n",
            paint(HEADER, "Allocator replay:"),
            x.notes.join("; ")
        ));
    }
    s
}

/// The record's warnings, less the inferences' lines (shown above).
fn warnings(a: &Analysis) -> String {
    let inferred: Vec<String> = a.inferences.iter().map(|x| x.describe()).collect();
    let rest: Vec<&String> = a
        .warnings
        .iter()
        .filter(|w| !inferred.contains(w))
        .collect();
    if rest.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n");
    for w in rest {
        s.push_str(&warning_line(w));
    }
    s
}

/// What was inferred about blocks allocated before recording, one line each ("weights
/// inferred from gradient sizes: 324 blocks, 12.69 GiB (confidence high)").
fn render_inferences(a: &Analysis) -> String {
    if a.inferences.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\n{}\n",
        paint(HEADER, "Inferred (allocated before recording began):")
    );
    for x in &a.inferences {
        s.push_str(&format!("  {}\n", x.describe()));
    }
    s
}

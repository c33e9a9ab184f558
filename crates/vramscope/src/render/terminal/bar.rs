//! The one picture in the terminal: a stacked bar of the GPU, its scale line and its legend.
//!
//! With colour each category is a colour and segment ends are drawn in eighths of a cell
//! (U+258F..U+2589, foreground = the ending category, background = the next one). Without
//! colour each category has its own fill character and each cell shows the category covering
//! its middle, so a category's share of the bar is its share of the scale to the nearest cell.

use super::{paint, BAD, DIM, INDENT, MAX_LINE};
use crate::render::{fit_of, SHOWN};
use crate::units::bytes;
use anstyle::{AnsiColor, Color, Style};
use vramscope_core::report::{Category, Report};

/// Left-aligned blocks of 1/8 .. 7/8 of a cell (index = eighths).
const PARTIAL: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];

pub(super) const FULL: char = '█';

pub(super) const FREE: char = '·';

/// Colour of a category in the picture.
pub(super) fn color(c: Category) -> Color {
    Color::Ansi(match c {
        Category::Parameters => AnsiColor::Blue,
        Category::Gradients => AnsiColor::Cyan,
        Category::OptimizerStates => AnsiColor::Magenta,
        Category::MasterWeights => AnsiColor::BrightMagenta,
        Category::Activations => AnsiColor::Green,
        Category::KvCache => AnsiColor::Yellow,
        Category::Temporaries => AnsiColor::BrightGreen,
        Category::CudaContext => AnsiColor::BrightBlack,
        Category::AllocatorReserve => AnsiColor::White,
        Category::Unattributed => AnsiColor::Red,
    })
}

/// Fill character of a category without colour: distinct for each category and from `FREE`.
pub(super) fn fill(c: Category) -> char {
    match c {
        Category::Parameters => '█',
        Category::Gradients => '▓',
        Category::OptimizerStates => '▒',
        Category::MasterWeights => '░',
        Category::Activations => '#',
        Category::KvCache => '=',
        Category::Temporaries => '+',
        Category::CudaContext => '%',
        Category::AllocatorReserve => '~',
        Category::Unattributed => '?',
    }
}

/// One bar cell: a character and its style.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Cell {
    pub(super) ch: char,
    pub(super) style: Style,
}

/// The stacked bar, its scale line and its legend.
pub(super) fn picture(r: &Report, width: usize, color: bool) -> Vec<String> {
    let width = width.clamp(MIN_BAR, MAX_BAR);
    let comps = &r.per_gpu.components;
    let segs: Vec<(Category, u64)> = SHOWN
        .iter()
        .map(|c| (*c, comps.get(*c)))
        .filter(|(_, b)| *b > 0)
        .collect();
    let used: u64 = segs.iter().map(|(_, b)| b).sum();
    let fit = fit_of(r);
    let gpu = fit.as_ref().map(|f| f.target.gpu.as_str());
    let capacity = fit.as_ref().map(|f| f.target.capacity).filter(|c| *c > 0);
    // Scale: the GPU when there is one and the job fits in it, else everything used (an
    // overflowing job is drawn whole, with the capacity marked under the bar).
    let scale = match capacity {
        Some(c) if used <= c => c,
        _ => used,
    };
    let mut lines = Vec::new();
    if scale == 0 {
        return lines;
    }
    let cells = bar_cells(&segs, scale, width, color);
    let mut bar = format!("{INDENT}│");
    push_cells(&mut bar, &cells, color);
    bar.push('│');
    lines.push(String::new());
    lines.push(bar);
    lines.push(scale_line(used, capacity, gpu, width, color));
    let entries = legend_entries(r, &segs, used, capacity.filter(|_| gpu.is_some()), color);
    lines.extend(pack_legend(entries));
    lines
}

/// The line under the bar: 0 at the left, the scale at the right (the GPU's capacity and name
/// when the job fits), and when it does not, the capacity marked where the bar reaches it.
fn scale_line(
    used: u64,
    capacity: Option<u64>,
    gpu: Option<&str>,
    width: usize,
    color: bool,
) -> String {
    let right = match (capacity, gpu) {
        (Some(c), Some(g)) if used <= c => format!("{} {g}", bytes(c)),
        _ => bytes(used),
    };
    let total_cols = INDENT.len() + 1 + width + 1;
    let mut axis = format!("{INDENT}0");
    match capacity {
        Some(c) if used > c => {
            // Column of the capacity: cell index where the bar reaches it.
            let at = ((u128::from(c) * width as u128) / u128::from(used)) as usize;
            let col = INDENT.len() + 1 + at.min(width - 1);
            let label = format!("^ {}", bytes(c));
            let pad = col.saturating_sub(axis.chars().count());
            axis.push_str(&" ".repeat(pad));
            let room = total_cols.saturating_sub(axis.chars().count() + label.len() + 1);
            if room > right.len() {
                axis.push_str(&paint(color, BAD, &label));
                axis.push_str(&" ".repeat(room - right.len() + 1));
                axis.push_str(&right);
            } else {
                axis.push_str(&paint(color, BAD, "^"));
            }
        }
        _ => {
            let pad = total_cols.saturating_sub(axis.chars().count() + right.chars().count());
            axis.push_str(&" ".repeat(pad.max(1)));
            axis.push_str(&right);
        }
    }
    axis
}

/// The legend's entries — swatch, label, size — with the bytes free (or over) on the GPU
/// last; each with its width in columns.
fn legend_entries(
    r: &Report,
    segs: &[(Category, u64)],
    used: u64,
    capacity: Option<u64>,
    color: bool,
) -> Vec<(String, usize)> {
    let mut entries: Vec<(String, usize)> = segs
        .iter()
        .map(|(c, b)| {
            let swatch = if color {
                paint(true, Style::new().fg_color(Some(self::color(*c))), "██")
            } else {
                fill(*c).to_string().repeat(2)
            };
            let text = format!(" {} {}", crate::render::label_in(r, *c), bytes(*b));
            (format!("{swatch}{text}"), 2 + text.chars().count())
        })
        .collect();
    match capacity {
        Some(c) if used <= c => {
            let text = format!(" free {}", bytes(c - used));
            entries.push((
                format!("{}{text}", paint(color, DIM, "··")),
                2 + text.chars().count(),
            ));
        }
        Some(c) => {
            let text = format!(" over capacity by {}", bytes(used - c));
            entries.push((
                format!("{}{text}", paint(color, BAD, "^")),
                1 + text.chars().count(),
            ));
        }
        None => {}
    }
    entries
}

/// Legend entries packed into lines of at most `MAX_LINE` columns, three spaces apart.
fn pack_legend(entries: Vec<(String, usize)>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = INDENT.to_string();
    let mut line_cols = INDENT.len();
    for (shown, cols) in entries {
        let sep = if line_cols > INDENT.len() { 3 } else { 0 };
        if line_cols + sep + cols > MAX_LINE && line_cols > INDENT.len() {
            lines.push(std::mem::replace(&mut line, INDENT.to_string()));
            line_cols = INDENT.len();
        } else if sep > 0 {
            line.push_str("   ");
            line_cols += 3;
        }
        line.push_str(&shown);
        line_cols += cols;
    }
    if line_cols > INDENT.len() {
        lines.push(line);
    }
    lines
}

/// Which segment covers eighth `e` of the bar (`ends` are cumulative segment ends in eighths).
fn owner(ends: &[(Category, usize)], e: usize) -> Option<Category> {
    ends.iter().find(|(_, end)| e < *end).map(|(c, _)| *c)
}

/// The bar's `width` cells for segments scaled so that `scale` bytes fill the bar.
pub(super) fn bar_cells(
    segs: &[(Category, u64)],
    scale: u64,
    width: usize,
    color: bool,
) -> Vec<Cell> {
    let eighths = width * 8;
    let mut cum: u128 = 0;
    let ends: Vec<(Category, usize)> = segs
        .iter()
        .map(|(c, b)| {
            cum += u128::from(*b);
            // Rounded to the nearest eighth; 128-bit so bytes × eighths cannot overflow.
            let e = (cum * eighths as u128 + u128::from(scale) / 2) / u128::from(scale);
            (*c, (e as usize).min(eighths))
        })
        .collect();
    let free = Cell {
        ch: FREE,
        style: if color { DIM } else { Style::new() },
    };
    (0..width)
        .map(|i| {
            let start = i * 8;
            if !color {
                return match owner(&ends, start + 4) {
                    Some(c) => Cell {
                        ch: fill(c),
                        style: Style::new(),
                    },
                    None => free,
                };
            }
            let Some(left) = owner(&ends, start) else {
                return free;
            };
            let k = (start..start + 8)
                .take_while(|e| owner(&ends, *e) == Some(left))
                .count();
            let fg = Style::new().fg_color(Some(self::color(left)));
            if k == 8 {
                return Cell {
                    ch: FULL,
                    style: fg,
                };
            }
            let style = match owner(&ends, start + k) {
                Some(next) => fg.bg_color(Some(self::color(next))),
                None => fg,
            };
            Cell {
                ch: PARTIAL[k],
                style,
            }
        })
        .collect()
}

/// Appends cells, with one style sequence per run of equally styled cells.
fn push_cells(out: &mut String, cells: &[Cell], color: bool) {
    let mut i = 0;
    while i < cells.len() {
        let style = cells[i].style;
        let mut run = String::new();
        while i < cells.len() && cells[i].style == style {
            run.push(cells[i].ch);
            i += 1;
        }
        if color && style != Style::new() {
            out.push_str(&format!("{style}{run}{style:#}"));
        } else {
            out.push_str(&run);
        }
    }
}

/// Bar cells are kept within this so that indent and frame stay inside `MAX_LINE`.
const MAX_BAR: usize = MAX_LINE - 4;

const MIN_BAR: usize = 10;

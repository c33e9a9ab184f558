//! Human renderings of reports. Pure functions from a report to text, so they can be tested
//! without a terminal; the commands decide width and colour.

pub mod html;
pub mod svg;
pub mod terminal;
pub mod whatif;

use vramscope_core::gpu;
use vramscope_core::report::{Category, Fit, Report};

/// The categories an estimate reports, in the order of every table and picture
/// (`vramscope_core::report::Category`; `unattributed` belongs to measurements only).
pub const SHOWN: [Category; 9] = Category::ESTIMATED;

/// The fit verdict: the report's own, or, when the estimator left it out although the job names
/// a GPU, one derived from the best device figure the report has (device total, else peak
/// reserved, else peak allocated, else the sum of the components).
pub fn fit_of(report: &Report) -> Option<Fit> {
    if let Some(f) = &report.fit {
        return Some(f.clone());
    }
    let gpu = gpu::find(report.job.gpu.as_deref()?).ok()?;
    let p = &report.per_gpu;
    let used = p
        .device_total
        .or(p.peak_reserved)
        .or(p.peak_allocated)
        .unwrap_or_else(|| SHOWN.iter().map(|c| p.components.get(*c)).sum());
    let usable = report.job.usable(gpu.memory_bytes);
    let headroom = (i128::from(usable) - i128::from(used))
        .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Some(Fit {
        gpu: gpu.id.clone(),
        capacity: gpu.memory_bytes,
        fits: used <= usable,
        headroom,
        reserve: report.job.reserve,
    })
}

/// A category's label in this report: a serving engine's preallocated KV pool shows as the
/// reserved-but-unallocated bytes, so for vLLM the allocator reserve is labelled as the pool's
/// free blocks (the same words in the bar, the table and the picture).
pub fn label_in(report: &Report, c: Category) -> &'static str {
    if c == Category::AllocatorReserve && report.per_gpu.kv_pool.is_some() {
        "KV pool (free blocks)"
    } else {
        c.label()
    }
}

//! PyTorch's CUDA out-of-memory message, every wording of `c10/cuda/CUDACachingAllocator.cpp`:
//!
//! - torch ≤ 1.3: `Tried to allocate X (GPU 0; C total capacity; A already allocated; F free;
//!   K cached)`, where "cached" is "memory held by the allocator but not used by the program"
//!   (the source's own comment), i.e. reserved − allocated;
//! - torch 1.4–1.13 (and 2.0): `... F free; R reserved in total by PyTorch)`;
//! - torch ≥ 2.1: `Tried to allocate X. GPU 0 has a total capacity of C of which F is free.
//!   [Process P has Y memory in use.]* Including non-PyTorch memory, this process has Z memory
//!   in use. Of the allocated memory A is allocated by PyTorch, and U is reserved by PyTorch but
//!   unallocated.` (2.1 spells "capacty").
//!
//! The message is read with its line breaks and runs of blanks folded, since posters wrap it.

use super::text::{after, number_and_unit, parse_size};
use super::{LogKind, LogReport, OomFigures};
use serde::Serialize;

/// The environment change that lets the caching allocator grow and shrink segments in pages
/// instead of holding fixed cudaMalloc'd ranges (c10/cuda/CUDACachingAllocator.cpp
/// `ExpandableSegment`; PyTorch's own OOM hint).
pub const EXPANDABLE_ENV: &str = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";

/// What `expandable_segments:True` could give back at an OOM, bounded by the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllocatorAdvice {
    /// The change, as an environment variable set before the process starts.
    pub env: &'static str,
    /// At most this much reserved memory becomes usable again: the message's
    /// reserved-but-unallocated bytes (free blocks cut into pieces no request fits; with
    /// expandable segments the allocator maps pages where a request needs them and unmaps
    /// free ones). It cannot be more: allocated bytes stay allocated.
    pub gives_back_up_to: u64,
    /// Whether that and the device's free memory together could hold the failed request
    /// (necessary, not sufficient: the allocations after it are unknown).
    pub request_could_fit: Option<bool>,
}

const MARKER: &str = "out of memory. Tried to allocate";

pub fn recognises(text: &str) -> bool {
    text.contains(MARKER) || fold(text).contains(MARKER)
}

/// Line breaks and runs of blanks become one blank.
fn fold(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Bytes of the size that starts `s` (`2.87 GiB`, `0 bytes`, `17.37 GiB.`).
fn size(s: &str) -> Option<u64> {
    let (n, u) = number_and_unit(s)?;
    parse_size(&n, u, false)
}

/// Bytes of the size just before `key` in `msg` (`8.77 GiB already allocated`).
fn size_before(msg: &str, key: &str) -> Option<u64> {
    let i = msg.find(key)?;
    let head = msg[..i].trim_end();
    let mut w = head.rsplit(' ');
    let unit = w.next()?;
    let num = w.next()?;
    parse_size(num, unit, false)
}

pub fn read(text: &str) -> LogReport {
    let mut r = LogReport::new(LogKind::TorchOom);
    let folded = fold(text);
    let start = folded.rfind(MARKER).unwrap_or(0);
    let msg = &folded[start..];
    let o = figures(msg, &mut r.warnings);
    r.per_gpu.peaks.peak_allocated = o.allocated;
    r.per_gpu.peaks.peak_reserved = o.reserved;
    r.per_gpu.peaks.device_total = o.process_in_use;
    r.per_gpu.components.allocator_reserve = o.reserved_unallocated;
    r.per_gpu.device = o.device.map(|d| format!("GPU {d}"));
    r.fit.capacity = o.capacity;
    check(msg, &o, &mut r.warnings);
    r.diagnosis = diagnose(&o);
    r.allocator = allocator_advice(&o);
    r.oom = Some(o);
    r
}

fn figures(msg: &str, warnings: &mut Vec<String>) -> OomFigures {
    let mut o = OomFigures {
        requested: after(msg, "Tried to allocate").and_then(size),
        ..Default::default()
    };
    o.device = after(msg, "GPU ")
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok());
    if msg.contains("total capacity;") {
        old_wording(msg, &mut o);
    } else {
        new_wording(msg, &mut o);
    }
    if o.requested.is_none() || o.capacity.is_none() || o.allocated.is_none() {
        warnings.push(
            "partial OOM message: the requested size, the GPU's capacity or PyTorch's \
             allocated memory is missing (truncated?)"
                .into(),
        );
    }
    o
}

/// torch ≤ 2.0: `(GPU 0; C total capacity; A already allocated; F free; R reserved in total by
/// PyTorch)` or `...; K cached)`.
fn old_wording(msg: &str, o: &mut OomFigures) {
    o.capacity = size_before(msg, "total capacity;");
    o.allocated = size_before(msg, "already allocated;");
    o.free = size_before(msg, "free;");
    if let Some(r) = size_before(msg, "reserved in total by PyTorch") {
        o.reserved = Some(r);
        o.reserved_unallocated = o.allocated.map(|a| r.saturating_sub(a));
    } else if let Some(k) = size_before(msg, "cached)") {
        o.reserved_unallocated = Some(k);
        o.reserved = o.allocated.map(|a| a.saturating_add(k));
    }
}

/// torch ≥ 2.1.
fn new_wording(msg: &str, o: &mut OomFigures) {
    o.capacity = after(msg, "total capacity of")
        .or_else(|| after(msg, "total capacty of"))
        .and_then(size);
    o.free = size_before(msg, "is free");
    o.process_in_use = after(msg, "this process has").and_then(size);
    o.allocated = size_before(msg, "is allocated by PyTorch");
    o.reserved_unallocated = size_before(msg, "is reserved by PyTorch but unallocated");
    o.reserved = match (o.allocated, o.reserved_unallocated) {
        (Some(a), Some(u)) => Some(a.saturating_add(u)),
        _ => None,
    };
    let others: Vec<u64> = msg
        .split("Process ")
        .skip(1)
        .filter_map(|s| after(s, " has").and_then(size))
        .collect();
    if !others.is_empty() {
        o.other_processes = Some(others.iter().sum());
    }
}

/// Figures that cannot all be true of one device (WSL and some drivers misreport).
fn check(msg: &str, o: &OomFigures, w: &mut Vec<String>) {
    let Some(cap) = o.capacity else { return };
    for (name, v) in [
        ("this process's use", o.process_in_use),
        ("PyTorch's allocated memory", o.allocated),
    ] {
        if v.is_some_and(|v| v > cap) {
            w.push(format!(
                "{name} exceeds the GPU's capacity: the driver misreports (WSL, unified memory) \
                 or the figures come from different devices"
            ));
        }
    }
    if o.process_in_use.is_none() && msg.contains("this process has") {
        w.push("this process's use could not be read (an impossible figure?)".into());
    }
}

/// One line: what ran out and what to change. The rules, in order:
/// 1. the request alone exceeds the device (capacity − other processes): no setting of the
///    allocator helps — a single tensor this large is usually the logits (batch × seq × vocab,
///    4 bytes each in fp32) or an eager attention matrix (batch × heads × seq² elements);
/// 2. fragmentation: reserved-but-unallocated is large (≥ 5% of the device: a judgement, below
///    it the device is simply full) and either holds the request or, with the free memory,
///    would hold it and is the larger of the two — the allocator holds the room in pieces
///    (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, PyTorch's own hint);
/// 3. a single large allocation: the request is ≥ 25% of the device;
/// 4. otherwise the job is simply too big for the device.
pub fn diagnose(o: &OomFigures) -> Option<String> {
    let req = o.requested?;
    let cap = o.capacity?;
    let others = o.other_processes.unwrap_or(0);
    // Other processes are known to exclude this one only when the message names this one
    // apart ("this process has"); in a container it may be listed as "Process N".
    let usable = if o.process_in_use.is_some() {
        cap.saturating_sub(others)
    } else {
        cap
    };
    let unalloc = o.reserved_unallocated.unwrap_or(0);
    let free = o.free.unwrap_or(0);
    let gib = human;
    if req > usable {
        return Some(format!(
            "one request of {} is larger than the GPU's {} available to this process: no allocator \
             setting helps; a tensor this large is usually the logits (batch × seq × vocab × 4 \
             bytes in fp32 — chunk the loss or use a fused linear cross-entropy) or an eager \
             attention matrix (batch × heads × seq² — use sdpa/flash attention); cut batch or \
             sequence length",
            gib(req),
            gib(usable)
        ));
    }
    let large = unalloc.saturating_mul(20) >= cap;
    if large && (unalloc >= req || (unalloc + free >= req && unalloc > free)) {
        return Some(format!(
            "fragmentation: {} is reserved by PyTorch but unallocated (plus {} free) against a \
             request of {}: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            gib(unalloc),
            gib(free),
            gib(req)
        ));
    }
    if req.saturating_mul(4) >= cap {
        return Some(format!(
            "a single allocation of {} ({:.0}% of the GPU): likely the logits (batch × seq × \
             vocab × 4 bytes in fp32) or an eager attention matrix (batch × heads × seq²); chunk \
             the loss / use a fused cross-entropy, use sdpa or flash attention, or cut batch × seq",
            gib(req),
            req as f64 * 100.0 / cap as f64
        ));
    }
    let allocated = o.allocated?;
    let mut line = format!(
        "too big for this GPU: {} already allocated of {} when {} more was asked; cut the \
         micro-batch or sequence length, turn on activation checkpointing, or use LoRA / an \
         8-bit optimizer (`vramscope fit` finds the largest that fits)",
        gib(allocated),
        gib(cap),
        gib(req)
    );
    if others.saturating_mul(10) > cap {
        let who = if o.process_in_use.is_some() {
            "other processes hold"
        } else {
            "processes on this GPU (this one may be among them) hold"
        };
        line.push_str(&format!("; {who} {}", gib(others)));
    }
    Some(line)
}

/// The expandable-segments advice when the reserved-but-unallocated bytes are large: at least
/// 5% of the device (the judgement `diagnose` uses; below it the device is simply full) or,
/// the capacity unknown, at least the request.
pub fn allocator_advice(o: &OomFigures) -> Option<AllocatorAdvice> {
    let unalloc = o.reserved_unallocated.filter(|&u| u > 0)?;
    let large = match o.capacity {
        Some(cap) => unalloc.saturating_mul(20) >= cap,
        None => o.requested.is_some_and(|r| unalloc >= r),
    };
    large.then(|| AllocatorAdvice {
        env: EXPANDABLE_ENV,
        gives_back_up_to: unalloc,
        request_could_fit: o
            .requested
            .map(|r| unalloc.saturating_add(o.free.unwrap_or(0)) >= r),
    })
}

/// Bytes in binary units, three significant figures (`26.0 MiB`, `4.84 GiB`).
fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        return format!("{b} B");
    }
    let digits = if v >= 100.0 { 1 } else { 2 };
    format!("{v:.digits$} {}", UNITS[u])
}

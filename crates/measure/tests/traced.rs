//! `vramscope.trace`'s record: a snapshot pickle whose root says `"traced": {"device": ...}`
//! and whose entries carry the tracer's category and phase. The pickles here are written by
//! hand (protocol 2 opcodes), so every expected byte is the arithmetic in the comments.

mod common;

use proptest::prelude::*;
use vramscope_measure::analyze_bytes;

/// A protocol-2 pickle writer for the few types a snapshot needs.
#[derive(Default)]
struct Pickle(Vec<u8>);

impl Pickle {
    fn str(&mut self, s: &str) -> &mut Self {
        self.0.push(b'X'); // BINUNICODE
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn int(&mut self, v: u32) -> &mut Self {
        self.0.push(b'J'); // BININT (4-byte signed)
        self.0.extend_from_slice(&(v as i32).to_le_bytes());
        self
    }
    fn op(&mut self, b: u8) -> &mut Self {
        self.0.push(b);
        self
    }
}

/// One trace entry: (action, address, size, category or "", phase).
type Entry<'a> = (&'a str, u32, u32, &'a str, &'a str);

fn entry(p: &mut Pickle, (action, addr, size, category, phase): Entry<'_>) {
    p.op(b'}').op(b'(');
    p.str("action").str(action);
    p.str("addr").int(addr);
    p.str("size").int(size);
    p.str("stream").int(0);
    p.str("frames").op(b']');
    if !category.is_empty() {
        p.str("category").str(category);
    }
    p.str("user_metadata")
        .str(&format!("{{\"phase\":\"{phase}\"}}"));
    p.op(b'u'); // SETITEMS
}

/// `{"segments": [], "device_traces": [[entries...]], "traced": {"device": device}}`.
fn record(entries: &[Entry<'_>], device: &str) -> Vec<u8> {
    record_with_conf(entries, device, None)
}

/// `record`, with `"allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf}` when given (what
/// `vramscope.trace` writes from the tracing process's `PYTORCH_ALLOC_CONF`).
fn record_with_conf(entries: &[Entry<'_>], device: &str, conf: Option<&str>) -> Vec<u8> {
    record_full(entries, device, conf, &[])
}

/// A warm-up event: (action, address, size, phase).
type Warm<'a> = (&'a str, u32, u32, &'a str);

/// `record_with_conf`, with `"traced": {"warmup": [[action, addr, size, phase], ...]}` when
/// `warmup` is not empty (the steps before the recorded one, as `vramscope.trace` writes them).
fn record_full(
    entries: &[Entry<'_>],
    device: &str,
    conf: Option<&str>,
    warmup: &[Warm<'_>],
) -> Vec<u8> {
    let mut p = Pickle::default();
    p.op(0x80).op(2); // PROTO 2
    p.op(b'}').op(b'(');
    p.str("segments").op(b']');
    p.str("device_traces").op(b']').op(b'(').op(b']').op(b'(');
    for &e in entries {
        entry(&mut p, e);
    }
    p.op(b'e'); // APPENDS: the device's entries
    p.op(b'e'); // APPENDS: the list of devices
    p.str("traced").op(b'}').op(b'(').str("device").str(device);
    if !warmup.is_empty() {
        p.str("warmup").op(b']').op(b'(');
        for &(action, addr, size, phase) in warmup {
            p.op(b']')
                .op(b'(')
                .str(action)
                .int(addr)
                .int(size)
                .str(phase)
                .op(b'e');
        }
        p.op(b'e');
    }
    p.op(b'u');
    if let Some(conf) = conf {
        p.str("allocator_settings").op(b'}').op(b'(');
        p.str("PYTORCH_CUDA_ALLOC_CONF").str(conf).op(b'u');
    }
    p.op(b'u').op(b'.');
    p.0
}

/// A CUDA allocator's own snapshot (no `"traced"` key) with `entries` as its trace and no
/// dump-time segments: `{"segments": [], "device_traces": [[entries...]]}`. Its entries carry
/// no category (one would mark the file as the profiler's).
fn allocator_record(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut p = Pickle::default();
    p.op(0x80).op(2);
    p.op(b'}').op(b'(');
    p.str("segments").op(b']');
    p.str("device_traces").op(b']').op(b'(').op(b']').op(b'(');
    for &e in entries {
        entry(&mut p, e);
    }
    p.op(b'e').op(b'e');
    p.op(b'u').op(b'.');
    p.0
}

fn free(addr: u32, size: u32, phase: &'static str) -> [Entry<'static>; 2] {
    [
        ("free_requested", addr, size, "", phase),
        ("free_completed", addr, size, "", phase),
    ]
}

/// A parameter of 1000 B, an activation of 100 B saved in the forward, a 4 B temporary in the
/// backward, then the activation freed.
fn step() -> Vec<Entry<'static>> {
    let mut v = vec![
        ("alloc", 512, 1000, "parameter", "setup"),
        ("alloc", 2048, 100, "activation", "forward"),
        ("alloc", 4096, 4, "temporary", "backward"),
    ];
    v.extend(free(4096, 4, "backward"));
    v.extend(free(2048, 100, "backward"));
    v
}

#[test]
fn a_cuda_trace_is_rounded_as_the_caching_allocator_does() {
    let a = analyze_bytes(&record(&step(), "cuda")).unwrap();
    assert_eq!(a.source.kind, "traced_snapshot");
    let g = &a.per_gpu;
    // round_size: 1000 → 1024 (two 512 B units), 100 → 512, 4 → 512; the peak is all three.
    assert_eq!(g.peaks.peak_allocated, Some(1024 + 512 + 512));
    assert_eq!(g.components.base.parameters, 1024);
    assert_eq!(g.components.base.activations, 512);
    assert_eq!(g.components.base.temporaries, 512);
    assert_eq!(g.peaks.peak_phase.as_deref(), Some("backward"));
    // No segments in a trace: the reserve is the trace replayed through the caching-allocator
    // model. Three blocks of at most 1 MiB share one 2 MiB small-pool segment
    // (CUDACachingAllocator.cpp kSmallBuffer); no GPU is named, so no context and no device
    // total.
    assert_eq!(g.peaks.peak_reserved, Some(2 << 20));
    assert_eq!(g.components.base.allocator_reserve, (2 << 20) - 2048);
    assert_eq!(g.peaks.device_total, None);
    assert!(common::warns_of(&a.warnings, "traced on fake tensors"));
}

/// A step in MiB: 100 allocated and freed, then 64 and 64 more, in the forward.
fn hundred_then_two_64s() -> Vec<Entry<'static>> {
    const MIB: u32 = 1 << 20;
    let mut v = vec![("alloc", 1 << 24, 100 * MIB, "temporary", "forward")];
    v.extend(free(1 << 24, 100 * MIB, "forward"));
    v.push(("alloc", 1 << 25, 64 * MIB, "activation", "forward"));
    v.push(("alloc", 1 << 26, 64 * MIB, "activation", "forward"));
    v
}

#[test]
fn a_cuda_trace_reserves_what_the_allocator_model_reserves() {
    const MIB: u32 = 1 << 20;
    // c10/cuda/CUDACachingAllocator.cpp, default settings. 100 MiB (≥ 10 MiB: a segment of its
    // size rounded to 2 MiB), freed: cached. 64 MiB takes the cached block (best fit) and
    // splits it (36 MiB left > kSmallSize = 1 MiB); the second 64 MiB finds no free block that
    // large: a new 64 MiB segment. Reserved 100 + 64 = 164 MiB; allocated 128 MiB at the peak.
    let v = hundred_then_two_64s();
    let a = analyze_bytes(&record(&v, "cuda")).unwrap();
    let g = &a.per_gpu;
    let mib = u64::from(MIB);
    assert_eq!(g.peaks.peak_allocated, Some(128 * mib));
    assert_eq!(g.peaks.peak_reserved, Some(164 * mib));
    assert_eq!(g.components.base.allocator_reserve, 36 * mib);
    // 99.5 MiB after the 100 MiB block was freed: the cached block serves it unsplit (0.5 MiB
    // left ≤ kSmallSize). A traced allocation keeps its rounded request (the remainder is the
    // model's, not the tensor's): 100 MiB allocated at the peak (the first block), 100 MiB
    // reserved, and during the 99.5 MiB block the remainder is in the reserve.
    let mut v = vec![("alloc", 1 << 24, 100 * MIB, "temporary", "forward")];
    v.extend(free(1 << 24, 100 * MIB, "forward"));
    v.push((
        "alloc",
        1 << 25,
        99 * MIB + MIB / 2,
        "activation",
        "forward",
    ));
    let a = analyze_bytes(&record(&v, "cuda")).unwrap();
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(100 * mib));
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(100 * mib));
}

#[test]
fn a_cuda_trace_replays_under_the_settings_it_names() {
    const MIB: u32 = 1 << 20;
    // The step of the test above under expandable_segments:True: one segment per (stream,
    // pool), mapped in 20 MiB pages in the large pool (CUDACachingAllocator.cpp
    // `ExpandableSegment`). 100 MiB maps 5 pages; freed, they stay mapped; the first 64 MiB
    // is cut from the free 100 MiB, the second needs 28 MiB beyond the 36 MiB left at the end:
    // 2 more pages. Reserved 140 MiB, where fixed segments reserve 164 MiB.
    let v = hundred_then_two_64s();
    let conf = Some("expandable_segments:True");
    let a = analyze_bytes(&record_with_conf(&v, "cuda", conf)).unwrap();
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(140 * u64::from(MIB)));
    // A setting PyTorch refuses (max_split_size_mb below 20): said, and the defaults replayed.
    let a = analyze_bytes(&record_with_conf(&v, "cuda", Some("max_split_size_mb:4"))).unwrap();
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(164 * u64::from(MIB)));
    common::assert_warns(&a.warnings, "max_split_size_mb");
}

#[test]
fn an_allocators_record_counts_the_blocks_its_replay_follows() {
    const MIB: u32 = 1 << 20;
    // 19.5 MiB (≥ 10 MiB) asks for a segment of its size rounded up to 2 MiB: 20 MiB, and the
    // 0.5 MiB left is ≤ kSmallSize, so `should_split` leaves it in the block
    // (CUDACachingAllocator.cpp): max_memory_allocated counts 20 MiB. The record (a segment of
    // 20 MiB at the block's address, then the alloc, then its free and the segment's release
    // by empty_cache) is what the model does, so the allocation counts as the 20 MiB block.
    let at = 1 << 24;
    let request = 19 * MIB + MIB / 2;
    let run = |segment: u32| {
        let v = [
            ("segment_alloc", at, segment, "", "forward"),
            ("alloc", at, request, "", "forward"),
            ("free_requested", at, request, "", "forward"),
            ("free_completed", at, request, "", "forward"),
            ("segment_free", at, segment, "", "forward"),
        ];
        analyze_bytes(&allocator_record(&v)).unwrap()
    };
    let a = run(20 * MIB);
    assert!(a.allocator.as_ref().unwrap().exact);
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(20 * u64::from(MIB)));
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(20 * u64::from(MIB)));
    // A record the model does not follow (a 22 MiB segment for the same request): only the
    // rounding is certain, and 19.5 MiB is already a multiple of 512 B.
    let a = run(22 * MIB);
    assert!(!a.allocator.as_ref().unwrap().exact);
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(u64::from(request)));
}

#[test]
fn a_cuda_trace_starts_from_the_cache_its_warm_up_left() {
    const MIB: u32 = 1 << 20;
    // The warm-up step made 100 MiB and freed it: a 100 MiB segment (≥ 10 MiB: its size
    // rounded to 2 MiB) stays cached. The recorded step's 64 MiB splits it (36 MiB left >
    // 1 MiB), its second 64 MiB gets a new segment: 164 MiB reserved, where the step alone
    // would reserve 128 MiB.
    let warmup = [
        ("alloc", 1 << 24, 100 * MIB, "forward"),
        ("free", 1 << 24, 100 * MIB, "forward"),
    ];
    let v = [
        ("alloc", 1 << 25, 64 * MIB, "activation", "forward"),
        ("alloc", 1 << 26, 64 * MIB, "activation", "forward"),
    ];
    let mib = u64::from(MIB);
    let a = analyze_bytes(&record_full(&v, "cuda", None, &warmup)).unwrap();
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(164 * mib));
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(128 * mib));
    let a = analyze_bytes(&record(&v, "cuda")).unwrap();
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(128 * mib));
    // A warm-up event of another shape is refused in one line.
    let bad = [("resize", 1 << 24, 100 * MIB, "forward")];
    let e = analyze_bytes(&record_full(&v, "cuda", None, &bad)).unwrap_err();
    assert!(e.to_string().contains("warmup"), "{e}");
}

#[test]
fn a_cpu_trace_keeps_the_bytes_asked_for() {
    let a = analyze_bytes(&record(&step(), "cpu")).unwrap();
    assert_eq!(a.source.kind, "traced_snapshot");
    // 1000 + 100 + 4 live together in the backward.
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(1104));
    assert_eq!(a.per_gpu.components.base.activations, 100);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Any sizes: the peak of allocations that are never freed is the sum of their requests
    /// rounded to 512 B (`round_size`); the reserve holds at least that.
    #[test]
    fn rounded_peak_is_the_sum_of_blocks(sizes in proptest::collection::vec(1u32..5_000_000, 1..20)) {
        let entries: Vec<Entry<'_>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| ("alloc", 512 * (i as u32 + 1) * 16384, s, "temporary", "forward"))
            .collect();
        let a = analyze_bytes(&record(&entries, "cuda")).unwrap();
        let rounded: u64 = sizes.iter().map(|&s| (u64::from(s)).div_ceil(512) * 512).sum();
        let peak = a.per_gpu.peaks.peak_allocated.unwrap();
        prop_assert_eq!(peak, rounded);
        // The components add up to it, and the reserve holds it.
        let c = &a.per_gpu.components;
        prop_assert_eq!(c.base.allocated() + c.unattributed, peak);
        prop_assert!(a.per_gpu.peaks.peak_reserved.unwrap() >= peak);
    }

    /// A traced record with any byte changed is read or refused, never a panic.
    #[test]
    fn mutated_traced_records_never_panic(pos in 0usize..4096, byte in any::<u8>()) {
        let warmup = [("alloc", 1 << 24, 1000, "forward"), ("free", 1 << 24, 1000, "forward")];
        let conf = Some("expandable_segments:True");
        let mut bytes = record_full(&step(), "cuda", conf, &warmup);
        let i = pos % bytes.len();
        bytes[i] = byte;
        let _ = analyze_bytes(&bytes);
    }
}

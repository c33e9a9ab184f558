//! The real fixtures in ../shared/fixtures (README there says how each was made) and the
//! synthetic snapshots of `scripts/make_synthetic_cuda_snapshot.py`. Expected figures come
//! from the model and the generator script, never from this crate's output.

mod common;
use common::shared;

use std::path::PathBuf;
use vramscope_measure::{analyze_file, Analysis};

fn fixture(rel: &str) -> PathBuf {
    shared(
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/"
        ))
        .join(rel),
    )
}

fn analyze(rel: &str) -> Analysis {
    analyze_file(&fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

// The tiny LM of scripts/make_samples.py: vocab 1000, d_model 128, ff 512, 2 encoder layers,
// untied head without bias. Parameters, counted from nn.TransformerEncoderLayer's modules:
const VOCAB: u64 = 1000;
const D: u64 = 128;
const FF: u64 = 512;
fn params_per_layer() -> (u64, u64) {
    let attn_in = 3 * D * D + 3 * D; // in_proj_weight + in_proj_bias
    let attn_out = D * D + D; // out_proj
    let ff = D * FF + FF + FF * D + D; // linear1, linear2
    let norms = 2 * 2 * D; // norm1, norm2 (weight + bias)
    (attn_in + attn_out + ff + norms, 12) // 12 tensors per layer
}
fn model_params() -> (u64, u64) {
    let (per_layer, tensors) = params_per_layer();
    let emb = VOCAB * D;
    let head = D * VOCAB;
    (emb + 2 * per_layer + head, 1 + 2 * tensors + 1)
}

#[test]
fn model_arithmetic_matches_the_fixture_notes() {
    // 652,544 params in 26 tensors (fixtures/README.md) — our own count agrees.
    assert_eq!(model_params(), (652_544, 26));
}

fn check_timeline(a: &Analysis) {
    let (p, tensors) = model_params();
    let g = &a.per_gpu;
    // fp32 weights and grads: 4 bytes each; AdamW: exp_avg + exp_avg_sq (8 B/param) plus one
    // fp32 `step` scalar per tensor (torch/optim/adamw.py `_init_group`, 4 B each).
    assert_eq!(g.components.base.parameters, 4 * p);
    assert_eq!(g.components.base.optimizer_states, 8 * p + 4 * tensors);
    assert_eq!(g.model_states.parameters, 4 * p);
    assert_eq!(g.model_states.gradients, 4 * p);
    assert_eq!(g.model_states.optimizer_states, 8 * p + 4 * tensors);
    // zero_grad(set_to_none=True) ran before the second step: no grads at its peak.
    assert_eq!(g.components.base.gradients, 0);
    // The components add up to peak_allocated.
    let sum = g.components.base.allocated() + g.components.unattributed;
    assert_eq!(Some(sum), g.peaks.peak_allocated);
    // Inputs x, y: int64 8×64 each, counted with activations, so activations ≥ 2·8·64·8.
    assert!(g.components.base.activations >= 2 * 8 * 64 * 8);
    // The peak opens the second backward: the two fp32 8·64×1000 logit gradients (nll_loss
    // and log_softmax backward) are live, 2 × 2,048,000 bytes of temporaries.
    assert_eq!(g.peaks.peak_phase.as_deref(), Some("backward"));
    assert_eq!(g.components.base.temporaries, 2 * 8 * 64 * VOCAB * 4);
    assert!(!a.timeline.is_empty() && a.timeline.len() <= 240);
}

#[test]
fn cpu_timeline_json_is_attributed_from_the_model() {
    let a = analyze("cpu_timeline.json");
    assert_eq!(a.source.kind, "memory_timeline");
    check_timeline(&a);
    assert_eq!(a.per_gpu.components.unattributed, 0);
}

#[test]
fn gz_and_raw_agree_with_json() {
    let j = analyze("cpu_timeline.json");
    let gz = analyze("cpu_timeline.json.gz");
    let raw = analyze("cpu_timeline.raw.json.gz");
    assert_eq!(raw.source.kind, "memory_timeline_raw");
    check_timeline(&gz);
    check_timeline(&raw);
    assert_eq!(j.per_gpu, gz.per_gpu);
    assert_eq!(j.per_gpu, raw.per_gpu);
}

#[test]
fn profiler_snapshot_replays_to_the_same_peak() {
    let a = analyze("cpu_profile_as_snapshot.pickle");
    let t = analyze("cpu_timeline.json");
    assert_eq!(a.source.kind, "profiler_snapshot");
    assert_eq!(a.source.pickle_protocol, Some(4));
    let (p, tensors) = model_params();
    let g = &a.per_gpu;
    // Pre-existing parameters inherit "parameter" from their in-place version bump.
    assert_eq!(g.components.base.parameters, 4 * p);
    assert_eq!(g.components.base.optimizer_states, 8 * p + 4 * tensors);
    assert_eq!(g.model_states.gradients, 4 * p);
    // The inputs x, y (2 × 8·64 int64) predate the profile and carry no frames: unattributed.
    assert_eq!(g.components.unattributed, 2 * 8 * 64 * 8);
    // Same run, two exports: the same peak.
    assert_eq!(g.peaks.peak_allocated, t.per_gpu.peaks.peak_allocated);
    assert_eq!(g.peaks.peak_reserved, None);
    assert!(!a.top_allocations.is_empty());
}

const MB: u64 = 1 << 20;

#[test]
fn synthetic_snapshots_all_protocols() {
    for proto in [2u8, 4, 5] {
        let a = analyze(&format!(
            "synthetic/synthetic_cuda_snapshot_p{proto}.pickle"
        ));
        assert_eq!(a.source.kind, "cuda_snapshot");
        assert_eq!(a.source.pickle_protocol, Some(proto));
        let g = &a.per_gpu;
        // Trace (make_synthetic_cuda_snapshot.py): alloc 8 MiB (linear forward), alloc
        // 4 MiB − 100 (_multi_tensor_adamw, still live → optimizer state), alloc 500 and
        // 512 (forward), free_requested of the 512 (freed inside forward → temporary).
        // Each counts as its block, as `max_memory_allocated` does (`round_size`: a multiple
        // of 512 B): 4 MiB − 100 in 4 MiB, 500 in 512 — the sizes the dump's segments give
        // those blocks (below: `f.allocated`).
        let blocks = 8 * MB + 4 * MB + 512 + 512;
        assert_eq!(g.peaks.peak_allocated, Some(blocks));
        assert_eq!(g.components.base.activations, 8 * MB + 512);
        assert_eq!(g.components.base.optimizer_states, 4 * MB);
        assert_eq!(g.components.base.temporaries, 512);
        assert_eq!(g.components.unattributed, 0);
        // Segments: 20 MiB + 2 MiB, both allocated by segment_alloc in the trace.
        assert_eq!(g.peaks.peak_reserved, Some(22 * MB));
        assert_eq!(g.components.base.allocator_reserve, 22 * MB - blocks);
        let f = a.fragmentation.as_ref().unwrap();
        assert_eq!(f.reserved, 22 * MB);
        assert_eq!(f.allocated, 8 * MB + 4 * MB + 512);
        assert_eq!(f.active_pending_free, 512);
        assert_eq!(f.internal_free, 100 + 12);
        assert_eq!(f.external_free, 8 * MB + (2 * MB - 1024));
        assert_eq!(
            f.allocated + f.active_pending_free + f.external_free,
            f.reserved
        );
        assert_eq!(f.largest_free_block, 8 * MB);
        assert_eq!(a.ooms.len(), 1);
        assert_eq!(a.ooms[0].device_free, Some(3 * MB));
        assert_eq!(a.ooms[0].requested, 80 * 1024 * MB);
    }
}

#[test]
fn legacy_1_13_list_of_segments() {
    let a = analyze("synthetic/synthetic_legacy_1_13_segments_list.pickle");
    assert_eq!(a.source.kind, "cuda_snapshot_1_13");
    let g = &a.per_gpu;
    // One 1,024-byte block allocated under nn.Linear.forward (history[0].frames).
    assert_eq!(g.peaks.peak_allocated, Some(1024));
    assert_eq!(g.components.base.activations, 1024);
    assert_eq!(g.peaks.peak_reserved, Some(2 * MB));
    let f = a.fragmentation.as_ref().unwrap();
    assert_eq!(f.internal_free, 1024 - 1000);
    assert_eq!(f.external_free, 2 * MB - 1024);
}

#[test]
fn empty_real_snapshot() {
    let a = analyze("cpu_only_empty_cuda_snapshot.pickle");
    assert_eq!(a.source.kind, "cuda_snapshot");
    assert_eq!(a.per_gpu.peaks.peak_allocated.unwrap_or(0), 0);
    common::assert_warns(&a.warnings, "no allocations");
}

#[test]
fn chrome_trace_memory_events() {
    let a = analyze("cpu_chrome_trace_mlp.json");
    assert_eq!(a.source.kind, "chrome_trace");
    // scripts/chrome_trace_mem.py: MLP 64→256→10 (4 tensors), one AdamW step, then
    // zero_grad, all inside the profile. The parameters predate it; the step's peak holds the
    // fp32 grads (made in backward, freed by zero_grad) and AdamW's exp_avg + exp_avg_sq
    // (8 B/param) plus a 4-byte `step` per tensor.
    let params: u64 = 64 * 256 + 256 + 256 * 10 + 10;
    let g = &a.per_gpu;
    assert_eq!(g.peaks.peak_phase.as_deref(), Some("optimizer"));
    assert_eq!(g.components.base.gradients, 4 * params);
    assert_eq!(g.components.base.optimizer_states, 8 * params + 4 * 4);
    let sum = g.components.base.allocated() + g.components.unattributed;
    assert_eq!(Some(sum), g.peaks.peak_allocated);
}

/// The streaming typed pass (trace entries and blocks typed while parsing, their generic
/// values dropped) must give the same snapshot as typing the whole value tree afterwards.
#[test]
fn streamed_and_tree_snapshots_agree() {
    use vramscope_measure::pickle::{parse_slice, Limits};
    use vramscope_measure::snapshot::{from_pickle, read_streaming, Snapshot};
    fn resolved(s: &Snapshot) -> String {
        let stack = |id: u32| -> Vec<String> {
            s.stack(id)
                .map(|f| format!("{}:{}:{}", f.filename, f.line, f.name))
                .collect()
        };
        let mut out = format!(
            "{:?} p{} {:?} {}\n",
            s.layout, s.protocol, s.alloc_conf, s.from_profiler
        );
        for seg in &s.segments {
            out += &format!(
                "seg {} {} {} {} {:?} {:?} {}\n",
                seg.device,
                seg.address,
                seg.total_size,
                seg.stream,
                seg.segment_type,
                seg.pool_id,
                seg.is_expandable
            );
            for b in &seg.blocks {
                out += &format!(
                    "  block {} {} {:?} {:?} {:?}\n",
                    b.address,
                    b.size,
                    b.requested_size,
                    b.state,
                    stack(b.stack)
                );
            }
        }
        for (d, t) in s.traces.iter().enumerate() {
            for e in t {
                out += &format!(
                    "{d} {:?} {} {} {} {:?} {:?} {:?} {:?} {:?}\n",
                    e.action,
                    e.addr,
                    e.size,
                    e.stream,
                    e.device_free,
                    e.time_us,
                    e.category,
                    s.strings[e.user_metadata as usize],
                    stack(e.stack)
                );
            }
        }
        out
    }
    let mut checked = 0;
    for rel in [
        "synthetic/synthetic_cuda_snapshot_p2.pickle",
        "synthetic/synthetic_cuda_snapshot_p4.pickle",
        "synthetic/synthetic_cuda_snapshot_p5.pickle",
        "synthetic/synthetic_legacy_1_13_segments_list.pickle",
        "cpu_profile_as_snapshot.pickle",
        "cpu_only_empty_cuda_snapshot.pickle",
    ] {
        let bytes = std::fs::read(fixture(rel)).unwrap();
        let tree = from_pickle(&parse_slice(&bytes).unwrap()).unwrap();
        let streamed = read_streaming(&bytes[..], bytes.len() as u64, Limits::default()).unwrap();
        let (a, b) = (resolved(&tree), resolved(&streamed));
        assert_eq!(a, b, "{rel}");
        checked += tree.traces.iter().map(Vec::len).sum::<usize>()
            + tree.segments.iter().map(|s| s.blocks.len()).sum::<usize>();
    }
    // The fixtures hold trace entries and blocks, so the comparison is not vacuous.
    assert!(checked > 10, "{checked}");
}

/// Two devices with entries on both, written opcode by opcode (EMPTY_LIST/MARK/APPENDS as
/// CPython writes lists, so the streaming pass types every entry): each device keeps its own
/// entries, in order — device 0's two allocations, device 1's allocation and its free.
#[test]
fn streamed_entries_split_per_device() {
    use vramscope_measure::pickle::Limits;
    use vramscope_measure::snapshot::{read_streaming, Action};
    fn s(b: &mut Vec<u8>, x: &str) {
        b.push(b'X');
        b.extend_from_slice(&(x.len() as u32).to_le_bytes());
        b.extend_from_slice(x.as_bytes());
    }
    fn entry(b: &mut Vec<u8>, action: &str, addr: u32, size: u32) {
        b.extend_from_slice(b"}(");
        s(b, "action");
        s(b, action);
        s(b, "addr");
        b.push(b'J');
        b.extend_from_slice(&addr.to_le_bytes());
        s(b, "size");
        b.push(b'J');
        b.extend_from_slice(&size.to_le_bytes());
        b.push(b'u');
    }
    let mut b = vec![0x80, 2, b'}'];
    s(&mut b, "device_traces");
    b.extend_from_slice(b"](](");
    entry(&mut b, "alloc", 4096, 512);
    entry(&mut b, "alloc", 8192, 1024);
    b.extend_from_slice(b"e](");
    entry(&mut b, "alloc", 12288, 2048);
    entry(&mut b, "free_requested", 12288, 2048);
    b.extend_from_slice(b"ees.");
    let snap = read_streaming(&b[..], b.len() as u64, Limits::default()).unwrap();
    let sizes: Vec<Vec<u64>> = snap
        .traces
        .iter()
        .map(|t| t.iter().map(|e| e.size).collect())
        .collect();
    assert_eq!(sizes, vec![vec![512, 1024], vec![2048, 2048]]);
    assert_eq!(snap.traces[1][1].action, Action::FreeRequested);
    assert_eq!(snap.traces[0][1].addr, 8192);
}

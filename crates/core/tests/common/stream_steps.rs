//! The allocator stream of a job and its events, for the stream's coverage tests
//! (`alloc_stream_coverage.rs`, `alloc_stream_selective.rs`).

use serde_json::{json, Value};
use vramscope_core::allocator::{Allocator, AllocatorConfig};
use vramscope_core::estimate::alloc_events::{step_stream, Event, Phase, Stream};

/// A small Llama's config (hidden 256, 4 heads of 64, 2 KV heads, MLP 768, vocabulary 8192,
/// untied, bf16) with `layers` blocks.
pub fn tiny_llama(layers: u64) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 8192,
        "max_position_embeddings": 4096, "hidden_act": "silu",
        "tie_word_embeddings": false, "torch_dtype": "bfloat16"})
}

/// The training stream of `job` (a JSON job), which the stream must cover.
pub fn stream_of(job: &Value) -> Stream {
    let (input, resolved) = super::prepared_json(job);
    step_stream(&input, &resolved)
        .unwrap()
        .expect("the stream covers the job")
}

/// The events of `phase`, from its marker up to the next phase's.
pub fn events_in(s: &Stream, phase: Phase) -> Vec<Event> {
    let mut inside = false;
    s.events
        .iter()
        .copied()
        .filter(|e| {
            if let Event::Phase(p) = *e {
                inside = p == phase;
            }
            inside
        })
        .collect()
}

/// The allocations of `phase` (requested bytes, in order) that `keep` keeps.
pub fn allocs_in(s: &Stream, phase: Phase, keep: impl Fn(u64) -> bool) -> Vec<u64> {
    let ev = events_in(s, phase);
    ev.iter()
        .filter_map(|e| match *e {
            Event::Alloc { bytes, .. } if keep(bytes) => Some(bytes),
            _ => None,
        })
        .collect()
}

/// The allocations of `phase` of at least `floor` bytes, in order.
pub fn big_allocs(s: &Stream, phase: Phase, floor: u64) -> Vec<u64> {
    allocs_in(s, phase, |b| b >= floor)
}

/// Where `event` first stands in the stream.
pub fn index_of(s: &Stream, event: Event) -> usize {
    s.events.iter().position(|e| *e == event).unwrap()
}

/// Allocations' requested bytes and frees (−1) in order; other events left out.
pub fn signed_sizes(ev: &[Event]) -> Vec<i64> {
    ev.iter()
        .filter_map(|e| match *e {
            Event::Alloc { bytes, .. } => Some(bytes as i64),
            Event::Free { .. } => Some(-1),
            _ => None,
        })
        .collect()
}

/// The stream's peak allocated (the allocator model's, rounded blocks) against the walk's
/// `peak_allocated` for the same job.
pub fn stream_and_walk(job: &Value) -> (u64, u64) {
    let s = stream_of(job);
    let (input, resolved) = super::prepared_json(job);
    let mut a = Allocator::new(&AllocatorConfig::default(), u64::MAX);
    let mut peak = 0;
    super::replay_each(&mut a, &s, |a, _| {
        peak = peak.max(a.stats().allocated_bytes.current)
    });
    let report = vramscope_core::estimate::estimate(&input, &resolved).unwrap();
    (peak, report.per_gpu.peaks.peak_allocated.unwrap())
}

/// The stream's peak within 1 % of the walk's.
pub fn assert_stream_meets_walk(job: &Value) {
    let (stream, walk) = stream_and_walk(job);
    let d = stream as f64 / walk as f64 - 1.0;
    assert!(
        d.abs() < 0.01,
        "stream {stream} walk {walk} {:+.3} %",
        d * 100.0
    );
}

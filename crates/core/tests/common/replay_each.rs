//! One replay loop of an event stream through the caching-allocator model, shared by this
//! crate's integration tests and `crates/formats/examples/alloc_stream_dump.rs` (by `#[path]`).

use vramscope_core::allocator::Allocator;
use vramscope_core::estimate::alloc_events::{Event, Stream};

/// Runs `s` through `a` as `estimate::alloc_events::replay::replay` does (each block's handle
/// kept by its id, a failed allocation skipped), calling `after` with the allocator and each
/// event once it is applied (a phase mark changes nothing in the allocator).
pub fn replay_each(a: &mut Allocator, s: &Stream, mut after: impl FnMut(&mut Allocator, Event)) {
    let mut handles = vec![None; s.ids()];
    let mut on = 0;
    for &e in &s.events {
        match e {
            Event::Alloc { id, bytes } => handles[id as usize] = a.malloc(bytes, on).ok(),
            Event::Free { id } => {
                if let Some(h) = handles[id as usize].take() {
                    a.free(h);
                }
            }
            Event::EmptyCache => a.empty_cache(),
            Event::Stream(stream) => on = stream,
            Event::Phase(_) => {}
        }
        after(a, e);
    }
}

//! The streaming pass that types a snapshot while the pickle VM runs (a [`Compactor`]): frames
//! and stacks interned, trace entries and blocks typed from their dicts as they complete, the
//! keys of those dicts resolved once per memoized key string.

use super::{bad, Action, Block, BlockState, Frame, ProfCategory, Segment, TraceEntry};
use crate::fxhash::FxMap;
use crate::pickle::{Compacted, Compactor, Id, Node, Tree};
use std::collections::HashMap;

/// The tables the pass fills: interned frames, stacks and strings, typed entries and blocks.
pub(super) struct Builder {
    pub(super) frames: Vec<Frame>,
    frame_by_node: NodeTable,
    frame_by_value: HashMap<Frame, u32>,
    pub(super) stacks: Vec<Box<[u32]>>,
    /// Only filled when not streaming: there a typed list becomes a [`Node::Stack`] (or its
    /// slot is reused), so node ids of lists are not stable keys.
    stack_by_node: FxMap<Id, u32>,
    stack_by_value: FxMap<Box<[u32]>, u32>,
    /// Stacks by the node ids of their frame dicts, when every frame dict is stable (the
    /// pickler memoizes shared frames, so a repeated stack is the same id sequence): a hit
    /// skips the per-frame lookups. Capped at [`MAX_STACK_SEQS`] sequences.
    stack_by_frame_nodes: FxMap<Box<[Id]>, u32>,
    /// Reused to build a stack's frame ids; a new box is made only for a new stack.
    stack_buf: Vec<u32>,
    /// Key strings already resolved, by node id (only ids that stay stable, see
    /// [`Tree::stable`]).
    key_ids: NodeTable,
    pub(super) strings: Vec<String>,
    string_by_value: HashMap<String, u32>,
    /// Stable string nodes already interned (see [`Builder::string_node`]).
    string_by_node: NodeTable,
    streaming: bool,
    /// Values typed while streaming, named by [`Node::Entry`] / [`Node::Block`].
    pub(super) entries: Vec<TraceEntry>,
    /// The node each streamed entry replaced, in streaming order: the usual file lists them
    /// in that order, which `finish` checks by comparing id arrays (sequential) instead of
    /// visiting 10^6+ nodes. A node typed as an entry keeps its placeholder to the end: the
    /// VM reuses only the slots of a compacted dict's own keys and values, never of a list item.
    pub(super) entry_nodes: Vec<Id>,
    /// Whether any streamed entry carries a profiler category.
    pub(super) any_category: bool,
    blocks: Vec<RawBlock>,
}

/// A block typed before its segment is known: the address (absent before torch 2.1) is
/// filled from the segment's running address, and the 1.13 layout ignores `frames`.
#[derive(Debug, Clone)]
struct RawBlock {
    address: Option<u64>,
    block: Block,
    has_history: bool,
}

/// The keys the streaming pass reads from trace-entry and block dicts. Each dict is scanned
/// once and its keys resolved to this table (by node id when the key string is memoized, as
/// the pickler writes every repeated key), instead of matching key text per lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Action,
    Addr,
    Size,
    Stream,
    DeviceFree,
    TimeUs,
    Frames,
    Category,
    UserMetadata,
    State,
    History,
    Address,
    RequestedSize,
    Other,
}

const NKEYS: usize = Key::Other as usize;

impl Key {
    fn parse(s: &str) -> Key {
        match s {
            "action" => Key::Action,
            "addr" => Key::Addr,
            "size" => Key::Size,
            "stream" => Key::Stream,
            "device_free" => Key::DeviceFree,
            "time_us" => Key::TimeUs,
            "frames" => Key::Frames,
            "category" => Key::Category,
            "user_metadata" => Key::UserMetadata,
            "state" => Key::State,
            "history" => Key::History,
            "address" => Key::Address,
            "requested_size" => Key::RequestedSize,
            _ => Key::Other,
        }
    }
}

/// Every key, indexed by its discriminant.
const KEYS: [Key; NKEYS + 1] = [
    Key::Action,
    Key::Addr,
    Key::Size,
    Key::Stream,
    Key::DeviceFree,
    Key::TimeUs,
    Key::Frames,
    Key::Category,
    Key::UserMetadata,
    Key::State,
    Key::History,
    Key::Address,
    Key::RequestedSize,
    Key::Other,
];

/// The values of one dict's known keys (a later duplicate key wins, as in Python).
#[derive(Clone, Copy)]
struct Fields([Option<Id>; NKEYS]);

impl Fields {
    fn get(&self, k: Key) -> Option<Id> {
        self.0.get(k as usize).copied().flatten()
    }

    fn u64(&self, t: Tree<'_>, k: Key) -> Option<u64> {
        self.get(k).and_then(|v| t.as_u64(v))
    }

    fn i64(&self, t: Tree<'_>, k: Key) -> Option<i64> {
        self.get(k).and_then(|v| t.as_i64(v))
    }

    fn str<'a>(&self, t: Tree<'a>, k: Key) -> Option<&'a str> {
        self.get(k).and_then(|v| t.as_str(v))
    }
}

/// A value remembered per stable node id. Memoized keys, frames and metadata strings are
/// written at first use, early in the file, so their ids are low: those live in a plain array
/// (an index, no hashing: the frame lookup was ~7 % of a 503 MB parse); higher ids go to a map,
/// so a hostile file cannot make the array large.
#[derive(Default)]
struct NodeTable {
    dense: Vec<u32>,
    sparse: FxMap<Id, u32>,
}

/// Most frame-node sequences remembered for [`Builder::stack`] (a real snapshot has a few
/// thousand distinct stacks).
const MAX_STACK_SEQS: usize = 1 << 16;

/// Ids below this use the array (at most 16 MiB).
const DENSE_IDS: usize = 1 << 22;
const EMPTY_SLOT: u32 = u32::MAX;

impl NodeTable {
    #[inline]
    fn get(&self, id: Id) -> Option<u32> {
        match self.dense.get(id as usize) {
            Some(&v) if v != EMPTY_SLOT => Some(v),
            Some(_) => None,
            None if (id as usize) < DENSE_IDS => None,
            None => self.sparse.get(&id).copied(),
        }
    }

    fn insert(&mut self, id: Id, v: u32) {
        let i = id as usize;
        if i < DENSE_IDS && v != EMPTY_SLOT {
            if i >= self.dense.len() {
                self.dense.resize(i + 1, EMPTY_SLOT);
            }
            self.dense[i] = v;
        } else {
            self.sparse.insert(id, v);
        }
    }
}

fn u64_field(t: Tree<'_>, d: Id, key: &str) -> Option<u64> {
    t.get(d, key).and_then(|v| t.as_u64(v))
}

fn i64_field(t: Tree<'_>, d: Id, key: &str) -> Option<i64> {
    t.get(d, key).and_then(|v| t.as_i64(v))
}

fn str_field<'a>(t: Tree<'a>, d: Id, key: &str) -> Option<&'a str> {
    t.get(d, key).and_then(|v| t.as_str(v))
}

impl Builder {
    pub(super) fn new(streaming: bool) -> Self {
        let empty: Box<[u32]> = Box::new([]);
        let mut stack_by_value = FxMap::default();
        stack_by_value.insert(empty.clone(), 0);
        let mut string_by_value = HashMap::new();
        string_by_value.insert(String::new(), 0);
        Builder {
            frames: Vec::new(),
            frame_by_node: NodeTable::default(),
            frame_by_value: HashMap::new(),
            stacks: vec![empty],
            stack_by_node: FxMap::default(),
            stack_by_value,
            stack_by_frame_nodes: FxMap::default(),
            stack_buf: Vec::new(),
            key_ids: NodeTable::default(),
            strings: vec![String::new()],
            string_by_value,
            string_by_node: NodeTable::default(),
            streaming,
            entries: Vec::new(),
            entry_nodes: Vec::new(),
            any_category: false,
            blocks: Vec::new(),
        }
    }

    fn frame(&mut self, t: Tree<'_>, id: Id) -> Option<u32> {
        if let Some(f) = self.frame_by_node.get(id) {
            return Some(f);
        }
        if !matches!(t.node(id), Node::Dict(_)) {
            return None;
        }
        let frame = Frame {
            filename: str_field(t, id, "filename").unwrap_or("").to_string(),
            line: i64_field(t, id, "line").unwrap_or(0),
            name: str_field(t, id, "name").unwrap_or("").to_string(),
        };
        let next = self.frames.len() as u32;
        let f = *self.frame_by_value.entry(frame.clone()).or_insert(next);
        if f == next {
            self.frames.push(frame);
        }
        if t.stable(id) {
            self.frame_by_node.insert(id, f);
        }
        Some(f)
    }

    fn stack(&mut self, t: Tree<'_>, list: Option<Id>) -> u32 {
        let Some(list) = list else { return 0 };
        if let Node::Stack(s) = t.node(list) {
            return *s;
        }
        if let Some(&s) = self.stack_by_node.get(&list) {
            return s;
        }
        let Some(items) = t.as_seq(list) else {
            return 0;
        };
        let stable = items.iter().all(|&f| t.stable(f));
        if stable {
            if let Some(&s) = self.stack_by_frame_nodes.get(items) {
                return s;
            }
        }
        let mut buf = std::mem::take(&mut self.stack_buf);
        buf.clear();
        buf.extend(items.iter().filter_map(|&f| self.frame(t, f)));
        let s = match self.stack_by_value.get(buf.as_slice()) {
            Some(&s) => s,
            None => {
                let s = self.stacks.len() as u32;
                let ids: Box<[u32]> = buf.as_slice().into();
                self.stacks.push(ids.clone());
                self.stack_by_value.insert(ids, s);
                s
            }
        };
        self.stack_buf = buf;
        if !self.streaming {
            self.stack_by_node.insert(list, s);
        }
        if stable && self.stack_by_frame_nodes.len() < MAX_STACK_SEQS {
            self.stack_by_frame_nodes.insert(items.into(), s);
        }
        s
    }

    /// Which known key the string node `k` is: an integer compare against the ids seen before,
    /// the text only the first time (or every time for a key that is not memoized).
    fn key(&mut self, t: Tree<'_>, k: Id) -> Key {
        if let Some(key) = self.key_ids.get(k) {
            return KEYS[key as usize];
        }
        let Some(text) = t.as_str(k) else {
            return Key::Other;
        };
        let key = Key::parse(text);
        if t.stable(k) {
            self.key_ids.insert(k, key as u32);
        }
        key
    }

    /// One pass over a dict's items; `None` when `d` is not a dict.
    fn fields(&mut self, t: Tree<'_>, d: Id) -> Option<Fields> {
        let Node::Dict(items) = t.node(d) else {
            return None;
        };
        let mut f = Fields([None; NKEYS]);
        for &(k, v) in items {
            let key = self.key(t, k);
            if let Some(slot) = f.0.get_mut(key as usize) {
                *slot = Some(v);
            }
        }
        Some(f)
    }

    /// [`Builder::string`] of a string node, remembered by node id when the id is stable (the
    /// pickler memoizes a repeated string, so most entries name the same few nodes).
    fn string_node(&mut self, t: Tree<'_>, id: Option<Id>) -> u32 {
        let Some(id) = id else { return 0 };
        if let Some(i) = self.string_by_node.get(id) {
            return i;
        }
        let i = self.string(t.as_str(id));
        if t.stable(id) && matches!(t.node(id), Node::Str(_)) {
            self.string_by_node.insert(id, i);
        }
        i
    }

    fn string(&mut self, v: Option<&str>) -> u32 {
        let Some(v) = v else { return 0 };
        if let Some(&i) = self.string_by_value.get(v) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(v.to_string());
        self.string_by_value.insert(v.to_string(), i);
        i
    }

    /// One block dict, before its segment's address and layout are applied.
    fn raw_block(&mut self, t: Tree<'_>, b: Id) -> Result<RawBlock, crate::MeasureError> {
        if let Node::Block(i) = t.node(b) {
            return self
                .blocks
                .get(*i as usize)
                .cloned()
                .ok_or_else(|| bad("a block placeholder out of range"));
        }
        let f = self.fields(t, b);
        self.raw_block_of(t, f.as_ref())
    }

    fn raw_block_of(
        &mut self,
        t: Tree<'_>,
        f: Option<&Fields>,
    ) -> Result<RawBlock, crate::MeasureError> {
        let f = f.ok_or_else(|| bad("a block has no integer size"))?;
        let size = f
            .u64(t, Key::Size)
            .ok_or_else(|| bad("a block has no integer size"))?;
        let state = match f.str(t, Key::State) {
            Some("active_allocated") => BlockState::ActiveAllocated,
            Some("active_pending_free") | Some("active_awaiting_free") => {
                BlockState::ActivePendingFree
            }
            Some("inactive") => BlockState::Inactive,
            _ => BlockState::Other,
        };
        let history = f.get(Key::History);
        let (stack, requested) = match history {
            // 1.13/2.0: history[0] is the most recent allocation of this block.
            Some(h) => {
                let h0 = t.as_seq(h).and_then(|h| h.first().copied());
                let frames = h0.and_then(|h| t.get(h, "frames"));
                let real = h0.and_then(|h| u64_field(t, h, "real_size"));
                (self.stack(t, frames), real)
            }
            None => {
                let frames = f.get(Key::Frames);
                (self.stack(t, frames), f.u64(t, Key::RequestedSize))
            }
        };
        Ok(RawBlock {
            address: f.u64(t, Key::Address),
            block: Block {
                address: 0,
                size,
                requested_size: requested,
                state,
                stack,
            },
            has_history: history.is_some(),
        })
    }

    pub(super) fn segment(
        &mut self,
        t: Tree<'_>,
        s: Id,
        legacy: bool,
    ) -> Result<Segment, crate::MeasureError> {
        if !matches!(t.node(s), Node::Dict(_)) {
            return Err(bad("a segment is not a dict"));
        }
        let address = u64_field(t, s, "address").unwrap_or(0);
        let total_size = u64_field(t, s, "total_size")
            .ok_or_else(|| bad("a segment has no integer total_size"))?;
        let pool_id = t.get(s, "segment_pool_id").and_then(|p| {
            let items = t.as_seq(p)?;
            Some((t.as_i64(*items.first()?)?, t.as_i64(*items.get(1)?)?))
        });
        let mut blocks = Vec::new();
        let mut running = address;
        if let Some(list) = t.get(s, "blocks").and_then(|b| t.as_seq(b)) {
            blocks.reserve(list.len());
            for &b in list {
                let raw = self.raw_block(t, b)?;
                let mut block = raw.block;
                // Blocks tile the segment in address order; before 2.1 they had no address.
                block.address = raw.address.unwrap_or(running);
                running = block.address.saturating_add(block.size);
                if legacy && !raw.has_history {
                    // The 1.13 layout keeps frames only in `history`.
                    block.stack = 0;
                    block.requested_size = None;
                }
                blocks.push(block);
            }
        }
        Ok(Segment {
            device: i64_field(t, s, "device").unwrap_or(0),
            address,
            total_size,
            stream: u64_field(t, s, "stream").unwrap_or(0),
            segment_type: str_field(t, s, "segment_type").map(str::to_string),
            pool_id,
            is_expandable: t
                .get(s, "is_expandable")
                .and_then(|v| t.as_bool(v))
                .unwrap_or(false),
            blocks,
        })
    }

    pub(super) fn trace_entry(
        &mut self,
        t: Tree<'_>,
        e: Id,
    ) -> Result<TraceEntry, crate::MeasureError> {
        let f = self.fields(t, e);
        self.trace_entry_of(t, f.as_ref())
    }

    fn trace_entry_of(
        &mut self,
        t: Tree<'_>,
        f: Option<&Fields>,
    ) -> Result<TraceEntry, crate::MeasureError> {
        let no_action = || bad("a trace entry has no action string");
        let f = f.ok_or_else(no_action)?;
        let action = Action::parse(f.str(t, Key::Action).ok_or_else(no_action)?);
        let stack = self.stack(t, f.get(Key::Frames));
        let user_metadata = self.string_node(t, f.get(Key::UserMetadata));
        Ok(TraceEntry {
            action,
            addr: f.u64(t, Key::Addr).unwrap_or(0),
            size: f.u64(t, Key::Size).unwrap_or(0),
            stream: f.u64(t, Key::Stream).unwrap_or(0),
            device_free: f.u64(t, Key::DeviceFree),
            time_us: f.i64(t, Key::TimeUs),
            stack,
            category: f.str(t, Key::Category).map(ProfCategory::parse),
            user_metadata,
        })
    }
}

/// The streaming typed pass: a dict with a string `action` is a trace entry, one with `size`
/// and `state` is a block (only those two shapes in `THCPModule_memorySnapshot`'s output).
/// A dict that does not type cleanly is left as is, so the final pass reports the error.
impl Compactor for Builder {
    fn compact(&mut self, t: Tree<'_>, id: Id) -> Option<Compacted> {
        let f = self.fields(t, id)?;
        let frames = f.get(Key::Frames).filter(|&l| t.as_seq(l).is_some());
        if f.str(t, Key::Action).is_some() {
            let te = self.trace_entry_of(t, Some(&f)).ok()?;
            let child = frames.map(|l| (l, Node::Stack(te.stack)));
            let i = u32::try_from(self.entries.len()).ok()?;
            self.any_category |= te.category.is_some();
            self.entries.push(te);
            self.entry_nodes.push(id);
            return Some(Compacted {
                node: Node::Entry(i),
                child,
            });
        }
        if f.get(Key::Size).is_some() && f.get(Key::State).is_some() {
            let raw = self.raw_block_of(t, Some(&f)).ok()?;
            // The frames of a history entry stay generic (history is not typed here).
            let child = if raw.has_history {
                None
            } else {
                frames.map(|l| (l, Node::Stack(raw.block.stack)))
            };
            let i = u32::try_from(self.blocks.len()).ok()?;
            self.blocks.push(raw);
            return Some(Compacted {
                node: Node::Block(i),
                child,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{Key, NodeTable, DENSE_IDS, KEYS, NKEYS};

    #[test]
    fn key_table_is_indexed_by_discriminant() {
        assert_eq!(KEYS.len(), NKEYS + 1);
        for (i, k) in KEYS.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
        assert_eq!(KEYS[Key::Frames as usize], Key::Frames);
    }

    #[test]
    fn node_table_holds_low_and_high_ids() {
        let mut t = NodeTable::default();
        let high = DENSE_IDS as u32 + 5;
        t.insert(3, 7);
        t.insert(high, 9);
        assert_eq!(t.get(3), Some(7));
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(1000), None);
        assert_eq!(t.get(high), Some(9));
        assert_eq!(t.get(high + 1), None);
        // High ids never grow the array.
        assert!(t.dense.len() <= 4);
    }
}

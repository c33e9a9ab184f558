//! The pickle machine: an arena of values ([`Node`]), the stack and marks, the memo, and the
//! compaction that drops what a [`Compactor`] typed. The opcodes themselves, one family per
//! method, are in [`super::ops`].

use super::src::Src;
use super::{Compactor, Id, Limits, Node, PickleError, Tree, ID_FALSE};
use std::collections::HashMap;
use std::io::Read;

pub(super) struct Vm<'c> {
    pub(super) nodes: Vec<Node>,
    /// One bit per node: memoized, DUPed or a shared small int, so it may be reached again
    /// and its slot is never reused.
    pinned: Vec<u64>,
    /// One bit per pinned dict the compactor declined: it is not offered again (frame dicts are
    /// appended to every frame list). Anything declined stays generic and is typed at the end.
    declined: Vec<u64>,
    /// Slots freed by compaction, reused by `alloc`.
    free: Vec<Id>,
    compactor: Option<&'c mut dyn Compactor>,
    pub(super) stack: Vec<Id>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: Vec<Id>,
    /// BINPUT to an index past the end of `memo` (never seen from CPython, allowed by the spec).
    memo_sparse: HashMap<u32, Id>,
    small_ints: Vec<Option<Id>>,
    pub(super) limits: Limits,
    /// Reused for the items of APPEND(S)/SETITEM(S)/DICT, so the hot path allocates nothing.
    scratch: Vec<Id>,
}

const NO_ID: Id = Id::MAX;

impl<'c> Vm<'c> {
    pub(super) fn new(limits: Limits, compactor: Option<&'c mut dyn Compactor>) -> Self {
        Vm {
            nodes: vec![Node::None, Node::Bool(true), Node::Bool(false)],
            pinned: Vec::new(),
            declined: Vec::new(),
            free: Vec::new(),
            compactor,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            memo_sparse: HashMap::new(),
            small_ints: vec![None; 258],
            limits,
            scratch: Vec::new(),
        }
    }

    pub(super) fn alloc(&mut self, n: Node) -> Id {
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = n;
            return id;
        }
        let id = self.nodes.len() as Id;
        self.nodes.push(n);
        id
    }

    pub(super) fn pin(&mut self, id: Id) {
        if self.compactor.is_none() {
            return;
        }
        let (w, b) = (id as usize / 64, id % 64);
        if w >= self.pinned.len() {
            self.pinned.resize(w + 1, 0);
        }
        self.pinned[w] |= 1 << b;
    }

    fn is_pinned(&self, id: Id) -> bool {
        self.pinned
            .get(id as usize / 64)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// Drops a value nobody else can reach and queues its slot for reuse. `None` past the
    /// three constants only exists in freed slots, so nothing is freed twice.
    fn release(&mut self, id: Id) {
        if id <= ID_FALSE || self.is_pinned(id) || matches!(self.nodes[id as usize], Node::None) {
            return;
        }
        self.nodes[id as usize] = Node::None;
        self.free.push(id);
    }

    /// Offers the dicts just appended to a list to the compactor.
    fn compact(&mut self, items: &[Id]) {
        let Some(c) = self.compactor.take() else {
            return;
        };
        for &id in items {
            // The declined bits first: a small bitset, where the node itself is a random read
            // (every frame of every frame list lands here).
            let (w, b) = (id as usize / 64, id % 64);
            if self
                .declined
                .get(w)
                .is_some_and(|bits| bits & (1 << b) != 0)
            {
                continue;
            }
            if !matches!(self.nodes[id as usize], Node::Dict(_)) {
                continue;
            }
            let tree = Tree {
                nodes: &self.nodes,
                pinned: Some(&self.pinned),
            };
            let Some(done) = c.compact(tree, id) else {
                if self.is_pinned(id) {
                    if w >= self.declined.len() {
                        self.declined.resize(w + 1, 0);
                    }
                    self.declined[w] |= 1 << b;
                }
                continue;
            };
            let old = std::mem::replace(&mut self.nodes[id as usize], done.node);
            let typed_child = done.child.map(|(child, node)| {
                if self.is_pinned(child) {
                    self.nodes[child as usize] = node;
                } else {
                    self.release(child);
                }
                child
            });
            if let Node::Dict(kv) = old {
                for (k, v) in kv {
                    self.release(k);
                    if Some(v) != typed_child {
                        self.release(v);
                    }
                }
            }
        }
        self.compactor = Some(c);
    }

    pub(super) fn int(&mut self, v: i64) -> Id {
        if (-1..=256).contains(&v) {
            let slot = (v + 1) as usize;
            if let Some(id) = self.small_ints[slot] {
                return id;
            }
            let id = self.alloc(Node::Int(v));
            self.pin(id);
            self.small_ints[slot] = Some(id);
            return id;
        }
        self.alloc(Node::Int(v))
    }

    pub(super) fn long(&mut self, bytes: &[u8]) -> Id {
        if bytes.is_empty() {
            return self.int(0);
        }
        if bytes.len() <= 8 {
            let neg = bytes[bytes.len() - 1] & 0x80 != 0;
            let mut buf = [if neg { 0xff } else { 0 }; 8];
            buf[..bytes.len()].copy_from_slice(bytes);
            return self.int(i64::from_le_bytes(buf));
        }
        self.alloc(Node::BigInt(bytes.into()))
    }

    pub(super) fn push<R>(&mut self, src: &Src<R>, id: Id) -> Result<(), PickleError>
    where
        R: Read,
    {
        if self.stack.len() >= self.limits.max_stack {
            return Err(src.err(format!(
                "stack deeper than {} values (nesting too deep)",
                self.limits.max_stack
            )));
        }
        self.stack.push(id);
        Ok(())
    }

    pub(super) fn pop<R: Read>(&mut self, src: &Src<R>, op: &str) -> Result<Id, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(src.err(format!("{op}: stack empty above the mark")));
        }
        self.stack
            .pop()
            .ok_or_else(|| src.err(format!("{op}: stack underflow")))
    }

    pub(super) fn top<R: Read>(&self, src: &Src<R>, op: &str) -> Result<Id, PickleError> {
        match (self.stack.last(), self.marks.last()) {
            (Some(&id), m) if m.is_none_or(|&m| m < self.stack.len()) => Ok(id),
            _ => Err(src.err(format!("{op}: stack underflow"))),
        }
    }

    /// Pops the last MARK: the stack's length when it was pushed.
    fn pop_mark_at<R: Read>(&mut self, src: &Src<R>, op: &str) -> Result<usize, PickleError> {
        self.marks
            .pop()
            .ok_or_else(|| src.err(format!("{op} without a MARK")))
    }

    /// Pops everything above the last MARK.
    pub(super) fn pop_mark<R: Read>(
        &mut self,
        src: &Src<R>,
        op: &str,
    ) -> Result<Vec<Id>, PickleError> {
        self.pop_mark_at(src, op).map(|m| self.stack.split_off(m))
    }

    /// Like [`Vm::pop_mark`], into the reused scratch buffer (give it back with `recycle`).
    pub(super) fn pop_mark_scratch<R: Read>(
        &mut self,
        src: &Src<R>,
        op: &str,
    ) -> Result<Vec<Id>, PickleError> {
        let m = self.pop_mark_at(src, op)?;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(&self.stack[m..]);
        self.stack.truncate(m);
        Ok(buf)
    }

    pub(super) fn recycle(&mut self, buf: Vec<Id>) {
        self.scratch = buf;
    }

    pub(super) fn memo_put<R: Read>(
        &mut self,
        src: &Src<R>,
        idx: u32,
        op: &str,
    ) -> Result<(), PickleError> {
        let id = self.top(src, op)?;
        self.pin(id);
        let i = idx as usize;
        if i < self.memo.len() {
            self.memo[i] = id;
        } else if i == self.memo.len() {
            self.memo.push(id);
        } else {
            self.memo_sparse.insert(idx, id);
        }
        Ok(())
    }

    pub(super) fn memo_get<R: Read>(&self, src: &Src<R>, idx: u32) -> Result<Id, PickleError> {
        let id = self
            .memo
            .get(idx as usize)
            .copied()
            .filter(|&id| id != NO_ID)
            .or_else(|| self.memo_sparse.get(&idx).copied());
        id.ok_or_else(|| src.err(format!("memo reference to missing slot {idx}")))
    }

    pub(super) fn append_items<R: Read>(
        &mut self,
        src: &Src<R>,
        target: Id,
        items: &[Id],
        op: &str,
    ) -> Result<(), PickleError> {
        match &mut self.nodes[target as usize] {
            Node::List(v) => {
                v.extend_from_slice(items);
                self.compact(items);
                Ok(())
            }
            _ => Err(src.err(format!("{op} onto a value that is not a list"))),
        }
    }

    pub(super) fn set_items<R: Read>(
        &mut self,
        src: &Src<R>,
        target: Id,
        items: &[Id],
        op: &str,
    ) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(src.err(format!("{op} with an odd number of items")));
        }
        match &mut self.nodes[target as usize] {
            Node::Dict(d) => {
                d.extend(items.chunks_exact(2).map(|kv| (kv[0], kv[1])));
                Ok(())
            }
            _ => Err(src.err(format!("{op} onto a value that is not a dict"))),
        }
    }

    pub(super) fn string<R: Read>(&mut self, src: &mut Src<R>, n: u64) -> Result<Id, PickleError> {
        let n = src.checked_len(n, "string")?;
        let s = String::from_utf8_lossy(src.take(n)?).into_owned();
        Ok(self.alloc(Node::Str(s.into_boxed_str())))
    }

    pub(super) fn bytes<R: Read>(&mut self, src: &mut Src<R>, n: u64) -> Result<Id, PickleError> {
        let n = src.checked_len(n, "bytes")?;
        let b: Box<[u8]> = src.take(n)?.into();
        Ok(self.alloc(Node::Bytes(b)))
    }
}

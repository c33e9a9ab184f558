//! A small, non-executing pickle reader for plain-data pickles (protocols 2–5).
//!
//! PyTorch's memory snapshots are `pickle.dump(dict)` of dicts, lists, tuples, strings, ints,
//! floats, bools and None (`torch/cuda/memory.py::_dump_snapshot`). Frame dicts and key strings
//! are shared objects, so the file is full of memo references; `serde-pickle` 1.2 mis-counts
//! those (its memo bug on shared dicts), hence this reader. Opcode semantics follow CPython's
//! `Lib/pickle.py` / `Lib/pickletools.py`.
//!
//! Values live in one arena and refer to each other by index, so a memoized dict referenced
//! 10^5 times is stored once, cycles cost nothing, and dropping the tree never recurses. The
//! VM is a loop (no recursion), every length prefix is checked against the bytes left before
//! anything is allocated, and the stack and mark depth are capped. Opcodes that build objects
//! or call code (GLOBAL, REDUCE, BUILD, ...) are refused by name: nothing is ever executed.

use std::collections::HashMap;
use std::io::Read;

/// Index of a value in [`Pickle::nodes`].
pub type Id = u32;

/// One value of the tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit i64: little-endian two's complement bytes (LONG1/LONG4).
    BigInt(Box<[u8]>),
    Float(f64),
    Str(Box<str>),
    Bytes(Box<[u8]>),
    List(Vec<Id>),
    Tuple(Box<[Id]>),
    /// Insertion order kept; a later duplicate key wins on lookup, as in Python.
    Dict(Vec<(Id, Id)>),
    /// Placeholders a [`Compactor`] leaves where it already typed a value (index into its own
    /// tables): a trace entry, a block, a frame list. Never produced without a compactor.
    Entry(u32),
    Block(u32),
    Stack(u32),
}

/// Why a pickle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pickle: {msg} (at byte {offset})")]
pub struct PickleError {
    pub offset: u64,
    pub msg: String,
}

/// Caps that keep a hostile file from exhausting the stack or memory.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most values on the VM stack at once (real snapshots stay under ~1,100: APPENDS/SETITEMS
    /// batch 1,000 items, nesting is < 10 deep).
    pub max_stack: usize,
    /// Most open MARKs at once.
    pub max_marks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_stack: 100_000,
            max_marks: 10_000,
        }
    }
}

/// A parsed pickle: the arena and the root value.
#[derive(Debug, Clone)]
pub struct Pickle {
    pub nodes: Vec<Node>,
    pub root: Id,
    /// The protocol named by PROTO (0 when the stream has none).
    pub protocol: u8,
}

const ID_NONE: Id = 0;
const ID_TRUE: Id = 1;
const ID_FALSE: Id = 2;

/// A read-only view of an arena, shared by a finished [`Pickle`] and a [`Compactor`] that
/// looks at values while the VM is still running.
#[derive(Debug, Clone, Copy)]
pub struct Tree<'a> {
    pub nodes: &'a [Node],
    /// While the VM runs: the bitset of values that may be reached again, whose slots are
    /// never reused. `None` for a finished pickle, where nothing changes any more.
    pub pinned: Option<&'a [u64]>,
}

impl<'a> Tree<'a> {
    pub fn node(self, id: Id) -> &'a Node {
        &self.nodes[id as usize]
    }

    /// Whether `id` names the same value for the rest of the parse (memoized or DUPed while
    /// the VM runs; always once it is done), so a caller may cache what it learnt about it.
    pub fn stable(self, id: Id) -> bool {
        match self.pinned {
            None => true,
            Some(bits) => bits
                .get(id as usize / 64)
                .is_some_and(|w| w & (1 << (id % 64)) != 0),
        }
    }

    /// `d[key]` when `id` is a dict with a string key `key`.
    pub fn get(self, id: Id, key: &str) -> Option<Id> {
        match self.node(id) {
            Node::Dict(items) => items
                .iter()
                .rev()
                .find(|(k, _)| matches!(self.node(*k), Node::Str(s) if &**s == key))
                .map(|(_, v)| *v),
            _ => None,
        }
    }

    pub fn as_str(self, id: Id) -> Option<&'a str> {
        match self.node(id) {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// An integer (or bool) as i128, wide enough for every LONG1 of up to 15 bytes.
    pub fn as_int(self, id: Id) -> Option<i128> {
        match self.node(id) {
            Node::Int(i) => Some(*i as i128),
            Node::Bool(b) => Some(*b as i128),
            Node::BigInt(bytes) if bytes.len() <= 16 => {
                let neg = bytes.last().is_some_and(|b| b & 0x80 != 0);
                let mut buf = [if neg { 0xff } else { 0 }; 16];
                buf[..bytes.len()].copy_from_slice(bytes);
                Some(i128::from_le_bytes(buf))
            }
            _ => None,
        }
    }

    pub fn as_u64(self, id: Id) -> Option<u64> {
        self.as_int(id).and_then(|v| u64::try_from(v).ok())
    }

    pub fn as_i64(self, id: Id) -> Option<i64> {
        self.as_int(id).and_then(|v| i64::try_from(v).ok())
    }

    pub fn as_f64(self, id: Id) -> Option<f64> {
        match self.node(id) {
            Node::Float(f) => Some(*f),
            _ => self.as_int(id).map(|v| v as f64),
        }
    }

    pub fn as_bool(self, id: Id) -> Option<bool> {
        match self.node(id) {
            Node::Bool(b) => Some(*b),
            Node::Int(i) => Some(*i != 0),
            _ => None,
        }
    }

    /// Items of a list or tuple.
    pub fn as_seq(self, id: Id) -> Option<&'a [Id]> {
        match self.node(id) {
            Node::List(v) => Some(v),
            Node::Tuple(v) => Some(v),
            _ => None,
        }
    }

    pub fn is_none(self, id: Id) -> bool {
        matches!(self.node(id), Node::None)
    }
}

impl Pickle {
    pub fn tree(&self) -> Tree<'_> {
        Tree {
            nodes: &self.nodes,
            pinned: None,
        }
    }

    pub fn node(&self, id: Id) -> &Node {
        self.tree().node(id)
    }

    pub fn get(&self, id: Id, key: &str) -> Option<Id> {
        self.tree().get(id, key)
    }

    pub fn as_str(&self, id: Id) -> Option<&str> {
        self.tree().as_str(id)
    }

    pub fn as_int(&self, id: Id) -> Option<i128> {
        self.tree().as_int(id)
    }

    pub fn as_u64(&self, id: Id) -> Option<u64> {
        self.tree().as_u64(id)
    }

    pub fn as_i64(&self, id: Id) -> Option<i64> {
        self.tree().as_i64(id)
    }

    pub fn as_f64(&self, id: Id) -> Option<f64> {
        self.tree().as_f64(id)
    }

    pub fn as_bool(&self, id: Id) -> Option<bool> {
        self.tree().as_bool(id)
    }

    pub fn as_seq(&self, id: Id) -> Option<&[Id]> {
        self.tree().as_seq(id)
    }

    pub fn is_none(&self, id: Id) -> bool {
        self.tree().is_none(id)
    }
}

/// What a [`Compactor`] made of a dict: the placeholder for the dict, and optionally one child
/// list it typed along (the frames) with that list's placeholder.
#[derive(Debug)]
pub struct Compacted {
    pub node: Node,
    pub child: Option<(Id, Node)>,
}

/// A typed pass run while parsing: each dict is offered once it is complete (when APPEND or
/// APPENDS puts it into a list: the pickler writes a container's contents before the
/// container is appended). A compactor that types it returns a small placeholder; the VM then
/// drops the dict's generic contents and reuses the slots of children nobody else can reach
/// (neither memoized nor DUPed), so a multi-GB trace never exists as a value tree. A memoized
/// dict the compactor declines is not offered again; the caller types it from the finished tree.
pub trait Compactor {
    fn compact(&mut self, tree: Tree<'_>, id: Id) -> Option<Compacted>;
}

/// A byte source that knows how many bytes are left, so length prefixes are checked before
/// anything is allocated. It buffers by itself (1 MiB reads), so it takes the file unbuffered.
struct Src<R> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Offset in the stream of `buf[0]`.
    base: u64,
    /// Length of the stream: nothing past it is read.
    len: u64,
}

const CHUNK: usize = 1 << 20;

impl<R: Read> Src<R> {
    fn new(r: R, len: u64) -> Self {
        Src {
            r,
            buf: vec![0; CHUNK.min(usize::try_from(len).unwrap_or(CHUNK)).max(16)],
            pos: 0,
            end: 0,
            base: 0,
            len,
        }
    }

    /// Bytes consumed so far.
    fn consumed(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes not yet consumed (buffered + unread).
    fn left(&self) -> u64 {
        self.len - self.consumed()
    }

    fn err(&self, msg: impl Into<String>) -> PickleError {
        PickleError {
            offset: self.consumed(),
            msg: msg.into(),
        }
    }

    /// Makes `n` bytes available at `pos` (n ≤ left was checked by the caller).
    fn fill(&mut self, n: usize) -> Result<(), PickleError> {
        if self.end - self.pos >= n {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        if self.buf.len() < n {
            self.buf.resize(n.max(CHUNK), 0);
        }
        while self.end < n {
            let unread = self.len - (self.base + self.end as u64);
            let want =
                (self.buf.len() - self.end).min(usize::try_from(unread).unwrap_or(usize::MAX));
            let got = self
                .r
                .read(&mut self.buf[self.end..self.end + want.max(n - self.end)])
                .map_err(|e| self.err(format!("read failed: {e}")))?;
            if got == 0 {
                return Err(self.err("truncated: the file ends inside a value"));
            }
            self.end += got;
        }
        Ok(())
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&[u8], PickleError> {
        // Buffered bytes never run past the stream's length, so a request the buffer holds
        // needs no other check.
        if n <= (self.end - self.pos) as u64 {
            let start = self.pos;
            self.pos += n as usize;
            return Ok(&self.buf[start..self.pos]);
        }
        self.take_slow(n)
    }

    #[cold]
    fn take_slow(&mut self, n: u64) -> Result<&[u8], PickleError> {
        if n > self.left() {
            return Err(self.err(format!("truncated: {n} bytes needed, {} left", self.left())));
        }
        let n = n as usize;
        self.fill(n)?;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, PickleError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, PickleError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or([0; 2]),
        ))
    }

    fn u32(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }

    /// Checks a length prefix against the bytes left (the 2^62-length attack).
    fn checked_len(&self, n: u64, what: &str) -> Result<u64, PickleError> {
        if n > self.left() {
            return Err(self.err(format!(
                "{what} length {n} exceeds the {} bytes left",
                self.left()
            )));
        }
        Ok(n)
    }
}

/// The name of an opcode that would build an object or run code, if `op` is one.
fn forbidden(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

/// Parses a whole pickle from memory.
pub fn parse_slice(bytes: &[u8]) -> Result<Pickle, PickleError> {
    parse_reader(bytes, bytes.len() as u64, Limits::default())
}

/// Parses a pickle of `len` bytes from `r` (a file, buffered here in 64 KiB chunks).
pub fn parse_reader<R: Read>(r: R, len: u64, limits: Limits) -> Result<Pickle, PickleError> {
    Vm::new(limits, None).run(Src::new(r, len))
}

/// Parses like [`parse_reader`], offering each completed dict to `c` (see [`Compactor`]).
pub fn parse_reader_compacting<R: Read>(
    r: R,
    len: u64,
    limits: Limits,
    c: &mut dyn Compactor,
) -> Result<Pickle, PickleError> {
    Vm::new(limits, Some(c)).run(Src::new(r, len))
}

struct Vm<'c> {
    nodes: Vec<Node>,
    /// One bit per node: memoized, DUPed or a shared small int, so it may be reached again
    /// and its slot is never reused.
    pinned: Vec<u64>,
    /// One bit per pinned dict the compactor declined: it is not offered again (frame dicts are
    /// appended to every frame list). Anything declined stays generic and is typed at the end.
    declined: Vec<u64>,
    /// Slots freed by compaction, reused by `alloc`.
    free: Vec<Id>,
    compactor: Option<&'c mut dyn Compactor>,
    stack: Vec<Id>,
    marks: Vec<usize>,
    memo: Vec<Id>,
    /// BINPUT to an index past the end of `memo` (never seen from CPython, allowed by the spec).
    memo_sparse: HashMap<u32, Id>,
    small_ints: Vec<Option<Id>>,
    limits: Limits,
    /// Reused for the items of APPEND(S)/SETITEM(S)/DICT, so the hot path allocates nothing.
    scratch: Vec<Id>,
}

const NO_ID: Id = Id::MAX;

impl<'c> Vm<'c> {
    fn new(limits: Limits, compactor: Option<&'c mut dyn Compactor>) -> Self {
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

    fn alloc(&mut self, n: Node) -> Id {
        if let Some(id) = self.free.pop() {
            self.nodes[id as usize] = n;
            return id;
        }
        let id = self.nodes.len() as Id;
        self.nodes.push(n);
        id
    }

    fn pin(&mut self, id: Id) {
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

    fn int(&mut self, v: i64) -> Id {
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

    fn long(&mut self, bytes: &[u8]) -> Id {
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

    fn push<R>(&mut self, src: &Src<R>, id: Id) -> Result<(), PickleError>
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

    fn pop<R: Read>(&mut self, src: &Src<R>, op: &str) -> Result<Id, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err(src.err(format!("{op}: stack empty above the mark")));
        }
        self.stack
            .pop()
            .ok_or_else(|| src.err(format!("{op}: stack underflow")))
    }

    fn top<R: Read>(&self, src: &Src<R>, op: &str) -> Result<Id, PickleError> {
        match (self.stack.last(), self.marks.last()) {
            (Some(&id), m) if m.is_none_or(|&m| m < self.stack.len()) => Ok(id),
            _ => Err(src.err(format!("{op}: stack underflow"))),
        }
    }

    /// Pops everything above the last MARK.
    fn pop_mark<R: Read>(&mut self, src: &Src<R>, op: &str) -> Result<Vec<Id>, PickleError> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| src.err(format!("{op} without a MARK")))?;
        Ok(self.stack.split_off(m))
    }

    /// Like [`Vm::pop_mark`], into the reused scratch buffer (give it back with `recycle`).
    fn pop_mark_scratch<R: Read>(
        &mut self,
        src: &Src<R>,
        op: &str,
    ) -> Result<Vec<Id>, PickleError> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| src.err(format!("{op} without a MARK")))?;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(&self.stack[m..]);
        self.stack.truncate(m);
        Ok(buf)
    }

    fn recycle(&mut self, buf: Vec<Id>) {
        self.scratch = buf;
    }

    fn memo_put<R: Read>(&mut self, src: &Src<R>, idx: u32, op: &str) -> Result<(), PickleError> {
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

    fn memo_get<R: Read>(&self, src: &Src<R>, idx: u32) -> Result<Id, PickleError> {
        let id = self
            .memo
            .get(idx as usize)
            .copied()
            .filter(|&id| id != NO_ID)
            .or_else(|| self.memo_sparse.get(&idx).copied());
        id.ok_or_else(|| src.err(format!("memo reference to missing slot {idx}")))
    }

    fn append_items<R: Read>(
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

    fn set_items<R: Read>(
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

    fn string<R: Read>(&mut self, src: &mut Src<R>, n: u64) -> Result<Id, PickleError> {
        let n = src.checked_len(n, "string")?;
        let s = String::from_utf8_lossy(src.take(n)?).into_owned();
        Ok(self.alloc(Node::Str(s.into_boxed_str())))
    }

    fn bytes<R: Read>(&mut self, src: &mut Src<R>, n: u64) -> Result<Id, PickleError> {
        let n = src.checked_len(n, "bytes")?;
        let b: Box<[u8]> = src.take(n)?.into();
        Ok(self.alloc(Node::Bytes(b)))
    }

    fn run<R: Read>(mut self, mut src: Src<R>) -> Result<Pickle, PickleError> {
        let mut protocol = 0u8;
        loop {
            if src.left() == 0 {
                return Err(src.err("truncated: no STOP opcode"));
            }
            let op = src.u8()?;
            match op {
                0x80 => {
                    protocol = src.u8()?;
                    if protocol > 5 {
                        return Err(src.err(format!("unsupported protocol {protocol}")));
                    }
                }
                0x95 => {
                    let n = src.u64()?;
                    src.checked_len(n, "FRAME")?;
                }
                b'.' => {
                    let root = self.pop(&src, "STOP")?;
                    if !self.marks.is_empty() {
                        return Err(src.err("STOP with an open MARK"));
                    }
                    return Ok(Pickle {
                        nodes: self.nodes,
                        root,
                        protocol,
                    });
                }
                b'(' => {
                    if self.marks.len() >= self.limits.max_marks {
                        return Err(src.err(format!(
                            "more than {} open MARKs (nesting too deep)",
                            self.limits.max_marks
                        )));
                    }
                    self.marks.push(self.stack.len());
                }
                b'}' => {
                    let id = self.alloc(Node::Dict(Vec::new()));
                    self.push(&src, id)?;
                }
                b']' => {
                    let id = self.alloc(Node::List(Vec::new()));
                    self.push(&src, id)?;
                }
                b')' => {
                    let id = self.alloc(Node::Tuple(Box::new([])));
                    self.push(&src, id)?;
                }
                b'd' => {
                    let items = self.pop_mark_scratch(&src, "DICT")?;
                    let id = self.alloc(Node::Dict(Vec::new()));
                    self.set_items(&src, id, &items, "DICT")?;
                    self.recycle(items);
                    self.push(&src, id)?;
                }
                b'l' => {
                    let items = self.pop_mark(&src, "LIST")?;
                    let id = self.alloc(Node::List(items));
                    self.push(&src, id)?;
                }
                b't' => {
                    let items = self.pop_mark(&src, "TUPLE")?;
                    let id = self.alloc(Node::Tuple(items.into()));
                    self.push(&src, id)?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = vec![0; n];
                    for slot in items.iter_mut().rev() {
                        *slot = self.pop(&src, "TUPLEn")?;
                    }
                    let id = self.alloc(Node::Tuple(items.into()));
                    self.push(&src, id)?;
                }
                0x8f => {
                    // EMPTY_SET: read as a list (sets never appear in snapshots).
                    let id = self.alloc(Node::List(Vec::new()));
                    self.push(&src, id)?;
                }
                0x90 => {
                    let items = self.pop_mark_scratch(&src, "ADDITEMS")?;
                    let target = self.top(&src, "ADDITEMS")?;
                    self.append_items(&src, target, &items, "ADDITEMS")?;
                    self.recycle(items);
                }
                0x91 => {
                    let items = self.pop_mark(&src, "FROZENSET")?;
                    let id = self.alloc(Node::Tuple(items.into()));
                    self.push(&src, id)?;
                }
                b'a' => {
                    let v = self.pop(&src, "APPEND")?;
                    let target = self.top(&src, "APPEND")?;
                    self.append_items(&src, target, &[v], "APPEND")?;
                }
                b'e' => {
                    let items = self.pop_mark_scratch(&src, "APPENDS")?;
                    let target = self.top(&src, "APPENDS")?;
                    self.append_items(&src, target, &items, "APPENDS")?;
                    self.recycle(items);
                }
                b's' => {
                    let v = self.pop(&src, "SETITEM")?;
                    let k = self.pop(&src, "SETITEM")?;
                    let target = self.top(&src, "SETITEM")?;
                    self.set_items(&src, target, &[k, v], "SETITEM")?;
                }
                b'u' => {
                    let items = self.pop_mark_scratch(&src, "SETITEMS")?;
                    let target = self.top(&src, "SETITEMS")?;
                    self.set_items(&src, target, &items, "SETITEMS")?;
                    self.recycle(items);
                }
                b'0' => {
                    self.pop(&src, "POP")?;
                }
                b'1' => {
                    let items = self.pop_mark_scratch(&src, "POP_MARK")?;
                    self.recycle(items);
                }
                b'2' => {
                    let id = self.top(&src, "DUP")?;
                    self.pin(id);
                    self.push(&src, id)?;
                }
                b'J' => {
                    let v = src.u32()? as i32 as i64;
                    let id = self.int(v);
                    self.push(&src, id)?;
                }
                b'K' => {
                    let v = src.u8()? as i64;
                    let id = self.int(v);
                    self.push(&src, id)?;
                }
                b'M' => {
                    let v = src.u16()? as i64;
                    let id = self.int(v);
                    self.push(&src, id)?;
                }
                0x8a => {
                    let n = src.u8()? as u64;
                    let bytes = src.take(n)?;
                    let id = self.long(bytes);
                    self.push(&src, id)?;
                }
                0x8b => {
                    let n = src.u32()? as i32;
                    if n < 0 {
                        return Err(src.err("LONG4 with a negative length"));
                    }
                    let n = src.checked_len(n as u64, "LONG4")?;
                    let bytes = src.take(n)?;
                    let id = self.long(bytes);
                    self.push(&src, id)?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(src.take(8)?.try_into().unwrap_or([0; 8]));
                    let id = self.alloc(Node::Float(v));
                    self.push(&src, id)?;
                }
                b'N' => self.push(&src, ID_NONE)?,
                0x88 => self.push(&src, ID_TRUE)?,
                0x89 => self.push(&src, ID_FALSE)?,
                0x8c => {
                    let n = src.u8()? as u64;
                    let id = self.string(&mut src, n)?;
                    self.push(&src, id)?;
                }
                b'X' => {
                    let n = src.u32()? as u64;
                    let id = self.string(&mut src, n)?;
                    self.push(&src, id)?;
                }
                0x8d => {
                    let n = src.u64()?;
                    let id = self.string(&mut src, n)?;
                    self.push(&src, id)?;
                }
                b'C' => {
                    let n = src.u8()? as u64;
                    let id = self.bytes(&mut src, n)?;
                    self.push(&src, id)?;
                }
                b'B' => {
                    let n = src.u32()? as u64;
                    let id = self.bytes(&mut src, n)?;
                    self.push(&src, id)?;
                }
                0x8e | 0x96 => {
                    let n = src.u64()?;
                    let id = self.bytes(&mut src, n)?;
                    self.push(&src, id)?;
                }
                0x94 => {
                    let idx = u32::try_from(self.memo.len())
                        .map_err(|_| src.err("memo larger than 2^32 entries"))?;
                    self.memo_put(&src, idx, "MEMOIZE")?;
                }
                b'q' => {
                    let idx = src.u8()? as u32;
                    self.memo_put(&src, idx, "BINPUT")?;
                }
                b'r' => {
                    let idx = src.u32()?;
                    self.memo_put(&src, idx, "LONG_BINPUT")?;
                }
                b'h' => {
                    let idx = src.u8()? as u32;
                    let id = self.memo_get(&src, idx)?;
                    self.push(&src, id)?;
                }
                b'j' => {
                    let idx = src.u32()?;
                    let id = self.memo_get(&src, idx)?;
                    self.push(&src, id)?;
                }
                other => {
                    if let Some(name) = forbidden(other) {
                        return Err(src.err(format!(
                            "opcode {name} would build an object or run code; only plain data \
                             is read"
                        )));
                    }
                    return Err(src.err(format!(
                        "unsupported opcode 0x{other:02x} (protocol 0/1 text opcodes are not read)"
                    )));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps([a, a], protocol=4)` with `a = {"k": 1}` — the serde-pickle failure case
    /// (notes/formats.md §4.1), written out by hand from pickletools' opcode table.
    const SHARED: &[u8] =
        b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01k\x94K\x01sh\x01e.";

    #[test]
    fn shared_dict_is_stored_once() {
        let p = parse_slice(SHARED).unwrap();
        let items = p.as_seq(p.root).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], items[1]);
        let v = p.get(items[0], "k").unwrap();
        assert_eq!(p.as_int(v), Some(1));
        assert_eq!(p.protocol, 4);
    }

    #[test]
    fn long1_big_address() {
        // LONG1 of 0x7f3a40000000 (6 bytes, high bit clear) and of -1.
        let p = parse_slice(b"\x80\x02\x8a\x06\x00\x00\x00\x40\x3a\x7f\x8a\x01\xff\x86.").unwrap();
        let t = p.as_seq(p.root).unwrap();
        assert_eq!(p.as_u64(t[0]), Some(0x7f3a_4000_0000));
        assert_eq!(p.as_int(t[1]), Some(-1));
    }

    #[test]
    fn forbidden_opcodes_are_named() {
        let e = parse_slice(b"\x80\x02cos\nsystem\n.").unwrap_err();
        assert!(e.msg.contains("GLOBAL"), "{e}");
        let e = parse_slice(b"\x80\x02N)R.").unwrap_err();
        assert!(e.msg.contains("REDUCE"), "{e}");
    }
}

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

mod ops;
mod src;
mod vm;

use src::Src;
use std::io::Read;
use vm::Vm;

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
    fn every_family_of_plain_opcodes() {
        // Written by hand from pickletools' table: MARK, BININT1 1, BININT2 256, BININT -1,
        // BINFLOAT 1.5 (0x3ff8000000000000 big-endian), NONE, NEWTRUE, NEWFALSE,
        // SHORT_BINUNICODE "hi", SHORT_BINBYTES b"ab", EMPTY_SET + MARK BININT1 7 ADDITEMS,
        // BININT1 5 TUPLE1 MEMOIZE (slot 0), BINGET 0, LIST, STOP.
        let p = parse_slice(
            b"\x80\x04(K\x01M\x00\x01J\xff\xff\xff\xffG?\xf8\x00\x00\x00\x00\x00\x00N\x88\x89\
              \x8c\x02hiC\x02ab\x8f(K\x07\x90K\x05\x85\x94h\x00l.",
        )
        .unwrap();
        let t = p.as_seq(p.root).unwrap();
        assert_eq!(t.len(), 12);
        assert_eq!(p.as_int(t[0]), Some(1));
        assert_eq!(p.as_int(t[1]), Some(256));
        assert_eq!(p.as_int(t[2]), Some(-1));
        assert_eq!(p.as_f64(t[3]), Some(1.5));
        assert!(p.is_none(t[4]));
        assert_eq!(
            (p.as_bool(t[5]), p.as_bool(t[6])),
            (Some(true), Some(false))
        );
        assert_eq!(p.as_str(t[7]), Some("hi"));
        assert_eq!(p.node(t[8]), &Node::Bytes(b"ab".as_slice().into()));
        let set = p.as_seq(t[9]).unwrap();
        assert_eq!(
            set.iter().map(|&i| p.as_int(i)).collect::<Vec<_>>(),
            [Some(7)]
        );
        // The memoized tuple and its BINGET copy are one value.
        assert_eq!(t[10], t[11]);
        assert_eq!(p.as_int(p.as_seq(t[10]).unwrap()[0]), Some(5));
    }

    #[test]
    fn misuse_of_each_family_is_refused_with_its_opcode() {
        // APPEND onto a dict, SETITEM onto a list, BINGET of an empty memo, TUPLE without MARK.
        let cases: [(&[u8], &str); 4] = [
            (
                b"\x80\x02}K\x01a.",
                "APPEND onto a value that is not a list",
            ),
            (
                b"\x80\x02]K\x01K\x02s.",
                "SETITEM onto a value that is not a dict",
            ),
            (b"\x80\x02h\x03.", "memo reference to missing slot 3"),
            (b"\x80\x02K\x01t.", "TUPLE without a MARK"),
        ];
        for (bytes, msg) in cases {
            let e = parse_slice(bytes).unwrap_err();
            assert!(e.msg.contains(msg), "{e}");
        }
        let e = parse_slice(b"\x80\x02\x81.").unwrap_err();
        assert!(e.msg.contains("NEWOBJ"), "{e}");
    }

    #[test]
    fn forbidden_opcodes_are_named() {
        let e = parse_slice(b"\x80\x02cos\nsystem\n.").unwrap_err();
        assert!(e.msg.contains("GLOBAL"), "{e}");
        let e = parse_slice(b"\x80\x02N)R.").unwrap_err();
        assert!(e.msg.contains("REDUCE"), "{e}");
    }
}

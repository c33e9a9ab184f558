//! The opcodes, one method per family — framing, containers, container updates, stack and
//! memo, numbers, strings and bytes — dispatched by [`Vm::run`]. Semantics follow CPython's
//! `Lib/pickle.py` (`_Unpickler.load_*`) and the opcode table of `Lib/pickletools.py`.

use super::src::Src;
use super::vm::Vm;
use super::{Node, Pickle, PickleError, ID_FALSE, ID_NONE, ID_TRUE};
use std::io::Read;

/// The name of an opcode that would build an object or run code, if `op` is one.
pub(super) fn forbidden(op: u8) -> Option<&'static str> {
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

/// Why an opcode outside the plain-data set is refused: by name when it would build an object
/// or run code (globals, reduce, build, persistent ids, extensions, buffers).
fn refused<R: Read>(src: &Src<R>, op: u8) -> PickleError {
    if let Some(name) = forbidden(op) {
        return src.err(format!(
            "opcode {name} would build an object or run code; only plain data is read"
        ));
    }
    src.err(format!(
        "unsupported opcode 0x{op:02x} (protocol 0/1 text opcodes are not read)"
    ))
}

impl Vm<'_> {
    /// Runs the machine to STOP: PROTO and FRAME are checked here, every other opcode goes to
    /// its family.
    pub(super) fn run<R: Read>(mut self, mut src: Src<R>) -> Result<Pickle, PickleError> {
        let mut protocol = 0u8;
        loop {
            if src.left() == 0 {
                return Err(src.err("truncated: no STOP opcode"));
            }
            let op = src.u8()?;
            match op {
                // PROTO
                0x80 => {
                    protocol = src.u8()?;
                    if protocol > 5 {
                        return Err(src.err(format!("unsupported protocol {protocol}")));
                    }
                }
                // FRAME: a length prefix only (the source buffers by itself).
                0x95 => {
                    let n = src.u64()?;
                    src.checked_len(n, "FRAME")?;
                }
                b'.' => return self.stop(&src, protocol),
                _ => self.step(op, &mut src)?,
            }
        }
    }

    /// One opcode, by family.
    #[inline]
    fn step<R: Read>(&mut self, op: u8, src: &mut Src<R>) -> Result<(), PickleError> {
        match op {
            b'(' | b'}' | b']' | b')' | b'd' | b'l' | b't' | 0x85..=0x87 | 0x8f | 0x91 => {
                self.container(op, src)
            }
            b'a' | b'e' | b's' | b'u' | 0x90 => self.update(op, src),
            b'0' | b'1' | b'2' | 0x94 | b'q' | b'r' | b'h' | b'j' => self.stack_or_memo(op, src),
            b'J' | b'K' | b'M' | 0x8a | 0x8b | b'G' | b'N' | 0x88 | 0x89 => self.number(op, src),
            0x8c | b'X' | 0x8d | b'C' | b'B' | 0x8e | 0x96 => self.text(op, src),
            other => Err(refused(src, other)),
        }
    }

    /// STOP: the value on the stack is the pickle's root.
    fn stop<R: Read>(mut self, src: &Src<R>, protocol: u8) -> Result<Pickle, PickleError> {
        let root = self.pop(src, "STOP")?;
        if !self.marks.is_empty() {
            return Err(src.err("STOP with an open MARK"));
        }
        Ok(Pickle {
            nodes: self.nodes,
            root,
            protocol,
        })
    }

    /// MARK and the opcodes that make a container: empty ones, and those built from the items
    /// above a mark or from the top one to three values.
    fn container<R: Read>(&mut self, op: u8, src: &Src<R>) -> Result<(), PickleError> {
        let node = match op {
            b'(' => {
                if self.marks.len() >= self.limits.max_marks {
                    return Err(src.err(format!(
                        "more than {} open MARKs (nesting too deep)",
                        self.limits.max_marks
                    )));
                }
                self.marks.push(self.stack.len());
                return Ok(());
            }
            b'}' => Node::Dict(Vec::new()),
            // EMPTY_LIST; EMPTY_SET is read as a list (sets never appear in snapshots).
            b']' | 0x8f => Node::List(Vec::new()),
            b')' => Node::Tuple(Box::new([])),
            b'd' => {
                let items = self.pop_mark_scratch(src, "DICT")?;
                let id = self.alloc(Node::Dict(Vec::new()));
                self.set_items(src, id, &items, "DICT")?;
                self.recycle(items);
                return self.push(src, id);
            }
            b'l' => Node::List(self.pop_mark(src, "LIST")?),
            b't' => Node::Tuple(self.pop_mark(src, "TUPLE")?.into()),
            // FROZENSET: read as a tuple.
            0x91 => Node::Tuple(self.pop_mark(src, "FROZENSET")?.into()),
            // TUPLE1..TUPLE3
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                let mut items = vec![0; n];
                for slot in items.iter_mut().rev() {
                    *slot = self.pop(src, "TUPLEn")?;
                }
                Node::Tuple(items.into())
            }
            other => return Err(refused(src, other)),
        };
        let id = self.alloc(node);
        self.push(src, id)
    }

    /// The opcodes that add to the list, set or dict below them: APPEND(S), ADDITEMS,
    /// SETITEM(S).
    fn update<R: Read>(&mut self, op: u8, src: &Src<R>) -> Result<(), PickleError> {
        match op {
            b'a' => {
                let v = self.pop(src, "APPEND")?;
                let target = self.top(src, "APPEND")?;
                self.append_items(src, target, &[v], "APPEND")
            }
            b's' => {
                let v = self.pop(src, "SETITEM")?;
                let k = self.pop(src, "SETITEM")?;
                let target = self.top(src, "SETITEM")?;
                self.set_items(src, target, &[k, v], "SETITEM")
            }
            b'e' | 0x90 | b'u' => {
                let name = match op {
                    b'e' => "APPENDS",
                    0x90 => "ADDITEMS",
                    _ => "SETITEMS",
                };
                let items = self.pop_mark_scratch(src, name)?;
                let target = self.top(src, name)?;
                if op == b'u' {
                    self.set_items(src, target, &items, name)?;
                } else {
                    self.append_items(src, target, &items, name)?;
                }
                self.recycle(items);
                Ok(())
            }
            other => Err(refused(src, other)),
        }
    }

    /// POP, POP_MARK, DUP and the memo: MEMOIZE, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET.
    fn stack_or_memo<R: Read>(&mut self, op: u8, src: &mut Src<R>) -> Result<(), PickleError> {
        match op {
            b'0' => self.pop(src, "POP").map(drop),
            b'1' => {
                let items = self.pop_mark_scratch(src, "POP_MARK")?;
                self.recycle(items);
                Ok(())
            }
            b'2' => {
                let id = self.top(src, "DUP")?;
                self.pin(id);
                self.push(src, id)
            }
            0x94 => {
                let idx = u32::try_from(self.memo.len())
                    .map_err(|_| src.err("memo larger than 2^32 entries"))?;
                self.memo_put(src, idx, "MEMOIZE")
            }
            b'q' => {
                let idx = src.u8()? as u32;
                self.memo_put(src, idx, "BINPUT")
            }
            b'r' => {
                let idx = src.u32()?;
                self.memo_put(src, idx, "LONG_BINPUT")
            }
            b'h' | b'j' => {
                let idx = if op == b'h' {
                    src.u8()? as u32
                } else {
                    src.u32()?
                };
                let id = self.memo_get(src, idx)?;
                self.push(src, id)
            }
            other => Err(refused(src, other)),
        }
    }

    /// Numbers and constants: BININT, BININT1, BININT2, LONG1, LONG4, BINFLOAT, NONE,
    /// NEWTRUE, NEWFALSE.
    fn number<R: Read>(&mut self, op: u8, src: &mut Src<R>) -> Result<(), PickleError> {
        let id = match op {
            b'J' => {
                let v = src.u32()? as i32 as i64;
                self.int(v)
            }
            b'K' => {
                let v = src.u8()? as i64;
                self.int(v)
            }
            b'M' => {
                let v = src.u16()? as i64;
                self.int(v)
            }
            0x8a => {
                let n = src.u8()? as u64;
                let bytes = src.take(n)?;
                self.long(bytes)
            }
            0x8b => {
                let n = src.u32()? as i32;
                if n < 0 {
                    return Err(src.err("LONG4 with a negative length"));
                }
                let n = src.checked_len(n as u64, "LONG4")?;
                let bytes = src.take(n)?;
                self.long(bytes)
            }
            b'G' => {
                let v = f64::from_be_bytes(src.take(8)?.try_into().unwrap_or([0; 8]));
                self.alloc(Node::Float(v))
            }
            b'N' => ID_NONE,
            0x88 => ID_TRUE,
            0x89 => ID_FALSE,
            other => return Err(refused(src, other)),
        };
        self.push(src, id)
    }

    /// Strings and bytes by the width of their length prefix: SHORT_BINUNICODE, BINUNICODE,
    /// BINUNICODE8; SHORT_BINBYTES, BINBYTES, BINBYTES8 and BYTEARRAY8.
    fn text<R: Read>(&mut self, op: u8, src: &mut Src<R>) -> Result<(), PickleError> {
        let n = match op {
            0x8c | b'C' => src.u8()? as u64,
            b'X' | b'B' => src.u32()? as u64,
            0x8d | 0x8e | 0x96 => src.u64()?,
            other => return Err(refused(src, other)),
        };
        let id = if matches!(op, 0x8c | b'X' | 0x8d) {
            self.string(src, n)?
        } else {
            self.bytes(src, n)?
        };
        self.push(src, id)
    }
}

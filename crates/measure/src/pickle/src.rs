//! The byte source of the VM: bounded by the stream's length, so every length prefix is checked
//! against the bytes left before anything is allocated.

use super::PickleError;
use std::io::Read;

/// A byte source that knows how many bytes are left, so length prefixes are checked before
/// anything is allocated. It buffers by itself (1 MiB reads), so it takes the file unbuffered.
pub(super) struct Src<R> {
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
    pub(super) fn new(r: R, len: u64) -> Self {
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
    pub(super) fn left(&self) -> u64 {
        self.len - self.consumed()
    }

    pub(super) fn err(&self, msg: impl Into<String>) -> PickleError {
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
    pub(super) fn take(&mut self, n: u64) -> Result<&[u8], PickleError> {
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
    pub(super) fn u8(&mut self) -> Result<u8, PickleError> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        Ok(self.take(1)?[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, PickleError> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().unwrap_or([0; 2]),
        ))
    }

    pub(super) fn u32(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }

    pub(super) fn u64(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }

    /// Checks a length prefix against the bytes left (the 2^62-length attack).
    pub(super) fn checked_len(&self, n: u64, what: &str) -> Result<u64, PickleError> {
        if n > self.left() {
            return Err(self.err(format!(
                "{what} length {n} exceeds the {} bytes left",
                self.left()
            )));
        }
        Ok(n)
    }
}

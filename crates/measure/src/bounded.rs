//! The budget of a JSON record's reader, checked on the bytes as they stream in, before the
//! parser allocates for them: the bytes after gunzip (`MAX_JSON_BYTES`), their ratio to the
//! gzip bytes read (`MAX_GZIP_RATIO`, past a floor), and the longest JSON string
//! (`MAX_JSON_STRING`). serde_json's streaming reader gathers a string whole before handing it
//! on, so one long event name inflated from a small gzip grew its buffer to gigabytes and then
//! aborted the process on a failed allocation (issue #35); these fail with the reason instead.

use std::cell::Cell;
use std::io::{Error, ErrorKind, Read};
use std::rc::Rc;

/// Largest JSON (after gunzip) read: timelines of long runs are tens of MB, Chrome traces of
/// long runs hundreds; a gzip bomb stops here.
pub const MAX_JSON_BYTES: u64 = 2 << 30;

/// Largest expansion of a gzipped record past `RATIO_FLOOR`. JSON traces compress 5–20×
/// (repeated keys and names); zlib's ceiling is about 1032× (RFC 1951's longest match, 258
/// bytes, coded in about 2 bits), which only a bomb's runs of one byte reach.
pub const MAX_GZIP_RATIO: u64 = 100;

/// What any gzip may expand to, whatever its ratio.
const RATIO_FLOOR: u64 = 64 << 20;

/// Longest JSON string (an event's name, a stack frame, a key): real ones are at most a few
/// kilobytes (long C++ template names).
pub const MAX_JSON_STRING: u64 = 16 << 20;

/// Counts the bytes read through it into a shared cell (the gzip bytes under a decoder).
pub struct Counting<R> {
    pub inner: R,
    pub count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Where a byte scan of JSON is: in a string or not, after a backslash or not.
#[derive(Default, Clone, Copy)]
struct Scan {
    in_string: bool,
    escaped: bool,
    run: u64,
}

/// A reader of JSON bytes that fails, with the reason, past the record's budget.
pub struct Bounded<R> {
    inner: R,
    read: u64,
    /// The gzip bytes read so far, when `inner` is a decoder.
    compressed: Option<Rc<Cell<u64>>>,
    scan: Scan,
}

impl<R: Read> Bounded<R> {
    /// A plain JSON stream.
    pub fn new(inner: R) -> Self {
        Bounded {
            inner,
            read: 0,
            compressed: None,
            scan: Scan::default(),
        }
    }

    /// A decoder's output, with the cell counting the gzip bytes it has read.
    pub fn gunzipped(inner: R, compressed: Rc<Cell<u64>>) -> Self {
        Bounded {
            compressed: Some(compressed),
            ..Bounded::new(inner)
        }
    }

    /// `Err` once the bytes read pass a budget.
    fn check(&self) -> std::io::Result<()> {
        let fail = |m: String| Err(Error::new(ErrorKind::InvalidData, m));
        if self.read > MAX_JSON_BYTES {
            return fail(format!("expands to more than {MAX_JSON_BYTES} bytes"));
        }
        if let Some(c) = &self.compressed {
            let allowed = RATIO_FLOOR.max(c.get().saturating_mul(MAX_GZIP_RATIO));
            if self.read > allowed {
                return fail(format!(
                    "gzip: {} bytes expanded to more than {} ({MAX_GZIP_RATIO}× past the \
                     first {RATIO_FLOOR}): not a trace (a gzip bomb?)",
                    c.get(),
                    self.read
                ));
            }
        }
        if self.scan.run > MAX_JSON_STRING {
            return fail(format!(
                "a JSON string longer than {MAX_JSON_STRING} bytes: not a trace's name or key"
            ));
        }
        Ok(())
    }
}

/// Advances `s` over `bytes` (JSON's strings: RFC 8259 §7), counting the current string's
/// bytes in `run`.
fn scan(s: &mut Scan, bytes: &[u8]) {
    for &b in bytes {
        if !s.in_string {
            if b == b'"' {
                *s = Scan {
                    in_string: true,
                    escaped: false,
                    run: 0,
                };
            }
            continue;
        }
        s.run += 1;
        match (s.escaped, b) {
            (true, _) => s.escaped = false,
            (false, b'\\') => s.escaped = true,
            (false, b'"') => s.in_string = false,
            _ => {}
        }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf).map_err(|e| {
            let gz = if self.compressed.is_some() {
                "gzip: "
            } else {
                ""
            };
            Error::new(ErrorKind::InvalidData, format!("{gz}{e}"))
        })?;
        self.read += n as u64;
        scan(&mut self.scan, &buf[..n]);
        self.check()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all<R: Read>(mut r: R) -> std::io::Result<u64> {
        std::io::copy(&mut r, &mut std::io::sink())
    }

    #[test]
    fn strings_are_measured_across_reads_and_escapes() {
        let mut s = Scan::default();
        scan(&mut s, br#"{"name": "ab\"c"#);
        assert!(s.in_string);
        // `a`, `b`, `\`, `"`, `c`: the escaped quote does not end the string.
        assert_eq!(s.run, 5);
        scan(&mut s, br#"d", "x": 1}"#);
        assert!(!s.in_string);
    }

    #[test]
    fn a_long_string_fails_where_it_passes_the_limit() {
        let n = MAX_JSON_STRING as usize + 10;
        let mut json = b"{\"name\": \"".to_vec();
        json.resize(json.len() + n, b'x');
        let e = read_all(Bounded::new(&json[..])).unwrap_err();
        assert!(e.to_string().contains("JSON string longer than"), "{e}");
        // The same bytes split into short strings read whole.
        let mut ok = b"[".to_vec();
        for _ in 0..n / 1000 {
            ok.extend_from_slice(b"\"");
            ok.resize(ok.len() + 990, b'x');
            ok.extend_from_slice(b"\",");
        }
        assert_eq!(read_all(Bounded::new(&ok[..])).unwrap(), ok.len() as u64);
    }

    #[test]
    fn expansion_past_the_floor_is_bounded_by_the_ratio() {
        // 10 bytes of gzip claiming 200 MB of output: past the 64 MiB floor, over 100 × 10.
        let count = Rc::new(Cell::new(10));
        let zeros = std::io::repeat(b' ').take(200 << 20);
        let e = read_all(Bounded::gunzipped(zeros, count)).unwrap_err();
        assert!(e.to_string().contains("gzip bomb"), "{e}");
        // With 1 MiB read, 100 MiB may come out.
        let count = Rc::new(Cell::new(1 << 20));
        let ok = std::io::repeat(b' ').take(100 << 20);
        assert_eq!(read_all(Bounded::gunzipped(ok, count)).unwrap(), 100 << 20);
    }
}

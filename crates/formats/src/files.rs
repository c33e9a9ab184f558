//! The one way vramscope opens a file it was named: regular files only, and whole reads
//! bounded. A device (`/dev/zero`) reads forever and a FIFO blocks its opener until a writer
//! comes (POSIX `open`), so the kind is checked by `stat` before the file is opened, and again
//! on the open file (the path may have changed in between); a whole read stops one byte past
//! its cap, whatever the file's stated size (a file growing while it is read, or `/proc`'s
//! zero-length files). Errors are `std::io::Error`s whose text says why, for every reader's
//! own error type to wrap.

use std::fs::{File, Metadata};
use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// What a non-regular file is, in words.
fn kind_of(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "not a file"
}

/// `Err` unless `meta` is a regular file's.
fn regular(meta: &Metadata) -> Result<(), Error> {
    if meta.is_file() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::InvalidInput,
        format!("{}, not a regular file", kind_of(meta)),
    ))
}

/// Opens `path` when it is a regular file (checked before opening, so a FIFO never blocks);
/// the file and its length.
pub fn open_regular(path: &Path) -> Result<(File, u64), Error> {
    regular(&std::fs::metadata(path)?)?;
    let file = File::open(path)?;
    let meta = file.metadata()?;
    regular(&meta)?;
    Ok((file, meta.len()))
}

/// The whole of the regular file at `path`, refused when it is longer than `cap` bytes (by
/// its stated length, and by what is read: reading stops at `cap + 1`). `what` names the kind
/// of file in the error (`a job file`).
pub fn read_regular(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>, Error> {
    let (file, len) = open_regular(path)?;
    let too_large = |n: String| {
        Error::new(
            ErrorKind::InvalidData,
            format!("{n} bytes is too large for {what} (limit {cap})"),
        )
    };
    if len > cap {
        return Err(too_large(len.to_string()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(format!("more than {cap}")));
    }
    Ok(bytes)
}

/// `read_regular` as UTF-8 text.
pub fn read_regular_text(path: &Path, cap: u64, what: &str) -> Result<String, Error> {
    String::from_utf8(read_regular(path, cap, what)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("vramscope-files-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    }

    #[test]
    fn regular_files_read_whole_within_their_cap() {
        let p = scratch("ten");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_regular(&p, 10, "x").unwrap(), b"0123456789");
        let e = read_regular(&p, 9, "a job file").unwrap_err().to_string();
        assert_eq!(e, "10 bytes is too large for a job file (limit 9)");
        assert_eq!(open_regular(&p).unwrap().1, 10);
    }

    #[cfg(unix)]
    #[test]
    fn devices_directories_and_fifos_are_refused_unopened() {
        let t = std::time::Instant::now();
        for (path, says) in [
            ("/dev/zero", "a character device, not a regular file"),
            ("/dev/null", "a character device, not a regular file"),
            ("/", "a directory, not a regular file"),
        ] {
            let e = read_regular(Path::new(path), 1 << 20, "x").unwrap_err();
            assert_eq!(e.to_string(), says, "{path}");
        }
        let fifo = scratch("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = open_regular(&fifo).unwrap_err();
            assert_eq!(e.to_string(), "a FIFO (named pipe), not a regular file");
        }
        // Opening the FIFO would have blocked until a writer came: none did.
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }

    /// `/proc` files state a length of 0 and hold more: the read still stops at the cap.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_file_longer_than_its_stated_length_is_cut_at_the_cap() {
        let p = Path::new("/proc/self/status");
        assert_eq!(std::fs::metadata(p).unwrap().len(), 0);
        let e = read_regular(p, 16, "x").unwrap_err().to_string();
        assert_eq!(e, "more than 16 bytes is too large for x (limit 16)");
    }
}

//! MODEL resolution for every command and the server: one call into `vramscope-hub` (local
//! path, preset, Hugging Face cache, vramscope's cache, the Hub), with the process's fetch
//! flags (`--refresh`, `--verbose`).

use std::sync::atomic::{AtomicBool, Ordering};
use vramscope_formats::hf_config::ReadOptions;
use vramscope_formats::FormatError;
use vramscope_hub::{Options, Resolved};

static REFRESH: AtomicBool = AtomicBool::new(false);
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// Records `--refresh` and `--verbose` for this process (each `cli_main` call sets its own).
pub fn set_fetch_flags(refresh: bool, verbose: bool) {
    REFRESH.store(refresh, Ordering::Relaxed);
    VERBOSE.store(verbose, Ordering::Relaxed);
}

/// The options a command resolves with. (A server bound beyond loopback refuses Hub ids before
/// they get here unless it was started with `--allow-hub`.)
pub fn options(assume_llama: bool) -> Options {
    let (refresh, verbose) = (
        REFRESH.load(Ordering::Relaxed),
        VERBOSE.load(Ordering::Relaxed),
    );
    Options {
        read: ReadOptions { assume_llama },
        refresh,
        verbose,
        no_network: false,
    }
}

/// Resolves MODEL with this process's flags.
pub fn resolve(arg: &str, opts: &Options) -> Result<Resolved, FormatError> {
    vramscope_hub::resolve(arg, opts)
}

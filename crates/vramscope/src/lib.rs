//! `vramscope`: where did my GPU memory go? The application over `vramscope-core` (estimation),
//! `vramscope-formats` (model files), `vramscope-measure` (PyTorch records) and `vramscope-hub`
//! (MODEL resolution): the command line, the web server, and (`cli_main`) the one entry point
//! the binary and the Python package's `vramscope` console script both call.

pub mod app;
mod cli;
mod commands;
mod models;
mod output;
mod render;
mod serve;
mod units;

use clap::Parser;
use std::ffi::OsString;

/// Parses `args` (the program name first, as `std::env::args_os()` gives them) and runs the
/// command exactly as the `vramscope` binary does, returning its exit code instead of exiting:
/// 0 success; 1 for `estimate --require-fit` on a job that does not fit; 2 for bad input or
/// usage, with one line `error: <cause>` on stderr (clap's own message for a bad flag). A closed
/// stdout (`vramscope models | head`) ends the command quietly with 0.
pub fn cli_main<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match cli::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` print to stdout and exit 0; usage errors exit 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    output::init_color(cli.color);
    match commands::run(cli) {
        Ok(code) => code,
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(output::closed_pipe) =>
        {
            0
        }
        Err(e) => {
            // One line naming what was wrong; exit 2 for bad input (the contract).
            let msg = e.to_string().replace('\n', " ");
            let _ = output::eprint_error(&msg);
            2
        }
    }
}

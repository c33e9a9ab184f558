//! `vramscope`: where did my GPU memory go? A thin shell over `vramscope-core` (estimation) and
//! `vramscope-formats` (model files): parse arguments, call the library, print.

mod cli;
mod commands;
mod models;
mod output;
mod render;
mod serve;
mod units;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    output::init_color(cli.color);
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line naming what was wrong; exit 2 for bad input (the contract).
            let msg = e.to_string().replace('\n', " ");
            let _ = output::eprint_error(&msg);
            ExitCode::from(2)
        }
    }
}

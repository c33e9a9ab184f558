//! One module per subcommand. Each returns the exit code or an error (printed as one line, exit
//! 2).

mod analyze;
mod catalog;
mod compare;
pub mod estimate;
pub mod estimate_pipeline;
pub mod fit;
mod inspect;
mod inspect_pipeline;
mod inspect_vision;
pub mod jobargs;
mod logview;
mod plan;
mod serve;
mod validate;
mod watch;

use crate::app::Session;
use crate::cli::{Cli, Command};

/// Any error a command can end with; its `Display` is the one-line cause.
pub type CmdResult = Result<i32, Box<dyn std::error::Error>>;

/// Runs one command line. Its MODEL resolution is this run's own (`Session`: `--refresh`,
/// `--verbose`), so an earlier in-process call (Python's `cli_main`) leaves nothing behind.
pub fn run(cli: Cli) -> CmdResult {
    let s = &Session::new(cli.refresh, cli.verbose);
    match cli.command {
        Command::Inspect {
            model,
            json,
            layers,
            tensors,
            assume_llama,
        } => inspect::run(s, &model, json, layers, tensors, assume_llama),
        Command::Estimate {
            job,
            diffusion,
            json,
            require_fit,
            svg,
            html,
            advise,
        } => match estimate_pipeline::pipeline_target(s, &job)? {
            Some(p) => estimate_pipeline::run_estimate(&p, &job, &diffusion, json, require_fit),
            None => estimate::run(
                s,
                &job,
                estimate::Outputs {
                    json,
                    require_fit,
                    advise,
                    svg: svg.as_deref(),
                    html: html.as_deref(),
                },
            ),
        },
        Command::Serve {
            port,
            bind,
            allow_hub,
        } => serve::run(s, bind, port, allow_hub),
        Command::Fit {
            job,
            diffusion,
            json,
            measured,
        } => match measured {
            Some(file) => fit::run_calibrated(s, &job, &file, json),
            None => match estimate_pipeline::pipeline_target(s, &job)? {
                Some(p) => estimate_pipeline::run_fit(&p, &job, &diffusion, json),
                None => fit::run(s, &job, json),
            },
        },
        Command::Plan {
            job,
            max_micro_batch,
            top,
            json,
        } => plan::run(s, &job, json, max_micro_batch, top),
        Command::Validate {
            file,
            json,
            tolerance_only,
            report_only,
        } => validate::run(s, &file, json, tolerance_only, report_only),
        Command::Models { json } => catalog::models(json),
        Command::Gpus { json } => catalog::gpus(json),
        Command::Analyze { file, json } => analyze::run(&file, json),
        Command::Compare { job, file, json } => compare::run(s, *job, file, json),
        Command::Watch {
            pid,
            interval,
            json,
            command,
        } => watch::run(pid, interval, json, &command),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut cmd = Cli::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "vramscope", &mut buf);
            crate::output::print(&String::from_utf8_lossy(&buf))?;
            Ok(0)
        }
    }
}

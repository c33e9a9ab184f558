//! The `vramscope` binary: `vramscope::cli_main` with this process's arguments, its answer as
//! the exit code.

fn main() {
    std::process::exit(vramscope::cli_main(std::env::args_os()));
}

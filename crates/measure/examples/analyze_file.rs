//! Analyzes one record and prints its peak: for timing the readers alone (BENCHMARKS.md),
//! `cargo run --release -p vramscope-measure --example analyze_file -- FILE`.

fn main() {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: analyze_file FILE");
        std::process::exit(2);
    };
    match vramscope_measure::analyze_file(std::path::Path::new(&path)) {
        Ok(a) => println!(
            "{} peak_allocated {:?} peak_reserved {:?} events {}",
            a.source.kind,
            a.per_gpu.peaks.peak_allocated,
            a.per_gpu.peaks.peak_reserved,
            a.source.events
        ),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

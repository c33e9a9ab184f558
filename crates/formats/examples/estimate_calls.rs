//! Runs the estimator N times on one job, for counting instructions with valgrind (a figure
//! that does not depend on the machine's load, unlike criterion's times):
//!
//! ```text
//! cargo build --release -p vramscope-formats --example estimate_calls
//! valgrind --tool=callgrind target/release/examples/estimate_calls one 0
//! valgrind --tool=callgrind target/release/examples/estimate_calls one 100
//! ```
//!
//! The difference of the two runs' totals over N is one call's instructions. MODE: `one` (an
//! estimate), `fit` (the fit search), `whatif` (the what-if table), each on the same model
//! value every call; `one-fresh`, `whatif-fresh`: on a fresh clone of the model each call (what
//! a caller pays the first time it asks of a model); `clone`: the clone alone; `json`: the
//! serialization of one estimate's report by `serde_json::to_vec`; `pretty`: by
//! `serde_json::to_string_pretty` (what the CLI's `--json`, the server and the Python binding pay
//! after the estimate).

use serde_json::json;
use std::hint::black_box;
use vramscope_core::estimate::estimate;
use vramscope_core::fit::{fit, what_if};
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_model;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!(
            "usage: estimate_calls one|fit|whatif|one-fresh|whatif-fresh|clone|json|pretty N"
        );
        std::process::exit(2);
    };
    let m = load_model("llama-3.1-8b").expect("the preset loads");
    let max = m.spec.as_ref().and_then(|s| s.max_position_embeddings);
    let input = m.into_input();
    let job: Job = serde_json::from_value(json!({"batch": 1, "seq": 4096, "gpu": "h100-80gb"}))
        .expect("a valid job");
    let job = job.resolve(max).expect("the job resolves");
    let report = estimate(&input, &job).expect("the job estimates");
    let mut checksum = 0u64;
    for _ in 0..n {
        checksum = checksum.wrapping_add(match mode.as_str() {
            "one" => estimate(black_box(&input), &job)
                .map(|r| r.per_gpu.peaks.device_total.unwrap_or(0))
                .unwrap_or(0),
            "fit" => fit(black_box(&input), &job).map_or(0, |f| f.evaluations),
            "whatif" => what_if(black_box(&input), &job).map_or(0, |t| t.len() as u64),
            "one-fresh" => estimate(&black_box(input.clone()), &job)
                .map(|r| r.per_gpu.peaks.device_total.unwrap_or(0))
                .unwrap_or(0),
            "whatif-fresh" => {
                what_if(&black_box(input.clone()), &job).map_or(0, |t| t.len() as u64)
            }
            "clone" => black_box(input.clone()).params_total,
            "json" => serde_json::to_vec(black_box(&report)).map_or(0, |v| v.len() as u64),
            "pretty" => {
                serde_json::to_string_pretty(black_box(&report)).map_or(0, |v| v.len() as u64)
            }
            _ => {
                eprintln!("unknown mode {mode}");
                std::process::exit(2);
            }
        });
    }
    println!("{mode} × {n}: checksum {checksum}");
}

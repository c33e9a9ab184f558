//! Unified-memory catalog entries (Apple silicon, NVIDIA GB10): an estimate on one says that
//! the OS shares the memory, and on Metal that the context and allocator figures are CUDA's.

mod common;

use serde_json::json;
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

fn warnings(gpu: &str) -> Vec<String> {
    let job: Job =
        serde_json::from_value(json!({"model": "gpt2", "task": "infer", "gpu": gpu})).unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let r = estimate(&model.into_input(), &job.resolve(Some(1024)).unwrap()).unwrap();
    r.warnings
}

#[test]
fn unified_memory_entries_warn_and_metal_says_its_overheads_are_assumed() {
    let mac = warnings("apple-m4max-128gb");
    common::assert_warns(&mac, "shares its memory with the OS");
    assert!(
        mac.iter()
            .any(|w| w.contains("Metal") && w.contains("assumed")),
        "{mac:?}"
    );
    let spark = warnings("dgx-spark");
    common::assert_warns(&spark, "gb10-128gb shares its memory");
    common::assert_never_warns(&spark, "Metal");
    let a100 = warnings("a100-80gb");
    common::assert_never_warns(&a100, "shares its memory");
}

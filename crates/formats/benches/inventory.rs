//! How fast a model's inventory is known: from a compiled-in preset, and from the headers of a
//! 70B-class sharded checkpoint (30 shards, made here with sparse data so no 140 GB is written).
//! Figures are recorded in BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, Criterion};
use std::fs;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use vramscope_formats::model_source::load_model;
use vramscope_formats::presets;

/// Writes llama-3.1-70b as a sharded safetensors checkpoint (bf16 headers, sparse data) plus
/// its index and config, the way `save_pretrained` lays it out.
fn synthetic_checkpoint(dir: &Path, shards: usize) {
    let preset = presets::find("llama-3.1-70b").unwrap();
    let model = load_model("llama-3.1-70b").unwrap();
    let tensors = model.inventory.unwrap().tensors;
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("config.json"), preset.config).unwrap();
    let per_shard = tensors.len().div_ceil(shards);
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for (i, chunk) in tensors.chunks(per_shard).enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
        let mut offset = 0u64;
        for t in chunk {
            header.insert(
                t.name.clone(),
                serde_json::json!({"dtype": "BF16", "shape": t.shape,
                                   "data_offsets": [offset, offset + t.bytes]}),
            );
            offset += t.bytes;
            weight_map.insert(t.name.clone(), name.clone().into());
        }
        total += offset;
        let mut text = serde_json::to_vec(&header).unwrap();
        while !text.len().is_multiple_of(8) {
            text.push(b' ');
        }
        let mut f = fs::File::create(dir.join(&name)).unwrap();
        f.write_all(&(text.len() as u64).to_le_bytes()).unwrap();
        f.write_all(&text).unwrap();
        f.set_len(8 + text.len() as u64 + offset).unwrap(); // sparse: no data written
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec_pretty(&index).unwrap(),
    )
    .unwrap();
}

fn benches(c: &mut Criterion) {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("vramscope-bench-70b-{}", std::process::id()));
    synthetic_checkpoint(&dir, 30);
    let dir_str = dir.to_str().unwrap().to_string();
    assert_eq!(load_model(&dir_str).unwrap().params_total, 70_553_706_496);

    let mut g = c.benchmark_group("inventory");
    g.bench_function("preset llama-3.1-70b (parse config + build)", |b| {
        b.iter(|| load_model(black_box("llama-3.1-70b")).unwrap())
    });
    g.bench_function("preset deepseek-v3 (44,544 expert tensors)", |b| {
        b.iter(|| load_model(black_box("deepseek-v3")).unwrap())
    });
    g.bench_function("headers llama-3.1-70b, 30 shards + index + config", |b| {
        b.iter(|| load_model(black_box(&dir_str)).unwrap())
    });
    g.finish();
    let _ = fs::remove_dir_all(&dir);
}

criterion_group!(inventory, benches);
criterion_main!(inventory);

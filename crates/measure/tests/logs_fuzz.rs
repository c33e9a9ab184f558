//! Fuzz-style tests of the log readers: arbitrary text, real logs cut at every point, and real
//! logs mutated at random never panic, and what comes back is consistent with what was read.

use proptest::prelude::*;
use std::path::PathBuf;
use vramscope_measure::logs::{analyze_any_bytes, detect, parse_size, read_log};

fn fixtures() -> Vec<(String, String)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    let mut out = Vec::new();
    for dir in ["vllm", "llamacpp", "ollama", "torch-oom"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x != "md") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p.display().to_string(), text));
            }
        }
    }
    out.sort();
    out
}

/// Reads `text` and checks the report's own consistency when it is read at all.
fn check(text: &str) {
    let kind = detect(text);
    match read_log(text) {
        Ok(r) => {
            assert_eq!(Some(r.source), kind);
            if let Some(o) = &r.oom {
                assert_eq!(r.per_gpu.peaks.peak_allocated, o.allocated);
                assert_eq!(r.fit.capacity, o.capacity);
            }
            let e = r.engine.clone().unwrap_or_default();
            if let (Some(n), Some(m)) = (e.get("n_gpu_layers"), e.get("n_layers")) {
                // Both from llama.cpp's "offloaded N/M layers" line, or from other lines; the
                // offload line itself never yields N > M.
                let from_line = text.contains(&format!("offloaded {n}/{m} layers"));
                assert!(!from_line || n.as_u64() <= m.as_u64(), "{n} > {m}");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    let _ = analyze_any_bytes(text.as_bytes());
}

#[test]
fn real_logs_cut_at_every_point() {
    for (name, text) in fixtures() {
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        let step = (cuts.len() / 150).max(1);
        for &i in cuts.iter().step_by(step) {
            let cut = &text[..i];
            let r = std::panic::catch_unwind(|| check(cut));
            assert!(r.is_ok(), "{name} cut at {i} panicked");
        }
    }
}

fn mutate(text: &str, ops: &[(u8, usize, String)]) -> String {
    let mut s = text.to_string();
    for (op, at, ins) in ops {
        let mut at = at % (s.len() + 1);
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        match op % 4 {
            0 => s.insert_str(at, ins),
            1 => {
                let mut end = (at + ins.len()).min(s.len());
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.replace_range(at..end, "");
            }
            2 => {
                let line = s[at..].lines().next().unwrap_or("").to_string();
                s.insert_str(at, &format!("{line}\n"));
            }
            _ => s.truncate(at),
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        check(&text);
    }

    #[test]
    fn log_shaped_noise_never_panics(
        parts in prop::collection::vec(prop_oneof![
            Just("CUDA0 model buffer size = ".to_string()),
            Just(" KV buffer size = ".to_string()),
            Just("offloaded ".to_string()),
            Just("Tried to allocate ".to_string()),
            Just("out of memory. Tried to allocate ".to_string()),
            Just("Loading model weights took ".to_string()),
            Just("msg=offload layers.split=".to_string()),
            Just("memory.available=\"[".to_string()),
            Just("Maximum concurrency for ".to_string()),
            Just("vllm serve ".to_string()),
            Just(" --max-model-len".to_string()),
            Just("=".to_string()),
            Just(" \\\n".to_string()),
            Just("kv_cache_size=".to_string()),
            Just("model params = ".to_string()),
            Just("/".to_string()), Just(",".to_string()), Just(" ".to_string()),
            Just("\n".to_string()), Just("GiB".to_string()), Just("MiB".to_string()),
            "[0-9.,]{1,25}",
            "\\PC{0,12}",
        ], 0..40)
    ) {
        check(&parts.concat());
    }

    #[test]
    fn mutated_real_logs_never_panic(
        which in 0usize..64,
        ops in prop::collection::vec((any::<u8>(), any::<usize>(), "\\PC{0,16}"), 1..6)
    ) {
        let all = fixtures();
        let (_, text) = &all[which % all.len()];
        check(&mutate(text, &ops));
    }

    #[test]
    fn sizes_never_panic(num in "\\PC{0,40}", unit in "\\PC{0,6}", gb in any::<bool>()) {
        let _ = parse_size(&num, &unit, gb);
    }

    #[test]
    fn sizes_are_monotonic(a in 0u64..10_000_000, b in 0u64..10_000_000) {
        // a/100 MiB ≤ b/100 MiB ⇔ a ≤ b, whatever the rounding.
        let fa = parse_size(&format!("{}.{:02}", a / 100, a % 100), "MiB", false).unwrap();
        let fb = parse_size(&format!("{}.{:02}", b / 100, b % 100), "MiB", false).unwrap();
        prop_assert_eq!(a <= b, fa <= fb);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A vLLM log's count in bytes (`LogReport::kv_pool_from_count`): any count and block size
    /// either gives count-in-blocks × block bytes exactly or (on overflow) leaves the pool
    /// unstated; it never panics and never invents a pool for a log without a count.
    #[test]
    fn kv_counts_to_bytes_are_exact_or_absent(
        blocks in any::<u32>(), block_bytes in any::<u64>(), block_size in 0u64..1024,
        tokens in any::<bool>(),
    ) {
        let line = if tokens {
            format!("INFO [kv_cache_utils.py:634] GPU KV cache size: {blocks} tokens\n")
        } else {
            format!("INFO distributed_gpu_executor.py:56] # GPU blocks: {blocks}, # CPU blocks: 1\n")
        };
        let mut r = read_log(&line).unwrap();
        let filled = r.kv_pool_from_count(block_bytes, block_size, "test");
        let n = if tokens {
            u64::from(blocks).div_ceil(block_size.max(1))
        } else {
            u64::from(blocks)
        };
        let want = n.checked_mul(block_bytes).filter(|_| block_bytes > 0);
        prop_assert_eq!(r.per_gpu.kv_pool, want);
        prop_assert_eq!(filled, want.is_some());
        let mut none = read_log("INFO worker.py:243] model weights take   14.96GiB\n").unwrap();
        prop_assert!(!none.kv_pool_from_count(block_bytes.max(1), block_size, "test"));
        prop_assert_eq!(none.per_gpu.kv_pool, None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// V0's "Memory profiling results" line, both wordings (v0.6.3: blanks; v0.6.4: commas and
    /// a duration): `kv_cache_size=X.YZGiB` is the KV pool, X.YZ × 2^30 bytes rounded to the
    /// nearest byte, and `total_gpu_memory` the capacity, whatever the figures.
    #[test]
    fn v0_profiling_kv_cache_size_is_exact(
        kv in 0u64..100_000_000, total in 0u64..100_000_000, commas in any::<bool>(),
    ) {
        let fig = |n: u64| format!("{}.{:02}GiB", n / 100, n % 100);
        let line = if commas {
            format!("INFO worker.py:232] Memory profiling results: duration=2.51 seconds, \
                     total_gpu_memory={}, initial_memory_usage=1.00GiB, non_torch_memory=0.43GiB, \
                     kv_cache_size={}, gpu_memory_utilization=0.90.\n", fig(total), fig(kv))
        } else {
            format!("INFO worker.py:220] Memory profiling results: total_gpu_memory={} \
                     initial_memory_usage=1.00GiB peak_torch_memory=2.00GiB \
                     memory_usage_post_profile=1.50Gib non_torch_memory=0.43GiB \
                     kv_cache_size={} gpu_memory_utilization=0.90\n", fig(total), fig(kv))
        };
        let r = read_log(&line).unwrap();
        // n hundredths of a GiB = n × 2^30 / 100 bytes, rounded half up.
        let bytes = |n: u64| ((u128::from(n) << 30) + 50) / 100;
        prop_assert_eq!(r.per_gpu.kv_pool.map(u128::from), Some(bytes(kv)));
        prop_assert_eq!(r.fit.capacity.map(u128::from), Some(bytes(total)));
    }

    /// The `vllm serve` command line: `--gpu-memory-utilization` and `--max-model-len` read
    /// back exactly in any order and spelling (`--flag value`, `--flag=value`, underscores, a
    /// continuation line), when no engine line states them.
    #[test]
    fn serve_command_flags_read_back(
        util in 1u64..=100, len in 1u64..10_000_000, equals in any::<bool>(),
        underscores in any::<bool>(), swap in any::<bool>(), wrap in any::<bool>(),
    ) {
        let name = |f: &str| if underscores { f.replace('-', "_") } else { f.to_string() };
        let flag = |f: &str, v: String| {
            if equals { format!("--{}={v}", name(f)) } else { format!("--{} {v}", name(f)) }
        };
        let mut flags = [
            flag("gpu-memory-utilization", format!("0.{util:02}")),
            flag("max-model-len", len.to_string()),
        ];
        if util == 100 {
            flags[0] = flag("gpu-memory-utilization", "1.0".into());
        }
        if swap {
            flags.swap(0, 1);
        }
        let sep = if wrap { " \\\n    " } else { " " };
        let log = format!(
            "vllm serve org/model{sep}{}{sep}{}\nINFO executor_base.py:95] # CUDA blocks: 5\n",
            flags[0], flags[1]
        );
        let r = read_log(&log).unwrap();
        let e = r.engine.unwrap();
        prop_assert_eq!(e["gpu_memory_utilization"].as_f64(), Some(util as f64 / 100.0));
        prop_assert_eq!(e["max_model_len"].as_u64(), Some(len));
        prop_assert_eq!(r.job.get("model").and_then(|m| m.as_str()), Some("org/model"));
    }
}

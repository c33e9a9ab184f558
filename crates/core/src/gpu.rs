//! The GPU catalog: capacity as the device reports it, compiled in from `data/gpus.json` (inside
//! this crate; `build.rs` checks every entry first; sources in `data/GPUS.md`).

use crate::error::CoreError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::OnceLock;

/// One GPU model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    /// Catalog id, `<family>-<memory>gb` (`a100-80gb`).
    pub id: String,
    /// Full product name.
    pub name: String,
    pub vendor: String,
    /// Architecture / generation (`volta`, `ampere`, `hopper`, ...).
    pub arch: String,
    /// Total memory in bytes as the device reports it (`cudaMemGetInfo` total, nvidia-smi's
    /// "Total" in MiB × 2^20), not the marketing figure; on a unified-memory machine, the GPU's
    /// share (`unified_memory`).
    pub memory_bytes: u64,
    /// The marketing capacity in GB as sold (for display).
    pub marketing_gb: u64,
    /// Whether the GPU computes in bf16 natively.
    pub bf16: bool,
    /// Where `memory_bytes` comes from.
    pub source: String,
    /// Other spellings accepted on the command line.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// CPU and GPU share one memory (Apple silicon, NVIDIA GB10): `memory_bytes` is what the
    /// GPU may take of it (Apple: Metal's `recommendedMaxWorkingSetSize`; GB10: CUDA's total of
    /// the shared pool), and the OS and other processes live in the same memory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unified_memory: bool,
    /// Speeds from the vendor's datasheet, for the step-time model (`crate::throughput`);
    /// absent where the catalog has not got them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf: Option<Perf>,
}

/// A GPU's peak speeds as its vendor's datasheet gives them (dense, i.e. without 2:4 sparsity).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Perf {
    /// Peak dense TFLOP/s per compute dtype (`fp32`, `tf32`, `bf16`, `fp16`, `fp8`); a dtype
    /// the GPU has no units for is absent.
    pub tflops: Tflops,
    /// Memory bandwidth, GB/s.
    pub memory_gbps: f64,
    /// GPU-to-GPU link within a node (NVLink, Infinity Fabric), GB/s in both directions
    /// together as datasheets give it; absent: peers talk over PCIe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_gbps: Option<f64>,
    /// The link to the host (PCIe, NVLink-C2C), GB/s in both directions together.
    pub host_gbps: f64,
    /// The network between nodes per GPU, Gbit/s (one NIC per GPU in DGX/HGX systems); absent:
    /// the step-time model assumes 200 Gbit/s HDR InfiniBand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_gbit_s: Option<f64>,
    /// GPUs per node (8 when absent: DGX/HGX systems).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_gpus: Option<u64>,
    /// Where the figures come from.
    pub source: String,
}

/// Peak dense TFLOP/s per compute dtype.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tflops {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<f64>,
}

impl Gpu {
    /// Whether the device runs Metal (Apple silicon) rather than CUDA/ROCm, whose context and
    /// allocator figures the estimator models.
    pub fn is_metal(&self) -> bool {
        self.vendor.eq_ignore_ascii_case("apple")
    }
}

const CATALOG_JSON: &str = include_str!("../data/gpus.json");

/// All GPUs in the catalog, in file order.
pub fn catalog() -> &'static [Gpu] {
    static CATALOG: OnceLock<Vec<Gpu>> = OnceLock::new();
    CATALOG.get_or_init(|| {
        serde_json::from_str(CATALOG_JSON).expect("data/gpus.json is checked by build.rs")
    })
}

/// Looks a GPU up by id or alias, case-insensitively.
pub fn find(id: &str) -> Result<&'static Gpu, CoreError> {
    let trimmed = id.trim();
    // The common spelling (an id as the catalog writes it) needs no lowercased copy.
    if let Some(&i) = index().get(trimmed) {
        return Ok(&catalog()[i]);
    }
    let key = trimmed.to_ascii_lowercase();
    index()
        .get(key.as_str())
        .map(|&i| &catalog()[i])
        .ok_or_else(|| CoreError::Unknown {
            kind: "GPU",
            name: id.to_string(),
            hint: suggestion(&key, catalog().iter().map(|g| g.id.as_str())),
        })
}

/// Each GPU's place in the catalog under its id and its aliases lowercased: the first GPU in
/// file order that a name matches, as a scan of the catalog would find it (an estimate looks
/// its GPU up several times).
fn index() -> &'static HashMap<String, usize> {
    static INDEX: OnceLock<HashMap<String, usize>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index = HashMap::new();
        for (i, g) in catalog().iter().enumerate() {
            // A scan compared the id exactly with the lowercased name.
            if g.id == g.id.to_ascii_lowercase() {
                index.entry(g.id.clone()).or_insert(i);
            }
            for a in &g.aliases {
                index.entry(a.to_ascii_lowercase()).or_insert(i);
            }
        }
        index
    })
}

/// "; did you mean 'x'?" for the closest name, or a pointer to the list.
///
/// A key more than 3 characters longer than every name gets no hint, unmeasured: its distance
/// to each is at least the difference in length (Levenshtein), and no name can start with it.
/// This keeps a hostile 100 kB name from costing its length × the catalog (1.1 s in a debug
/// build, found by `crates/vramscope/tests/fuzz_readers.rs`).
pub fn suggestion<'a>(key: &str, names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    if crate::text::longer_by_more_than(key, longest, 3) {
        return String::new();
    }
    let best = names
        .into_iter()
        .map(|n| (crate::text::edit_distance(key, n), n))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, n)) if d <= 3 || n.starts_with(key) => format!("; did you mean '{n}'?"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hostile 1,000,000-character GPU name (a fuzzed job's `gpu`) is refused without a
    /// hint and without measuring it against the catalog: at 100,000 characters the hint's edit
    /// distances took 1.1 s in a debug build, linear in the name, so this one took about 11 s;
    /// the limit is 100× what the length check takes.
    #[test]
    fn a_huge_unknown_name_is_refused_at_once() {
        let name = "x".repeat(1_000_000);
        let t = std::time::Instant::now();
        let e = find(&name).unwrap_err().to_string();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        assert!(!e.contains("did you mean"));
        // A near miss still gets its hint (one deleted character, distance 1).
        let near = find("a100-80g").unwrap_err().to_string();
        assert!(near.contains("did you mean 'a100-80gb'"), "{near}");
    }

    /// The index finds, for every id and alias in any case and with spaces around, the GPU a
    /// scan of the catalog in file order finds (the lookup before the index); unknown names
    /// are still errors.
    #[test]
    fn the_index_finds_what_a_scan_finds() {
        let scan = |id: &str| {
            let key = id.trim().to_ascii_lowercase();
            catalog()
                .iter()
                .find(|g| g.id == key || g.aliases.iter().any(|a| a.eq_ignore_ascii_case(&key)))
                .map(|g| g.id.as_str())
        };
        let mut names = 0;
        for g in catalog() {
            for name in std::iter::once(&g.id).chain(&g.aliases) {
                for spelled in [
                    name.clone(),
                    name.to_ascii_uppercase(),
                    format!("  {name} "),
                ] {
                    let found = find(&spelled).ok().map(|g| g.id.as_str());
                    assert_eq!(found, scan(&spelled), "{spelled:?}");
                    assert!(found.is_some(), "{spelled:?}");
                    names += 1;
                }
            }
        }
        assert!(names >= 3 * catalog().len());
        assert!(find("h100-80gbx").is_err());
        assert!(find("").is_err());
    }

    #[test]
    fn catalog_is_well_formed() {
        let cat = catalog();
        assert!(cat.len() >= 17, "catalog has {} GPUs", cat.len());
        for g in cat {
            assert!(
                g.memory_bytes > 0 && g.memory_bytes % (1 << 20) == 0,
                "{}",
                g.id
            );
            assert!(!g.source.is_empty(), "{} names no source", g.id);
            let suffix = format!("-{}gb", g.marketing_gb);
            assert!(g.id.ends_with(&suffix), "{} does not end in {suffix}", g.id);
            // A device reports less than or about its marketing capacity, never far more.
            let marketing_gib = g.marketing_gb as f64 * 1e9 / (1u64 << 30) as f64;
            let reported_gib = g.memory_bytes as f64 / (1u64 << 30) as f64;
            assert!(reported_gib <= marketing_gib * 1.08 + 0.5, "{}", g.id);
        }
        for id in [
            "v100-16gb",
            "v100-32gb",
            "a10-24gb",
            "a100-40gb",
            "a100-80gb",
            "l4-24gb",
            "l40s-48gb",
            "h100-80gb",
            "h200-141gb",
            "b200-192gb",
            "mi300x-192gb",
            "t4-16gb",
            "rtx3090-24gb",
            "rtx4090-24gb",
            "rtx5090-32gb",
        ] {
            assert!(find(id).is_ok(), "{id} missing");
        }
    }

    /// Unified-memory entries hold the figure their source cites (`crates/core/data/GPUS.md`), read off
    /// the logs by hand: Metal's recommendedMaxWorkingSetSize 49152.00 MiB (M1 Max 64 GB,
    /// llama.cpp#1870), 73728,00 "MB" = MiB (M2 Max 96 GB, llama.cpp#3213), 103079.22 MB =
    /// 98304 MiB (M4 Max 128 GB); CUDA's total 124610 MiB on a DGX Spark (GB10).
    #[test]
    fn unified_memory_entries_hold_their_cited_figures() {
        for (id, mib) in [
            ("apple-m1max-64gb", 49152u64),
            ("apple-m2max-96gb", 73728),
            ("apple-m4max-128gb", 98304),
            ("gb10-128gb", 124610),
        ] {
            let g = find(id).unwrap();
            assert_eq!(g.memory_bytes, mib << 20, "{id}");
            assert!(g.unified_memory, "{id}");
        }
        // 103079.22 MB (10^6 bytes) as today's llama.cpp prints it is 98304 MiB.
        assert_eq!(
            (find("apple-m4max-128gb").unwrap().memory_bytes as f64 / 1e4).round() / 100.0,
            103079.22
        );
        assert_eq!(find("dgx-spark").unwrap().id, "gb10-128gb");
        assert!(find("apple-m4max-128gb").unwrap().is_metal());
        assert!(!find("gb10-128gb").unwrap().is_metal());
        assert!(!find("a100-80gb").unwrap().unified_memory);
    }

    /// Entries whose figure is the same machine class's reading (`crates/core/data/GPUS.md`):
    /// macOS's working set on a 48 GB Mac is 38654.71 MB (M3 Max log) = 36 GiB = 36864 MiB, on a
    /// 64 GB Mac 51539.61 MB = 48 GiB = 49152 MiB (llama.cpp#9112); Strix Halo's 96 GB carve-out
    /// reads `mem_info_vram_total` 103079215104 (ROCm#5444) and llama.cpp's HIP backend
    /// "Total VRAM: 98304 MiB" (nix-amd-ai#42).
    #[test]
    fn m4_pro_and_strix_halo_hold_their_cited_figures() {
        for (id, mib) in [
            ("apple-m4pro-48gb", 36864u64),
            ("apple-m4pro-64gb", 49152),
            ("strix-halo-128gb", 98304),
        ] {
            let g = find(id).unwrap();
            assert_eq!(g.memory_bytes, mib << 20, "{id}");
            assert!(g.unified_memory, "{id}");
        }
        // 38654.71 MB and 51539.61 MB are bytes / 10^6 rounded to two decimals.
        for (id, mb) in [
            ("apple-m4pro-48gb", 38654.71),
            ("apple-m4pro-64gb", 51539.61),
        ] {
            let b = find(id).unwrap().memory_bytes as f64;
            assert_eq!((b / 1e4).round() / 100.0, mb, "{id}");
        }
        assert_eq!(
            find("strix-halo-128gb").unwrap().memory_bytes,
            103_079_215_104
        );
        assert_eq!(find("ryzen-ai-max-395").unwrap().id, "strix-halo-128gb");
        assert!(find("apple-m4pro-48gb").unwrap().is_metal());
        assert!(!find("strix-halo-128gb").unwrap().is_metal());
    }

    /// Datasheet figures, read off NVIDIA's H100 and A100 datasheets by hand: H100 SXM BF16
    /// 1,979 TFLOPS with sparsity = 989.5 dense, HBM3 3.35 TB/s, NVLink 900 GB/s; A100 80GB
    /// SXM BF16 312 TFLOPS dense, HBM2e 2,039 GB/s, NVLink 600 GB/s, PCIe Gen4 64 GB/s.
    #[test]
    fn perf_entries_hold_datasheet_figures() {
        let h = find("h100-80gb").unwrap().perf.as_ref().unwrap();
        assert_eq!(h.tflops.bf16, Some(1979.0 / 2.0));
        assert_eq!(h.memory_gbps, 3350.0);
        assert_eq!(h.nvlink_gbps, Some(900.0));
        let a = find("a100-80gb").unwrap().perf.as_ref().unwrap();
        assert_eq!(a.tflops.bf16, Some(312.0));
        assert_eq!((a.memory_gbps, a.host_gbps), (2039.0, 64.0));
        assert_eq!(a.tflops.fp8, None, "the A100 has no FP8 units");
        for g in catalog() {
            if let Some(p) = &g.perf {
                // Datasheet orderings every GPU keeps: fp32 ≤ tf32 ≤ bf16 ≤ fp8.
                let t = p.tflops;
                let order = [t.fp32, t.tf32, t.bf16.or(t.fp16), t.fp8];
                let present: Vec<f64> = order.iter().flatten().copied().collect();
                assert!(present.windows(2).all(|w| w[0] <= w[1]), "{}", g.id);
                assert!(p.memory_gbps > 0.0 && p.host_gbps > 0.0, "{}", g.id);
                assert!(!p.source.is_empty(), "{}", g.id);
            }
        }
    }

    #[test]
    fn unknown_gpu_suggests() {
        let e = find("a100-80g").unwrap_err().to_string();
        assert!(e.contains("did you mean 'a100-80gb'"), "{e}");
    }
}

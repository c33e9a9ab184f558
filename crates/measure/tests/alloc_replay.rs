//! The allocator model replayed on real records (`vramscope_measure::alloc_replay`): every
//! segment event must come out as recorded and the peak reserved as measured.
//!
//! Expected figures are read off the records themselves, never off the model: the number of
//! segment events and the largest reserved memory are computed here by summing the trace's own
//! `segment_alloc`/`segment_map` (+) and `segment_free`/`segment_unmap` (−) events from the
//! reserved memory at its start (the dump's segments less the trace's net change); the H200
//! peaks are `torch.cuda.max_memory_reserved()` as the measurement script wrote it
//! (`results-h200-2026-12-04.jsonl`, peaks reset per phase: the process's peak is the largest
//! over all phases of all steps).

use std::path::PathBuf;
use vramscope_core::allocator::AllocatorConfig;
use vramscope_measure::alloc_replay::{replay_device, replay_snapshot, traced_devices};
use vramscope_measure::snapshot::{Action, Snapshot};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/"
    ))
}

fn load(rel: &str) -> Snapshot {
    let path = fixtures().join(rel);
    let bytes =
        std::fs::read(&path).unwrap_or_else(|e| panic!("missing fixture {} ({e})", path.display()));
    vramscope_measure::read_snapshot_bytes(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// (segment events, segment_alloc + segment_map events, largest reserved) of device `d`'s
/// trace, from the record alone.
fn recorded_figures(snap: &Snapshot, d: usize) -> (usize, usize, u64) {
    let trace = &snap.traces[d];
    let delta = |a: Action, size: u64| -> i128 {
        match a {
            Action::SegmentAlloc | Action::SegmentMap => size as i128,
            Action::SegmentFree | Action::SegmentUnmap => -(size as i128),
            _ => 0,
        }
    };
    let at_dump = snap.reserved_at_dump(d as i64) as i128;
    let net: i128 = trace.iter().map(|e| delta(e.action, e.size)).sum();
    let mut now = at_dump - net;
    assert!(
        now >= 0,
        "device {d}: the trace frees more than the dump and trace hold"
    );
    let mut peak = now;
    let (mut events, mut grows) = (0, 0);
    for e in trace {
        let x = delta(e.action, e.size);
        if x != 0 {
            events += 1;
        }
        if x > 0 {
            grows += 1;
        }
        now += x;
        peak = peak.max(now);
    }
    (events, grows, peak as u64)
}

/// The largest `key` (`peak_reserved`, `peak_allocated`) over every phase of every step of
/// spec `id` in the H200 results file.
fn measured_peak(id: &str, key: &str) -> u64 {
    let path = fixtures().join("gpu-h200/results-h200-2026-12-04.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    let line = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["id"] == id && v["status"] == "ok")
        .unwrap_or_else(|| panic!("{id} not in the results file"));
    let steps = line["steps"].as_array().unwrap();
    steps
        .iter()
        .flat_map(|s| s["phases"].as_array().unwrap())
        .map(|p| p[key].as_u64().unwrap())
        .max()
        .unwrap()
}

/// `empty_cache` calls the record shows: runs of `segment_free` entries whose stack has a
/// frame named `empty_cache` (torch/cuda/memory.py).
fn empty_cache_runs(snap: &Snapshot, d: usize) -> usize {
    let mut runs = 0;
    let mut inside = false;
    for e in &snap.traces[d] {
        let by_empty_cache =
            e.action == Action::SegmentFree && snap.stack(e.stack).any(|f| f.name == "empty_cache");
        if by_empty_cache && !inside {
            runs += 1;
        }
        inside = by_empty_cache || (inside && e.action == Action::SegmentFree);
    }
    runs
}

fn assert_exact_on_h200(file: &str, spec: &str, segment_events: usize) {
    let snap = load(&format!("gpu-h200/{file}"));
    let replay = replay_snapshot(&snap).unwrap();
    let r = &replay.result;
    let (events, _, recorded_peak) = recorded_figures(&snap, 0);
    assert_eq!(
        events, segment_events,
        "{spec}: the record's segment events"
    );
    assert_eq!(r.first_mismatch, None, "{spec}");
    assert_eq!(r.segment_events_matched, events, "{spec}");
    assert_eq!(r.segment_events_recorded, events, "{spec}");
    assert_eq!(
        r.address_mismatches, 0,
        "{spec}: every block where the GPU put it"
    );
    assert!(r.complete_history, "{spec}");
    assert_eq!(r.empty_cache_calls, empty_cache_runs(&snap, 0), "{spec}");
    let measured = measured_peak(spec, "peak_reserved");
    assert_eq!(
        recorded_peak, measured,
        "{spec}: the record agrees with the measurement"
    );
    assert_eq!(r.replayed_peak_reserved, measured, "{spec}");
    assert_eq!(r.recorded_peak_reserved, Some(measured), "{spec}");
    assert_eq!(r.alloc_conf, "", "{spec}: default settings");
    // torch.cuda.max_memory_allocated() too: the blocks are the allocator's sizes.
    assert_eq!(
        r.peak_allocated,
        measured_peak(spec, "peak_allocated"),
        "{spec}"
    );
    // The same calls on the model's own addresses, default settings: best-fit ties may break
    // elsewhere, the peak may not go below what is allocated.
    let again = replay.peak_reserved_under(&AllocatorConfig::default());
    assert!(again >= r.peak_allocated, "{spec}: {again}");
}

#[test]
fn gpt2_fp32_h200_snapshot_replays_exactly() {
    // 144 segment_alloc + 1 segment_free (python: collections.Counter of the trace's actions).
    assert_exact_on_h200(
        "snapshot-gpt2-snap-fp32-adamw-eager-b4s512.pickle",
        "gpt2-snap-fp32-adamw-eager-b4s512",
        145,
    );
}

#[test]
fn smollm2_bf16_h200_snapshot_replays_exactly() {
    // 224 segment_alloc + 1 segment_free.
    assert_exact_on_h200(
        "snapshot-smollm2-snap-bf16mix-adamw-sdpa-b4s512.pickle",
        "smollm2-snap-bf16mix-adamw-sdpa-b4s512",
        225,
    );
}

/// Every traced device of every real record: the replay's segment events and peak as the
/// record's own.
#[test]
fn every_real_record_replays_as_recorded() {
    let mut files = Vec::new();
    for dir in ["real-snapshots", "real-snapshots/more"] {
        for e in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if name.ends_with(".pickle") {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    files.sort();
    let (mut replayed, mut events_total, mut mid_run) = (0, 0, 0);
    for file in &files {
        let snap = load(file);
        for d in traced_devices(&snap) {
            let r = replay_device(&snap, d).unwrap().result;
            let (events, _, peak) = recorded_figures(&snap, d);
            let at = format!("{file} device {d}");
            assert_eq!(r.first_mismatch, None, "{at}");
            assert_eq!(r.segment_events_matched, events, "{at}");
            assert_eq!(r.recorded_peak_reserved, Some(peak), "{at}");
            assert_eq!(r.replayed_peak_reserved, peak, "{at}");
            assert!(r.notes.iter().all(|n| !n.contains('\n')), "{at}");
            if !r.complete_history {
                mid_run += 1;
                assert!(r.notes.iter().any(|n| n.contains("mid-run")), "{at}");
            }
            replayed += 1;
            events_total += events;
        }
    }
    // 23 + 16 pickles, of which 7 hold no call (state only, empty, or a lone `snapshot`
    // entry); Constructor-Sun's traces three devices.
    assert!(replayed >= 30, "{replayed} traces replayed");
    assert!(
        events_total > 8000,
        "{events_total} segment events compared"
    );
    assert!(mid_run > 20, "{mid_run}");
}

#[test]
fn expandable_segments_record_with_an_oom_replays_exactly() {
    // Constructor-Sun's run set expandable_segments:True; device 1 ran out of memory once
    // (one `oom` entry) after unmapping its free pages (six `segment_unmap`s).
    let snap = load("real-snapshots/more/Constructor-Sun__code_location__memory_snapshot.pickle");
    let r = replay_device(&snap, 1).unwrap().result;
    let (events, maps, peak) = recorded_figures(&snap, 1);
    assert_eq!((events, maps), (46, 40));
    assert_eq!(r.alloc_conf, "expandable_segments:True");
    assert_eq!(r.segment_events_matched, 46);
    assert_eq!(r.first_mismatch, None);
    assert_eq!((r.recorded_ooms, r.replayed_ooms), (1, 1));
    assert_eq!(r.replayed_peak_reserved, peak);
    assert!(r.complete_history);
}

#[test]
fn what_ifs_run_the_same_calls_under_other_settings() {
    let snap = load("gpu-h200/snapshot-smollm2-snap-bf16mix-adamw-sdpa-b4s512.pickle");
    let replay = replay_snapshot(&snap).unwrap();
    let allocated = replay.result.peak_allocated;
    // The record ran with the defaults: no saving against itself.
    assert_eq!(replay.recorded_config(), &AllocatorConfig::default());
    assert_eq!(replay.saving_under(&AllocatorConfig::default()), 0);
    let baseline = replay.peak_reserved_under(&AllocatorConfig::default());
    for conf in ["expandable_segments:True", "max_split_size_mb:128"] {
        let config = AllocatorConfig::parse(conf).unwrap();
        let peak = replay.peak_reserved_under(&config);
        // Never below what is allocated (blocks of the same requests).
        assert!(peak >= allocated, "{conf}: {peak}");
        let saving = replay.saving_under(&config);
        assert_eq!(saving, baseline as i128 - peak as i128, "{conf}");
        println!("{conf}: {peak} (saving {saving})");
    }
}

mod synthetic {
    //! Hand-written traces: what the replay infers (`empty_cache`, a retry, the settings)
    //! derived in the comments from the allocator's rules.
    use vramscope_measure::alloc_replay::replay_snapshot;
    use vramscope_measure::snapshot::{
        Action, AllocatorSettings, Layout, Segment, Snapshot, TraceEntry,
    };

    const MIB: u64 = 1 << 20;

    fn entry(action: Action, addr: u64, size: u64) -> TraceEntry {
        TraceEntry::bare(action, addr, size)
    }

    fn snapshot(trace: Vec<TraceEntry>, settings: Option<AllocatorSettings>) -> Snapshot {
        Snapshot {
            layout: Layout::Dict,
            protocol: 4,
            frames: Vec::new(),
            stacks: vec![Box::new([])],
            strings: vec![String::new()],
            segments: Vec::new(),
            traces: vec![trace],
            alloc_conf: None,
            allocator_settings: settings,
            from_profiler: false,
            traced: None,
            traced_gpu: None,
            traced_warmup: Vec::new(),
        }
    }

    #[test]
    fn a_segment_free_no_call_would_do_is_an_empty_cache() {
        use Action::*;
        let (a, b) = (0x7f00_0000_0000, 0x7f00_0200_0000);
        // 4 MiB → a 20 MiB segment at a; freed; cached. The record then frees the segment
        // before the next call: no malloc frees with unlimited memory, so empty_cache ran.
        // The next 4 MiB needs a new segment (at b). Reserved peaks at 20 MiB.
        let trace = vec![
            entry(SegmentAlloc, a, 20 * MIB),
            entry(Alloc, a, 4 * MIB),
            entry(FreeRequested, a, 4 * MIB),
            entry(FreeCompleted, a, 4 * MIB),
            entry(SegmentFree, a, 20 * MIB),
            entry(SegmentAlloc, b, 20 * MIB),
            entry(Alloc, b, 4 * MIB),
        ];
        let mut snap = snapshot(trace, None);
        // At the dump: the segment at b.
        snap.segments.push(Segment {
            device: 0,
            address: b,
            total_size: 20 * MIB,
            stream: 0,
            segment_type: Some("large".into()),
            pool_id: None,
            is_expandable: false,
            blocks: Vec::new(),
        });
        let r = replay_snapshot(&snap).unwrap().result;
        assert_eq!(r.first_mismatch, None);
        assert_eq!(r.segment_events_matched, 3);
        assert_eq!(r.empty_cache_calls, 1);
        assert_eq!(r.recorded_peak_reserved, Some(20 * MIB));
        assert_eq!(r.replayed_peak_reserved, 20 * MIB);
        assert_eq!(r.address_mismatches, 0);
        assert!(r.complete_history);
    }

    #[test]
    fn a_segment_free_inside_a_failing_malloc_is_its_retry() {
        use Action::*;
        let (a, b) = (0x7f00_0000_0000, 0x7f00_0400_0000);
        // The OOM at the end says the allocator could hold 40 MiB reserved + 10 MiB free =
        // 50 MiB. 30 MiB cached at a; 40 MiB asked: cudaMalloc fails (70 > 50), the cache is
        // released (segment_free a) and the retry succeeds at b: no empty_cache, one retry.
        // Then 20 MiB: nothing cached, 60 > 50, nothing to release: the OOM, a second retry.
        let mut oom = entry(Oom, 0, 20 * MIB);
        oom.device_free = Some(10 * MIB);
        let trace = vec![
            entry(SegmentAlloc, a, 30 * MIB),
            entry(Alloc, a, 30 * MIB),
            entry(FreeCompleted, a, 30 * MIB),
            entry(SegmentFree, a, 30 * MIB),
            entry(SegmentAlloc, b, 40 * MIB),
            entry(Alloc, b, 40 * MIB),
            oom,
        ];
        let r = replay_snapshot(&snapshot(trace, None)).unwrap().result;
        assert_eq!(r.first_mismatch, None);
        assert_eq!(r.segment_events_matched, 3);
        assert_eq!(r.empty_cache_calls, 0);
        assert_eq!(r.num_alloc_retries, 2);
        assert_eq!((r.recorded_ooms, r.replayed_ooms), (1, 1));
        assert_eq!(r.replayed_peak_reserved, 40 * MIB);
    }

    #[test]
    fn the_typed_settings_are_what_the_replay_runs_with() {
        // max_split_size 512 MiB in bytes; 4 divisions from the 256 MiB interval on.
        let divisions = (0..16)
            .map(|k| (1u64 << k, if k >= 8 { 4 } else { 0 }))
            .collect();
        let settings = AllocatorSettings {
            conf: Some("max_split_size_mb:512,roundup_power2_divisions:[256:4,>:4]".into()),
            expandable_segments: Some(false),
            max_split_size: Some(512 << 20),
            garbage_collection_threshold: Some(0.0),
            roundup_power2_divisions: divisions,
        };
        // 300 MiB + 1 B: with 4 divisions of [256, 512) MiB it rounds up to 320 MiB, and the
        // segment is 320 MiB (a multiple of 2 MiB).
        let trace = vec![
            entry(Action::SegmentAlloc, 0x7f00_0000_0000, 320 * MIB),
            entry(Action::Alloc, 0x7f00_0000_0000, 300 * MIB + 1),
        ];
        let r = replay_snapshot(&snapshot(trace, Some(settings)))
            .unwrap()
            .result;
        assert!(
            r.alloc_conf.starts_with("max_split_size_mb:512,"),
            "{}",
            r.alloc_conf
        );
        assert_eq!(r.first_mismatch, None);
        assert_eq!(r.peak_allocated, 320 * MIB);
    }
}

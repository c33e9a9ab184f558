//! Hostile input: every case must be a clean `Err` (or `Ok` for the fuzz cases), quickly,
//! without a panic or an allocation sized by an unchecked field.

mod common;
use common::shared;

use proptest::prelude::*;
use vramscope_measure::pickle::parse_slice;
use vramscope_measure::{analyze_bytes, read_snapshot_bytes};

fn synthetic(proto: u8) -> Vec<u8> {
    let p = format!(
        "{}/../../../shared/fixtures/synthetic/synthetic_cuda_snapshot_p{proto}.pickle",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(shared(p)).unwrap()
}

#[test]
fn global_and_reduce_are_refused_by_name() {
    // pickle.dumps(os.system) style: GLOBAL 'os system', then REDUCE with an argument tuple.
    let e = analyze_bytes(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00echo\x85R.").unwrap_err();
    assert!(e.to_string().contains("GLOBAL"), "{e}");
    let e = analyze_bytes(b"\x80\x04N\x85\x94R.").unwrap_err();
    assert!(e.to_string().contains("REDUCE"), "{e}");
    for (bytes, name) in [
        (
            &b"\x80\x04\x8c\x02os\x8c\x06system\x93."[..],
            "STACK_GLOBAL",
        ),
        (b"\x80\x04}N\x85b.", "BUILD"),
        (b"\x80\x04N\x85N\x81.", "NEWOBJ"),
        (b"\x80\x04NQ.", "BINPERSID"),
        (b"\x80\x04\x82\x01.", "EXT1"),
    ] {
        let e = parse_slice(bytes).unwrap_err();
        assert!(e.msg.contains(name), "{name}: {e}");
    }
}

#[test]
fn every_truncation_of_a_valid_snapshot_is_an_error() {
    for proto in [2, 4, 5] {
        let full = synthetic(proto);
        assert!(read_snapshot_bytes(&full).is_ok());
        for n in 0..full.len() {
            assert!(
                analyze_bytes(&full[..n]).is_err(),
                "p{proto}: a {n}-byte prefix was accepted"
            );
        }
    }
}

#[test]
fn memo_reference_to_a_missing_slot() {
    let e = parse_slice(b"\x80\x04]\x94h\x05.").unwrap_err();
    assert!(e.msg.contains("missing slot 5"), "{e}");
    let e = parse_slice(b"\x80\x04j\xff\xff\xff\x7f.").unwrap_err();
    assert!(e.msg.contains("missing slot"), "{e}");
}

#[test]
fn huge_length_prefixes_are_checked_before_allocating() {
    // BINUNICODE8 / BINBYTES8 claiming 2^62 bytes, in a 20-byte file.
    for op in [0x8du8, 0x8e, 0x96] {
        let mut b = vec![0x80, 0x04, op];
        b.extend_from_slice(&(1u64 << 62).to_le_bytes());
        b.extend_from_slice(b"abc.");
        let e = parse_slice(&b).unwrap_err();
        assert!(e.msg.contains("4611686018427387904"), "{e}");
    }
    // BINUNICODE claiming 4 GiB − 1, LONG4 claiming 2 GiB − 1.
    assert!(parse_slice(b"\x80\x02X\xff\xff\xff\xffab.").is_err());
    assert!(parse_slice(b"\x80\x02\x8b\xff\xff\xff\x7fab.").is_err());
    // A FRAME longer than the file.
    let mut b = vec![0x80, 0x04, 0x95];
    b.extend_from_slice(&(1u64 << 62).to_le_bytes());
    b.extend_from_slice(b"N.");
    assert!(parse_slice(&b).is_err());
}

#[test]
fn million_deep_nesting_is_refused_without_recursion() {
    let depth = 1_000_000;
    // [[[...]]]: EMPTY_LIST × 10^6, then APPEND × (10^6 − 1), STOP.
    let mut b = vec![0x80, 0x04];
    b.extend(std::iter::repeat_n(b']', depth));
    b.extend(std::iter::repeat_n(b'a', depth - 1));
    b.push(b'.');
    let e = parse_slice(&b).unwrap_err();
    assert!(e.msg.contains("too deep"), "{e}");
    // MARK × 10^6.
    let mut b = vec![0x80, 0x04];
    b.extend(std::iter::repeat_n(b'(', depth));
    b.push(b'.');
    let e = parse_slice(&b).unwrap_err();
    assert!(e.msg.contains("too deep"), "{e}");
    // Within the limits, a deep chain built by memo (a list that contains itself) is fine.
    let p = parse_slice(b"\x80\x04]\x94h\x00a.").unwrap();
    assert_eq!(p.as_seq(p.root).unwrap(), &[p.root]);
}

#[test]
fn wrong_shapes_are_errors_not_panics() {
    for bytes in [
        &b"\x80\x04K\x05."[..],               // an int
        b"\x80\x04}\x94.",                    // an empty dict: not a snapshot
        b"\x80\x04}(\x8c\x08segmentsK\x01u.", // segments is not a list
        b"\x80\x04K\x01K\x02s.",              // SETITEM onto an int
        b"\x80\x04a.",                        // APPEND on an empty stack
        b"\x80\x04(u.",                       // SETITEMS with no dict below the mark
        b"\x80\x04N",                         // no STOP
        b"",                                  // empty
        b"\x80\x07N.",                        // protocol 7
        b"not json at all",
        b"[1, 2, 3]",
        b"{\"traceEvents\": 5}",
        b"[{\"a\": 1}]", // a list of objects that are not events
        b"{\"traceEvents\": [{\"a\": 1}]}",
        b"\x1f\x8b\x08\x00garbage",
    ] {
        assert!(analyze_bytes(bytes).is_err(), "{bytes:?} was accepted");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = analyze_bytes(&bytes);
    }

    #[test]
    fn random_pickle_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut b = vec![0x80, 0x04];
        b.extend(body);
        let _ = analyze_bytes(&b);
    }

    #[test]
    fn mutated_snapshots_never_panic(pos in 0usize..2155, byte in any::<u8>(), proto in 0usize..3) {
        let mut b = synthetic([2, 4, 5][proto]);
        let n = b.len();
        b[pos % n] = byte;
        let _ = analyze_bytes(&b);
    }
}

/// A Chrome trace of memory events: (bytes, addr, total allocated, ts) each, and one op.
fn chrome_trace(events: &[(i64, u64, u64, u32)]) -> String {
    let mut out = String::from(
        "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"Optimizer.step#AdamW.step\", \
         \"tid\": 1, \"ts\": 50, \"dur\": 20}",
    );
    for &(bytes, addr, total, ts) in events {
        out.push_str(&format!(
            ", {{\"ph\": \"i\", \"name\": \"[memory]\", \"tid\": 1, \"ts\": {ts}, \"args\": \
             {{\"Device Type\": 1, \"Device Id\": 0, \"Addr\": {addr}, \"Bytes\": {bytes}, \
             \"Total Allocated\": {total}, \"Total Reserved\": {}}}}}",
            total * 2
        ));
    }
    out.push_str("], \"deviceProperties\": [{\"id\": 0}]}");
    out
}

#[test]
fn chrome_trace_before_recording_is_the_total_beyond_the_events() {
    // 1000 B live from before profiling; events: +100 at a (total 1100), +50 at b (1150),
    // −100 at a (1050). Peak 1150 = 1000 before + 150 traced; reserved doubles the total.
    let t = chrome_trace(&[(100, 1, 1100, 10), (50, 2, 1150, 20), (-100, 1, 1050, 30)]);
    let a = analyze_bytes(t.as_bytes()).unwrap();
    assert_eq!(a.per_gpu.peaks.peak_allocated, Some(1150));
    assert_eq!(a.per_gpu.components.before_recording, 1000);
    assert_eq!(a.per_gpu.peaks.peak_reserved, Some(2300));
    // The same trace gzipped, and as a bare event list, reads the same.
    let start = "{\"traceEvents\": [".len();
    let list = format!("[{}]", &t[start..t.find("], \"device").unwrap()]);
    let b = analyze_bytes(list.as_bytes()).unwrap();
    assert_eq!(b.per_gpu.peaks.peak_allocated, Some(1150));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, t.as_bytes()).unwrap();
    let c = analyze_bytes(&gz.finish().unwrap()).unwrap();
    assert_eq!(c.per_gpu.components.before_recording, 1000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Any sequence of memory events reads without a panic, and the components at the peak
    /// add up to the peak.
    #[test]
    fn chrome_traces_never_panic_and_add_up(
        events in proptest::collection::vec(
            (-1000i64..1000, 0u64..8, 0u64..100_000, 0u32..100), 0..40)
    ) {
        let t = chrome_trace(&events);
        let a = analyze_bytes(t.as_bytes()).unwrap();
        let c = &a.per_gpu.components;
        let sum = c.base.allocated() + c.unattributed + c.before_recording;
        prop_assert_eq!(Some(sum), a.per_gpu.peaks.peak_allocated.or(Some(0)));
    }

    #[test]
    fn truncated_chrome_traces_are_errors(cut in 0usize..400) {
        let t = chrome_trace(&[(100, 1, 1100, 10), (-100, 1, 1000, 20)]);
        let cut = cut.min(t.len() - 1);
        prop_assert!(analyze_bytes(&t.as_bytes()[..cut]).is_err());
    }
}

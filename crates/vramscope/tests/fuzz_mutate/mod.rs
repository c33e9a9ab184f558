//! The fuzz targets' mutator: a small deterministic xorshift stream and the mutations it
//! draws (byte flips, truncation, splices of another seed, duplicated spans, huge numbers,
//! deep nesting, control and invalid UTF-8 bytes, JSON values replaced in place).

/// xorshift64* (Marsaglia 2003, Vigna's `*` output): a reproducible stream, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Numbers that break arithmetic: past u64, negative, huge floats, not numbers.
const HUGE: [&str; 7] = [
    "18446744073709551616",
    "99999999999999999999999999",
    "-1",
    "1e308",
    "-9223372036854775809",
    "NaN",
    "4294967296",
];

/// Bytes a terminal or a line-based reader chokes on.
const HOSTILE: [&[u8]; 4] = [
    b"\x1b]0;x\x07\x1b[2J",
    b"\n\r\n",
    b"\xff\xfe\xc3",
    b"\0\0\0",
];

/// A random span of `s`, at most `max` bytes.
fn span(rng: &mut Rng, s: &[u8], max: usize) -> (usize, usize) {
    let a = rng.below(s.len() + 1);
    let b = (a + 1 + rng.below(max)).min(s.len());
    (a, b.max(a))
}

/// One mutation of `s`; `others` are the reader's other seeds (for splicing).
fn mutate_once(rng: &mut Rng, s: &mut Vec<u8>, others: &[Vec<u8>]) {
    let at = rng.below(s.len() + 1);
    match rng.below(11) {
        9 | 10 if json_mutate(rng, s) => {}
        0 if !s.is_empty() => {
            let i = rng.below(s.len());
            s[i] ^= 1 << rng.below(8);
        }
        1 if !s.is_empty() => {
            let i = rng.below(s.len());
            s[i] = rng.next() as u8;
        }
        2 => s.truncate(at),
        3 => {
            let o = &others[rng.below(others.len())];
            let (a, b) = span(rng, o, 4096);
            s.splice(at..at, o[a..b].iter().copied());
        }
        4 => {
            let (a, b) = span(rng, s, 2048);
            let dup = s[a..b].repeat(1 + rng.below(4));
            s.splice(b..b, dup);
        }
        5 => huge_number(rng, s),
        6 => {
            let n = [8, 200, 5000][rng.below(3)];
            let (open, close) = [("[", "]"), ("{\"a\":", "}"), ("- ", "")][rng.below(3)];
            let deep = [open.repeat(n), close.repeat(n)].concat();
            s.splice(at..at, deep.into_bytes());
        }
        7 => {
            s.splice(at..at, HOSTILE[rng.below(HOSTILE.len())].iter().copied());
        }
        _ => {
            let (a, b) = span(rng, s, 512);
            s.drain(a..b);
        }
    }
}

/// A value that breaks a reader's assumptions about a field.
fn hostile_value(rng: &mut Rng) -> serde_json::Value {
    use serde_json::json;
    let deep = |n: usize| serde_json::from_str(&["[".repeat(n), "]".repeat(n)].concat()).unwrap();
    match rng.below(12) {
        0 => json!(u64::MAX),
        1 => json!(-1),
        2 => json!(0),
        3 => json!(1e308),
        4 => json!(-0.5),
        5 => json!("\u{1b}]0;x\u{7}\u{1b}[2J\nsecond line"),
        6 => json!(null),
        7 => json!(true),
        8 => json!([]),
        9 => json!({}),
        10 => json!("x".repeat(100_000)),
        _ => deep(100),
    }
}

/// Walks to a random node of `v` and replaces it (or, in an object, drops or duplicates a key).
fn poke(rng: &mut Rng, v: &mut serde_json::Value, depth: usize) {
    use serde_json::Value;
    match v {
        Value::Object(m) if !m.is_empty() && depth < 12 && rng.below(4) != 0 => {
            let key = m.keys().nth(rng.below(m.len())).unwrap().clone();
            match rng.below(8) {
                0 => drop(m.remove(&key)),
                1 => {
                    let copy = m[&key].clone();
                    m.insert(format!("{key}\u{1b}"), copy);
                }
                _ => poke(rng, m.get_mut(&key).unwrap(), depth + 1),
            }
        }
        Value::Array(a) if !a.is_empty() && depth < 12 && rng.below(4) != 0 => {
            let i = rng.below(a.len());
            if rng.below(6) == 0 {
                // Up to 1000 copies, about 1 MiB at most.
                let copy = a[i].clone();
                let size = serde_json::to_vec(&copy).map_or(1, |v| v.len().max(1));
                a.extend(std::iter::repeat_n(copy, (1 << 20) / size).take(1000));
            } else {
                poke(rng, &mut a[i], depth + 1);
            }
        }
        _ => *v = hostile_value(rng),
    }
}

/// When `s` is JSON, replaces one of its values with a hostile one (a structure-aware
/// mutation that gets past the parser to the reader's own checks); false when it is not JSON.
fn json_mutate(rng: &mut Rng, s: &mut Vec<u8>) -> bool {
    let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(s) else {
        return false;
    };
    poke(rng, &mut v, 0);
    *s = serde_json::to_vec_pretty(&v).unwrap();
    true
}

/// Replaces a run of ASCII digits with a huge or negative number; in binary input with no
/// digits nearby, writes all-ones over eight bytes (a count or an offset of u64::MAX).
fn huge_number(rng: &mut Rng, s: &mut Vec<u8>) {
    let start = rng.below(s.len() + 1);
    if let Some(i) = s[start..]
        .iter()
        .position(u8::is_ascii_digit)
        .map(|i| i + start)
    {
        let end = s[i..]
            .iter()
            .position(|c| !c.is_ascii_digit())
            .map_or(s.len(), |n| i + n);
        let n = HUGE[rng.below(HUGE.len())].as_bytes();
        s.splice(i..end, n.iter().copied());
    } else if s.len() >= 8 {
        let i = rng.below(s.len() - 7);
        s[i..i + 8].fill(0xff);
    }
}

/// Mutants stop growing here: the readers' byte limits (64 MiB and up) have their own
/// hand-built tests; the fuzz runs look for what a file of ordinary size does.
const MAX_MUTANT: usize = 8 << 20;

/// A mutant of one of `seeds`: one to four mutations.
pub fn mutant(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut s = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let before = s.clone();
        mutate_once(rng, &mut s, seeds);
        if s.len() > MAX_MUTANT {
            s = before;
        }
    }
    s
}

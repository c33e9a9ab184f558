//! Small text helpers for friendly errors.

/// Levenshtein distance between two short strings (for "did you mean").
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Whether `key` has more than `longest + slack` characters (counting no further than that),
/// so that its edit distance to every name of at most `longest` characters exceeds `slack`:
/// each insertion or deletion changes the length by one.
pub fn longer_by_more_than(key: &str, longest: usize, slack: usize) -> bool {
    key.chars().nth(longest + slack).is_some()
}

/// Bytes in binary units with three significant figures (`14.96 GiB`, `2.67 MiB`, `512 B`):
/// the adaptive unit of every human message (JSON carries bytes).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    let digits = if v >= 100.0 { 1 } else { 2 };
    format!("{v:.digits$} {}", UNITS[u])
}

/// `8030261248` → `8,030,261,248`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn longer_by_more_than_counts_characters() {
        // Longest name 1 plus slack 2: 3 characters are within, a 4th is past.
        assert!(!super::longer_by_more_than("abc", 1, 2));
        assert!(super::longer_by_more_than("abcd", 1, 2));
        // Characters, not bytes: 'é' is two bytes, one character.
        assert!(!super::longer_by_more_than("ééé", 1, 2));
    }

    #[test]
    fn adaptive_units() {
        assert_eq!(super::bytes(512), "512 B");
        // 1536 / 1024 = 1.5
        assert_eq!(super::bytes(1536), "1.50 KiB");
        // 295,501,824 / 2^20 = 281.81...
        assert_eq!(super::bytes(295_501_824), "281.8 MiB");
    }

    #[test]
    fn distances() {
        assert_eq!(super::edit_distance("kitten", "sitting"), 3);
        assert_eq!(super::edit_distance("", "abc"), 3);
        assert_eq!(super::edit_distance("bf16", "bf16"), 0);
    }
}

//! Small exact readers for the figures in log lines: a decimal with its unit to bytes (no
//! floating point: `14.9889 GiB` is 14.9889 × 2^30 rounded to the nearest byte), counts with
//! thousands separators, and "the value after this key".

/// Bytes of `num` `unit`. `gb_is_gib`: read a `GB`/`MB` label as 2^30/2^20 (vLLM's habit);
/// otherwise `GB` is 10^9. `None` for a malformed number, an unknown unit or an overflow.
pub fn parse_size(num: &str, unit: &str, gb_is_gib: bool) -> Option<u64> {
    let scale: u128 = match unit {
        "B" | "bytes" | "byte" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" if gb_is_gib => 1 << 10,
        "MB" if gb_is_gib => 1 << 20,
        "GB" if gb_is_gib => 1 << 30,
        "TB" if gb_is_gib => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || int.len() + frac.len() > 30
    {
        return None;
    }
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().ok()?;
    let denom = 10u128.checked_pow(frac.len() as u32)?;
    let bytes = mantissa.checked_mul(scale)?.checked_add(denom / 2)? / denom;
    u64::try_from(bytes).ok()
}

/// The rest of `line` after the first `key`, with separators (`=`, `:`, `(`, quotes, blanks)
/// skipped.
pub fn after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(key)?;
    Some(line[i + key.len()..].trim_start_matches([' ', '\t', '=', ':', '(', '"', '\'']))
}

/// Splits a leading number (digits, `.`, `,` thousands separators removed) and the unit word
/// that follows it, attached or after blanks.
pub fn number_and_unit(s: &str) -> Option<(String, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(s.len());
    let raw = s[..end].trim_end_matches(',');
    // Thousands separators must group by three (`158,656`); a cut number (`158,6`) is refused.
    let mut groups = raw.split('.').next().unwrap_or("").split(',');
    let first_ok = groups
        .next()
        .is_some_and(|g| !g.is_empty() || !raw.contains(','));
    if !first_ok || groups.any(|g| g.len() != 3) {
        return None;
    }
    let num: String = raw.chars().filter(|&c| c != ',').collect();
    if num.is_empty() || num == "." {
        return None;
    }
    let rest = s[end..].trim_start();
    let uend = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    Some((num.trim_end_matches('.').to_string(), &rest[..uend]))
}

/// Bytes stated right after `key` (`key 14.96GiB`, `key = 5434.38 MiB`, `key (23.58GiB)`).
pub fn size_after(line: &str, key: &str, gb_is_gib: bool) -> Option<u64> {
    let (num, unit) = number_and_unit(after(line, key)?)?;
    parse_size(&num, unit, gb_is_gib)
}

/// A count right after `key` (`# GPU blocks: 10039`, `GPU KV cache size: 158,656 tokens`).
pub fn count_after(line: &str, key: &str) -> Option<u64> {
    let (num, _) = number_and_unit(after(line, key)?)?;
    num.parse().ok()
}

/// A decimal right after `key` (`gpu_memory_utilization (0.90)`, `: 4.84x`).
pub fn decimal_after(line: &str, key: &str) -> Option<f64> {
    let (num, _) = number_and_unit(after(line, key)?)?;
    let v: f64 = num.parse().ok()?;
    v.is_finite().then_some(v)
}

/// The token (up to a blank, `,` or `)`) right after `key`, quotes stripped.
pub fn word_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = after(line, key)?;
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ',' || c == ')' || c == '\'' || c == '"')
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_exact() {
        // 5434.38 MiB = 543438 × 1,048,576 / 100 = 5,698,360,442.88 → 5,698,360,443 bytes.
        assert_eq!(parse_size("5434.38", "MiB", false), Some(5_698_360_443));
        // 6.1138 GB in vLLM's sense = 61138 × 1,073,741,824 / 10^4 = 6,564,642,763.57.
        assert_eq!(parse_size("6.1138", "GB", true), Some(6_564_642_764));
        assert_eq!(parse_size("0", "B", false), Some(0));
        assert_eq!(parse_size("1", "GB", false), Some(1_000_000_000));
        assert_eq!(
            parse_size("17179869184.00", "GiB", false),
            None,
            "2^64 overflows"
        );
        assert_eq!(parse_size("nan", "MiB", false), None);
        assert_eq!(parse_size("-64.00", "MiB", false), None);
        assert_eq!(parse_size("1.5", "parsecs", false), None);
    }

    #[test]
    fn keyed_values() {
        // 79.22 GiB = 7922 × 1,073,741,824 / 100 = 85,061,827,297.28.
        let l = "INFO worker.py:243] total_gpu_memory     79.22GiB";
        assert_eq!(
            size_after(l, "total_gpu_memory", true),
            Some(85_061_827_297)
        );
        assert_eq!(
            count_after("GPU KV cache size: 158,656 tokens", "GPU KV cache size"),
            Some(158_656)
        );
        assert_eq!(
            decimal_after(
                "gpu_memory_utilization (0.99) = 23.35GiB",
                "gpu_memory_utilization"
            ),
            Some(0.99)
        );
        assert_eq!(
            word_after("type_k = 'q4_0', type_v", "type_k"),
            Some("q4_0")
        );
        assert_eq!(
            count_after("GPU KV cache size: 158,6", "GPU KV cache size"),
            None
        );
        assert_eq!(count_after("blocks: 10039, # CPU", "blocks"), Some(10_039));
    }
}

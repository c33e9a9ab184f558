//! The caching allocator's settings: `PYTORCH_CUDA_ALLOC_CONF` / `PYTORCH_ALLOC_CONF` as PyTorch
//! parses them (`AcceleratorAllocatorConfig::parseArgs` in `c10/core/AllocatorConfig.cpp`, the
//! CUDA-only keys in `CUDAAllocatorConfig::parseArgs`, `c10/cuda/CUDAAllocatorConfig.cpp`).
//!
//! Only the keys that change the native allocator's block and segment decisions are kept; the
//! others the variable allows (`backend`, `release_lock_on_cudamalloc`, `pinned_*`,
//! `graph_capture_record_stream_reuse`, ...) are accepted and ignored, as they do not change
//! what `max_memory_reserved` counts.

use serde::{Deserialize, Serialize};

const MIB: u64 = 1024 * 1024;

/// `kRoundUpPowerOfTwoIntervals` (`c10/core/AllocatorConfig.cpp`): the division table has one
/// entry per power-of-two interval from 1 MiB (`kRoundUpPowerOfTwoStart`) to 64 GiB
/// (`kRoundUpPowerOfTwoEnd`); sizes outside clamp to the first or last entry.
pub const ROUNDUP_INTERVALS: usize = 16;

/// `kLargeBuffer / kMB` (`parseMaxSplitSize`): `max_split_size_mb` and
/// `max_non_split_rounding_mb` below 20 are rejected.
const MIN_SPLIT_SIZE_MB: u64 = 20;

/// The allocator settings that change its decisions. `Default` is PyTorch's default (no
/// variable set): nothing expandable, every block splittable, no garbage collection, no
/// power-of-two rounding, oversize blocks rounded up by at most 20 MiB.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocatorConfig {
    /// `expandable_segments:True`: one growing virtual segment per (stream, pool).
    #[serde(default)]
    pub expandable_segments: bool,
    /// `max_split_size_mb`: blocks at least this large are never split ("oversize"). `None`:
    /// unlimited (`SIZE_MAX`), PyTorch's default. At least 20 (`parseMaxSplitSize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_split_size_mb: Option<u64>,
    /// `garbage_collection_threshold` in (0, 1): before a cudaMalloc, cached blocks are freed
    /// once reserved exceeds this fraction of the allowed memory. `None`: off (PyTorch's 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage_collection_threshold: Option<f64>,
    /// `roundup_power2_divisions`: requests above 512 B rounded up to a division of their
    /// power-of-two interval. `None`: off (every entry 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roundup_power2_divisions: Option<RoundupDivisions>,
    /// `max_non_split_rounding_mb`: how much larger than the request an oversize cached block
    /// may be and still serve it unsplit. `None`: 20 MiB (`kLargeBuffer`), PyTorch's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_non_split_rounding_mb: Option<u64>,
}

/// `roundup_power2_divisions` as the variable writes it: one value for every interval, or a list
/// of `interval_mb:divisions` pairs (`>` for every interval after the last one named).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RoundupDivisions {
    /// `roundup_power2_divisions:4`: 4 divisions in every interval.
    All(u64),
    /// `roundup_power2_divisions:[256:1,512:2,>:8]`, in JSON `[[256, 1], [512, 2], [">", 8]]`.
    Intervals(Vec<(IntervalBound, u64)>),
}

/// The left side of one `interval:divisions` pair: a power of two in MiB, or `>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntervalBound {
    /// The interval starting at this many MiB (a power of two).
    Mb(u64),
    /// `>`: every interval after the last one named.
    Rest(Rest),
}

/// The `>` marker of `IntervalBound::Rest` (serialized as the string `">"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rest {
    /// `>`
    #[serde(rename = ">")]
    Rest,
}

impl AllocatorConfig {
    /// Parses the variable's syntax (`key:value,key:[a:b,c:d]`, spaces ignored), as
    /// `AcceleratorAllocatorConfig::parseArgs` and `CUDAAllocatorConfig::parseArgs` do: keys
    /// the model does not use are skipped with their value; a bad value is an error of one line.
    pub fn parse(conf: &str) -> Result<Self, String> {
        let tokens = tokenize(conf);
        let mut config = AllocatorConfig::default();
        let mut i = 0;
        while i < tokens.len() {
            let key = tokens[i].as_str();
            expect(&tokens, i + 1, ":", key)?;
            i += 2;
            let value = tokens
                .get(i)
                .ok_or_else(|| format!("PYTORCH_CUDA_ALLOC_CONF: {key} has no value"))?;
            match key {
                "expandable_segments" => config.expandable_segments = parse_bool(key, value)?,
                "max_split_size_mb" => config.max_split_size_mb = Some(parse_mb(key, value)?),
                "max_non_split_rounding_mb" => {
                    config.max_non_split_rounding_mb = Some(parse_mb(key, value)?)
                }
                "garbage_collection_threshold" => {
                    config.garbage_collection_threshold = Some(parse_threshold(value)?)
                }
                "roundup_power2_divisions" => {
                    let (divisions, end) = parse_divisions(&tokens, i)?;
                    config.roundup_power2_divisions = Some(divisions);
                    i = end;
                }
                _ => i = skip_value(&tokens, i, key)?,
            }
            i += 1;
            if i < tokens.len() {
                expect(&tokens, i, ",", key)?;
                i += 1;
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// The settings back in the variable's syntax, keys in a fixed order; `""` for the defaults.
    pub fn to_conf_string(&self) -> String {
        let mut parts = Vec::new();
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_string());
        }
        if let Some(mb) = self.max_split_size_mb {
            parts.push(format!("max_split_size_mb:{mb}"));
        }
        if let Some(mb) = self.max_non_split_rounding_mb {
            parts.push(format!("max_non_split_rounding_mb:{mb}"));
        }
        if let Some(t) = self.garbage_collection_threshold {
            parts.push(format!("garbage_collection_threshold:{t}"));
        }
        match &self.roundup_power2_divisions {
            None => {}
            Some(RoundupDivisions::All(n)) => parts.push(format!("roundup_power2_divisions:{n}")),
            Some(RoundupDivisions::Intervals(list)) => {
                let items: Vec<String> = list
                    .iter()
                    .map(|(bound, n)| match bound {
                        IntervalBound::Mb(mb) => format!("{mb}:{n}"),
                        IntervalBound::Rest(_) => format!(">:{n}"),
                    })
                    .collect();
                parts.push(format!("roundup_power2_divisions:[{}]", items.join(",")));
            }
        }
        parts.join(",")
    }

    /// Checks the values as PyTorch's parser does (a config built in code or read from JSON
    /// goes through the same checks as one parsed from the variable).
    pub fn validate(&self) -> Result<(), String> {
        for (key, mb) in [
            ("max_split_size_mb", self.max_split_size_mb),
            ("max_non_split_rounding_mb", self.max_non_split_rounding_mb),
        ] {
            if let Some(mb) = mb {
                if mb < MIN_SPLIT_SIZE_MB {
                    return Err(format!(
                        "allocator: {key} is {mb}, must be >= {MIN_SPLIT_SIZE_MB}"
                    ));
                }
            }
        }
        if let Some(t) = self.garbage_collection_threshold {
            if !(t > 0.0 && t < 1.0) {
                return Err(format!(
                    "allocator: garbage_collection_threshold is {t}, must be in (0.0, 1.0)"
                ));
            }
        }
        match &self.roundup_power2_divisions {
            None => Ok(()),
            Some(RoundupDivisions::All(n)) if !n.is_power_of_two() => Err(format!(
                "allocator: roundup_power2_divisions is {n}, must be a power of 2"
            )),
            Some(RoundupDivisions::All(_)) => Ok(()),
            Some(RoundupDivisions::Intervals(list)) => validate_intervals(list),
        }
    }

    /// `max_split_size` in bytes (`SIZE_MAX` when unset, PyTorch's default).
    pub fn max_split_size(&self) -> u64 {
        self.max_split_size_mb
            .map_or(u64::MAX, |mb| mb.min(u64::MAX / MIB) * MIB)
    }

    /// `max_non_split_rounding_size` in bytes (`kLargeBuffer`, 20 MiB, when unset).
    pub fn max_non_split_rounding_size(&self) -> u64 {
        self.max_non_split_rounding_mb
            .map_or(20 * MIB, |mb| mb.min(u64::MAX / MIB) * MIB)
    }

    /// The division per interval, as `parseRoundUpPower2Divisions` fills
    /// `roundup_power2_divisions_`: a single value fills all 16; in a list, the first pair also
    /// fills every interval below it, each pair sets its own interval (index log2(MiB), clamped
    /// to 0..16) and `>` fills every interval after the last one named.
    pub fn divisions_table(&self) -> [u64; ROUNDUP_INTERVALS] {
        let mut table = [0u64; ROUNDUP_INTERVALS];
        match &self.roundup_power2_divisions {
            None => {}
            Some(RoundupDivisions::All(n)) => table = [*n; ROUNDUP_INTERVALS],
            Some(RoundupDivisions::Intervals(list)) => {
                let mut last_index = 0usize;
                let mut first = true;
                for &(bound, n) in list {
                    match bound {
                        IntervalBound::Rest(_) => {
                            for entry in table.iter_mut().skip(last_index + 1) {
                                *entry = n;
                            }
                        }
                        IntervalBound::Mb(mb) => {
                            let index = (mb.max(1).ilog2() as usize).min(ROUNDUP_INTERVALS - 1);
                            if first {
                                table[..index].fill(n);
                                first = false;
                            }
                            table[index] = n;
                            last_index = index;
                        }
                    }
                }
            }
        }
        table
    }
}

fn validate_intervals(list: &[(IntervalBound, u64)]) -> Result<(), String> {
    for &(bound, n) in list {
        if n != 0 && !n.is_power_of_two() {
            return Err(format!(
                "allocator: roundup_power2_divisions has {n} divisions, must be 0 or a power of 2"
            ));
        }
        if let IntervalBound::Mb(mb) = bound {
            if !mb.is_power_of_two() {
                return Err(format!(
                    "allocator: roundup_power2_divisions interval {mb} MiB is not a power of 2"
                ));
            }
        }
    }
    Ok(())
}

/// `ConfigTokenizer`: `,` `:` `[` `]` are tokens of their own, whitespace is dropped, the rest
/// forms words.
fn tokenize(conf: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    for ch in conf.chars() {
        if matches!(ch, ',' | ':' | '[' | ']') {
            if !word.is_empty() {
                tokens.push(std::mem::take(&mut word));
            }
            tokens.push(ch.to_string());
        } else if !ch.is_whitespace() {
            word.push(ch);
        }
    }
    if !word.is_empty() {
        tokens.push(word);
    }
    tokens
}

fn expect(tokens: &[String], i: usize, token: &str, key: &str) -> Result<(), String> {
    match tokens.get(i) {
        Some(t) if t == token => Ok(()),
        Some(t) => Err(format!(
            "PYTORCH_CUDA_ALLOC_CONF: expected '{token}' after {key}, found '{t}'"
        )),
        None => Err(format!(
            "PYTORCH_CUDA_ALLOC_CONF: expected '{token}' after {key}, found the end"
        )),
    }
}

/// `ConfigTokenizer::skipKey`: a single value, or a bracketed list up to its `]`. Returns the
/// index of the value's last token.
fn skip_value(tokens: &[String], i: usize, key: &str) -> Result<usize, String> {
    if tokens[i] != "[" {
        return Ok(i);
    }
    tokens[i..]
        .iter()
        .position(|t| t == "]")
        .map(|offset| i + offset)
        .ok_or_else(|| format!("PYTORCH_CUDA_ALLOC_CONF: {key}'s list has no closing ']'"))
}

/// `ConfigTokenizer::toBool`: exactly `True` or `False`.
fn parse_bool(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "True" => Ok(true),
        "False" => Ok(false),
        other => Err(format!(
            "PYTORCH_CUDA_ALLOC_CONF: {key} must be True or False, not '{other}'"
        )),
    }
}

fn parse_u64(key: &str, value: &str) -> Result<u64, String> {
    value.parse::<u64>().map_err(|_| {
        format!("PYTORCH_CUDA_ALLOC_CONF: {key} must be a whole number, not '{value}'")
    })
}

fn parse_mb(key: &str, value: &str) -> Result<u64, String> {
    let mb = parse_u64(key, value)?;
    if mb < MIN_SPLIT_SIZE_MB {
        return Err(format!(
            "PYTORCH_CUDA_ALLOC_CONF: {key} is {mb}, must be >= {MIN_SPLIT_SIZE_MB}"
        ));
    }
    Ok(mb)
}

fn parse_threshold(value: &str) -> Result<f64, String> {
    let t = value.parse::<f64>().map_err(|_| {
        format!(
            "PYTORCH_CUDA_ALLOC_CONF: garbage_collection_threshold must be a number, not '{value}'"
        )
    })?;
    if !(t > 0.0 && t < 1.0) {
        return Err(format!(
            "PYTORCH_CUDA_ALLOC_CONF: garbage_collection_threshold is {value}, must be in (0.0, 1.0)"
        ));
    }
    Ok(t)
}

/// `parseRoundUpPower2Divisions`: a single number, or `[interval:divisions, ..., >:divisions]`.
/// `i` is the value's first token; returns the divisions and the index of its last token.
fn parse_divisions(tokens: &[String], mut i: usize) -> Result<(RoundupDivisions, usize), String> {
    const KEY: &str = "roundup_power2_divisions";
    if tokens[i] != "[" {
        return Ok((RoundupDivisions::All(parse_u64(KEY, &tokens[i])?), i));
    }
    let mut list = Vec::new();
    loop {
        i += 1;
        let bound = tokens
            .get(i)
            .ok_or_else(|| format!("PYTORCH_CUDA_ALLOC_CONF: {KEY}'s list has no closing ']'"))?;
        if bound == "]" {
            break;
        }
        let bound = if bound == ">" {
            IntervalBound::Rest(Rest::Rest)
        } else {
            IntervalBound::Mb(parse_u64(KEY, bound)?)
        };
        expect(tokens, i + 1, ":", KEY)?;
        let value = tokens
            .get(i + 2)
            .ok_or_else(|| format!("PYTORCH_CUDA_ALLOC_CONF: {KEY}'s list ends early"))?;
        list.push((bound, parse_u64(KEY, value)?));
        i += 2;
        if tokens.get(i + 1).is_some_and(|t| t == ",") {
            i += 1;
        }
    }
    Ok((RoundupDivisions::Intervals(list), i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_pytorch_default() {
        let c = AllocatorConfig::parse("").unwrap();
        assert_eq!(c, AllocatorConfig::default());
        assert_eq!(c.max_split_size(), u64::MAX);
        assert_eq!(c.max_non_split_rounding_size(), 20 * MIB);
        assert_eq!(c.divisions_table(), [0; 16]);
        assert_eq!(c.to_conf_string(), "");
    }

    #[test]
    fn parses_the_briefs_example() {
        let c = AllocatorConfig::parse(
            "expandable_segments:True, max_split_size_mb:512,garbage_collection_threshold:0.6,\
             roundup_power2_divisions:[256:1,512:2,>:8]",
        )
        .unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size_mb, Some(512));
        assert_eq!(c.max_split_size(), 512 * MIB);
        assert_eq!(c.garbage_collection_threshold, Some(0.6));
        // 256 MiB → index log2(256) = 8; being first it also fills 0..8 with 1. 512 → index 9
        // gets 2; `>` fills 10..16 with 8.
        let mut want = [1u64; 16];
        want[9] = 2;
        want[10..].fill(8);
        assert_eq!(c.divisions_table(), want);
        let back = AllocatorConfig::parse(&c.to_conf_string()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn single_division_value_fills_every_interval() {
        let c = AllocatorConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.divisions_table(), [4; 16]);
        assert_eq!(c.to_conf_string(), "roundup_power2_divisions:4");
    }

    #[test]
    fn unknown_and_cuda_only_keys_are_skipped() {
        let c = AllocatorConfig::parse(
            "backend:native,pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True,\
             pinned_num_register_threads:8,some_list:[1,2],max_split_size_mb:20",
        )
        .unwrap();
        assert_eq!(c.max_split_size_mb, Some(20));
        assert!(!c.expandable_segments);
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        for bad in [
            "expandable_segments:true",
            "expandable_segments",
            "max_split_size_mb:19",
            "max_split_size_mb:abc",
            "garbage_collection_threshold:1.0",
            "garbage_collection_threshold:0",
            "roundup_power2_divisions:3",
            "roundup_power2_divisions:[300:2]",
            "roundup_power2_divisions:[256:3]",
            "roundup_power2_divisions:[256:2",
            "max_split_size_mb:512 expandable_segments:True",
            "a:[1,2",
        ] {
            let err = AllocatorConfig::parse(bad).unwrap_err();
            assert!(!err.contains('\n'), "{bad}: {err}");
        }
    }

    #[test]
    fn json_field_names_and_shapes() {
        let c: AllocatorConfig = serde_json::from_str(
            r#"{"expandable_segments": true, "max_split_size_mb": 256,
                "roundup_power2_divisions": [[256, 1], [">", 4]]}"#,
        )
        .unwrap();
        assert!(c.expandable_segments);
        assert_eq!(c.max_split_size_mb, Some(256));
        assert_eq!(
            c.roundup_power2_divisions,
            Some(RoundupDivisions::Intervals(vec![
                (IntervalBound::Mb(256), 1),
                (IntervalBound::Rest(Rest::Rest), 4)
            ]))
        );
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"expandable_segments":true,"max_split_size_mb":256,"roundup_power2_divisions":[[256,1],[">",4]]}"#
        );
        let n: AllocatorConfig =
            serde_json::from_str(r#"{"roundup_power2_divisions": 8}"#).unwrap();
        assert_eq!(n.roundup_power2_divisions, Some(RoundupDivisions::All(8)));
        let d: AllocatorConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(d, AllocatorConfig::default());
        assert!(serde_json::from_str::<AllocatorConfig>(r#"{"expandable": true}"#).is_err());
    }

    #[test]
    fn validate_checks_values_built_in_code() {
        let c = AllocatorConfig {
            garbage_collection_threshold: Some(1.5),
            ..AllocatorConfig::default()
        };
        assert!(c.validate().is_err());
        let c = AllocatorConfig {
            max_split_size_mb: Some(4),
            ..AllocatorConfig::default()
        };
        assert!(c.validate().is_err());
    }
}

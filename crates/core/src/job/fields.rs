//! Readers of the job's JSON fields: whole numbers written as integers, floats or strings,
//! bounded counts, strings, string choices and the `reserve` in bytes.

use crate::error::CoreError;
use serde_json::Value;

/// No GPU or unified-memory machine has a pebibyte: a larger reserve is a typo.
const MAX_RESERVE: f64 = (1u64 << 50) as f64;

/// Upper bounds on counts: beyond them no real job exists, and products of them stay far from
/// overflowing 64 bits (batch · seq · vocab · 4 < 2^64 needs each well under 2^21..2^32).
pub(super) const MAX_BATCH: u64 = 1 << 24;
pub(super) const MAX_SEQ: u64 = 1 << 26;
pub(super) const MAX_GPUS: u64 = 1 << 20;

/// The job's `host_ram`: bytes as a non-negative JSON number or numeric string (rounded to the
/// byte); absent or null = unknown (`None`).
pub(super) fn host_ram_bytes(v: Option<&Value>) -> Result<Option<u64>, CoreError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let f = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match f {
        Some(f) if f.is_finite() && (0.0..=MAX_RESERVE).contains(&f) => Ok(Some(f.round() as u64)),
        _ => Err(CoreError::field(
            "host_ram",
            format!("must be a non-negative number of bytes below 1 PiB (got {v})"),
        )),
    }
}

/// The job's `reserve`: bytes as a non-negative JSON number, integer or float (rounded to the
/// byte), or a numeric string; absent or null = 0.
pub(super) fn reserve_bytes(v: Option<&Value>) -> Result<u64, CoreError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(0);
    };
    let f = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match f {
        Some(f) if f.is_finite() && (0.0..=MAX_RESERVE).contains(&f) => Ok(f.round() as u64),
        Some(f) if f < 0.0 => Err(CoreError::field(
            "reserve",
            format!("must not be negative (got {f})"),
        )),
        Some(f) if f.is_finite() => Err(CoreError::field(
            "reserve",
            format!("{f} bytes is more than any device has"),
        )),
        _ => Err(CoreError::field(
            "reserve",
            format!("must be a number of bytes (got {v})"),
        )),
    }
}

/// Reads a non-negative whole number written as a JSON integer or float (`7.5e9`).
pub fn whole_number(field: &str, v: &Value) -> Result<u64, CoreError> {
    if let Some(u) = v.as_u64() {
        return Ok(u);
    }
    if let Some(i) = v.as_i64() {
        return Err(CoreError::field(
            field,
            format!("must not be negative (got {i})"),
        ));
    }
    if let Some(f) = v.as_f64() {
        if f < 0.0 {
            return Err(CoreError::field(
                field,
                format!("must not be negative (got {f})"),
            ));
        }
        if f.fract() != 0.0 || !f.is_finite() {
            return Err(CoreError::field(
                field,
                format!("must be a whole number (got {f})"),
            ));
        }
        if f >= 1.8e19 {
            return Err(CoreError::field(field, format!("{f} is too large")));
        }
        return Ok(f as u64);
    }
    if let Some(s) = v.as_str() {
        if let Ok(f) = s.trim().parse::<f64>() {
            return whole_number(field, &Value::from(f));
        }
    }
    Err(CoreError::field(
        field,
        format!("must be a number (got {v})"),
    ))
}

pub(super) fn count(
    field: &str,
    v: Option<&Value>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, CoreError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(default);
    };
    let n = whole_number(field, v)?;
    if n < min {
        return Err(CoreError::field(
            field,
            format!("must be at least {min} (got {n})"),
        ));
    }
    if n > max {
        return Err(CoreError::field(
            field,
            format!("{n} is more than vramscope accepts ({max})"),
        ));
    }
    Ok(n)
}

/// An object field: absent or `null` = `None`; any other non-object is refused, the error
/// saying it `must be {what}`.
pub(super) fn object<'a>(
    field: &str,
    v: Option<&'a Value>,
    what: &str,
) -> Result<Option<&'a serde_json::Map<String, Value>>, CoreError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(other) => Err(CoreError::field(
            field,
            format!("must be {what} (got {other})"),
        )),
    }
}

/// A boolean field: JSON `true`/`false`; absent or `null` = `default`; anything else is
/// refused (`must be true or false`). Strings are not read as booleans here (the technique
/// switches, which flags and TOML pass as strings, take `techniques::flag`).
pub(super) fn boolean(field: &str, v: Option<&Value>, default: bool) -> Result<bool, CoreError> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(CoreError::field(
            field,
            format!("must be true or false (got {other})"),
        )),
    }
}

pub(super) fn text<'a>(field: &str, v: Option<&'a Value>) -> Result<Option<&'a str>, CoreError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(CoreError::field(
            field,
            format!("must be a string (got {other})"),
        )),
    }
}

/// A string field's contract spelling parsed by `parse`, or `default` when absent.
pub(super) fn choice<T>(
    field: &str,
    v: Option<&str>,
    parse: fn(&str, &str) -> Result<T, CoreError>,
    default: T,
) -> Result<T, CoreError> {
    v.map_or(Ok(default), |s| parse(field, s))
}

//! Why a job's text (flags, a job file, a framework config, keywords) could not be read, and the
//! one reading of a flag's value as a JSON number or string that every reader shares.

use serde_json::Value;

/// Why a job could not be built. The message is one line naming the file or field.
#[derive(Debug)]
pub struct JobError(pub String);

impl std::fmt::Display for JobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JobError {}

/// A flag's text as a JSON value: a number when it reads as one, else the string (the core's
/// validator then says what is wrong with it, naming the field).
pub fn number_value(s: &str) -> Value {
    let t = s.trim();
    if let Ok(u) = t.parse::<u64>() {
        return Value::from(u);
    }
    if let Ok(i) = t.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(f) = t.parse::<f64>() {
        if f.is_finite() {
            return Value::from(f);
        }
    }
    Value::String(s.to_string())
}

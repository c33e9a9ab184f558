//! The job's `allocator` field: PyTorch's caching-allocator settings, written as the contract's
//! object or as `PYTORCH_CUDA_ALLOC_CONF`'s own string (what a user copies from a launch
//! script), checked once into [`AllocatorConfig`] (`crate::allocator::config`, which parses the
//! variable as `c10/core/AllocatorConfig.cpp` does).

use crate::allocator::AllocatorConfig;
use crate::error::CoreError;
use serde_json::Value;

/// Reads the field: absent or `null` = PyTorch's defaults; a string in the variable's syntax;
/// an object with the contract's keys (each optional, `null` = that setting's default).
pub fn resolve(v: Option<&Value>) -> Result<AllocatorConfig, CoreError> {
    let bad = |m: String| CoreError::field("allocator", m);
    match v {
        None | Some(Value::Null) => Ok(AllocatorConfig::default()),
        Some(Value::String(s)) => AllocatorConfig::parse(s).map_err(|e| bad(one_line(&e))),
        Some(Value::Object(m)) => {
            // `null` spells "PyTorch's default" for any key, as in the contract's example.
            let given: serde_json::Map<String, Value> = m
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let config: AllocatorConfig = serde_json::from_value(Value::Object(given))
                .map_err(|e| bad(one_line(&e.to_string())))?;
            config.validate().map_err(|e| bad(one_line(&e)))?;
            Ok(config)
        }
        Some(other) => Err(bad(format!(
            "expected an object such as {{\"expandable_segments\": true}} or a \
             PYTORCH_CUDA_ALLOC_CONF string such as \"expandable_segments:True\" (got {})",
            one_line(&other.to_string())
        ))),
    }
}

/// Whether the settings are PyTorch's defaults (the report then echoes no `allocator`).
pub fn is_default(c: &AllocatorConfig) -> bool {
    *c == AllocatorConfig::default()
}

/// Error text on one line, cut to a readable length (a hostile value may be long).
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut out: String = flat.chars().take(200).collect();
    if flat.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_and_null_are_pytorchs_defaults() {
        assert!(is_default(&resolve(None).unwrap()));
        assert!(is_default(&resolve(Some(&Value::Null)).unwrap()));
        // The contract's example object: every value PyTorch's default.
        let example = json!({"expandable_segments": false, "max_split_size_mb": null,
            "garbage_collection_threshold": null, "roundup_power2_divisions": null});
        assert!(is_default(&resolve(Some(&example)).unwrap()));
    }

    #[test]
    fn string_and_object_spell_the_same_settings() {
        let s = resolve(Some(&json!(
            "expandable_segments:True,max_split_size_mb:512"
        )))
        .unwrap();
        let o = resolve(Some(
            &json!({"expandable_segments": true, "max_split_size_mb": 512}),
        ))
        .unwrap();
        assert_eq!(s, o);
        assert!(s.expandable_segments);
        assert_eq!(s.max_split_size_mb, Some(512));
    }

    #[test]
    fn nonsense_is_one_line_naming_the_field() {
        let cases = [
            json!(7),
            json!(["expandable_segments"]),
            json!({"expandable": true}),
            json!({"max_split_size_mb": -3}),
            json!("max_split_size_mb:abc"),
            // 10 MiB is below kLargeBuffer (20 MiB), which parseMaxSplitSize refuses.
            json!("max_split_size_mb:10"),
            json!({"garbage_collection_threshold": 1.5}),
            json!(format!("expandable_segments:{}\n", "x".repeat(5000))),
        ];
        for c in cases {
            let e = resolve(Some(&c)).unwrap_err().to_string();
            assert!(e.contains("allocator"), "{e}");
            assert!(!e.contains('\n') && e.len() < 400, "{e}");
        }
    }
}

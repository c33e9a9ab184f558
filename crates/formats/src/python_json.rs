//! JSON as Python writes it. Python's `json.dumps` (`allow_nan=True`, its default) writes the
//! floats `inf`, `-inf` and `nan` as the bare tokens `Infinity`, `-Infinity` and `NaN`, and
//! `json.loads` reads them back (CPython `Lib/json/encoder.py` `floatstr`, `Lib/json/scanner.py`
//! `py_make_scanner`); transformers writes `config.json` with `json.dumps`
//! (`PreTrainedConfig.to_json_string`), so a published config can hold them (Nemotron-H-56B's
//! does). Strict JSON, and serde_json, has no such tokens: [`to_strict`] rewrites each one that
//! stands where a value stands, and leaves everything else — strings above all — as it was.

use std::borrow::Cow;

/// What each Python token becomes: infinities the largest finite float of their sign (a size
/// read from one is refused as implausibly large; a bound read from one stays a bound), NaN the
/// string `"NaN"` (a number read from it is refused, naming the field; a float read as optional
/// reads as absent).
const REWRITES: &[(&str, &str)] = &[
    ("-Infinity", "-1.7976931348623157e308"),
    ("Infinity", "1.7976931348623157e308"),
    ("NaN", "\"NaN\""),
];

/// `text` with Python's non-finite tokens in value position rewritten as strict JSON; borrowed
/// unchanged when it holds none. A token inside a string, or not in value position (after `[`,
/// `,` or `:`, or at the start, and followed by a delimiter), is left alone, so text that is not
/// JSON stays not JSON and its parser names the error.
pub fn to_strict(text: &str) -> Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return Cow::Borrowed(text);
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let (mut i, mut copied) = (0, 0);
    let mut in_string = false;
    // The last byte outside strings and whitespace: whether a value may start here.
    let mut last = b'[';
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            last = c;
            i += 1;
            continue;
        }
        if matches!(last, b'[' | b',' | b':') {
            if let Some((token, strict)) = token_at(b, i) {
                out.push_str(&text[copied..i]);
                out.push_str(strict);
                i += token.len();
                copied = i;
                last = b'0';
                continue;
            }
        }
        if !c.is_ascii_whitespace() {
            last = c;
        }
        i += 1;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// The Python token starting at `i` and its rewrite, when one starts there and ends at a
/// delimiter.
fn token_at(b: &[u8], i: usize) -> Option<(&'static str, &'static str)> {
    REWRITES.iter().copied().find(|(token, _)| {
        let end = i + token.len();
        b[i..].starts_with(token.as_bytes())
            && b.get(end)
                .is_none_or(|d| d.is_ascii_whitespace() || matches!(d, b',' | b']' | b'}'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[test]
    fn nemotron_h_style_values_are_rewritten() {
        let text = r#"{"time_step_limit": [0.0, Infinity], "x": -Infinity, "y": NaN}"#;
        let v: Value = serde_json::from_str(&to_strict(text)).unwrap();
        assert_eq!(v["time_step_limit"][1].as_f64(), Some(f64::MAX));
        assert_eq!(v["x"].as_f64(), Some(-f64::MAX));
        assert_eq!(v["y"], json!("NaN"));
    }

    #[test]
    fn tokens_out_of_value_position_are_left_for_the_parser() {
        for bad in [r#"{"a": 1 NaN}"#, r#"{"a": NaNa}"#, r#"{Infinity: 1}"#] {
            assert_eq!(to_strict(bad), bad);
            assert!(serde_json::from_str::<Value>(&to_strict(bad)).is_err());
        }
        assert!(matches!(to_strict(r#"{"a": 1}"#), Cow::Borrowed(_)));
    }

    /// Any JSON value, its strings drawn to hold the tokens, quotes and escapes.
    fn value() -> impl Strategy<Value = Value> {
        let text = prop::collection::vec(
            prop_oneof![
                Just("NaN".to_string()),
                Just("Infinity".to_string()),
                Just("-Infinity".to_string()),
                Just("\"".to_string()),
                Just("\\".to_string()),
                Just(", ".to_string()),
                Just(": [".to_string()),
                "[a-z ]{0,4}",
            ],
            0..6,
        )
        .prop_map(|parts| parts.concat());
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            // Quarters: exact in binary and in the shortest decimal, so they parse back equal.
            (-1e6f64..1e6).prop_map(|f| Value::from((f * 4.0).round() / 4.0)),
            text.clone().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((text.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Strict JSON, compact or pretty, is returned unchanged: tokens inside strings (keys
        /// and values) are never touched.
        #[test]
        fn strict_json_is_untouched(v in value()) {
            for text in [serde_json::to_string(&v).unwrap(), serde_json::to_string_pretty(&v).unwrap()] {
                let got = to_strict(&text);
                prop_assert_eq!(got.as_ref(), text.as_str());
            }
        }

        /// Python-written non-finite floats anywhere in an array parse after the rewrite, and
        /// every other element parses to what it was.
        #[test]
        fn python_tokens_parse(v in prop::collection::vec(value(), 1..6), at in 0usize..6, which in 0usize..3) {
            let token = ["Infinity", "-Infinity", "NaN"][which];
            let mut parts: Vec<String> = v.iter().map(|x| serde_json::to_string(x).unwrap()).collect();
            let at = at.min(parts.len());
            parts.insert(at, token.to_string());
            let text = format!("[{}]", parts.join(", "));
            let got: Value = serde_json::from_str(&to_strict(&text)).unwrap();
            let got = got.as_array().unwrap();
            prop_assert_eq!(got.len(), v.len() + 1);
            let mut rest = got.clone();
            rest.remove(at);
            prop_assert_eq!(&rest, &v);
        }
    }
}

//! The job's fields for vision-language models: `images` (per sequence) and `freeze` (model
//! components kept frozen in training).

use super::fields::{count, object};
use crate::error::CoreError;
use crate::vision::{Images, Part};
use serde_json::Value;

/// Most images per sequence accepted.
const MAX_IMAGES: u64 = 1 << 16;
/// Largest image side accepted, in pixels.
const MAX_SIDE: u64 = 1 << 20;

/// `images`: `null`, or `{"count": n, "width": px, "height": px}` for every sequence of the
/// batch (contract).
pub(super) fn parse_images(v: Option<&Value>) -> Result<Option<Images>, CoreError> {
    let what = "null or {\"count\", \"width\", \"height\"}";
    let Some(obj) = object("images", v, what)? else {
        return Ok(None);
    };
    if let Some(k) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "count" | "width" | "height"))
    {
        return Err(CoreError::field(
            "images",
            format!("unknown key '{k}' (expected count, width, height)"),
        ));
    }
    for k in ["width", "height"] {
        if !obj.contains_key(k) {
            return Err(CoreError::field(
                format!("images.{k}"),
                "is required (pixels)",
            ));
        }
    }
    let count = count("images.count", obj.get("count"), 1, 0, MAX_IMAGES)?;
    let width = count_px("images.width", obj.get("width"))?;
    let height = count_px("images.height", obj.get("height"))?;
    Ok((count > 0).then_some(Images {
        count,
        width,
        height,
    }))
}

fn count_px(field: &str, v: Option<&Value>) -> Result<u64, CoreError> {
    count(field, v, 1, 1, MAX_SIDE)
}

/// `freeze`: a list of components (`vision`, `projector`, `language`) whose weights get no
/// gradient and no optimizer state in training — `["vision"]` is the common "freeze the
/// vision tower" fine-tune.
pub(super) fn parse_freeze(v: Option<&Value>) -> Result<Vec<Part>, CoreError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(CoreError::field(
                "freeze",
                format!("must be a list of components (got {other})"),
            ))
        }
    };
    let mut out = Vec::new();
    for item in list {
        let part = item.as_str().and_then(Part::parse).ok_or_else(|| {
            CoreError::field(
                "freeze",
                format!("entries must be vision, projector, audio or language (got {item})"),
            )
        })?;
        if !out.contains(&part) {
            out.push(part);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn images_and_freeze_are_checked() {
        let i = parse_images(Some(&json!({"count": 2, "width": 640, "height": 480}))).unwrap();
        assert_eq!(
            i,
            Some(Images {
                count: 2,
                width: 640,
                height: 480
            })
        );
        assert_eq!(parse_images(Some(&Value::Null)).unwrap(), None);
        assert_eq!(
            parse_images(Some(&json!({"count": 0, "width": 1, "height": 1}))).unwrap(),
            None
        );
        for bad in [
            json!(3),
            json!({"count": 1, "width": 640}),
            json!({"count": 1, "width": 0, "height": 4}),
            json!({"count": -1, "width": 4, "height": 4}),
            json!({"count": 1, "width": 4, "height": 4, "depth": 3}),
        ] {
            assert!(parse_images(Some(&bad)).is_err(), "{bad}");
        }
        assert_eq!(
            parse_freeze(Some(&json!(["projector", "vision", "vision"]))).unwrap(),
            vec![Part::Vision, Part::Projector]
        );
        assert!(parse_freeze(Some(&json!(["tower"]))).is_err());
        assert!(parse_freeze(Some(&json!("vision"))).is_err());
    }
}

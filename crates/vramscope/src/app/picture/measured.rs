//! A measurement in the picture: the analyze report's components at its peak and its timeline,
//! from the measure crate's [`vramscope_measure::Analysis`] or from `analyze --json` sent back.

use vramscope_core::report::{Category, TimelinePoint};

/// What a measurement adds to the picture: the analyze report's (`vramscope analyze --json`)
/// components at the measured peak and its timeline.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Bytes by category at the measured peak, `unattributed` included; zeros left out.
    pub components: Vec<(Category, u64)>,
    pub peak_allocated: Option<u64>,
    pub timeline: Vec<TimelinePoint>,
}

/// The measured categories in the picture's order: the estimate's, then `unattributed`.
const MEASURED_ORDER: [Category; 10] = Category::ALL;

impl Measured {
    pub fn from_analysis(a: &vramscope_measure::Analysis) -> Self {
        let g = &a.per_gpu;
        Measured {
            components: MEASURED_ORDER
                .iter()
                .map(|c| (*c, g.components.get(*c)))
                .filter(|(_, b)| *b > 0)
                .collect(),
            peak_allocated: g.peaks.peak_allocated,
            timeline: a.timeline.clone(),
        }
    }

    /// Reads the analyze JSON (`{"per_gpu": {...}, "timeline": [...]}`, as `analyze --json`
    /// prints it) back; unknown categories are left out, at most `MAX_POINTS` timeline points.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        const MAX_POINTS: usize = 100_000;
        let per_gpu = v
            .get("per_gpu")
            .and_then(|p| p.as_object())
            .ok_or("measurement: no \"per_gpu\" object (send what `analyze --json` prints)")?;
        let comps = per_gpu
            .get("components")
            .and_then(|c| c.as_object())
            .ok_or("measurement: per_gpu has no \"components\" object")?;
        let cat = |name: &str| MEASURED_ORDER.iter().copied().find(|c| c.name() == name);
        let mut components = Vec::new();
        for c in MEASURED_ORDER {
            match comps.get(c.name()) {
                None | Some(serde_json::Value::Null) => {}
                Some(b) => {
                    let b = b.as_u64().ok_or_else(|| {
                        format!("measurement: components.{} is not a byte count", c.name())
                    })?;
                    if b > 0 {
                        components.push((c, b));
                    }
                }
            }
        }
        let peak_allocated = per_gpu.get("peak_allocated").and_then(|b| b.as_u64());
        let points = match v.get("timeline") {
            None | Some(serde_json::Value::Null) => &[][..],
            Some(t) => t
                .as_array()
                .ok_or("measurement: \"timeline\" is not a list")?
                .as_slice(),
        };
        if points.len() > MAX_POINTS {
            return Err(format!(
                "measurement: {} timeline points, more than {MAX_POINTS}",
                points.len()
            ));
        }
        let mut timeline = Vec::with_capacity(points.len());
        for (i, p) in points.iter().enumerate() {
            let allocated = p.get("allocated").and_then(|a| a.as_u64()).ok_or_else(|| {
                format!("measurement: timeline[{i}].allocated is not a byte count")
            })?;
            let s = |k: &str| p.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
            let by_category = p
                .get("by_category")
                .and_then(|b| b.as_object())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, b)| Some((cat(k)?.name(), b.as_u64()?)))
                        .collect()
                })
                .unwrap_or_default();
            timeline.push(TimelinePoint {
                phase: s("phase").into(),
                label: s("label").into(),
                allocated,
                by_category,
            });
        }
        Ok(Measured {
            components,
            peak_allocated,
            timeline,
        })
    }

    pub(super) fn used(&self) -> u64 {
        self.components
            .iter()
            .fold(0u64, |a, (_, b)| a.saturating_add(*b))
    }
}

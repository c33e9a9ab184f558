//! Helpers for the vision-language tests (`vlm*.rs`): a fixture of `tests/fixtures/vlm/` read
//! natively, its parameters per component, and the image tokens its processor rule gives.

use vramscope_core::model::ModelSpec;
use vramscope_core::vision::{ImageCost, Part};
use vramscope_formats::model_source::{load_model, LoadedModel};

/// The path of `tests/fixtures/vlm/<name>`.
pub fn fixture(name: &str) -> String {
    super::fixture_path("vlm", name)
}

/// The model of `tests/fixtures/vlm/<name>`, read as the CLI reads a local config.
pub fn model(name: &str) -> LoadedModel {
    load_model(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// [`model`], checked to read without a warning about a multimodal part left uncounted (the
/// reader's warning when a config names a tower or projector it does not count); a failure
/// names the fixture and the warning.
pub fn counted_model(name: &str) -> LoadedModel {
    let m = model(name);
    if let Some(w) = m.warnings.iter().find(|w| w.contains("multimodal")) {
        panic!("{name}: a warning about an uncounted part: {w}");
    }
    m
}

/// (total, vision tower, projector, language model) as `m`'s inventory counts them.
pub fn parts_of(m: &LoadedModel) -> (u64, u64, u64, u64) {
    let by = m.inventory.as_ref().expect("an inventory").by_part();
    let get = |p: Part| by.get(&p).map_or(0, |t| t.params);
    (
        m.params_total,
        get(Part::Vision),
        get(Part::Projector),
        get(Part::Language),
    )
}

/// [`parts_of`] the model of `tests/fixtures/vlm/<name>`.
pub fn parts(name: &str) -> (u64, u64, u64, u64) {
    parts_of(&model(name))
}

/// What one `w × h` image costs under `spec`'s image-token rule.
pub fn cost(spec: &ModelSpec, w: u64, h: u64) -> ImageCost {
    let vision = spec.vision.as_ref().expect("a vision tower");
    vision.tokens.cost(w, h).unwrap()
}

/// (tokens, tower images, tower sequence) of one `w × h` image for the model of
/// `tests/fixtures/vlm/<name>`.
pub fn tokens(name: &str, w: u64, h: u64) -> (u64, u64, u64) {
    let c = cost(model(name).spec.as_ref().expect("a spec"), w, h);
    (c.tokens, c.tower_images, c.tower_seq)
}

/// Tests of the per-component counts, one a row:
/// `NAME: "FIXTURE" => (total, vision tower, projector, language model);` is a `#[test]` named
/// NAME that compares `parts("FIXTURE")` (the `parts` in scope where the rows stand: this
/// module's, or a test file's own that checks more on the way) with the tuple; a row's doc
/// comment stays on its test.
#[macro_export]
macro_rules! parts_tests {
    ($($(#[$doc:meta])* $name:ident: $file:literal => $want:expr;)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                assert_eq!(parts($file), $want, "{}", $file);
            }
        )*
    };
}

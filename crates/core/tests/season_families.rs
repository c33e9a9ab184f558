//! This season's nearly-Llama families (SmolLM3's NoPE layers and tied head, OLMo-2's and
//! OLMo-3's norms after each sublayer and whole-projection q/k norms, OLMo-3's sliding layers,
//! EXAONE-4's per-head q/k norms, sliding layers and NoPE global layers): a tiny config of each
//! trained for one AdamW step with SDPA, fp32 and bf16-mixed, batch 2 × 256 tokens, measured on
//! the CPU tensor by tensor with `../shared/measure/measure.py` (torch 2.15.0, transformers
//! 5.24.0; the runs in `validation/results/cpu-tiny-{smollm3,olmo2,olmo3,exaone4}-*`, the cases
//! `validation/cpu-measured-season.json` from `scripts/cases_from_measure.py`, held to 3 % in
//! `cpu_measured.rs`).

mod common;

/// The measured models' parameter counts, by hand (h 256, 4 layers, 4 heads of 64, 2 KV heads,
/// MLP 512, vocab 8192), equal to what `measure.py` printed for each (`n_params` in the result
/// files). Per layer: q and o 256² = 65,536 each, k and v 256 · 128 = 32,768 each, MLP 3 · 256
/// · 512 = 393,216, two norms 512 → 590,336 before q/k norms; SmolLM3 none (tied: one 8192 ·
/// 256 = 2,097,152 matrix), OLMo-2/3 whole projections 256 + 128, EXAONE-4 one head each 64 +
/// 64 (untied: two matrices); final norm 256.
#[test]
fn measured_models_count_by_hand() {
    let cases: Vec<serde_json::Value> = common::validation("cpu-measured-season.json");
    let layer = 2 * 65_536 + 2 * 32_768 + 393_216 + 512;
    assert_eq!(layer, 590_336);
    for c in &cases {
        let cfg = &c["job"]["model"]["hf_config"];
        let (qk, matrices) = match cfg["model_type"].as_str().unwrap() {
            "smollm3" => (0, 1),
            "olmo2" | "olmo3" => (256 + 128, 2),
            "exaone4" => (64 + 64, 2),
            other => panic!("{other}"),
        };
        let expected = 4 * (layer + qk) + matrices * 2_097_152 + 256;
        let m = vramscope_formats::model_source::load_job_model(&c["job"]["model"]).unwrap();
        assert_eq!(m.params_total, expected, "{}", c["id"]);
    }
    // measure.py's n_params for the four models.
    let printed = [4_458_752, 6_557_440, 6_557_440, 6_556_416];
    let hand = [
        4 * layer + 2_097_152 + 256,
        4 * (layer + 384) + 2 * 2_097_152 + 256,
        4 * (layer + 384) + 2 * 2_097_152 + 256,
        4 * (layer + 128) + 2 * 2_097_152 + 256,
    ];
    assert_eq!(hand, printed);
}

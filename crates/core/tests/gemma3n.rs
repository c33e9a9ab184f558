//! Gemma 3n's text model (`gemma3n_text`) estimated, not only counted: tiny training steps
//! measured on the CPU (`validation/cpu-measured-gemma3n.json`), held whole and layer by
//! layer. E2B's KV cache, fit and training step are checked with Gemma 4's in `gemma_e2b.rs`.

mod common;
mod measured;

use serde_json::{json, Value};

/// A tiny Gemma 3n text model's AdamW steps at 2 × 256 with SDPA (fp32, bf16-mixed, pure bf16),
/// eager attention and SDPA under full checkpointing (bf16-mixed),
/// measured on the CPU tensor by tensor (`validation/cpu-measured-gemma3n.json`,
/// `validation/results/cpu-tiny-gemma3n-*`; validation/README.md): 6 layers (full at 2 and 5,
/// the last two reusing kv), MLP widths 512/512/384/512/384/512, the first two layers' gates
/// sparse, four AltUp streams, LAuReL rank 16, per-layer inputs of 64; 9,211,296 parameters
/// (measure.py's count; by hand: embeddings, per-layer table and projection, AltUp projections
/// and final norm 5,734,720; attention 4 · 196,736 + 2 · 131,136 = 1,049,216; MLPs
/// 3·256·2,816 = 2,162,688; norms, AltUp, LAuReL and per-layer branch 6 · 44,112 = 264,672).
/// The peaks (in the loss's backward, net of the two cuBLAS workspaces a CPU run lacks) and the
/// activations at them measured within 0.06 % without checkpointing, within 0.07 % (peak) and
/// 0.30 % (activations) with it, so all are held to 0.5 %. Left out, the checkpointed layers'
/// stored keys and values read −0.32 % (peak) and −1.05 % (activations).
#[test]
fn measured_training_steps_within_half_a_percent() {
    let all = measured::compare("cpu-measured-gemma3n.json");
    assert_eq!(all.len(), 10);
    for c in &all {
        assert!(c.error.abs() <= 0.005, "{} {:+.4}", c.id, c.error);
    }
}

/// Each block's kept bytes in the estimate (`activations::forward`), for the measured job.
fn blocks_kept(id: &str) -> Vec<u64> {
    let path = format!(
        "{}/../../validation/specs/{id}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let job: vramscope_core::job::Job = serde_json::from_value(json!({
        "model": {"hf_config": spec["hf_config"]}, "task": "train", "batch": spec["batch"],
        "seq": spec["seq"], "precision": spec["precision"], "optimizer": "adamw",
        "attention": spec["attention"], "checkpointing": spec["checkpointing"]}))
    .unwrap();
    let model =
        vramscope_formats::model_source::load_job_model(job.model.as_ref().unwrap()).unwrap();
    let spec = model.spec.unwrap();
    let resolved = job.resolve(spec.max_position_embeddings).unwrap();
    let plan =
        vramscope_core::estimate::activations::forward(&spec, &resolved, &mut Vec::new()).unwrap();
    plan.layers
        .iter()
        .map(|l| l.kept + l.weight_copies + l.cached_copies)
        .collect()
}

/// The measured per-layer increments of a result file (`layer_increments`: what layers 1–5
/// each add by the end of their forward).
fn measured_increments(id: &str) -> Vec<u64> {
    let path = format!(
        "{}/../../validation/results/{id}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    r["steps"]["step2"]["r512"]["layer_increments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// Layer by layer, the measured increments of layers 1–5 against each block's kept bytes:
/// sparse and dense MLPs of both widths, own and shared keys, sliding and full. Two layers'
/// increments hold more at the end of their forward than they keep for backward: the last
/// layer of each type before the shared ones stores its keys and values in the forward's
/// `shared_kv_states` (`kv_sharing_modes` "store", `Gemma3nTextAttention.forward`), a local of
/// `Gemma3nTextModel.forward` freed when it returns, before the backward; only where SDPA does
/// not save those tensors themselves do they add bytes. By hand (b 2, 2 kv heads, s 256, head
/// 64: 65,536 values each):
/// - fp32, layer 2 (full: no mask, SDPA's own GQA saves k and v): 0; layer 3 (sliding: the
///   mask makes transformers `repeat_kv`, and SDPA saves the copies): k and v, 524,288 B;
/// - bf16-mixed, layer 2: the rotated keys are fp32 (cos/sin take the fp32 stack's dtype) and
///   SDPA saves their 16-bit cast: k, 262,144 B; layer 3: fp32 k and bf16 v, 393,216 B;
/// - bf16-mixed with eager attention (`repeat_kv` on every layer): fp32 k and bf16 v on both,
///   393,216 B each;
/// - pure bf16, layer 3: bf16 k and v, 262,144 B.
///
/// Under full checkpointing the dict is an argument of every checkpointed layer, kept for its
/// recomputation until its backward, so those keys and values stay: the estimate keeps them
/// (`blocks::gemma4::checkpoint_stored_kv`), and each checkpointed layer's increment (its fp32
/// four-stream input, 2,097,152 B, autocast's cached copies of its weights, and on layers 2
/// and 3 the stored keys and values, 393,216 B each) agrees with nothing held apart.
///
/// The rest agrees within 0.3 % per layer (under the estimate by 23,904–43,520 B a layer,
/// 0.1–0.25 %: small `[b·s, 1]` and `[b·s, n]` tensors, each rounded to 512 B). A kv-sharing full layer under autocast casts the producer's
/// fp32 keys to 16 bit (saved by SDPA: 131,072 B); without it layer 5 read 0.7 % low.
#[test]
fn measured_layers_agree_one_by_one() {
    let held: [(&str, [u64; 5]); 5] = [
        ("cpu-tiny-gemma3n-fp32-adamw-sdpa", [0, 0, 524_288, 0, 0]),
        (
            "cpu-tiny-gemma3n-bf16mixed-adamw-sdpa",
            [0, 262_144, 393_216, 0, 0],
        ),
        (
            "cpu-tiny-gemma3n-bf16mixed-adamw-eager",
            [0, 393_216, 393_216, 0, 0],
        ),
        ("cpu-tiny-gemma3n-bf16mixed-adamw-sdpa-ckpt", [0; 5]),
        ("cpu-tiny-gemma3n-bf16-adamw-sdpa", [0, 0, 262_144, 0, 0]),
    ];
    for (id, held) in held {
        let est = blocks_kept(id);
        let measured = measured_increments(id);
        assert_eq!((est.len(), measured.len()), (6, 5));
        for i in 1..6 {
            let expected = (measured[i - 1] - held[i - 1]) as f64;
            let error = (est[i] as f64 - expected) / expected;
            assert!(error.abs() <= 0.003, "{id} layer {i}: {error:+.4}");
        }
    }
}

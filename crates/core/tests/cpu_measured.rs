//! Every `validation/cpu-measured-*.json` file of a model family against the estimate: tiny
//! models' training steps measured on the CPU tensor by tensor (made with
//! `../shared/measure/measure.py` and `scripts/cases_from_measure.py`; runs in
//! `validation/results/`, validation/README.md), each case within 3 %. Peaks are compared net of
//! the two cuBLAS workspaces the estimate counts on a GPU (forward and backward threads) and a
//! CPU run does not have (`measured::compare`). One row per file: what was measured, and the
//! least number of cases the file holds. The family's other checks stay in its own test file
//! (named in each row's comment).

mod common;
mod measured;

/// A measured file and the least number of cases it holds.
struct Measured {
    file: &'static str,
    min_cases: usize,
}

const FILES: &[Measured] = &[
    // dsa.rs: a tiny DeepSeek-V3.2's AdamW steps with eager attention, fp32 and bf16-mixed
    // (transformers' torch path: the indexer under `torch.no_grad`, its top-k folded into the
    // float mask): the peaks, one block's activations and the activations at the peak; with a
    // 16-head indexer at seq 1024 the fp32 peak sits in the forward at the indexer's two fp32
    // `[b, s, heads, t]` score tensors.
    Measured {
        file: "cpu-measured-dsa.json",
        min_cases: 3,
    },
    // eager_backward.rs: a 2-layer Llama at batch 1 × 1024, fp32, SGD, eager attention, without
    // and with full checkpointing; the three cases of each run (the peak, one block's
    // activations, the activations at the no-checkpointing peak).
    Measured {
        file: "cpu-measured-eager-backward.json",
        min_cases: 5,
    },
    // gemma3n.rs: a tiny Gemma 3n text model (6 layers, four AltUp streams, LAuReL, sparse
    // gates on layers 0–1, per-layer inputs, the last two layers reusing kv), AdamW, batch 2 ×
    // 256: SDPA fp32, bf16-mixed and pure bf16, eager bf16-mixed, SDPA bf16-mixed under full
    // checkpointing; the peaks and the activations at them.
    Measured {
        file: "cpu-measured-gemma3n.json",
        min_cases: 10,
    },
    // gemma3n.rs: that text model inside the whole `gemma3n` (the default MobileNetV5 vision
    // tower and a tiny audio tower held, not run; both embedders run), text only, AdamW,
    // batch 2 × 256, SDPA fp32 and bf16-mixed: the peaks and the activations at them.
    Measured {
        file: "cpu-measured-gemma3nfull.json",
        min_cases: 4,
    },
    // gpt_oss.rs: a tiny gpt-oss (4 layers alternating sliding and full attention, sinks, 8
    // experts with biases, 2 per token): peak, activations and activations per layer.
    Measured {
        file: "cpu-measured-gpt-oss.json",
        min_cases: 3,
    },
    // granite.rs: a tiny Bamba (`validation/specs/cpu-tiny-bamba-*.json`: 4 layers, hidden 256,
    // attention on layer 1, Mamba2 mixers of 8 heads × 64 with state 16 and chunk 64
    // elsewhere, SwiGLU 512; 7,153,448 parameters) and a tiny Granite 4.0-H
    // (`cpu-tiny-granitemoehybrid-*.json`: the same mixers and attention layout, every layer 4
    // experts of 128, 2 per token, plus a shared MLP of 256; the muP multipliers of the
    // published models; tied; 5,846,824 parameters) on transformers' torch path (no
    // `mamba_ssm`: the estimate's `attention: eager`), fp32 and bf16-mixed, AdamW, batch 2 ×
    // seq 256: peak, activations at the peak and the per-layer increment; and a tiny
    // Granite-MoE (`cpu-tiny-granitemoe-*-adamw-sdpa.json`: 4 attention layers of 8 heads over
    // 2 KV heads, 4 experts of 128, 2 per token, the 3.x models' multipliers, tied; 4,331,776
    // parameters) with SDPA.
    Measured {
        file: "cpu-measured-granite.json",
        min_cases: 18,
    },
    // hybrid.rs: a tiny Jamba (4 layers: Mamba + SwiGLU, attention + 4 experts, twice): peak,
    // activations and the Mamba layer's activations; and a tiny Falcon-H1's (4 layers of
    // attention beside a Mamba2 mixer on its torch path).
    Measured {
        file: "cpu-measured-hybrid.json",
        min_cases: 3,
    },
    // gemma4_vlm.rs: a tiny Gemma 4 without audio (`gemma4`, `audio_config` null) trained
    // through `Gemma4ForConditionalGeneration` with one 192 px image a sequence (630 padded
    // patches of a 2-layer tower; scripts/measure_gemma4vis.py), fp32 and bf16-mixed, AdamW,
    // SDPA, with and without full checkpointing, and with the 26B/31B's vision-bidirectional
    // text masks (`use_bidirectional_attention: "vision"` with the processor's
    // `mm_token_type_ids`; not modelled, −0.50 % / −0.55 % on the peaks): the peaks, one block's
    // activations and the activations at the peak.
    Measured {
        file: "cpu-measured-gemma4vis.json",
        min_cases: 18,
    },
    // gemma4_vlm.rs: a tiny Gemma 4 with an audio tower (`gemma4` as E2B / E4B are built:
    // the text model with per-layer inputs and kv-sharing layers, the vision tower above, a
    // 2-layer conformer of 256 and `embed_audio`, loaded and never run;
    // scripts/measure_gemma4vis.py) trained through `Gemma4ForConditionalGeneration`, text only
    // and with one 192 px image a sequence, fp32 and bf16-mixed, AdamW, SDPA: the peaks (no
    // gradient or AdamW state for the audio tower, nor for the vision tower without images),
    // one block's activations and the activations at the peak.
    Measured {
        file: "cpu-measured-gemma4audio.json",
        min_cases: 12,
    },
    // llama4_vlm.rs: a tiny Llama 4 (`llama4`) trained through `Llama4ForConditionalGeneration`,
    // text only and with one 448 px image a sequence (2 × 2 tiles and the global tile), fp32
    // and bf16-mixed, AdamW, SDPA: the peaks, one block's activations and the activations at
    // the peak.
    Measured {
        file: "cpu-measured-llama4.json",
        min_cases: 12,
    },
    // lfm2.rs: a tiny LFM2's AdamW steps with SDPA, fp32 and bf16-mixed (the short convolution
    // on transformers' torch fallback, as it runs without a hub `causal_conv1d` kernel): the
    // peaks and the short-conv block's activations.
    Measured {
        file: "cpu-measured-lfm2.json",
        min_cases: 4,
    },
    // lfm2.rs: a tiny LFM2-MoE's AdamW steps with SDPA, fp32 and bf16-mixed (transformers'
    // default `grouped_mm` experts and the sigmoid router of `Lfm2MoeTopKRouter`).
    Measured {
        file: "cpu-measured-lfm2moe.json",
        min_cases: 4,
    },
    // moe_families.rs: a tiny OLMoE (4 layers, q/k norms over the whole projections, 16
    // experts, 4 per token through transformers 5's `grouped_mm`): peak, activations and
    // activations per layer.
    Measured {
        file: "cpu-measured-moe.json",
        min_cases: 3,
    },
    // nemotron_h.rs: a tiny Nemotron-H (4 layers "M*-E": a Mamba2 mixer on transformers' torch
    // path, eager attention, a squared-ReLU MLP, a 4-expert MoE with a shared expert), fp32 and
    // bf16-mixed: the peak, the activations at the peak and the attention block's increment.
    Measured {
        file: "cpu-measured-nemotronh.json",
        min_cases: 6,
    },
    // qwen35.rs: tiny Qwen3.5 and Qwen3.5-MoE text models' AdamW steps with SDPA at 2 × 256,
    // fp32 and bf16-mixed (transformers' torch path of the gated delta rule and the causal
    // conv, as they run without flash-linear-attention and causal-conv1d): the peaks and the
    // gated DeltaNet block's activations.
    Measured {
        file: "cpu-measured-qwen35.json",
        min_cases: 8,
    },
    // qwen3_next.rs: a tiny Qwen3-Next's AdamW steps with SDPA, fp32 at seq 256 (whole 64-token
    // chunks) and 200 (padded) and bf16-mixed at 256 (transformers' torch path of the gated
    // delta rule, as it runs without flash-linear-attention): the peaks and the gated DeltaNet
    // block's activations.
    Measured {
        file: "cpu-measured-qwen3next.json",
        min_cases: 4,
    },
    // season_families.rs: this season's nearly-Llama families (SmolLM3, OLMo-2, OLMo-3,
    // EXAONE-4), one AdamW step each with SDPA, fp32 and bf16-mixed, batch 2 × 256: the step's
    // peak, one block's activations and the activations at the peak.
    Measured {
        file: "cpu-measured-season.json",
        min_cases: 24,
    },
    // ssm.rs: a tiny Mamba (4 layers, hidden 256, d_inner 512, d_state 16) on transformers'
    // torch scan path, fp32 and bf16-mixed: each step's peak and activations per layer.
    Measured {
        file: "cpu-measured-mamba.json",
        min_cases: 2,
    },
    // zamba2.rs: a tiny Zamba2 (6 layers, hybrid at 1, 3, 5 over 2 shared blocks with q/k/v and
    // MLP adapters, rotary, eager attention, the Mamba2 mixers on transformers' torch path), fp32
    // and bf16-mixed: the peak, the activations at the peak and the first hybrid layer's
    // increment (`scripts/cases_from_measure_zamba2.py`).
    Measured {
        file: "cpu-measured-zamba2.json",
        min_cases: 6,
    },
    // vlm_step.rs: a tiny Qwen2-VL's image training steps (the vision tower and merger op by
    // op), the CLIP-tower LLaVA's and mllama's (`mllama_step.rs`); each case's tolerance in
    // the file is 3 %.
    Measured {
        file: "cpu-measured-vlm.json",
        min_cases: 8,
    },
    // vision_stream.rs: a tiny Gemma 3 (SigLIP tower of 3 layers × 128, 16 × 16 patches
    // pooled to 64 image tokens) trained with one 224 × 224 image per sequence: fp32 and
    // bf16-mixed, bf16-mixed with the tower frozen and under full checkpointing; the peaks,
    // each within 1 %.
    Measured {
        file: "cpu-measured-gemma3vis.json",
        min_cases: 4,
    },
    // vlm_season.rs: PaliGemma 2's and LFM2-VL's image training steps through the whole model,
    // tower and projector included; each case's tolerance in the file is 3 %.
    Measured {
        file: "cpu-measured-vlm-season.json",
        min_cases: 4,
    },
];

#[test]
fn every_measured_family_within_3_percent() {
    for m in FILES {
        let all = measured::compare(m.file);
        assert!(all.len() >= m.min_cases, "{}: {} cases", m.file, all.len());
        for c in &all {
            let off = c.error.abs();
            assert!(
                off <= 0.03,
                "{}: {} off by {:+.2} %",
                m.file,
                c.id,
                c.error * 100.0
            );
        }
    }
}

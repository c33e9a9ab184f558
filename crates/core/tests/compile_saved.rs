//! `compile: true`: the bytes one block saves for backward under `torch.compile`, derived by
//! hand from what autograd saves (`tools/autograd/derivatives.yaml`) and from the cut
//! AOTAutograd's min-cut partitioner makes (`torch/_functorch/partitioners.py`; rules in
//! `crates/core/src/estimate/tape/compile.rs`). The compiled Llama figure is also the list of
//! tensors the partitioner handed the backward graph for this very model and shape (torch 2.15,
//! traced with inductor's joint passes and partition function, `docs/techniques.md`).

use serde_json::{json, Value};
use vramscope_core::estimate::estimate;
use vramscope_core::job::Job;
use vramscope_formats::model_source::load_job_model;

fn per_layer(hf_config: Value, batch: u64, seq: u64, attention: &str, compile: bool) -> u64 {
    let job: Job = serde_json::from_value(json!({
        "model": {"hf_config": hf_config}, "task": "train", "batch": batch, "seq": seq,
        "precision": "fp32", "attention": attention, "compile": compile
    }))
    .unwrap();
    let model = load_job_model(job.model.as_ref().unwrap()).unwrap();
    let r = estimate(&model.into_input(), &job.resolve(None).unwrap()).unwrap();
    r.per_gpu.peaks.activation_bytes_per_layer.unwrap()
}

/// A Llama block (hidden 256, 4 heads of 64 over 2 KV heads, SiLU MLP of 768, no dropout) in
/// fp32 with SDPA, batch 2 × seq 256 = 512 tokens. One token-row of width w is 512·w·4 B:
/// width 256 → 524,288 B, 768 → 1,572,864 B; a per-token fp32 scalar 2,048 B.
///
/// Eager: RMSNorm keeps rsqrt (2,048) and x·rsqrt (524,288) for its weight's gradient, the
/// normalized input of q/k/v (524,288); SDPA keeps q (524,288), k and v at 2 KV heads
/// (262,144 each), its output (524,288, also o_proj's input) and logsumexp (2·4·256·4 = 8,192);
/// the residual h (524,288); the second norm the same three (2,048 + 2 · 524,288); the MLP
/// gate, silu(gate), up and their product (4 · 1,572,864); the block's output (524,288):
/// 11,022,336 B.
///
/// Compiled: x·rsqrt is a pointwise function of the block input and rsqrt, silu(gate) of the
/// gate: both recomputed in backward (−2 · 524,288 − 1,572,864); traced, transformers passes
/// SDPA a causal mask, so k and v are repeated to all 4 heads (+2 · 262,144): 8,925,184 B —
/// the partitioner's own list for this model: rsqrt, view_1, add_4, view_10, view_11,
/// getitem, getitem_1, mm_3, rsqrt_1, view_16, mm_4, mm_5, view_20, add_9 per layer.
#[test]
fn llama_block_saves_the_partitioners_cut() {
    let cfg = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 8192, "max_position_embeddings": 2048,
        "hidden_act": "silu", "attention_dropout": 0.0, "tie_word_embeddings": false
    });
    assert_eq!(per_layer(cfg.clone(), 2, 256, "sdpa", false), 11_022_336);
    assert_eq!(per_layer(cfg, 2, 256, "sdpa", true), 8_925_184);
}

/// A GPT-2 block (n_embd 256, 4 heads, dropout 0.1, `gelu_new`) in fp32 with eager attention,
/// batch 2 × seq 128 = 256 tokens: a row of 256 is 262,144 B, of 1,024 is 1,048,576 B.
///
/// Eager: ln_1's mean and rstd (1,024 each), c_attn's input (262,144), the q and k copies the
/// score matmul keeps (2 · 262,144), softmax's output (2·4·128·128·4 = 524,288), the dropout
/// mask (131,072) and dropped probabilities (524,288), the v copy (262,144), c_proj's input
/// (262,144), the residual dropout mask (65,536), the residual h (262,144), ln_2's mean and
/// rstd (2,048) and c_fc's input (262,144); `gelu_new` keeps its input, tanh's output, 0.5·x
/// and 1 + tanh (4 · 1,048,576) and c_proj its output (1,048,576); the MLP dropout mask
/// (65,536); the block's output (262,144): 8,654,848 B.
///
/// Compiled: tanh's output, 0.5·x and 1 + tanh are pointwise in c_fc's output, which is
/// saved anyway: −3 · 1,048,576 = 5,509,120 B. (Measured: the compiled step's saved
/// activations are 12,572,160 B below the eager step's over 4 layers, 4 · 3,145,728 =
/// 12,582,912 within 0.1 %; `validation/results/cpu-tiny-gpt2-fp32-*`.)
#[test]
fn gpt2_block_recomputes_its_gelu_chain() {
    let cfg = json!({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 256,
        "n_head": 4, "n_layer": 4, "n_positions": 1024, "vocab_size": 50257,
        "activation_function": "gelu_new", "attn_pdrop": 0.1, "embd_pdrop": 0.1,
        "resid_pdrop": 0.1
    });
    assert_eq!(per_layer(cfg.clone(), 2, 128, "eager", false), 8_654_848);
    assert_eq!(per_layer(cfg, 2, 128, "eager", true), 5_509_120);
}

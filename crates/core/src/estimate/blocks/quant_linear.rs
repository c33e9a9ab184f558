//! Which bitsandbytes path a training step's frozen projections take, and what the walk
//! charges apart for it (the dequantized weight the blocks' tapes leave to the stream).

use super::{Dequant, Int8Lt, Numerics};
use crate::estimate::quant::WeightFormat;
use crate::estimate::tape::BlockEvents;
use crate::job::{Checkpointing, Precision, ResolvedJob};
use crate::model::{Layer, Mlp, ModelSpec};

/// How a frozen bitsandbytes projection runs ([`super::BlockCtx::dequant`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantLinear {
    /// `Linear4bit` (`MatMul4Bit`).
    FourBit(Dequant),
    /// `Linear8bitLt` (`MatMul8bitLt`).
    Int8(Int8Lt),
}

impl QuantLinear {
    /// How a training step's projections run their bitsandbytes base weights: 4-bit
    /// (NF4/FP4, with or without double quantization) dequantized to the compute dtype, as the
    /// walk's `dequant` sizes them; LLM.int8 (`int8`) by its int8 matmul with transformers'
    /// default `llm_int8_threshold` of 6.0 (`BitsAndBytesConfig`, transformers 5.24), the
    /// activations fp16 under fp16 training; `None` for every other format (the stream does
    /// not write their kernels).
    pub fn of(format: &WeightFormat, job: &ResolvedJob, num: Numerics) -> Option<Self> {
        let nested = match format {
            WeightFormat::Nf4 | WeightFormat::Fp4 => false,
            WeightFormat::Nf4Dq => true,
            WeightFormat::Int8 => {
                return Some(QuantLinear::Int8(Int8Lt {
                    fp16: num.param == 2
                        && matches!(job.precision, Precision::Fp16 | Precision::Fp16Mixed),
                    outliers: true,
                }))
            }
            _ => return None,
        };
        Some(QuantLinear::FourBit(Dequant {
            width: num.compute.min(2),
            nested,
            input_dtype: crate::job::kbit_casts(job.techniques.kbit_prepare, &job.weights.value),
        }))
    }

    /// The walk's dequantized matrix of a block whose weights are in `format`, in backward
    /// and in forward: the layer's largest matrix at the compute width (at most 16 bit), both
    /// ways; LLM.int8 under training (`path`, the block's [`QuantLinear`]) only in backward,
    /// where `MatMul8bitLt.backward` copies `CB` to the input's dtype (`num.param`, the width
    /// the block's projections read). Unquantized: none.
    pub fn walk_transients(
        path: Option<Self>,
        format: &WeightFormat,
        spec: &ModelSpec,
        layer: &Layer,
        num: Numerics,
    ) -> (u64, u64) {
        if format.is_none() {
            return (0, 0);
        }
        let largest = largest_matrix(spec, layer);
        let round = crate::estimate::overhead::round_size;
        match path {
            Some(QuantLinear::Int8(_)) => (round(largest * num.param), 0),
            _ => {
                let d = round(largest * num.compute.min(2));
                (d, d)
            }
        }
    }

    /// What a layer keeps under full checkpointing beyond its output: the tensors its first
    /// forward holds as ctx attributes (`Tape::hold_in_ctx`: LLM.int8's `MatMul8bitLt` inputs in
    /// `ctx.tensors`), each rounded as the allocator rounds it, under non-reentrant checkpointing;
    /// none under reentrant. `block` is the layer's events (`PlanEvents::blocks`).
    ///
    /// torch 2.15 `utils/checkpoint.py`: non-reentrant runs the first forward with grad and swaps
    /// only saved tensors for handles, so a ctx attribute lives with the graph until the loss is
    /// dropped; the recompute's own is freed with its discarded graph; reentrant runs the first
    /// forward under `no_grad` (no node, no ctx). Checked on the CPU with a custom Function
    /// (`scripts/check_ctx_lifetime.py`, `through_the_step`). The walk frees a layer's kept bytes
    /// at its backward, these included (they live to the end of the backward).
    pub fn checkpoint_held(block: Option<&BlockEvents>, job: &ResolvedJob) -> u64 {
        if job.checkpointing != Checkpointing::Full || job.techniques.checkpoint_reentrant {
            return 0;
        }
        block.map_or(0, |b| {
            b.held
                .iter()
                .filter_map(|&h| b.sizes.get(h as usize))
                .map(|&n| crate::estimate::overhead::round_size(n))
                .sum()
        })
    }
}

/// Elements of the layer's largest weight matrix.
fn largest_matrix(spec: &ModelSpec, layer: &Layer) -> u64 {
    let h = spec.hidden_size;
    let attn = layer.attention.kind.heads() * layer.attention.kind.qk_head_dim();
    let mlp = match &layer.mlp {
        Mlp::Dense(d) => d.ffn,
        Mlp::Moe(m) => m.expert.ffn,
        Mlp::None => 0,
    };
    let ssm = layer
        .ssm_mixers()
        .map(|s| s.d_inner + s.conv_dim())
        .max()
        .unwrap_or(0);
    h * attn.max(mlp).max(ssm)
}

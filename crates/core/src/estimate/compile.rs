//! `compile: true`: a training step under `torch.compile` (inductor), beside what the block
//! programs do under it (`tape/compile.rs`: the partitioner's cut of what pointwise ops save;
//! `blocks/attention.rs`: SDPA's grouped k/v repeated): the causal mask transformers builds once
//! per traced forward, and what the report says of how sure the answer is.

use super::blocks::Numerics;
use super::stages::LossMemory;
use crate::job::{AttentionKernel, ResolvedJob, Task};
use crate::model::{ModelSpec, Naming};

/// The b×1×s×s attention mask a compiled decoder's SDPA layers save. Traced, transformers 5.x
/// keeps the packed-sequence mask (`masking_utils.find_packed_sequence_indices` cannot check
/// its values while tracing), so `create_causal_mask` does not fall back to SDPA's
/// `is_causal` and materialises the mask once per forward; SDPA turns the boolean mask into an
/// additive one in the query's dtype (16-bit under autocast) and saves it for backward, one
/// tensor shared by every layer. Encoders (BERT, RoBERTa) without padding skip their mask.
pub fn traced_causal_mask(spec: &ModelSpec, job: &ResolvedJob, num: Numerics) -> u64 {
    let encoder = matches!(spec.naming, Naming::Bert | Naming::Roberta);
    if !num.compile || job.task != Task::Train || job.attention != AttentionKernel::Sdpa || encoder
    {
        return 0;
    }
    let width = if num.autocast { 2 } else { num.compute };
    super::overhead::round_size(job.batch * job.seq * job.seq * width)
}

/// The loss of a compiled step. The partitioner recomputes `log_softmax` in backward from the
/// logits and two per-token fp32 statistics (its max and log-sum-exp: reductions, saved), so
/// the backward receives the logits at their own width (16 bit under autocast) instead of the
/// fp32 log-softmax, and the forward materializes neither it nor the fp32 upcast (one fused
/// kernel). Traced for the measured GPT-2 (`scripts/compile_saved.py`): the loss graph saves the
/// logits, `amax`, `log` and the padded labels, in fp32 and in bf16-mixed. The backward's
/// transients stay eager's: the compiled fp32 GPT-2 step held as many t·V buffers at its peak
/// (the logits' gradient, a copy, the tied embedding's gradient) as the eager one.
pub fn loss(
    eager: LossMemory,
    num: Numerics,
    logits: u64,
    log_softmax: u64,
    tokens: u64,
) -> LossMemory {
    if !num.compile {
        return eager;
    }
    let stats = 2 * super::overhead::round_size(tokens * 4);
    let labels = eager.saved.saturating_sub(log_softmax);
    LossMemory {
        saved: logits + stats + labels,
        forward_transient: 0,
        ..eager
    }
}

/// torchtune's `CEWithChunkedOutputLoss` in a compiled recipe: `training.compile_loss`
/// (`torchtune/training/_compile.py`) compiles the loss's `compute_cross_entropy`, so each
/// chunk's upcast and cross-entropy are one graph with [`loss`]'s cut — the partitioner saves
/// the chunk's 16-bit logits and two per-token fp32 statistics instead of its fp32
/// log-softmax, and the forward makes no fp32 copy. Summed over the chunks: the 16-bit chunks
/// (`dlogits`, the same sizes), the fp32 log-softmax of all `tokens` rows, 2 × 4 B per token.
///
/// A chunk's backward is that graph's backward: `nll_loss`'s scatter into zeros becomes a
/// pointwise select (inductor's `scatter_upon_const_tensor`, `torch/_inductor/fx_passes/
/// post_grad.py`, written for cross-entropy's backward), and with `log_softmax`'s backward
/// (a per-row sum, then pointwise) and the cast back to 16 bits it is fused into kernels that
/// read the saved chunk and statistics and write the chunk's 16-bit gradient: no fp32 t·V
/// buffer is made. The graph's saved chunk is freed once its backward has run (the recipe has
/// dropped its `logits` list), so each chunk trades its saved 16-bit logits for its 16-bit
/// gradient and the walk's transient is one chunk's gradient, `chunk_grad` (the largest, the
/// first: `torch.chunk`), where eager holds two fp32 gradients of a chunk.
pub fn chunked_output_loss(
    eager: LossMemory,
    num: Numerics,
    tokens: u64,
    vocab: u64,
    chunk_grad: u64,
) -> LossMemory {
    if !num.compile {
        return eager;
    }
    let log_softmax = super::overhead::round_size(tokens * vocab * 4);
    LossMemory {
        backward_transient: chunk_grad,
        ..loss(eager, num, eager.dlogits, log_softmax, tokens)
    }
}

/// What the report says of a compiled step.
pub fn warning(job: &ResolvedJob) -> Option<String> {
    if !job.techniques.compile || job.task != Task::Train {
        return None;
    }
    Some(
        "compile: saved activations are the partitioner's cut (torch.compile, inductor, default \
         mode, one graph per model: pointwise chains recomputed in backward, matmul inputs and \
         outputs, norm statistics and dropout masks saved); measured on fp32 CPU steps of \
         GPT-2, Llama and BERT within 3 %, not in bf16 nor on a GPU; graph breaks, mode=\"max-autotune\" (CUDA \
         graphs) and an activation_memory_budget below 1 are not modelled"
            .into(),
    )
}

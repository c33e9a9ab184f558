//! What the training techniques of issue 20 change in the step the simulator walks: the
//! optimizer in backward (gradients freed by their own hook), activation offloading (saved
//! tensors in host memory), paged optimizers (states in unified memory) and `torch.compile`.
//! The simulator asks this module; the default job takes none of these paths.

use super::blocks::Numerics;
use super::forward_plan::ForwardPlan;
pub use super::state_bytes::HookStep;
use super::state_bytes::StateBytes;
use crate::job::{
    ActivationOffload, AttentionKernel, Checkpointing, ReferenceModel, ResolvedJob, Task,
};

/// The model states when each step runs in the backward: no gradient is resident, none is
/// carried to a separate step, and the step's scratch is per tensor (in [`HookStep`]); the
/// gradients' maximum over the step is the largest single gradient.
pub fn steps_in_backward(st: &mut StateBytes) {
    st.resident.gradients = 0;
    st.max.gradients = st.hook_step.largest_grad;
    st.step_scratch = 0;
}

/// Whether the walk runs the optimizer in the backward.
pub fn in_backward(job: &ResolvedJob) -> bool {
    job.task == Task::Train && job.techniques.optimizer_in_backward
}

/// Whether `enable_input_require_grads()`'s hook (transformers 5.24 `modeling_utils.py`: a
/// forward hook on the input embeddings calling `output.requires_grad_(True)`) makes the
/// embedding's output a leaf that requires grad, so that autograd leaves the first block's
/// input gradient on it as `.grad` (`AccumulateGrad`), held with the leaf by the graph until
/// the loss is dropped. The hook is registered by every path that turns full checkpointing on
/// for a PEFT model: transformers 5.24's `_activation_checkpointing_enable` for any model whose
/// `main_input_name` is `input_ids` (what `gradient_checkpointing_enable()`, the `Trainer`'s
/// `gradient_checkpointing=True`, TRL's `SFTTrainer` and axolotl run, of either kind), PEFT
/// 0.21.2's `PeftModel.__init__` on a model already checkpointing (`peft_model.py` line 184),
/// `prepare_model_for_kbit_training` on a bitsandbytes/GPTQ model (`utils/other.py` line 233),
/// TRL v1.9's `SFTTrainer` itself (`sft_trainer.py` line 1120); LLaMA-Factory's checkpoint
/// function calls `requires_grad_(True)` on each trained layer's input alike. Without
/// checkpointing none of them runs; a trained embedding's output is no leaf (nothing to keep).
/// Measured on the CPU (`validation/cpu-measured-input-grads.json`): at the backward's end
/// `.grad` and the leaf, b·s·h each, reentrant and not; not done by torchtune, which the job
/// does not tell apart.
pub fn input_grads_hook(job: &ResolvedJob, embedding_trained: bool) -> bool {
    job.task == Task::Train
        && job.peft.is_some()
        && job.checkpointing == Checkpointing::Full
        && !embedding_trained
}

/// Whether saved activations go to host memory.
pub fn offloads(job: &ResolvedJob) -> bool {
    job.task == Task::Train && job.techniques.activation_offload == ActivationOffload::Cpu
}

/// Bytes one block keeps on the GPU from its forward to its backward: all it saves, or with
/// activation offloading none. torchtune's `OffloadActivations` copies every saved tensor of at
/// least 1 KiB that is not a parameter to pinned host memory as it is saved; the GPU copy is
/// released once the copy is done, except for the last `max_fwd_stash_size` = 5 tensors (the
/// forward stash). The blocks' tensors are not among those five: the final norm, inside the
/// offloaded region after the last block, saves five (HF and torchtune RMSNorm: the fp32
/// input and its rsqrt, each saved twice, and the normalized output), and those are counted
/// with the head, which keeps them on the GPU.
pub fn kept_on_gpu(job: &ResolvedJob, kept: u64) -> u64 {
    if offloads(job) {
        0
    } else {
        kept
    }
}

/// Bytes a block's backward brings back to the GPU before it runs: with checkpointing its
/// saved input (the recomputation needs it whole); without, its saved tensors come back node by
/// node (`unpack_tensor_with_streams`) and each node's are released when a later node has
/// unpacked, so about the block's largest single saved tensor is back at once — bounded here
/// by what the block keeps.
pub fn brought_back(job: &ResolvedJob, kept: u64) -> u64 {
    if offloads(job) && job.checkpointing != Checkpointing::Full {
        0
    } else {
        kept
    }
}

/// With checkpointing, the previous block's input brought back for its recomputation is held
/// in the backward stash until a later node has unpacked and finished (the stash of
/// `unpack_tensor_with_streams`): it is still on the GPU while the next block recomputes.
pub fn held_from_previous(job: &ResolvedJob, previous_kept: u64) -> u64 {
    if offloads(job) && job.checkpointing == Checkpointing::Full {
        previous_kept
    } else {
        0
    }
}

/// Host (pinned CPU) bytes holding the offloaded activations at the end of the forward: every
/// block's saved tensors (and autocast's weight copies they save).
pub fn host_activation_bytes(job: &ResolvedJob, plan: Option<&ForwardPlan>) -> u64 {
    match plan {
        Some(p) if offloads(job) => p
            .layers
            .iter()
            .map(|l| l.kept.saturating_add(l.weight_copies))
            .fold(0u64, u64::saturating_add),
        _ => 0,
    }
}

/// A frozen reference model's bytes per GPU: a second copy of the policy's weights as the GPU
/// holds them. TRL's `DPOTrainer` (`trl/trainer/dpo_trainer.py`) loads the reference from the
/// same checkpoint with the same `model_init_kwargs` (same dtype) and prepares it with the
/// same accelerator (sharded and offloaded alike under ZeRO-3 / FSDP), so it weighs what the
/// policy's parameters weigh; it has no gradients and no optimizer states. With a PEFT policy
/// TRL makes no copy: the reference is the base model with the adapters disabled
/// (`null_ref_context`). Its forward runs under `torch.no_grad()`, so it saves nothing.
pub fn reference_bytes(job: &ResolvedJob, policy_parameters: u64) -> u64 {
    let frozen = job.techniques.reference_model == ReferenceModel::Frozen;
    if job.task == Task::Train && frozen && job.peft.is_none() {
        policy_parameters
    } else {
        0
    }
}

/// Adds the reference model's weights to the parameters held through the step.
pub fn add_reference_model(job: &ResolvedJob, st: &mut StateBytes) {
    let r = reference_bytes(job, st.resident.parameters);
    st.resident.parameters = st.resident.parameters.saturating_add(r);
    st.max.parameters = st.max.parameters.saturating_add(r);
}

/// The int64 `[b, s]` tensors the batch brings: `input_ids` and `labels`, and with packing the
/// `position_ids` that mark where each packed sequence restarts (transformers'
/// `DataCollatorWithFlattening`, TRL's padding-free collator, axolotl's
/// `V2BatchSamplerDataCollatorForSeq2Seq`): flash-attention's varlen kernel reads the sequence
/// boundaries from them, so no attention mask is made and no token is padding.
pub fn input_tensors(job: &ResolvedJob) -> u64 {
    if job.techniques.packing {
        3
    } else {
        2
    }
}

fn reference_warnings(job: &ResolvedJob, st: &StateBytes, out: &mut Vec<String>) {
    match job.techniques.reference_model {
        ReferenceModel::Frozen if job.peft.is_some() => out.push(
            "reference model: with PEFT TRL makes no copy (the reference is the base model with \
             the adapters disabled), so no reference weights are added; its no_grad forward \
             still runs after the policy's; batch counts pairs (2 x batch rows)"
                .into(),
        ),
        ReferenceModel::Frozen => {
            let half = st.resident.parameters / 2;
            out.push(format!(
                "reference model: a frozen copy of the weights ({}) is held through the step; \
                 its no_grad forward runs after the policy's (TRL DPOTrainer) and saves \
                 nothing; its logits are the timeline's reference event; batch counts pairs \
                 (2 x batch rows)",
                crate::text::bytes(half)
            ));
        }
        ReferenceModel::Precomputed => out.push(
            "reference model: log-probabilities precomputed before training (TRL \
             precompute_ref_log_probs): no reference weights or forward while the policy \
             trains; batch counts pairs (2 x batch rows)"
                .into(),
        ),
        ReferenceModel::None => {}
    }
}

fn packing_warning(job: &ResolvedJob, out: &mut Vec<String>) {
    if !job.techniques.packing {
        return;
    }
    if job.attention == AttentionKernel::Flash {
        out.push(
            "packing: every row is seq tokens of packed sequences (flash-attention varlen with \
             position_ids: no padding, no attention mask), so every step is the estimated one"
                .into(),
        );
    } else {
        out.push(format!(
            "packing with attention {}: transformers builds a [b, 1, s, s] block-causal mask \
             from the packed position_ids, which this estimate does not count for sdpa; the \
             packing recipes (TRL, axolotl) ask for flash attention",
            job.attention.as_str()
        ));
    }
}

/// What the report says of the techniques the job uses.
pub fn warnings(job: &ResolvedJob, st: &StateBytes, host_activations: u64, out: &mut Vec<String>) {
    if job.task != Task::Train {
        return;
    }
    reference_warnings(job, st, out);
    packing_warning(job, out);
    if host_activations > 0 {
        out.push(format!(
            "activation offloading keeps {} of saved activations in pinned host memory \
             (torchtune OffloadActivations): per_gpu.host_bytes counts them; the GPU holds the \
             block being recomputed or differentiated",
            crate::text::bytes(host_activations)
        ));
    }
    if in_backward(job) {
        out.push(
            "optimizer in backward: each parameter's step runs in its gradient hook and frees \
             the gradient (torchtune optimizer_in_bwd); no gradient clipping or accumulation \
             over micro-batches is possible"
                .into(),
        );
    }
    if st.paged_states > 0 {
        out.push(format!(
            "{} of the optimizer states are paged (bitsandbytes, cudaMallocManaged: \
             per_gpu.paged_states): outside PyTorch's allocator, so not in peak_allocated \
             (torch.cuda.max_memory_allocated does not count them); on the GPU while it has \
             room, so in device_total (nvidia-smi); evicted to host RAM under pressure (the \
             step slows, it does not fail), so the fit does not need them",
            crate::text::bytes(st.paged_states)
        ));
    }
    out.extend(super::compile::warning(job));
}

/// The widths after PEFT's `prepare_model_for_kbit_training` (`job::kbit_casts`; PEFT 0.21.2
/// `peft/utils/other.py` line 209: every fp16/bf16 parameter that is not a `Params4bit` cast to
/// fp32). The embedding's output is then fp32 (`F.embedding` returns its weight's dtype), so
/// is each RMSNorm's (transformers 5.24 `modeling_llama.py` `LlamaRMSNorm.forward` returns
/// `self.weight` times `hidden_states.to(input_dtype)`: an fp32 weight promotes the product to
/// fp32, torch's `result_type`), and each decoder layer's output (`residual + hidden_states`
/// with an fp32 operand): the residual stream is fp32, with or without autocast (autocast
/// casts matmul-class ops' inputs only; `add`, `mul`, `embedding` are in none of its lists).
/// Without autocast an unquantized base's matmuls run on fp32 weights, so are the final norm,
/// the head and the logits fp32; bitsandbytes' `Linear4bit.forward` returns
/// `matmul_4bit(x.to(compute_dtype), ...).to(inp_dtype)`, fp32 for an fp32 input, under
/// autocast too (`blocks::Dequant::input_dtype`). Under autocast an unquantized base's
/// matmuls are 16-bit on fp32 weights, as in mixed precision. Measured on the CPU:
/// `validation/cpu-measured-kbit-prepare.json`.
pub fn kbit_fp32_base(num: Numerics) -> Numerics {
    Numerics {
        param: 4,
        compute: if num.autocast { num.compute } else { 4 },
        ..num
    }
}

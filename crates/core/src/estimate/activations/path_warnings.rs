//! The warnings and notes of the forward plan about which code path a state-space or gated
//! DeltaNet block was estimated on (a child of `activations.rs`).

use crate::job::{AttentionKernel, ResolvedJob, Task};
use crate::model::ModelSpec;

/// Which transformers release's `mamba2_chunk_scan` the estimate modelled
/// (`job/transformers_version.rs`, `blocks/ssd_torch.rs`), where a Mamba2 (SSD) mixer runs
/// transformers' torch path (`attention: eager`): the only blocks whose saved set depends on the
/// release.
pub(super) fn ssd_release_note(spec: &ModelSpec, job: &ResolvedJob, warnings: &mut Vec<String>) {
    use crate::model::SsmVersion;
    let torch_ssd = job.attention == AttentionKernel::Eager
        && spec.all_layers().any(|l| {
            l.parallel_ssm.is_some()
                || l.attention
                    .kind
                    .state_space()
                    .is_some_and(|s| s.version == SsmVersion::Mamba2)
        });
    if torch_ssd {
        warnings.push(crate::job::release_note(
            job.transformers_version,
            "Mamba2's torch chunked scan (mamba2_chunk_scan)",
        ));
    }
}

/// Which selective-scan path a training job's state-space layers were estimated on
/// (`blocks/mamba.rs`): the choice moves their activations by a large factor.
pub(super) fn ssm_path_warning(spec: &ModelSpec, job: &ResolvedJob, warnings: &mut Vec<String>) {
    if job.task == Task::Train && spec.all_layers().any(|l| l.parallel_ssm.is_some()) {
        warnings.push(crate::estimate::blocks::falcon_h1_path_warning(
            job.attention,
        ));
        return;
    }
    if job.task == Task::Train && spec.naming == crate::model::Naming::NemotronH {
        if spec.all_layers().any(|l| l.holds_state()) {
            warnings.push(crate::estimate::blocks::nemotron_h_path_warning(
                job.attention,
            ));
        }
        return;
    }
    use crate::model::SsmVersion;
    let has = |v: fn(SsmVersion) -> bool| {
        spec.all_layers()
            .any(|l| l.attention.kind.state_space().is_some_and(|s| v(s.version)))
    };
    if job.task != Task::Train {
        return;
    }
    let torch_ssd = spec.all_layers().any(|l| {
        l.attention
            .kind
            .state_space()
            .is_some_and(|s| s.version == SsmVersion::Mamba2 && s.chunk > 0)
    });
    if torch_ssd {
        warnings.push(crate::estimate::blocks::mamba2_path_warning(job.attention));
        return;
    }
    if has(|v| v == SsmVersion::ShortConv) {
        warnings.push(
            "LFM2's short-convolution layers estimated on transformers' torch path \
             (causal_conv1d_fn's F.conv1d fallback, which keeps the padded conv output); a hub \
             causal_conv1d kernel keeps less"
                .to_string(),
        );
    }
    if has(|v| v == SsmVersion::GatedDeltaNet) {
        warnings.push(gated_delta_path_warning());
    }
    if !has(|v| {
        !matches!(
            v,
            SsmVersion::Mamba2 | SsmVersion::GatedDeltaNet | SsmVersion::ShortConv
        )
    }) {
        return;
    }
    warnings.push(
        if job.attention == crate::job::AttentionKernel::Eager {
            "state-space layers estimated on transformers' torch path (attention eager: no \
             mamba_ssm kernels), which saves the scan's [batch, d_inner, seq, d_state] fp32 \
             tensors; on CUDA with mamba_ssm installed (attention sdpa/flash) far less is saved"
        } else {
            "state-space layers estimated on the fused mamba_ssm kernels (CUDA with mamba_ssm \
             and causal_conv1d installed); without them transformers falls back to its torch \
             path, which saves far more (attention eager estimates that)"
        }
        .to_string(),
    );
}

/// The path gated DeltaNet layers (Qwen3-Next, Qwen3.5) are estimated on, whatever the
/// attention kernel (`blocks/gated_delta.rs`): transformers' PyTorch fallbacks
/// (`modeling_qwen3_next.py` / `modeling_qwen3_5.py`: `torch_chunk_gated_delta_rule` and
/// `causal_conv1d_fn`'s reference implementation), which run when flash-linear-attention and
/// causal-conv1d are not installed; their fused kernels keep far less.
fn gated_delta_path_warning() -> String {
    "gated DeltaNet layers estimated on transformers' torch path (torch_chunk_gated_delta_rule \
     and the PyTorch causal conv: no flash-linear-attention or causal-conv1d installed); with \
     those kernels (CUDA) far less is saved"
        .to_string()
}

//! The one warning of every Mamba2 (SSD) mixer's training estimate: which of transformers'
//! two paths it was estimated on, the attention kernel standing for the choice.

use crate::job::AttentionKernel;

/// `subject` estimated on transformers' torch path (`attention: eager`: no `mamba_ssm`
/// kernels; `mamba2_chunk_scan`'s saved tensors) or on the fused
/// `mamba_split_conv1d_scan_combined` kernel (any other kernel).
pub fn ssd_path_warning(subject: &str, kernel: AttentionKernel) -> String {
    if kernel == AttentionKernel::Eager {
        format!(
            "{subject} estimated on transformers' torch path (attention eager: no mamba_ssm \
             kernels), whose chunked scan saves [batch, heads, chunks, chunk, chunk] decay and \
             score tensors and copies of its einsum operands; on CUDA with mamba_ssm installed \
             (attention sdpa/flash) the fused kernel saves far less"
        )
    } else {
        format!(
            "{subject} estimated on the fused mamba_ssm kernel \
             (mamba_split_conv1d_scan_combined, CUDA with mamba_ssm installed); without it \
             transformers falls back to its torch path, which saves far more (attention eager \
             estimates that)"
        )
    }
}

//! One rank of `DistributedDataParallel` (`torch/nn/parallel/distributed.py`, the reducer of
//! `torch/csrc/distributed/c10d/reducer.cpp`) as the caching allocator sees it: the
//! single-GPU step plus what DDP allocates through the allocator. NCCL's own buffers are
//! `cudaMalloc`ed by NCCL outside it (`overhead::nccl_bytes`, in `device_total`, not in
//! reserved).
//!
//! - Construction, `_sync_module_states` → `dist._broadcast_coalesced(..., 250 MiB)`
//!   (`torch/csrc/distributed/c10d/comm.cpp` `broadcast_coalesced`): every parameter and
//!   buffer in buckets of at least 250 MiB (`compute_bucket_assignment_by_size`), each bucket
//!   flattened into one tensor (`BroadcastWork`: `flatten_dense_tensors`), at most two in
//!   flight: the third bucket's tensor is made after the first's work finishes and frees it.
//! - The reducer: with `find_unused_parameters=False` the first iteration runs one bucket of
//!   every gradient (`_ddp_init_helper`: `bucket_size_limits = [sys.maxsize]`), whose flat
//!   tensor `Reducer::initialize_buckets` makes (`at::empty({offset})`). The forward after the
//!   first backward rebuilds the buckets in the order the gradients became ready
//!   (`_pre_forward` → `Reducer::rebuild_buckets`): `buckets_.clear()` frees the one, then one
//!   tensor per bucket of at least 1 MiB first (`_DEFAULT_FIRST_BUCKET_BYTES`), then 25 MiB
//!   each (`bucket_cap_mb`), a tensor larger than the limit closing its bucket alone.
//! - With `gradient_as_bucket_view=False` (the default) `.grad` stays its own tensor: each
//!   gradient is copied into its bucket view, all-reduced in place and copied back
//!   (`mark_variable_ready_dense`, `finalize_bucket_dense`): nothing more is allocated.

use super::{Param, Sink};

/// `dist._DEFAULT_FIRST_BUCKET_BYTES`: 1 MiB.
pub const FIRST_BUCKET_BYTES: u64 = 1 << 20;
/// `bucket_cap_mb`'s default, 25 MiB.
pub const BUCKET_CAP_BYTES: u64 = 25 << 20;
/// DDP's `broadcast_bucket_size`: `int(250 * 1024 * 1024)`.
pub const BROADCAST_BUCKET_BYTES: u64 = 250 << 20;

/// `compute_bucket_assignment_by_size` on tensors of `sizes` bytes (one dtype), in order:
/// a bucket closes once its size reaches its limit, the limits taken in turn and the last
/// kept; the rest is the last bucket. Each bucket's bytes.
pub fn bucket_sizes(sizes: impl IntoIterator<Item = u64>, limits: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut k = 0;
    let mut size = 0u64;
    let mut any = false;
    for b in sizes {
        size = size.saturating_add(b);
        any = true;
        let limit = limits.get(k).copied().unwrap_or(u64::MAX);
        if size >= limit {
            out.push(size);
            size = 0;
            any = false;
            if k + 1 < limits.len() {
                k += 1;
            }
        }
    }
    if any {
        out.push(size);
    }
    out
}

/// DDP's construction: the broadcast's flat buckets (two in flight), then the reducer's one
/// bucket of every gradient. Its id.
pub fn construct<S: Sink>(s: &mut S, params: &[Param]) -> u32 {
    let sizes = params.iter().map(|p| p.bytes).filter(|&b| b > 0);
    let mut in_flight: std::collections::VecDeque<u32> = Default::default();
    for b in bucket_sizes(sizes, &[BROADCAST_BUCKET_BYTES]) {
        if in_flight.len() >= 2 {
            if let Some(done) = in_flight.pop_front() {
                s.free(done);
            }
        }
        in_flight.push_back(s.alloc(b));
    }
    for id in in_flight {
        s.free(id);
    }
    s.alloc(params.iter().map(|p| p.grad).sum())
}

/// `Reducer::rebuild_buckets` at the forward after the first backward: the one bucket freed,
/// then the buckets of the gradients in `ready` order (`order`: indices into `params`).
pub fn rebuild<S: Sink>(s: &mut S, first: u32, params: &[Param], order: &[usize]) {
    s.free(first);
    let sizes = order
        .iter()
        .map(|&k| params.get(k).map_or(0, |p| p.grad))
        .filter(|&g| g > 0);
    for b in bucket_sizes(sizes, &[FIRST_BUCKET_BYTES, BUCKET_CAP_BYTES]) {
        s.alloc(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Limits 1 MiB then 25 MiB: 0.5 + 0.75 MiB reach 1 MiB (bucket 1.25 MiB); then three
    /// 10 MiB tensors reach 25 (30 MiB); a 40 MiB tensor alone (40); 3 MiB left over. A
    /// single limit of 250 MiB over five 100 MiB tensors: three reach it (300), two are the
    /// rest (200).
    #[test]
    fn buckets_close_at_their_limit() {
        let got = bucket_sizes(
            [
                MIB / 2,
                3 * MIB / 4,
                10 * MIB,
                10 * MIB,
                10 * MIB,
                40 * MIB,
                3 * MIB,
            ],
            &[FIRST_BUCKET_BYTES, BUCKET_CAP_BYTES],
        );
        assert_eq!(got, [5 * MIB / 4, 30 * MIB, 40 * MIB, 3 * MIB]);
        let got = bucket_sizes([100 * MIB; 5], &[BROADCAST_BUCKET_BYTES]);
        assert_eq!(got, [300 * MIB, 200 * MIB]);
        assert!(bucket_sizes([], &[MIB]).is_empty());
    }
}

//! Sizes: how a request is rounded (`round_size`), which pool it goes to (`get_pool`), how much
//! a fresh segment gets (`get_allocation_size`) and whether a block is split
//! (`should_split`), all in `DeviceCachingAllocator`, `c10/cuda/CUDACachingAllocator.cpp`.

use super::config::ROUNDUP_INTERVALS;

const MIB: u64 = 1024 * 1024;
/// `kMinBlockSize`: all sizes are rounded to at least, and a multiple of, 512 bytes.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// `kSmallSize`: the largest request served by the small pool (1 MiB).
pub const SMALL_SIZE: u64 = MIB;
/// `kSmallBuffer`: the small pool's segments (2 MiB), and its expandable page size.
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// `kLargeBuffer` (`c10/core/AllocatorConfig.h`): requests of 1–10 MiB get a 20 MiB segment;
/// also the large pool's expandable page size (`find_expandable_block`).
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// `kMinLargeAlloc`: from 10 MiB on a request gets a segment of its own (rounded) size.
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// `kRoundLarge`: such a segment is rounded up to 2 MiB.
pub const ROUND_LARGE: u64 = 2 * MIB;

/// `round_size`: below 512 B → 512; with `roundup_power2_divisions` set for the request's
/// interval (more than 1 division, and the request above 512 × divisions) → the next division
/// of its power-of-two interval (`roundup_power2_next_division`); otherwise the next multiple
/// of 512.
pub fn round_size(size: u64, divisions: &[u64; ROUNDUP_INTERVALS]) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    let d = divisions[interval_index(size)];
    if d > 1 && size > MIN_BLOCK_SIZE.saturating_mul(d) {
        roundup_power2_next_division(size, d)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
    }
}

/// `AcceleratorAllocatorConfig::roundup_power2_divisions(size)`: the interval of `size`,
/// log2(size) − log2(1 MiB), clamped to 0..16.
fn interval_index(size: u64) -> usize {
    let log = size.max(1).ilog2() as usize;
    log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1)
}

/// `roundup_power2_next_division`: a power of two stays; otherwise the interval
/// [2^k, 2^(k+1)) is cut into `divisions` equal steps and `size` rounded up to the next step.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << size.ilog2();
    let step = floor >> divisions.ilog2();
    if step == 0 {
        return floor << 1;
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down + step
    }
}

/// `get_pool`: rounded sizes up to `kSmallSize` go to the small pool.
pub fn is_small(rounded: u64) -> bool {
    rounded <= SMALL_SIZE
}

/// `get_allocation_size`: the cudaMalloc size for a rounded request no cached block serves.
pub fn allocation_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

/// `should_split`: a small-pool block, or any block under `expandable_segments`, is split when
/// at least 512 B would remain; a large-pool block only when the request is below
/// `max_split_size` and more than 1 MiB (`kSmallSize`) would remain.
pub fn should_split(
    block_size: u64,
    size: u64,
    small: bool,
    expandable: bool,
    max_split: u64,
) -> bool {
    let remaining = block_size - size;
    if small || expandable {
        remaining >= MIN_BLOCK_SIZE
    } else {
        size < max_split && remaining > SMALL_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [u64; 16] = [0; 16];

    #[test]
    fn rounding_to_512() {
        assert_eq!(round_size(1, &NONE), 512);
        assert_eq!(round_size(512, &NONE), 512);
        assert_eq!(round_size(513, &NONE), 1024);
        // 10 MiB + 1 B → next multiple of 512: 10 MiB + 512.
        assert_eq!(round_size(10 * MIB + 1, &NONE), 10 * MIB + 512);
    }

    #[test]
    fn rounding_by_power2_divisions() {
        // 4 divisions of [1 MiB, 2 MiB): 1, 1.25, 1.5, 1.75 MiB. 1.1 MiB → 1.25 MiB.
        let four = [4u64; 16];
        assert_eq!(round_size(1_153_434, &four), 1_310_720);
        // A power of two stays.
        assert_eq!(round_size(4 * MIB, &four), 4 * MIB);
        // 1200 B with 4 divisions: below the 1 MiB start the first interval's value applies;
        // 1200 > 512 × 4 is false, so plain 512 rounding: 1536.
        assert_eq!(round_size(1200, &four), 1536);
        // 3000 B > 2048: interval [2048, 4096) in steps of 512 → 3072.
        assert_eq!(round_size(3000, &four), 3072);
        // 1 division (or 0) means no power-of-two rounding.
        assert_eq!(round_size(1_153_434, &[1; 16]), 1_153_536);
    }

    #[test]
    fn segment_sizes() {
        assert_eq!(allocation_size(512), 2 * MIB);
        assert_eq!(allocation_size(MIB), 2 * MIB);
        assert_eq!(allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB), 12 * MIB);
    }

    #[test]
    fn split_rules() {
        // Large pool: 12 MiB segment for an 11 MiB request leaves exactly 1 MiB: not split.
        assert!(!should_split(12 * MIB, 11 * MIB, false, false, u64::MAX));
        // 10.5 MiB leaves 1.5 MiB: split.
        assert!(should_split(
            12 * MIB,
            10 * MIB + MIB / 2,
            false,
            false,
            u64::MAX
        ));
        // At or above max_split_size nothing is split.
        assert!(!should_split(40 * MIB, 20 * MIB, false, false, 20 * MIB));
        // Small pool: 512 B remaining is enough.
        assert!(should_split(2 * MIB, 2 * MIB - 512, true, false, u64::MAX));
        assert!(!should_split(2 * MIB, 2 * MIB, true, false, u64::MAX));
        // Expandable: 512 B remaining is enough in the large pool too.
        assert!(should_split(
            20 * MIB,
            20 * MIB - 512,
            false,
            true,
            u64::MAX
        ));
    }
}

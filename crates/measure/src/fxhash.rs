//! A fast hasher for the integer-keyed maps of the parse and the replay (node ids, frame ids,
//! block addresses), where SipHash was a measurable share of the time. It does not resist
//! crafted collisions: a hostile file can slow its own analysis down, never change its result.
//!
//! The mixing step is FxHash's (rustc's hasher); the finish is MurmurHash3's 64-bit finalizer.

use std::collections::{HashMap, HashSet};

#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for c in &mut words {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    /// Ends with MurmurHash3's 64-bit finalizer: the table picks buckets by the low bits, which
    /// the bare multiply leaves poorly mixed for stacks sharing their last frames (a lookup of
    /// a 30-frame stack cost ~300 ns in collisions, ~10× the hashing itself).
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

impl FxHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;
pub type FxSet<K> = HashSet<K, std::hash::BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::FxHasher;
    use std::hash::{Hash, Hasher};

    fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
        let mut h = FxHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    /// Stacks that share all but their first frame, and block addresses 4 KiB apart, must
    /// spread over a table's low bits like random keys: 4,096 keys into 4,096 buckets fill
    /// 4096·(1 − 1/e) ≈ 2,589 of them on average; a poorly mixed hash fills far fewer.
    #[test]
    fn low_bits_spread_like_random_keys() {
        let mask = 4095u64;
        let stacks: std::collections::HashSet<u64> = (0..4096u32)
            .map(|i| {
                let mut s = [7u32; 30];
                s[0] = i;
                hash(&s[..]) & mask
            })
            .collect();
        assert!(stacks.len() > 2400, "{} buckets", stacks.len());
        let addrs: std::collections::HashSet<u64> = (0..4096u64)
            .map(|i| hash(&(0x7f00_0000_0000 + i * 4096)) & mask)
            .collect();
        assert!(addrs.len() > 2400, "{} buckets", addrs.len());
    }
}

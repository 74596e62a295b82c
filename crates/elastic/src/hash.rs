//! The one hash of the crate. Ring positions, UE keys and Maglev's offset
//! and skip all come from it, so the schemes differ only in how they use
//! it (seed 004 6 uses one hash, Jenkins', for CH and skewed CH alike).

/// Seeds that make independent hashes out of the one function.
pub mod seed {
    /// A UE's key (its M-TMSI) on a ring or in a Maglev table.
    pub const KEY: u64 = 0x006b_6579;
    /// A host's virtual node on a ring.
    pub const VNODE: u64 = 0x0076_6e6f_6465;
    /// Maglev's offset and skip per host (Maglev 3.4 uses two hashes).
    pub const MAGLEV_OFFSET: u64 = 0x6f66_6673_6574;
    pub const MAGLEV_SKIP: u64 = 0x736b_6970;
    /// A UE's replica group, from its IMSI (`router::imsi_group`).
    pub const GROUP: u64 = 0x0067_726f_7570;
}

/// A 64-bit hash of `key` under `seed`: MurmurHash3's 64-bit finalizer on
/// the key mixed with the finalized seed. For one seed it is a bijection
/// of `u64`, so distinct keys never collide.
pub fn hash64(seed: u64, key: u64) -> u64 {
    fmix64(key ^ fmix64(seed ^ 0x9e37_79b9_7f4a_7c15))
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_give_different_hashes_and_bits_spread() {
        assert_ne!(hash64(seed::KEY, 1), hash64(seed::VNODE, 1));
        // Consecutive keys land in every one of 16 buckets about equally.
        let mut buckets = [0u32; 16];
        for k in 0..16_000u64 {
            buckets[(hash64(seed::KEY, k) >> 60) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| (800..1200).contains(&b)), "{buckets:?}");
    }
}

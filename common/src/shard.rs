//! Shard choice: `shard = jump_hash(series_id, shard_count)`.
//!
//! Jump consistent hash (Lamping & Veach, 2014): no table, and when the shard
//! count grows from n to n+1 only 1/(n+1) of the keys move. Shard count is
//! immutable per cluster today, so a series never changes shard.

/// Shard number in `0..shard_count` for a `series_id`.
///
/// # Panics
/// Never; a `shard_count` of 0 is treated as 1.
#[inline]
pub fn jump_hash(series_id: u64, shard_count: u32) -> u32 {
    let buckets = i64::from(shard_count.max(1));
    let mut key = series_id;
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < buckets {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_bucket_is_zero() {
        for k in [0u64, 1, 42, u64::MAX] {
            assert_eq!(jump_hash(k, 1), 0);
            assert_eq!(jump_hash(k, 0), 0);
        }
    }

    #[test]
    fn known_vectors() {
        // Cross-checked with an independent Python transcription of the paper.
        assert_eq!(jump_hash(1, 1), 0);
        assert_eq!(jump_hash(0xDEAD_BEEF, 1 << 16), 64244);
        assert_eq!(jump_hash(256, 1024), 520);
        assert_eq!(jump_hash(123_456_789, 100), 34);
        assert_eq!(jump_hash(u64::MAX, 7), 2);
    }

    #[test]
    fn growing_moves_few_keys_and_only_to_the_new_shard() {
        let mut moved = 0;
        for k in 0..10_000u64 {
            let key = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let a = jump_hash(key, 10);
            let b = jump_hash(key, 11);
            if a != b {
                assert_eq!(b, 10, "a moved key goes to the new shard");
                moved += 1;
            }
        }
        assert!((600..1300).contains(&moved), "moved {moved} of 10000");
    }

    #[test]
    fn spreads_evenly() {
        let mut counts = [0u32; 16];
        for k in 0..160_000u64 {
            counts[jump_hash(k.wrapping_mul(0x9E37_79B9_7F4A_7C15), 16) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }
}

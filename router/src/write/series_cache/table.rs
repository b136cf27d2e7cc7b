//! One stripe's table: open addressing with linear probing over 32-byte
//! slots, no removal (a full table is cleared wholesale).
//!
//! Why not `HashMap`: a lookup in a 1M-entry hashbrown table is two
//! dependent cache misses (control bytes, then the entry), ~180 ns per
//! line at 1M series, and its bucket address cannot be known ahead. Here a
//! key's home slot is `base + (key & mask)`: a request prefetches it for a
//! line a few lines ahead, and the lookup finds it in cache.

use super::memory::Mapped;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// What a slot holds besides its key; `db == 0` marks an empty slot
/// (database ids start at 1), so an all-zero slot is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Value {
    pub(super) check: u64,
    pub(super) db: u32,
    pub(super) shard_count: u32,
    pub(super) shard: u32,
    pub(super) measurement_len: u32,
}

/// 32 bytes, aligned so that a slot never straddles two cache lines.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
pub(super) struct Slot {
    key: u64,
    value: Value,
}

/// Slots of a new table (it doubles up to the size its capacity needs):
/// one 4 KiB page.
const FIRST_SLOTS: usize = 128;

/// Slots a table of `capacity` entries ends with: entries fill at most 3/4
/// of the slots (linear probing gets long probes beyond).
pub(super) fn slots_for(capacity: usize) -> usize {
    (capacity * 4)
        .div_ceil(3)
        .next_power_of_two()
        .max(FIRST_SLOTS)
}

/// Whether a table of `slots` slots holding `len` entries must grow before
/// one more is added (load above 3/4), given that it may not grow past
/// `max_slots`.
fn must_grow(len: usize, slots: usize, max_slots: usize) -> bool {
    slots < max_slots && (len + 1) * 4 > slots * 3
}

/// A stripe's table. Changed under the stripe's lock only; `base` and
/// `mask` are also published for [`prefetch`] (a hint that needs no lock:
/// a stale pair only prefetches a useless line).
#[derive(Debug)]
pub(super) struct Table {
    slots: Option<Mapped<Slot>>,
    len: usize,
    capacity: usize,
}

impl std::fmt::Debug for Mapped<Slot> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} slots", self.as_slice().len())
    }
}

/// Where a stripe's table lives, for prefetching without its lock.
#[derive(Debug, Default)]
pub(super) struct Published {
    base: AtomicPtr<Slot>,
    mask: AtomicUsize,
}

impl Published {
    /// Asks the CPU to bring `key`'s home slot into cache.
    #[inline]
    pub(super) fn prefetch(&self, key: u64) {
        let base = self.base.load(Ordering::Relaxed);
        if base.is_null() {
            return;
        }
        let home = base.wrapping_add(key as usize & self.mask.load(Ordering::Relaxed));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it never faults, even on an
        // address no longer allocated, and reads nothing into the program.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(home.cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = home;
    }
}

impl Table {
    /// An empty table for at most `capacity` entries (no memory yet).
    pub(super) fn new(capacity: usize) -> Table {
        Table {
            slots: None,
            len: 0,
            capacity,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Slots allocated (memory is 32 bytes each).
    pub(super) fn slots(&self) -> usize {
        self.slots.as_ref().map_or(0, |m| m.as_slice().len())
    }

    /// The slot index of `key` in `slots`, or of the empty slot where it
    /// would go (there is one: at most 3/4 are used).
    #[inline]
    fn find(slots: &[Slot], key: u64) -> usize {
        let mask = slots.len() - 1;
        let mut i = key as usize & mask;
        loop {
            let s = &slots[i];
            if s.value.db == 0 || s.key == key {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub(super) fn get(&self, key: u64) -> Option<Value> {
        let slots = self.slots.as_ref()?.as_slice();
        let s = &slots[Self::find(slots, key)];
        (s.value.db != 0).then_some(s.value)
    }

    /// Inserts or replaces `key`'s value (`value.db != 0`). Returns how the
    /// number of entries changed: +1, 0 (replaced), or 1 - the entries
    /// dropped when a full table was cleared to make room.
    pub(super) fn insert(&mut self, key: u64, value: Value, published: &Published) -> i64 {
        debug_assert_ne!(value.db, 0, "database ids start at 1");
        if self.capacity == 0 {
            return 0;
        }
        let max_slots = slots_for(self.capacity);
        let size = self.slots();
        if size == 0 || must_grow(self.len, size, max_slots) {
            self.resize((size * 2).clamp(FIRST_SLOTS, max_slots), published);
        }
        let full = self.len >= self.capacity;
        let slots = self.slots.as_mut().expect("allocated above").as_mut_slice();
        let mut i = Self::find(slots, key);
        let mut change = 0;
        if slots[i].value.db == 0 && full {
            // Full and the key is new: clear wholesale (no per-hit
            // bookkeeping to pick a victim; the stripe refills from traffic).
            change -= self.len as i64;
            slots.fill(Slot::default());
            self.len = 0;
            i = Self::find(slots, key);
        }
        if slots[i].value.db == 0 {
            self.len += 1;
            change += 1;
        }
        slots[i] = Slot { key, value };
        change
    }

    fn resize(&mut self, size: usize, published: &Published) {
        let mut new = Mapped::<Slot>::zeroed(size);
        let slots = new.as_mut_slice();
        if let Some(old) = &self.slots {
            for s in old.as_slice().iter().filter(|s| s.value.db != 0) {
                let i = Self::find(slots, s.key);
                slots[i] = *s;
            }
        }
        published.base.store(slots.as_mut_ptr(), Ordering::Relaxed);
        published.mask.store(size - 1, Ordering::Relaxed);
        self.slots = Some(new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(db: u32, shard: u32) -> Value {
        Value {
            check: 7,
            db,
            shard_count: 8,
            shard,
            measurement_len: 3,
        }
    }

    #[test]
    fn slot_is_half_a_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 32);
    }

    #[test]
    fn sizes_keep_the_load_at_most_three_quarters() {
        assert_eq!(slots_for(12), 128, "at least a page");
        assert_eq!(slots_for(97), 256);
        assert_eq!(slots_for(24_576), 32_768);
        assert!(must_grow(12, 16, 64));
        assert!(!must_grow(11, 16, 64));
        assert!(!must_grow(12, 16, 16), "not past the largest size");
    }

    #[test]
    fn inserted_keys_are_found_through_growth_and_collisions() {
        let p = Published::default();
        let mut t = Table::new(1_000);
        // Keys sharing their low bits collide at the same home slot.
        let keys: Vec<u64> = (0..1_000u64).map(|i| (i << 20) | 5).collect();
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(t.insert(k, value(1, i as u32), &p), 1);
        }
        assert_eq!(t.len(), 1_000);
        assert_eq!(t.slots(), slots_for(1_000));
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(t.get(k), Some(value(1, i as u32)));
        }
        assert_eq!(t.get(6), None);
        assert_eq!(t.insert(keys[3], value(2, 9), &p), 0, "replaced");
        assert_eq!(t.get(keys[3]), Some(value(2, 9)));
        assert!(!p.base.load(Ordering::Relaxed).is_null());
        p.prefetch(keys[0]);
    }

    #[test]
    fn a_full_table_is_cleared_for_a_new_key_only() {
        let p = Published::default();
        let mut t = Table::new(200);
        for k in 1..=200u64 {
            t.insert(k, value(1, 0), &p);
        }
        assert_eq!(t.slots(), 512, "never grows past its capacity's size");
        assert_eq!(t.insert(5, value(1, 1), &p), 0, "a known key is updated");
        assert_eq!(t.len(), 200);
        assert_eq!(t.insert(1_000, value(1, 0), &p), 1 - 200);
        assert_eq!((t.len(), t.get(1_000).is_some(), t.get(1)), (1, true, None));
        assert_eq!(Table::new(0).insert(1, value(1, 0), &p), 0);
    }
}

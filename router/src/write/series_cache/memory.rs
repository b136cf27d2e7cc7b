//! The memory of one stripe's table: an anonymous mapping of its own,
//! zero on first touch (an all-zero slot is empty), and for tables of
//! 2 MiB or more aligned to 2 MiB and advised to use huge pages.
//!
//! Why: at 1M series the cache is ~45 MB. With 4 KiB pages every lookup
//! also missed the TLB, and the prefetch of a line's slot stalled on that
//! page walk (85% of the look-ahead's samples sat on the instruction after
//! the prefetch). 2 MiB pages map the whole cache with a few TLB entries.
//! Small tables use plain pages: memory grows with the entries.

use std::ptr::NonNull;

/// Huge page size on x86-64 and most arm64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeroed values of `T` in a mapping of their own. `T` must be
/// valid when all-zero (checked by its user: `Slot::default()` is zeros).
pub(super) struct Mapped<T> {
    start: NonNull<T>,
    len: usize,
    map: *mut libc::c_void,
    map_len: usize,
}

// SAFETY: the mapping is owned by this value alone, like a `Vec<T>`'s
// buffer; access goes through `&self`/`&mut self`.
unsafe impl<T: Send> Send for Mapped<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Sync> Sync for Mapped<T> {}

/// Where a 2 MiB-aligned region of `bytes` starts in a mapping at `map`
/// (mapped with one huge page to spare), or `map` itself below 2 MiB.
fn aligned_start(map: usize, bytes: usize) -> usize {
    if bytes >= HUGE_PAGE {
        map.next_multiple_of(HUGE_PAGE)
    } else {
        map
    }
}

impl<T: Copy> Mapped<T> {
    pub(super) fn zeroed(len: usize) -> Mapped<T> {
        let bytes = (len * std::mem::size_of::<T>()).max(1);
        let map_len = if bytes >= HUGE_PAGE {
            bytes + HUGE_PAGE
        } else {
            bytes
        };
        // SAFETY: a fresh private anonymous mapping; no existing memory
        // is touched. Checked for MAP_FAILED below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let layout = std::alloc::Layout::array::<T>(len).expect("slot table size");
            std::alloc::handle_alloc_error(layout);
        }
        let start = aligned_start(map as usize, bytes);
        if bytes >= HUGE_PAGE {
            // SAFETY: [start, start + bytes) lies inside the mapping. A
            // hint: without huge pages (disabled, or none free) the table
            // still works on 4 KiB pages, so the result is not checked.
            unsafe {
                libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
            }
        }
        Mapped {
            start: NonNull::new(start as *mut T).expect("mmap returned a non-null address"),
            len,
            map,
            map_len,
        }
    }

    pub(super) fn as_slice(&self) -> &[T] {
        // SAFETY: `len` values of T from `start` lie in the mapping (page
        // aligned, so aligned for T), zero-initialised, which the user
        // guarantees is a valid T; borrowed with `self`.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`, exclusively borrowed with `self`.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) }
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `zeroed`, once.
        unsafe {
            libc::munmap(self.map, self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_tables_start_on_a_huge_page_and_small_ones_where_mapped() {
        assert_eq!(aligned_start(4096, 1 << 20), 4096);
        assert_eq!(aligned_start(4096, 4 << 20), 2 << 20);
        assert_eq!(aligned_start(2 << 20, 4 << 20), 2 << 20);
    }

    #[test]
    fn mapped_memory_is_zeroed_writable_and_aligned() {
        for len in [1usize, 1_000, 200_000] {
            let mut m: Mapped<[u64; 4]> = Mapped::zeroed(len);
            assert!(m.as_slice().iter().all(|v| *v == [0; 4]));
            m.as_mut_slice()[len - 1] = [1, 2, 3, 4];
            assert_eq!(m.as_slice()[len - 1], [1, 2, 3, 4]);
            let bytes = len * 32;
            if bytes >= HUGE_PAGE {
                assert_eq!(m.as_slice().as_ptr() as usize % HUGE_PAGE, 0);
            }
        }
    }
}

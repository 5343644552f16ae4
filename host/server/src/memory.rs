//! The process's memory: transparent huge pages off.
//!
//! An allocator may advise the kernel to back its arenas with transparent huge pages
//! (`MADV_HUGEPAGE`; mimalloc, the host's allocator until the twenty-first round, did), so where
//! the system leaves THP to `madvise` (Debian's default), each first touch of a 2 MiB region
//! after the allocator gave memory back faults in a whole huge page and the kernel zeroes 2 MiB:
//! in a web-index load with 32 runs in flight, ≈ 13 % of the observer workers' samples were that
//! zeroing (BENCHMARKS.md, "Sixth round"). Turned off for the process, faults zero 4 KiB pages
//! as they are touched, whatever the allocator (jemalloc now) advises.

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`: every later
/// fault, whatever was advised). Returns false where the kernel refuses (not Linux, or too
/// old): nothing changes then.
pub fn without_transparent_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and touches no memory of
        // ours.
        #[allow(unsafe_code)]
        let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn the_switch_is_set_for_the_process() {
        assert!(super::without_transparent_huge_pages());
        // SAFETY: PR_GET_THP_DISABLE reads the flag; no memory of ours is touched.
        #[allow(unsafe_code)]
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1);
    }
}

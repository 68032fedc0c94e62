//! The process's resident memory between phases.

/// Give the allocator's free pages back to the system (glibc's `malloc_trim`; nothing elsewhere). Memory freed
/// by one phase stays resident otherwise: glibc keeps freed blocks in the arena of the thread that allocated
/// them (the readers' batches, freed by the main thread) and in the holes of its heaps, and the next phase's
/// allocations come from elsewhere. The analysis calls it just before its peak, the sweep of the device rows.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only releases memory no allocation owns.
    unsafe {
        libc::malloc_trim(0);
    }
}

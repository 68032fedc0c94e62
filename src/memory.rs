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

/// Fewer malloc arenas than glibc's default (8 per core): the parallel readers allocate little (their rows go
/// into vectors reserved once), but each arena they touch keeps its own free and fragmented pages resident.
/// Measured on the 16-core machine at 5 M kernels: `sqlite-ranges` peak RSS 199 -> 192 MB with 4 arenas (as with 2
/// or 8), time unchanged. Only `sqlite-ranges` calls it, before any thread starts: with it, the report's step
/// budget, whose parallel passes allocate, spent 0.99 s in its steps phase instead of 0.30 s (16 threads on 4
/// arenas' locks).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes no pointer; it changes a tuning parameter of the allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 4);
    }
}

/// Drop `v` in a thread of its own, so that the caller goes on while a large analysis's memory is given back:
/// the last phase of a run is one thread's work, and its frees (tens of milliseconds of unmapping at 5 M
/// kernels) would otherwise hold up its result while another core waits. A process that exits meanwhile
/// leaves the rest to the system. Dropped here when no thread can be started (the closure holding `v` is
/// dropped by the failed spawn).
pub fn drop_beside<T: Send + 'static>(v: T) {
    let _ = std::thread::Builder::new().name("nsyskit-drop".into()).spawn(move || drop(v));
}

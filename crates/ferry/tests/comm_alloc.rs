//! The into-buffer collectives and receives of `ferry::Comm` allocate nothing per call: the
//! only allocations left in a steady state are the in-memory transport's own (one payload copy
//! per message sent). Counted per thread by a wrapping global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ferry::prelude::*;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // `try_with`: thread-local storage may already be gone while a thread exits.
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

/// Allocations per call of `f` on this thread, over `calls` calls after as many warm-up calls
/// (the warm-up covers the transport's per-flow tables for every sequence number).
fn per_call(c: &mut Comm, calls: u64, f: &mut dyn FnMut(&mut Comm) -> ferry::Result<()>) -> f64 {
    for _ in 0..calls {
        f(c).unwrap();
    }
    let before = allocs();
    for _ in 0..calls {
        f(c).unwrap();
    }
    (allocs() - before) as f64 / calls as f64
}

#[test]
fn into_buffer_operations_allocate_only_the_transports_payload_copies() {
    const N: usize = 3;
    let results = ferry::run_threads(N, |mut c: Comm| {
        let r = c.rank();
        let send = [r as u64; 4];
        let mut all = vec![0u64; 4 * N];
        let mut parts = vec![r as u64; 4 * N];
        let mut got = [0u64; 4];
        let calls = 600;
        // Each call sends N-1 messages: the mem transport copies each payload once.
        let ag = per_call(&mut c, calls, &mut |c| c.allgather_into(&send, &mut all));
        let a2a = per_call(&mut c, calls, &mut |c| {
            let snapshot = parts.clone();
            let r = c.alltoall_into(&snapshot, &mut parts);
            drop(snapshot);
            r
        }) - 1.0; // the clone above
        let shift = per_call(&mut c, calls, &mut |c| {
            c.sendrecv_into(&send, (r + 1) % N, &mut got, (r + N - 1) % N, 5)
        });
        c.finish()?;
        Ok((ag, a2a, shift))
    })
    .unwrap();
    for (rank, (ag, a2a, shift)) in results.into_iter().enumerate() {
        let sent = (N - 1) as f64;
        // Amortised growth of the transport's channel blocks and inbox is well under one
        // allocation per call; a new exchange per call would add two (its two vectors).
        assert!(
            ag < sent + 0.5,
            "rank {rank}: allgather_into: {ag} allocations per call"
        );
        assert!(
            a2a < sent + 0.5,
            "rank {rank}: alltoall_into: {a2a} allocations per call"
        );
        assert!(
            shift < 1.5,
            "rank {rank}: sendrecv_into: {shift} allocations per call"
        );
    }
}

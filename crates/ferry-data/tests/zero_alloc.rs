//! D5: a transition between two fixed partitionings runs with zero heap allocations after its
//! first execution, proven with a counting global allocator.
//!
//! The counter only counts on threads that switched it on, and the transport wrapper switches
//! it off while the backend works: the in-memory test backend allocates a copy per message
//! (real backends have their own buffer pools), and what is measured here is the data layer's
//! own work (planning, packing, exchange set-up, unpacking, folding).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use ferry_core::mem::MemTransport;
use ferry_core::{Exchange, Result, Stats, Transport};
use ferry_data::{Container, DataFlow, Instance, Partitioner, Partitioning, ReduceOp, Space};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
    }
}

fn allocs() -> usize {
    ALLOCS.with(|a| a.get())
}

// SAFETY: forwards to the system allocator; only adds a counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count_one();
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count_one();
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Pauses counting while the backend runs.
struct Uncounted(MemTransport);

fn paused<R>(f: impl FnOnce() -> R) -> R {
    let was = COUNTING.with(|c| c.replace(false));
    let r = f();
    COUNTING.with(|c| c.set(was));
    r
}

impl Transport for Uncounted {
    fn rank(&self) -> usize {
        self.0.rank()
    }
    fn size(&self) -> usize {
        self.0.size()
    }
    fn name(&self) -> &'static str {
        "uncounted-mem"
    }
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        paused(|| self.0.progress_exchange(ex))
    }
    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        paused(|| self.0.wait_for_input(timeout))
    }
    fn stats(&self) -> Stats {
        self.0.stats()
    }
}

#[test]
fn repeated_switches_do_not_allocate() {
    let counts = MemTransport::run(4, |t| {
        let mut t = Uncounted(t);
        let mut inst = Instance::for_transport(&t).unwrap();
        let w = inst.world().clone();
        let s = Space::new2(64, 48).unwrap();
        let write = Partitioning::new(&s, &w, &Partitioner::Bisection).unwrap();
        let read =
            Partitioning::derived(&s, &Partitioner::CornerHalo { depth: 1 }, &write).unwrap();
        let all = Partitioning::new(&s, &w, &Partitioner::All).unwrap();
        let mut c = Container::<f64>::new(&mut inst, "z", &s);
        c.reserve(&[&write, &read]).unwrap();
        c.switch_to(&mut t, &write, DataFlow::None, None).unwrap();
        c.fill(t.rank() as f64);
        // First round: plans, binds and sizes everything.
        c.switch_to(&mut t, &read, DataFlow::Preserve, None)
            .unwrap();
        c.switch_to(&mut t, &write, DataFlow::Preserve, None)
            .unwrap();
        // Explicit action sequences (jac -a) as well as cached switch_to.
        let mut to_all = c.prepare(&all, DataFlow::Preserve, true).unwrap();
        let mut back = {
            // bind the way back from `all` through a scratch container in the same state
            c.run(&mut t, &mut to_all, Some(&ReduceOp::Sum)).unwrap();
            c.prepare(&write, DataFlow::Preserve, false).unwrap()
        };
        c.run(&mut t, &mut back, None).unwrap();

        let before = allocs();
        COUNTING.with(|x| x.set(true));
        for _ in 0..20 {
            c.switch_to(&mut t, &read, DataFlow::Preserve, None)
                .unwrap();
            c.switch_to(&mut t, &write, DataFlow::Preserve, None)
                .unwrap();
            c.run(&mut t, &mut to_all, Some(&ReduceOp::Sum)).unwrap();
            c.run(&mut t, &mut back, None).unwrap();
        }
        COUNTING.with(|x| x.set(false));
        allocs() - before
    });
    // Counted per rank thread; every rank must be allocation-free.
    assert_eq!(
        counts.iter().max(),
        Some(&0),
        "allocations during steady-state switches: {counts:?}"
    );
}

#[test]
fn the_counter_counts() {
    COUNTING.with(|x| x.set(true));
    let before = allocs();
    let v: Vec<u64> = Vec::with_capacity(1000);
    std::hint::black_box(&v);
    COUNTING.with(|x| x.set(false));
    assert!(allocs() > before);
}

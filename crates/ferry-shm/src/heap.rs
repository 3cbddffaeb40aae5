//! [`SharedHeap`]: an opt-in global allocator that serves large allocations from anonymous
//! memory files, so that a node-local peer can map the sender's buffer and receive a large
//! message with one `memcpy` (the analogue of MPI's `MPI_Alloc_mem` with XPMEM).
//!
//! Every allocation of at least [`SharedHeap::MIN_BYTES`] gets its own memory file
//! (`memfd_create`, sized and reserved with `fallocate` so that a full memory cgroup is a
//! fallback to the system allocator, never a SIGBUS on first touch) mapped read-write and
//! shared, and is listed in a fixed per-process table: its address range, descriptor, inode
//! and a generation that no other region of any process of the job reuses (seeded from the
//! clock at the first allocation, then counted up). A large send whose buffer lies in a listed
//! region offers a descriptor naming the region (see `transport/send.rs`); the receiver maps
//! the region once through `/proc/<pid>/fd/<fd>` and keeps the mapping keyed by
//! (pid, generation) (`heap_map.rs`). Anything else (small allocations, alignment above a
//! page, a full table, a refused `memfd_create`) goes to the system allocator.
//!
//! The allocator itself never allocates (the table is static, the system calls go through
//! `libc`), so it is safe as `#[global_allocator]`. No leftovers: a memory file has no name
//! and goes with the last process that maps it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// Regions the table lists at most; further large allocations go to the system allocator.
const SLOTS: usize = 256;
/// Tag of a slot that is free.
const FREE: u64 = 0;
/// Tag of a slot being filled or emptied.
const BUSY: u64 = u64::MAX;

struct Slot {
    /// FREE, BUSY, or the region's generation (published: the other fields are valid).
    tag: AtomicU64,
    base: AtomicUsize,
    len: AtomicUsize,
    fd: AtomicI32,
    ino: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)] // only the array initialiser below uses it
const EMPTY: Slot = Slot {
    tag: AtomicU64::new(FREE),
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
    ino: AtomicU64::new(0),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// One past the highest slot ever used: lookups scan no further.
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Regions listed now; 0 makes a lookup one load (the default path pays nothing else).
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The next generation; 0 until the first allocation seeds it from the clock.
static NEXT_GEN: AtomicU64 = AtomicU64::new(0);

/// A region of the shared heap that holds a buffer, as the sender's descriptor names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeapRegion {
    pub generation: u64,
    pub fd: i32,
    pub ino: u64,
    pub base: usize,
    pub len: usize,
}

/// The region of this process's shared heap that holds all of `data`, if any.
pub(crate) fn find(data: &[u8]) -> Option<HeapRegion> {
    if LIVE.load(Ordering::Acquire) == 0 || data.is_empty() {
        return None;
    }
    let start = data.as_ptr() as usize;
    let end = start + data.len();
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    for s in &TABLE[..high] {
        let t1 = s.tag.load(Ordering::Acquire);
        if t1 == FREE || t1 == BUSY {
            continue;
        }
        let base = s.base.load(Ordering::Relaxed);
        let len = s.len.load(Ordering::Relaxed);
        if start < base || end > base + len {
            continue;
        }
        let r = HeapRegion {
            generation: t1,
            fd: s.fd.load(Ordering::Relaxed),
            ino: s.ino.load(Ordering::Relaxed),
            base,
            len,
        };
        // The slot may have been emptied and refilled while it was read (another thread
        // freeing and allocating); the fields belong to `t1` only if the tag is unchanged.
        std::sync::atomic::fence(Ordering::Acquire);
        if s.tag.load(Ordering::Relaxed) == t1 {
            return Some(r);
        }
    }
    None
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn next_generation() -> u64 {
    if NEXT_GEN.load(Ordering::Relaxed) == 0 {
        // Seeded from the clock so that a process that replaces a dead one under the same pid
        // (a respawned rank) never repeats a generation a peer may still have cached.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            .clamp(1, u64::MAX / 2);
        let _ = NEXT_GEN.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }
    NEXT_GEN.fetch_add(1, Ordering::Relaxed)
}

/// Allocates a listed region of at least `size` bytes; None when any step is refused.
fn alloc_region(size: usize) -> Option<*mut u8> {
    let page = page_size();
    let len = size.checked_add(page - 1)? / page * page;
    let off = libc::off_t::try_from(len).ok()?;
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(c"ferry-heap".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let give_up = |p: *mut libc::c_void| {
        if !p.is_null() {
            // SAFETY: `p` is the mapping of `len` bytes made below and not yet handed out.
            unsafe { libc::munmap(p, len) };
        }
        // SAFETY: `fd` is the descriptor opened above, owned here.
        unsafe { libc::close(fd) };
        None
    };
    // SAFETY: plain system calls on the descriptor owned here; `st` is written by fstat.
    let (sized, st) = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let ok = libc::ftruncate(fd, off) == 0
            && libc::fallocate(fd, 0, 0, off) == 0
            && libc::fstat(fd, &mut st) == 0;
        (ok, st)
    };
    if !sized {
        return give_up(std::ptr::null_mut());
    }
    // SAFETY: a fresh shared mapping of the whole file, which is exactly `len` bytes long.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return give_up(std::ptr::null_mut());
    }
    let Some(i) = (0..SLOTS).find(|&i| {
        TABLE[i]
            .tag
            .compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }) else {
        return give_up(p);
    };
    let s = &TABLE[i];
    s.base.store(p as usize, Ordering::Relaxed);
    s.len.store(len, Ordering::Relaxed);
    s.fd.store(fd, Ordering::Relaxed);
    s.ino.store(st.st_ino, Ordering::Relaxed);
    HIGH.fetch_max(i + 1, Ordering::AcqRel);
    LIVE.fetch_add(1, Ordering::AcqRel);
    s.tag.store(next_generation(), Ordering::Release);
    Some(p.cast())
}

/// Frees the region at `ptr` if the table lists it; false if it is not a region.
fn free_region(ptr: *mut u8) -> bool {
    if LIVE.load(Ordering::Acquire) == 0 {
        return false;
    }
    let high = HIGH.load(Ordering::Acquire).min(SLOTS);
    for s in &TABLE[..high] {
        let t = s.tag.load(Ordering::Acquire);
        if t == FREE || t == BUSY || s.base.load(Ordering::Relaxed) != ptr as usize {
            continue;
        }
        // Only the owner of an allocation frees it, so nobody else empties this slot now.
        s.tag.store(BUSY, Ordering::Release);
        let len = s.len.load(Ordering::Relaxed);
        let fd = s.fd.swap(-1, Ordering::Relaxed);
        // SAFETY: the mapping and descriptor this slot listed, freed exactly once (the slot
        // is BUSY, and the caller gives up the allocation).
        unsafe {
            libc::munmap(ptr.cast(), len);
            libc::close(fd);
        }
        LIVE.fetch_sub(1, Ordering::AcqRel);
        s.tag.store(FREE, Ordering::Release);
        return true;
    }
    false
}

/// An allocator for `#[global_allocator]` that puts large allocations into node-shared
/// memory, so that the shared-memory backend moves large messages from them with one copy
/// (see the module documentation). Opt-in: nothing changes for a program that does not
/// install it.
///
/// ```no_run
/// #[global_allocator]
/// static HEAP: ferry_shm::SharedHeap = ferry_shm::SharedHeap::new();
/// ```
pub struct SharedHeap {
    active: AtomicBool,
}

impl SharedHeap {
    /// Allocations at least this large come from node-shared memory (a memory file each).
    pub const MIN_BYTES: usize = 64 * 1024;

    /// A heap that serves large allocations from node-shared memory from the start.
    pub const fn new() -> SharedHeap {
        SharedHeap {
            active: AtomicBool::new(true),
        }
    }

    /// A heap that forwards everything to the system allocator until
    /// [`set_active`](Self::set_active) switches it on (a program that decides at run time).
    pub const fn inactive() -> SharedHeap {
        SharedHeap {
            active: AtomicBool::new(false),
        }
    }

    /// Switches serving new large allocations from node-shared memory on or off; allocations
    /// made before keep where they are and are freed correctly either way.
    pub fn set_active(&self, on: bool) {
        self.active.store(on, Ordering::Relaxed);
    }

    /// Whether new large allocations come from node-shared memory.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Large allocations currently in node-shared memory (in this process, from any
    /// `SharedHeap`).
    pub fn shared_regions() -> usize {
        LIVE.load(Ordering::Relaxed)
    }

    fn wants(&self, layout: Layout) -> bool {
        layout.size() >= Self::MIN_BYTES
            && layout.align() <= page_size()
            && self.active.load(Ordering::Relaxed)
    }
}

impl Default for SharedHeap {
    fn default() -> SharedHeap {
        SharedHeap::new()
    }
}

// SAFETY: every block handed out is either the system allocator's (freed by it) or a fresh
// page-aligned mapping of at least `layout.size()` bytes (page alignment covers every
// alignment `wants` admits), zero-filled, listed until `dealloc` unmaps it.
unsafe impl GlobalAlloc for SharedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.wants(layout) {
            if let Some(p) = alloc_region(layout.size()) {
                return p;
            }
        }
        // SAFETY: forwarded with the caller's layout (non-zero size, per GlobalAlloc).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.wants(layout) {
            // A new memory file reads as zeros.
            if let Some(p) = alloc_region(layout.size()) {
                return p;
            }
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= Self::MIN_BYTES && free_region(ptr) {
            return;
        }
        // SAFETY: not a region, so the system allocator made it with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let is_region = layout.size() >= Self::MIN_BYTES;
        if !is_region && new_size < Self::MIN_BYTES {
            // SAFETY: small to small stays with the system allocator that made it.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: `layout.align()` is valid and the caller guarantees `new_size` does not
        // overflow when rounded to it.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new` has a non-zero size (GlobalAlloc::realloc's contract).
        let p = unsafe { self.alloc(new) };
        if !p.is_null() {
            // SAFETY: both blocks are valid for the smaller size and distinct allocations.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        p
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The table is per process: tests that check what it lists run one at a time.
    pub(crate) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn large_blocks_are_listed_regions_and_small_ones_are_not() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let heap = SharedHeap::new();
        let big = Layout::from_size_align(100_000, 8).unwrap();
        // SAFETY: non-zero layouts; every block is freed with its layout below.
        unsafe {
            let p = heap.alloc(big);
            assert!(!p.is_null());
            let data = std::slice::from_raw_parts_mut(p, 100_000);
            data[99_999] = 3;
            let r = find(&data[10..5000]).expect("a listed region");
            assert_eq!(r.base, p as usize);
            assert!(r.len >= 100_000);
            // Anonymous: a memory file with no name in /dev/shm.
            let link = std::fs::read_link(format!("/proc/self/fd/{}", r.fd)).unwrap();
            assert!(link.to_string_lossy().starts_with("/memfd:ferry-heap"));
            assert!(find(&data[..]).is_some());
            let small = heap.alloc(Layout::from_size_align(100, 8).unwrap());
            assert!(find(std::slice::from_raw_parts(small, 100)).is_none());
            heap.dealloc(small, Layout::from_size_align(100, 8).unwrap());
            // Grows into a new region with the bytes kept and a new generation.
            let q = heap.realloc(p, big, 300_000);
            let grown = std::slice::from_raw_parts(q, 300_000);
            assert_eq!(grown[99_999], 3);
            let r2 = find(grown).expect("the grown block is a region");
            assert_ne!(r2.generation, r.generation);
            heap.dealloc(q, Layout::from_size_align(300_000, 8).unwrap());
            assert!(find(std::slice::from_raw_parts(q, 10)).is_none());
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn an_inactive_heap_uses_the_system_allocator() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let heap = SharedHeap::inactive();
        let big = Layout::from_size_align(200_000, 8).unwrap();
        // SAFETY: as above.
        unsafe {
            let p = heap.alloc_zeroed(big);
            assert!(find(std::slice::from_raw_parts(p, 200_000)).is_none());
            heap.set_active(true);
            let q = heap.alloc_zeroed(big);
            let s = std::slice::from_raw_parts(q, 200_000);
            assert!(s.iter().all(|&b| b == 0));
            assert!(find(s).is_some());
            heap.dealloc(p, big);
            heap.dealloc(q, big);
        }
    }
}

//! A container's two storage buffers (current and spare, D6), on the heap or in one node-shared
//! region (S3).
//!
//! A shared region holds a header and both buffers: `[header | buffer 0 | buffer 1]`. The
//! header's state word says which switch (if any) currently lets peers read this rank's
//! current buffer: the owner stores a fresh epoch before it offers the buffer and 0 once every
//! reader has confirmed its copy, or the switch failed. A reader checks the word before and
//! after copying (see `action/share.rs`), so an owner that gave up, freed or reused its memory
//! is noticed instead of read as valid data.
//!
//! The element semantics are those of the heap vectors they replace: growing fills with
//! `T::default()`, shrinking forgets, so both kinds give byte-identical containers.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_core::{Element, Error, ErrorKind, RegionId, Result, SharedMemory, SharedRegion};

/// Bytes before the first buffer of a region (the header's cache lines).
pub(crate) const HEADER: usize = 128;
/// Offset of the state word in the header (its own cache line; the owner writes it twice per
/// switch, readers read it).
pub(crate) const STATE: usize = 64;
const MAGIC_OFF: usize = 0;
/// "ferrydat" in the first header word: a reader checks it to refuse a mapping that is not a
/// data region.
pub(crate) const MAGIC: u64 = 0x7461_6479_7272_6566;

/// What an owner offers its readers in one switch: where its current buffer lives.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Published {
    pub id: RegionId,
    /// Byte offset of the buffer in the region.
    pub base: usize,
    /// Elements in the buffer.
    pub len: usize,
    /// The value of the state word while the offer stands.
    pub epoch: u64,
}

struct Shared {
    region: SharedRegion,
    /// Elements each buffer can hold.
    cap: usize,
    len: [usize; 2],
}

/// The two buffers; see the module documentation.
pub(crate) struct Storage<T: Element> {
    heap: [Vec<T>; 2],
    shared: Option<Shared>,
    cur: usize,
    /// Where shared regions come from and peers' regions are mapped; `None`: heap only and
    /// no sharing protocol (not asked for, or unsupported by the backend).
    alloc: Option<Arc<dyn SharedMemory>>,
    /// Whether to allocate regions from `alloc` (cleared when an allocation failed: the
    /// protocol stays on, this rank just offers nothing).
    use_alloc: bool,
    epoch: u64,
    rank: usize,
}

/// Which of the two buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    Cur,
    Spare,
}

fn half_bytes<T>(cap: usize) -> Option<usize> {
    cap.checked_mul(std::mem::size_of::<T>())?
        .checked_add(63)
        .map(|b| b / 64 * 64)
}

impl<T: Element> Storage<T> {
    /// Empty buffers; shared ones (allocated on first growth) when `alloc` is given.
    pub(crate) fn new(alloc: Option<Arc<dyn SharedMemory>>, rank: usize) -> Storage<T> {
        Storage {
            heap: [Vec::new(), Vec::new()],
            shared: None,
            cur: 0,
            use_alloc: alloc.is_some(),
            alloc,
            epoch: 0,
            rank,
        }
    }

    /// Whether the buffers live in a node-shared region.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Whether switches of this container use the sharing protocol with peers on this node
    /// (the same on every rank of the job: it follows the configuration and the backend, not
    /// whether this rank's allocation succeeded).
    pub(crate) fn sharing(&self) -> Option<&Arc<dyn SharedMemory>> {
        self.alloc.as_ref()
    }

    fn len_of(&self, h: usize) -> usize {
        match &self.shared {
            Some(s) => s.len[h],
            None => self.heap[h].len(),
        }
    }

    fn ptr_of(&self, h: usize) -> *mut T {
        match &self.shared {
            Some(s) => {
                let off = HEADER + h * half_bytes::<T>(s.cap).unwrap_or(0);
                // SAFETY: the region holds the header and two halves of `half_bytes(cap)`
                // (checked when it was allocated), so the offset is inside it.
                unsafe { s.region.as_ptr().add(off).cast::<T>() }
            }
            None => self.heap[h].as_ptr().cast_mut(),
        }
    }

    fn slice(&self, h: usize) -> &[T] {
        match &self.shared {
            // SAFETY: buffer `h` starts at `ptr_of(h)` (64-aligned, so aligned for T) and its
            // first `len[h]` elements were initialised (zeroed region, or written by `resize`);
            // the region lives as long as `self`. Peers only read it.
            Some(s) => unsafe { std::slice::from_raw_parts(self.ptr_of(h), s.len[h]) },
            None => &self.heap[h],
        }
    }

    fn slice_mut(&mut self, h: usize) -> &mut [T] {
        match &self.shared {
            Some(s) => {
                let n = s.len[h];
                // SAFETY: as in `slice`; `&mut self` makes this the only view this rank has.
                // Peers read only cells this rank does not write while it offers the buffer.
                unsafe { std::slice::from_raw_parts_mut(self.ptr_of(h), n) }
            }
            None => &mut self.heap[h],
        }
    }

    fn idx(&self, w: Which) -> usize {
        match w {
            Which::Cur => self.cur,
            Which::Spare => 1 - self.cur,
        }
    }

    /// The current buffer as a raw pointer and its length, derived from the region (or the
    /// heap vector) without a reference over the buffer: for in-place switches, where peers
    /// read cells of it while this rank writes others (see `action/share/raw.rs`).
    pub(crate) fn cur_raw(&mut self) -> (*mut T, usize) {
        let c = self.cur;
        match &self.shared {
            Some(s) => (self.ptr_of(c), s.len[c]),
            None => (self.heap[c].as_mut_ptr(), self.heap[c].len()),
        }
    }

    /// The current buffer (read) and the spare one (write).
    pub(crate) fn split(&mut self) -> (&[T], &mut [T]) {
        let (c, s) = (self.cur, 1 - self.cur);
        let (nc, ns) = (self.len_of(c), self.len_of(s));
        if self.shared.is_some() {
            // SAFETY: the two halves of the region are disjoint; lengths as in `slice`.
            unsafe {
                (
                    std::slice::from_raw_parts(self.ptr_of(c), nc),
                    std::slice::from_raw_parts_mut(self.ptr_of(s), ns),
                )
            }
        } else {
            let [a, b] = &mut self.heap;
            if c == 0 {
                (&a[..], &mut b[..])
            } else {
                (&b[..], &mut a[..])
            }
        }
    }

    /// Makes the spare buffer the current one.
    pub(crate) fn swap(&mut self) {
        self.cur = 1 - self.cur;
    }

    /// Sets the length of buffer `w` to `n` (like `Vec::resize` with `T::default()`): new
    /// elements are default, shrinking forgets. Out of memory is an error value.
    pub(crate) fn resize(&mut self, w: Which, n: usize) -> Result<()> {
        let h = self.idx(w);
        let old = self.len_of(h);
        if n > old {
            self.grow(n, Some(h))?;
        }
        match &mut self.shared {
            Some(s) => {
                s.len[h] = n;
                if n > old {
                    self.slice_mut(h)[old..].fill(T::default());
                }
            }
            None => {
                let v = &mut self.heap[h];
                v.truncate(n);
                v.resize(n, T::default());
            }
        }
        Ok(())
    }

    /// Capacity for `n` elements in both buffers (D6): later resizes up to `n` allocate nothing.
    pub(crate) fn reserve(&mut self, n: usize) -> Result<()> {
        self.grow(n, None)
    }

    /// Ensures buffer `only` (both with `None`; a region always grows both) can hold `n`
    /// elements, keeping the contents.
    fn grow(&mut self, n: usize, only: Option<usize>) -> Result<()> {
        if let Some(s) = &self.shared {
            if s.cap >= n {
                return Ok(());
            }
        }
        if let Some(alloc) = self.alloc.clone().filter(|_| self.use_alloc) {
            let cap = match &self.shared {
                Some(s) => n.max(s.cap.saturating_add(s.cap / 2)),
                None => n,
            };
            match self.new_region(&*alloc, cap) {
                Ok(region) => {
                    self.move_into(region, cap);
                    return Ok(());
                }
                Err(e) => {
                    // Keep the copy path for this container: peers are told at each switch
                    // that this rank offers nothing.
                    tracing::debug!(
                        "rank {}: no shared storage, keeping the heap: {e}",
                        self.rank
                    );
                    self.use_alloc = false;
                    self.move_to_heap()?;
                }
            }
        }
        for (h, v) in self.heap.iter_mut().enumerate() {
            if only.is_some_and(|o| o != h) {
                continue;
            }
            let more = n.saturating_sub(v.len());
            v.try_reserve_exact(more).map_err(|e| {
                Error::new(ErrorKind::ResourceExhausted, "allocate")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "{n} elements of {} ({} bytes) for a container's local part",
                        T::NAME,
                        n.saturating_mul(std::mem::size_of::<T>())
                    ))
                    .with_source(e)
            })?;
        }
        Ok(())
    }

    fn new_region(&self, alloc: &dyn SharedMemory, cap: usize) -> Result<SharedRegion> {
        let bytes = half_bytes::<T>(cap)
            .and_then(|h| h.checked_mul(2))
            .and_then(|b| b.checked_add(HEADER))
            .ok_or_else(|| {
                Error::new(ErrorKind::ResourceExhausted, "allocate")
                    .on_rank(self.rank)
                    .with_detail(format!("{cap} elements of {} overflow", T::NAME))
            })?;
        let region = alloc.alloc(bytes)?;
        if region.len() < bytes || !(region.as_ptr() as usize).is_multiple_of(64) {
            return Err(Error::new(ErrorKind::Protocol, "allocate")
                .on_rank(self.rank)
                .with_detail("the backend's shared region is too small or misaligned"));
        }
        // SAFETY: the header's first word is inside the fresh region, 64-aligned, and no peer
        // knows the region yet.
        unsafe {
            (*region.as_ptr().add(MAGIC_OFF).cast::<AtomicU64>()).store(MAGIC, Ordering::Relaxed);
        }
        Ok(region)
    }

    /// Copies both buffers into `region` (capacity `cap` each) and drops the old storage.
    fn move_into(&mut self, region: SharedRegion, cap: usize) {
        let lens = [self.len_of(0), self.len_of(1)];
        let half = half_bytes::<T>(cap).unwrap_or(0);
        for (h, &n) in lens.iter().enumerate() {
            let src = self.slice(h);
            // SAFETY: half `h` of the new region has room for `cap >= n` elements (grow is
            // only called with cap >= every length), is 64-aligned and disjoint from `src`.
            unsafe {
                let dst = region.as_ptr().add(HEADER + h * half).cast::<T>();
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n);
            }
        }
        self.heap = [Vec::new(), Vec::new()];
        self.shared = Some(Shared {
            region,
            cap,
            len: lens,
        });
    }

    /// Moves the buffers back to the heap (shared allocation failed).
    fn move_to_heap(&mut self) -> Result<()> {
        if self.shared.is_none() {
            return Ok(());
        }
        let mut heap = [Vec::new(), Vec::new()];
        for (h, v) in heap.iter_mut().enumerate() {
            let src = self.slice(h);
            v.try_reserve_exact(src.len()).map_err(|e| {
                Error::new(ErrorKind::ResourceExhausted, "allocate")
                    .on_rank(self.rank)
                    .with_source(e)
            })?;
            v.extend_from_slice(src);
        }
        self.heap = heap;
        self.shared = None;
        Ok(())
    }

    fn state(&self) -> Option<&AtomicU64> {
        let s = self.shared.as_ref()?;
        // SAFETY: the state word is inside the header, 8-aligned (the region is 64-aligned).
        Some(unsafe { &*s.region.as_ptr().add(STATE).cast::<AtomicU64>() })
    }

    /// Offers the current buffer to readers of this switch: a fresh epoch in the state word
    /// (release: everything this rank wrote before is visible to a reader that sees it).
    /// `None` on the heap.
    pub(crate) fn publish(&mut self) -> Option<Published> {
        self.shared.as_ref()?;
        self.epoch += 1;
        let epoch = self.epoch;
        let state = self.state()?;
        state.store(epoch, Ordering::Release);
        let s = self.shared.as_ref()?;
        Some(Published {
            id: s.region.id(),
            base: HEADER + self.cur * half_bytes::<T>(s.cap).unwrap_or(0),
            len: s.len[self.cur],
            epoch,
        })
    }

    /// Ends the offer: readers that look again see that it no longer stands.
    pub(crate) fn withdraw(&mut self) {
        if let Some(state) = self.state() {
            state.store(0, Ordering::Release);
        }
    }
}

impl<T: Element> Deref for Storage<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.slice(self.cur)
    }
}

impl<T: Element> DerefMut for Storage<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let c = self.cur;
        self.slice_mut(c)
    }
}

impl<T: Element> Drop for Storage<T> {
    fn drop(&mut self) {
        // A reader that still held an offer sees it end before the memory goes.
        self.withdraw();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::shared::HeapShared;

    fn both(shared: bool) -> Storage<f64> {
        let alloc: Option<Arc<dyn SharedMemory>> = if shared {
            Some(Arc::new(HeapShared::for_job(1).remove(0)))
        } else {
            None
        };
        Storage::new(alloc, 0)
    }

    #[test]
    fn shared_buffers_behave_like_the_heap_vectors() {
        let mut h = both(false);
        let mut s = both(true);
        for st in [&mut h, &mut s] {
            st.resize(Which::Cur, 5).unwrap();
            for (i, v) in st.iter_mut().enumerate() {
                *v = i as f64 + 1.0;
            }
            st.resize(Which::Spare, 3).unwrap();
            {
                let (cur, spare) = st.split();
                spare.copy_from_slice(&cur[1..4]);
            }
            st.swap();
            st.resize(Which::Cur, 6).unwrap();
            st.resize(Which::Spare, 2).unwrap();
            st.resize(Which::Spare, 7).unwrap();
            st.reserve(100).unwrap();
        }
        assert!(s.is_shared() && !h.is_shared());
        assert_eq!(&h[..], &[2.0, 3.0, 4.0, 0.0, 0.0, 0.0]);
        assert_eq!(&h[..], &s[..]);
        let (hc, hs) = h.split();
        let (hc, hs) = (hc.to_vec(), hs.to_vec());
        let (sc, ss) = s.split();
        assert_eq!(hc, sc);
        assert_eq!(hs, ss, "regrown elements are default, as with Vec::resize");
    }

    #[test]
    fn publishing_sets_and_clears_the_state_word() {
        let mut s = both(true);
        assert!(
            s.publish().is_none(),
            "nothing to offer before any allocation"
        );
        s.resize(Which::Cur, 10).unwrap();
        let p = s.publish().unwrap();
        let q = s.publish().unwrap();
        assert!(q.epoch > p.epoch, "every offer has a fresh epoch");
        assert_eq!(p.len, 10);
        assert_eq!(s.state().unwrap().load(Ordering::Acquire), q.epoch);
        s.withdraw();
        assert_eq!(s.state().unwrap().load(Ordering::Acquire), 0);
        s.swap();
        s.resize(Which::Cur, 4).unwrap();
        let r = s.publish().unwrap();
        assert_ne!(r.base, p.base, "the other buffer");
        assert_eq!(r.len, 4);
        assert!(both(false).publish().is_none());
    }

    #[test]
    fn a_failed_shared_allocation_falls_back_to_the_heap() {
        struct Broken;
        impl SharedMemory for Broken {
            fn alloc(&self, len: usize) -> Result<SharedRegion> {
                Err(Error::new(ErrorKind::ResourceExhausted, "shared alloc")
                    .with_detail(format!("{len} bytes")))
            }
            fn map(&self, _: usize, _: &RegionId) -> Result<SharedRegion> {
                Err(Error::invalid("shared map", "broken"))
            }
        }
        let mut s: Storage<u32> = Storage::new(Some(Arc::new(Broken)), 3);
        s.resize(Which::Cur, 4).unwrap();
        s.fill(9);
        assert!(!s.is_shared());
        assert!(
            s.sharing().is_some(),
            "the protocol stays on: peers expect this rank's word"
        );
        assert_eq!(&s[..], &[9, 9, 9, 9]);
    }
}

//! Memory that the ranks of one node can map (S3): the interface through which the data layer
//! keeps containers where a peer can copy from them directly, without owning any I/O itself.
//!
//! A backend that can share memory between its ranks hands out a [`SharedMemory`] from
//! [`crate::Transport::shared_memory`]: the owner allocates a [`SharedRegion`] and tells peers
//! its [`RegionId`] (in an ordinary message); a peer on the same node maps the region by that
//! id. What the bytes mean, and when a peer may read them, is the caller's protocol: the
//! backend only provides the memory. Backends that cannot share memory (tcp, mpi, ranks on
//! other nodes) return `None`, and callers keep copying through messages.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::error::{Error, ErrorKind, Result};

/// Names one region of one owner, as the backend understands it (opaque to callers; 32 bytes so
/// that it travels in a fixed-size message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RegionId(pub [u64; 4]);

/// A mapping of a shared region: `len()` bytes at `as_ptr()`, zeroed at allocation, aligned to
/// at least 64 bytes. The mapping stays valid as long as this value lives, whatever the owner
/// does with its own mapping (a peer's copy never faults because the owner freed the region;
/// whether the bytes are still meaningful is the caller's protocol to decide).
pub struct SharedRegion {
    ptr: NonNull<u8>,
    len: usize,
    id: RegionId,
    _keep: Box<dyn Any + Send + Sync>,
}

// SAFETY: the region is plain memory owned by `_keep` (Send + Sync); every access goes through
// raw pointers whose synchronisation is the caller's protocol, as with any shared mapping.
unsafe impl Send for SharedRegion {}
// SAFETY: as above; `&SharedRegion` only hands out the pointer and the length.
unsafe impl Sync for SharedRegion {}

impl std::fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegion")
            .field("len", &self.len)
            .field("id", &self.id)
            .finish()
    }
}

impl SharedRegion {
    /// Wraps a mapping of `len` bytes at `ptr` that `keep` owns (unmapped when `keep` drops).
    ///
    /// # Safety
    /// `ptr` must point to `len` bytes readable and writable, aligned to 64 bytes, that stay
    /// mapped at least until `keep` is dropped, and nothing else may free them before.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        len: usize,
        id: RegionId,
        keep: Box<dyn Any + Send + Sync>,
    ) -> SharedRegion {
        SharedRegion {
            ptr,
            len,
            id,
            _keep: keep,
        }
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The id peers map it by.
    pub fn id(&self) -> RegionId {
        self.id
    }
}

/// Allocation and mapping of node-shared memory, handed out by a backend that has it.
pub trait SharedMemory: Send + Sync {
    /// Allocates `len` zeroed bytes that the other ranks of this node can map. Running out of
    /// memory is an error value (the memory is reserved up front, so touching it later cannot
    /// fault).
    fn alloc(&self, len: usize) -> Result<SharedRegion>;

    /// Maps region `id` of rank `owner` (a world rank on this node). An error if it is not
    /// (or no longer) a region of that rank.
    fn map(&self, owner: usize, id: &RegionId) -> Result<SharedRegion>;
}

/// Owns one heap allocation of [`HeapShared`]; freed when the last mapping drops.
struct HeapBlock {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: a plain heap block; accesses are synchronised by the users of the region.
unsafe impl Send for HeapBlock {}
// SAFETY: as above.
unsafe impl Sync for HeapBlock {}

impl Drop for HeapBlock {
    fn drop(&mut self) {
        // SAFETY: allocated in `HeapShared::alloc` with this layout, freed exactly once here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The job-wide table of regions of an in-memory job (ranks are threads of one process): a
/// region is a heap block, mapped by its owner and its peers through shared ownership.
#[derive(Default)]
struct HeapTable {
    /// (owner, serial, block) while the owner keeps it (weak: freeing is the owner's).
    regions: Mutex<Vec<(usize, u64, std::sync::Weak<HeapBlock>)>>,
    next: std::sync::atomic::AtomicU64,
}

/// One rank's handle on node-shared memory of an in-memory job (see [`crate::mem`]).
#[derive(Clone)]
pub struct HeapShared {
    table: Arc<HeapTable>,
    rank: usize,
}

impl HeapShared {
    /// One handle per rank of a job of `size` ranks, over one table.
    pub fn for_job(size: usize) -> Vec<HeapShared> {
        let table = Arc::new(HeapTable::default());
        (0..size)
            .map(|rank| HeapShared {
                table: table.clone(),
                rank,
            })
            .collect()
    }
}

impl SharedMemory for HeapShared {
    fn alloc(&self, len: usize) -> Result<SharedRegion> {
        let exhausted = || {
            Error::new(ErrorKind::ResourceExhausted, "shared alloc")
                .on_rank(self.rank)
                .with_detail(format!("{len} bytes of shared memory"))
        };
        let layout =
            std::alloc::Layout::from_size_align(len.max(64), 64).map_err(|_| exhausted())?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(exhausted)?;
        let block = Arc::new(HeapBlock { ptr, layout });
        let serial = self
            .table
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut regions = self.table.regions.lock().unwrap_or_else(|p| p.into_inner());
        regions.retain(|(_, _, w)| w.strong_count() > 0);
        regions.push((self.rank, serial, Arc::downgrade(&block)));
        let id = RegionId([self.rank as u64, serial, len as u64, 0]);
        // SAFETY: `block` owns `len` (at least) zeroed bytes aligned to 64 until it drops.
        Ok(unsafe { SharedRegion::from_raw(ptr, len, id, Box::new(block)) })
    }

    fn map(&self, owner: usize, id: &RegionId) -> Result<SharedRegion> {
        let regions = self.table.regions.lock().unwrap_or_else(|p| p.into_inner());
        let block = regions
            .iter()
            .find(|(o, s, _)| *o == owner && id.0[0] == owner as u64 && *s == id.0[1])
            .and_then(|(_, _, w)| w.upgrade())
            .ok_or_else(|| {
                Error::new(ErrorKind::Protocol, "shared map")
                    .on_rank(self.rank)
                    .with_peer(owner)
                    .with_detail(format!("rank {owner} has no region {:?} (freed?)", id.0))
            })?;
        let len = id.0[2] as usize;
        if len > block.layout.size() {
            return Err(Error::new(ErrorKind::Protocol, "shared map")
                .on_rank(self.rank)
                .with_peer(owner)
                .with_detail(format!(
                    "region {:?} claims {len} bytes, it has {}",
                    id.0,
                    block.layout.size()
                )));
        }
        let ptr = block.ptr;
        // SAFETY: the block stays allocated while this region holds it.
        Ok(unsafe { SharedRegion::from_raw(ptr, len, *id, Box::new(block)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_maps_what_the_owner_wrote_until_the_owner_frees_it() {
        let ranks = HeapShared::for_job(2);
        let region = ranks[0].alloc(100).unwrap();
        assert_eq!(region.len(), 100);
        assert_eq!(region.as_ptr() as usize % 64, 0);
        // SAFETY: 100 bytes owned by `region`; no other access meanwhile.
        unsafe {
            assert_eq!(*region.as_ptr().add(99), 0, "zeroed");
            *region.as_ptr().add(7) = 42;
        }
        let id = region.id();
        let peer = ranks[1].map(0, &id).unwrap();
        // SAFETY: the peer's mapping holds the block; the owner wrote before, no writer now.
        assert_eq!(unsafe { *peer.as_ptr().add(7) }, 42);
        assert!(ranks[1].map(1, &id).is_err(), "not a region of rank 1");
        drop(region);
        // The peer's mapping still holds the memory; a new mapping is refused.
        // SAFETY: as above.
        assert_eq!(unsafe { *peer.as_ptr().add(7) }, 42);
        drop(peer);
        let e = ranks[1].map(0, &id).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        let mut forged = id;
        forged.0[2] = 1 << 20;
        let again = ranks[0].alloc(64).unwrap();
        let mut big = again.id();
        big.0[2] = forged.0[2];
        assert!(ranks[1].map(0, &big).is_err(), "longer than the block");
    }
}

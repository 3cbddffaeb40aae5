//! Node-shared memory for the data layer's containers (S3): [`ShmShared`], the backend's
//! [`SharedMemory`].
//!
//! A region is an anonymous memory file (`memfd_create`), sized and reserved with `fallocate`
//! (so that a full memory cgroup is an error value at allocation, never a SIGBUS when a page is
//! first touched) and mapped by its owner. Its id is (pid, descriptor, inode, length); a peer
//! opens `/proc/<pid>/fd/<descriptor>` read-only, checks the inode (a descriptor number can be
//! reused for another file) and that the pid is the one the job segment lists for that rank,
//! maps it read-only and closes the descriptor again.
//!
//! No leftovers, by the same choice as the launcher's job segment (`handoff.rs`): nothing ever
//! has a name, so there is nothing to remove. The memory goes with the last process that maps
//! it, however the job ends (exit, crash, SIGKILL, Ctrl-C). Opening another process's
//! descriptor needs the same user and a dumpable process (ptrace *read* access, which Yama's
//! `ptrace_scope` does not restrict, unlike cross-memory attach); where it is refused, mapping
//! fails with an error value and the data layer falls back to messages.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferry_core::{Error, ErrorKind, RegionId, Result, SharedMemory, SharedRegion};
use memmap2::{MmapOptions, MmapRaw};

use crate::segment::Segment;
use crate::sys;

/// The owner's side of a region: the mapping and the descriptor peers open.
struct Owned {
    _map: MmapRaw,
    _fd: OwnedFd,
}

/// One rank's node-shared memory (see the module documentation).
pub(crate) struct ShmShared {
    seg: Arc<Segment>,
    /// Global rank -> index in the segment (None: another node).
    local_of: Vec<Option<usize>>,
    rank: usize,
}

impl ShmShared {
    pub(crate) fn new(seg: Arc<Segment>, local_of: Vec<Option<usize>>, rank: usize) -> ShmShared {
        ShmShared {
            seg,
            local_of,
            rank,
        }
    }

    fn err(&self, op: &'static str, e: std::io::Error, what: String) -> Error {
        Error::io(op, e).on_rank(self.rank).with_detail(what)
    }
}

impl SharedMemory for ShmShared {
    fn alloc(&self, len: usize) -> Result<SharedRegion> {
        let len = len.max(64);
        let what = || format!("a shared region of {len} bytes");
        let fd = rustix::fs::memfd_create("ferry-data", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| self.err("shared alloc", e.into(), what()))?;
        rustix::fs::ftruncate(&fd, len as u64)
            .map_err(|e| self.err("shared alloc", e.into(), what()))?;
        // Reserve every page now: on tmpfs a page that cannot be had when first written is a
        // SIGBUS, which would kill the rank instead of failing the allocation.
        rustix::fs::fallocate(&fd, rustix::fs::FallocateFlags::empty(), 0, len as u64).map_err(
            |e| {
                let e: std::io::Error = e.into();
                let kind = if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) {
                    ErrorKind::ResourceExhausted
                } else {
                    ErrorKind::Io
                };
                Error::new(kind, "shared alloc")
                    .on_rank(self.rank)
                    .with_detail(what())
                    .with_source(e)
            },
        )?;
        let map = MmapOptions::new()
            .len(len)
            .map_raw(fd.as_fd().as_raw_fd())
            .map_err(|e| self.err("shared alloc", e, what()))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| self.err("shared alloc", e.into(), what()))?;
        let id = RegionId([
            sys::my_pid() as u64,
            fd.as_raw_fd() as u64,
            st.st_ino,
            len as u64,
        ]);
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| {
            Error::new(ErrorKind::Io, "shared alloc")
                .on_rank(self.rank)
                .with_detail("mmap returned a null mapping")
        })?;
        let keep = Owned { _map: map, _fd: fd };
        // SAFETY: `keep` owns the mapping of `len` bytes at `ptr` (page-aligned, read-write,
        // zero-filled by the kernel) and unmaps it only when it drops.
        Ok(unsafe { SharedRegion::from_raw(ptr, len, id, Box::new(keep)) })
    }

    fn map(&self, owner: usize, id: &RegionId) -> Result<SharedRegion> {
        let [pid, fd, ino, len] = id.0;
        let bad = |why: String| {
            Error::new(ErrorKind::Protocol, "shared map")
                .on_rank(self.rank)
                .with_peer(owner)
                .with_detail(why)
        };
        let Some(Some(local)) = self.local_of.get(owner).copied() else {
            return Err(bad(format!("rank {owner} is not on this node")));
        };
        let listed = self.seg.pid(local).load(Ordering::Acquire);
        if listed != pid || pid == 0 {
            return Err(bad(format!(
                "region of process {pid}, rank {owner} is process {listed}"
            )));
        }
        let len = usize::try_from(len).map_err(|_| bad(format!("length {len}")))?;
        let path = format!("/proc/{pid}/fd/{fd}");
        let what = || format!("mapping rank {owner}'s region {path}");
        let file = std::fs::File::open(&path).map_err(|e| {
            Error::io("shared map", e)
                .on_rank(self.rank)
                .with_peer(owner)
                .with_detail(what())
        })?;
        let st = rustix::fs::fstat(&file).map_err(|e| {
            Error::io("shared map", e.into())
                .on_rank(self.rank)
                .with_peer(owner)
                .with_detail(what())
        })?;
        if st.st_ino != ino || (st.st_size as u64) < len as u64 {
            return Err(bad(format!(
                "{path} is no longer the region (freed, descriptor reused)"
            )));
        }
        let map = MmapOptions::new()
            .len(len)
            .map_raw_read_only(file.as_raw_fd())
            .map_err(|e| {
                Error::io("shared map", e)
                    .on_rank(self.rank)
                    .with_peer(owner)
                    .with_detail(what())
            })?;
        drop(file);
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| bad("null mapping".into()))?;
        // SAFETY: `map` owns a read-only mapping of `len` bytes at `ptr`, page-aligned; the file
        // is never shrunk by its owner, so every byte stays backed while the mapping lives.
        Ok(unsafe { SharedRegion::from_raw(ptr, len, *id, Box::new(map)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Layout;

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn a_region_is_seen_through_the_peer_mapping_and_checked() {
        let seg = Arc::new(Segment::anonymous(Layout::new(2, 4, 256).unwrap()).unwrap());
        for r in 0..2 {
            seg.pid(r).store(sys::my_pid() as u64, Ordering::Release);
        }
        let owner = ShmShared::new(seg.clone(), vec![Some(0), Some(1)], 0);
        let peer = ShmShared::new(seg.clone(), vec![Some(0), Some(1)], 1);
        let r = owner.alloc(10_000).unwrap();
        // Anonymous: nothing in /dev/shm to leave behind, whatever happens to the job.
        let link = std::fs::read_link(format!("/proc/self/fd/{}", r.id().0[1])).unwrap();
        assert!(
            link.to_string_lossy().starts_with("/memfd:ferry-data"),
            "{}",
            link.display()
        );
        // SAFETY: the owner's writable mapping, 10 000 bytes, no concurrent access.
        unsafe { *r.as_ptr().add(9_999) = 7 };
        let m = peer.map(0, &r.id()).unwrap();
        // SAFETY: the peer's read-only mapping of the same memory.
        assert_eq!(unsafe { *m.as_ptr().add(9_999) }, 7);
        let mut wrong_pid = r.id();
        wrong_pid.0[0] += 1;
        assert!(peer.map(0, &wrong_pid).is_err());
        let mut wrong_ino = r.id();
        wrong_ino.0[2] ^= 1;
        assert!(peer.map(0, &wrong_ino).is_err());
        let id = r.id();
        drop(r);
        // The owner closed its descriptor: the region cannot be mapped again (unless the
        // number was reused, which the inode check catches), but the old mapping still reads.
        assert!(peer.map(0, &id).is_err());
        // SAFETY: as above.
        assert_eq!(unsafe { *m.as_ptr().add(9_999) }, 7);
        assert!(peer.map(5, &id).is_err(), "no such rank");
    }
}

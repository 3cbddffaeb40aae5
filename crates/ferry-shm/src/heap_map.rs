//! The receiver's mappings of its peers' shared-heap regions (`heap.rs`): a large message
//! whose descriptor names a region is copied with one `memcpy` from a read-only mapping of
//! the sender's memory file instead of through cross-memory attach.
//!
//! A mapping is made on first use (`/proc/<pid>/fd/<fd>`, checked against the descriptor's
//! inode and length) and kept for the next messages from the same region, keyed by
//! (pid, generation): a region the sender has freed never comes back under its generation, so
//! a kept mapping is never used for memory the sender has since reused. The cache is bounded
//! ([`MAX_MAPS`] mappings, [`MAX_BYTES`] bytes, least recently used out first), and before a
//! new mapping is added, mappings whose region the sender has freed or whose sender is gone
//! are dropped (a kept mapping would pin the freed memory).

use std::io;
use std::os::fd::AsRawFd;

use memmap2::{MmapOptions, MmapRaw};

use crate::ring::HeapDesc;

/// Mappings kept at most.
pub(crate) const MAX_MAPS: usize = 16;
/// Bytes mapped at most (a region larger than this alone is not mapped: cross-memory attach).
pub(crate) const MAX_BYTES: usize = 1 << 30;

struct Mapped {
    pid: u32,
    h: HeapDesc,
    map: MmapRaw,
    last_use: u64,
}

/// One rank's mappings of its peers' regions.
#[derive(Default)]
pub(crate) struct HeapMaps {
    maps: Vec<Mapped>,
    clock: u64,
}

impl std::fmt::Debug for HeapMaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapMaps")
            .field("maps", &self.maps.len())
            .field("bytes", &self.bytes())
            .finish()
    }
}

fn still_listed(pid: u32, h: &HeapDesc) -> bool {
    rustix::fs::stat(format!("/proc/{pid}/fd/{}", h.fd))
        .map(|st| st.st_ino == h.ino)
        .unwrap_or(false)
}

impl HeapMaps {
    /// Copies `dst.len()` bytes at the sender's address `addr`, which lie in the region `h` of
    /// process `pid`, into `dst` with one `memcpy` through a mapping of the region. Errors when
    /// the region cannot be mapped (freed, not permitted, too large); the caller then reads
    /// with cross-memory attach, which reaches the same memory.
    ///
    /// The caller holds the descriptor's claim: the sender keeps the buffer unchanged until
    /// the descriptor completes (the single-copy protocol, `ring.rs`).
    pub(crate) fn copy(
        &mut self,
        pid: u32,
        h: &HeapDesc,
        addr: u64,
        dst: &mut [u8],
    ) -> io::Result<()> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
        let off = addr
            .checked_sub(h.base)
            .ok_or_else(|| bad("message before its region"))?;
        let end = off
            .checked_add(dst.len() as u64)
            .ok_or_else(|| bad("message length overflows"))?;
        if end > h.len {
            return Err(bad("message beyond its region"));
        }
        self.clock += 1;
        let i = match self
            .maps
            .iter()
            .position(|m| m.pid == pid && m.h.generation == h.generation)
        {
            Some(i) => i,
            None => self.map(pid, h)?,
        };
        let m = &mut self.maps[i];
        if m.h != *h {
            // Same process and generation but another region: a corrupt descriptor.
            return Err(bad("descriptor disagrees with the mapped region"));
        }
        m.last_use = self.clock;
        debug_assert!(m.map.len() as u64 >= end);
        // SAFETY: the mapping covers `h.len >= end` bytes (checked when it was made) and lives
        // in `self.maps` for the duration; `dst` is a distinct, writable buffer of this
        // process; the sender does not write the message's bytes while the claimed descriptor
        // is open.
        unsafe {
            std::ptr::copy_nonoverlapping(
                m.map.as_ptr().add(off as usize),
                dst.as_mut_ptr(),
                dst.len(),
            );
        }
        Ok(())
    }

    /// Maps region `h` of `pid`; returns its index.
    fn map(&mut self, pid: u32, h: &HeapDesc) -> io::Result<usize> {
        let len = usize::try_from(h.len)
            .ok()
            .filter(|&l| l > 0 && l <= MAX_BYTES)
            .ok_or_else(|| io::Error::other(format!("region of {} bytes not mapped", h.len)))?;
        // Drop what the senders have freed (or whose sender is gone) before adding.
        self.maps.retain(|m| still_listed(m.pid, &m.h));
        while self.maps.len() >= MAX_MAPS || self.bytes() + len > MAX_BYTES {
            let Some(oldest) = (0..self.maps.len()).min_by_key(|&i| self.maps[i].last_use) else {
                break;
            };
            self.maps.swap_remove(oldest);
        }
        let path = format!("/proc/{pid}/fd/{}", h.fd);
        let file = std::fs::File::open(&path)?;
        let st = rustix::fs::fstat(&file)?;
        if st.st_ino != h.ino || (st.st_size as u64) < h.len {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{path} is no longer the region (freed, descriptor reused)"),
            ));
        }
        let map = MmapOptions::new()
            .len(len)
            .map_raw_read_only(file.as_raw_fd())?;
        self.maps.push(Mapped {
            pid,
            h: *h,
            map,
            last_use: self.clock,
        });
        Ok(self.maps.len() - 1)
    }

    fn bytes(&self) -> usize {
        self.maps.iter().map(|m| m.map.len()).sum()
    }

    /// Drops every mapping of `pid`'s regions (its process ended or was declared failed).
    pub(crate) fn forget(&mut self, pid: u32) {
        self.maps.retain(|m| m.pid != pid);
    }

    /// Mappings kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.maps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::{self, SharedHeap};
    use std::alloc::{GlobalAlloc, Layout};

    fn desc(r: &heap::HeapRegion) -> HeapDesc {
        HeapDesc {
            generation: r.generation,
            fd: r.fd as u64,
            ino: r.ino,
            base: r.base as u64,
            len: r.len as u64,
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn copies_through_a_kept_mapping_and_never_from_a_freed_region() {
        let _one = heap::tests::SERIAL
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let a = SharedHeap::new();
        let lay = Layout::from_size_align(256 * 1024, 8).unwrap();
        let pid = std::process::id();
        let mut maps = HeapMaps::default();
        // SAFETY: non-zero layout; freed with it below.
        let p = unsafe { a.alloc(lay) };
        // SAFETY: `p` is a fresh block of `lay.size()` bytes.
        let src = unsafe { std::slice::from_raw_parts_mut(p, lay.size()) };
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let r = heap::find(src).unwrap();
        let h = desc(&r);
        let mut dst = vec![0u8; 100_000];
        maps.copy(pid, &h, p as u64 + 1000, &mut dst).unwrap();
        assert_eq!(&dst[..], &src[1000..101_000]);
        assert_eq!(maps.len(), 1);
        // Kept: the next message from the region needs no new mapping, and sees new bytes.
        src[5000] = 7;
        maps.copy(pid, &h, p as u64 + 5000, &mut dst[..10]).unwrap();
        assert_eq!(dst[0], 7);
        assert_eq!(maps.len(), 1);
        // Out of the region: refused, not read.
        assert!(maps
            .copy(pid, &h, p as u64 + lay.size() as u64 - 5, &mut dst[..10])
            .is_err());
        assert!(maps.copy(pid, &h, p as u64 - 1, &mut dst[..10]).is_err());
        // SAFETY: allocated above with `lay`.
        unsafe { a.dealloc(p, lay) };
        // The sender freed it: a descriptor naming the region under another generation
        // (the sender reused the descriptor number for a new region) is not served from the
        // kept mapping, and the freed region cannot be mapped anew.
        let stale = HeapDesc {
            generation: h.generation + 1,
            ..h
        };
        assert!(maps.copy(pid, &stale, p as u64, &mut dst[..10]).is_err());
        // The failed attempt pruned the mapping of the freed region.
        assert_eq!(maps.len(), 0);
        // A region that does not exist: an error, never a crash.
        let bogus = HeapDesc {
            generation: 5,
            fd: 1_000_000,
            ino: 1,
            base: 4096,
            len: 4096,
        };
        assert!(maps.copy(pid, &bogus, 4096, &mut dst[..10]).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn the_cache_is_bounded() {
        let _one = heap::tests::SERIAL
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let a = SharedHeap::new();
        let lay = Layout::from_size_align(64 * 1024, 8).unwrap();
        let pid = std::process::id();
        let mut maps = HeapMaps::default();
        let blocks: Vec<*mut u8> = (0..MAX_MAPS + 4)
            // SAFETY: non-zero layout; every block is freed below.
            .map(|_| unsafe { a.alloc(lay) })
            .collect();
        let mut dst = [0u8; 16];
        for &p in &blocks {
            // SAFETY: a block of `lay.size()` bytes.
            let s = unsafe { std::slice::from_raw_parts(p, lay.size()) };
            let h = desc(&heap::find(s).unwrap());
            maps.copy(pid, &h, p as u64, &mut dst).unwrap();
            assert!(maps.len() <= MAX_MAPS);
        }
        assert_eq!(maps.len(), MAX_MAPS);
        maps.forget(pid);
        assert_eq!(maps.len(), 0);
        for p in blocks {
            // SAFETY: allocated above with `lay`.
            unsafe { a.dealloc(p, lay) };
        }
    }
}

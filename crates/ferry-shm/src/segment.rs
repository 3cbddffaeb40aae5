//! The job's shared segment: layout, creation by name with an exclusive-create race (001 §3.1,
//! §4.2), and removal of the name once every rank has attached (S4).
//!
//! Layout (all offsets relative to the mapping, which each process maps at its own address):
//!
//! ```text
//! 0      header (4 KiB): magic, version, size, ring geometry, creator pid, rank counter,
//!        attach counter, probe counter (each counter on its own cache line)
//! 4096   rank blocks, 256 B each: pid, state, CMA probe address/value/verdict,
//!        doorbell word (own line), "sleeping" flag (own line)
//! ...    sender maps, one per rank, ceil(N/64) words: bit s of rank r's map says that rank s
//!        opened its ring to r (X5: rings are used only between ranks that talk, so a rank
//!        learns from its map, not from a scan of N rings, which peers have sent to it)
//! ...    rings, one per ordered pair (from, to), each page-aligned:
//!        +0 reserved line, +64 consumer head (own line), +128 CMA completion window,
//!        +1024 slots of `shm.slot_bytes` + 40-byte header, rounded up to cache lines
//! ```
//!
//! S4 choice: the segment has a POSIX name only while ranks gather. The rank whose attach
//! completes the job unlinks it; from then on the memory lives exactly as long as some rank maps
//! it, so normal exit, crash, SIGKILL or Ctrl-C leave nothing behind in /dev/shm. A rank that
//! gives up waiting for the others also removes the name. The remaining window (a rank killed
//! while the job is still gathering) is closed by stale detection: the next start under the
//! same name finds no live process attached and removes the leftover.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferry_core::{Error, ErrorKind, Result};
use memmap2::MmapRaw;

use crate::sys;

pub(crate) const MAGIC: u64 = 0x6d68_7379_7272_6566; // "ferryshm", little-endian
/// Layout version: ranks of a job agree on it (3: chunk payloads start on their own cache line;
/// 4: rings carry receivers' write offers for split single copy, an entry type older ranks
/// would reject mid-job).
pub(crate) const VERSION: u64 = 4;
pub(crate) const HEADER_BYTES: usize = 4096;
pub(crate) const BLOCK_BYTES: usize = 256;
/// Bytes before the first slot of a ring (control lines and the CMA completion window).
pub(crate) const RING_CTRL: usize = 1024;
/// Single-copy descriptors a sender may have outstanding per peer (completion slots per ring).
pub(crate) const ACK_WINDOW: u64 = 64;

// Header fields.
pub(crate) const H_MAGIC: usize = 0;
pub(crate) const H_VERSION: usize = 8;
pub(crate) const H_SIZE: usize = 16;
pub(crate) const H_SLOTS: usize = 24;
pub(crate) const H_SLOT_BYTES: usize = 32;
const H_CREATOR: usize = 40;
const H_TOTAL: usize = 48;
const H_COUNTER: usize = 64;
const H_ATTACHED: usize = 128;
const H_PROBED: usize = 192;
/// Futex word the rank completing a start-up counter rings, so waiting ranks sleep instead of
/// polling (hundreds of ranks polling on two cores starved the late arrivals).
const H_GATHER_BELL: usize = 256;

// Rank block fields.
const B_PID: usize = 0;
const B_STATE: usize = 8;
const B_PROBE_ADDR: usize = 16;
const B_PROBE_VALUE: usize = 24;
const B_CMA_OK: usize = 32;
const B_BELL: usize = 64;
const B_SLEEPING: usize = 128;
const B_BLAME: usize = 192;

/// Rank states in the rank block.
pub(crate) const STATE_EMPTY: u64 = 0;
pub(crate) const STATE_ATTACHED: u64 = 1;
pub(crate) const STATE_FINISHED: u64 = 2;
pub(crate) const STATE_GONE: u64 = 3;

/// Geometry of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub size: usize,
    pub slots: usize,
    pub slot_bytes: usize,
    pub ring_bytes: usize,
    /// Start of the sender maps and the words of one rank's map.
    pub maps_off: usize,
    pub map_words: usize,
    pub rings_off: usize,
    pub total: usize,
}

fn align_up(v: usize, a: usize) -> Option<usize> {
    v.checked_add(a - 1).map(|x| x / a * a)
}

/// Ring memory a job may reserve in total; beyond it rings get fewer slots (at least 4), so a
/// job of many ranks (N^2 rings) stays within /dev/shm. Every rank derives the same geometry.
pub(crate) const RING_BUDGET: usize = 4 << 30;

impl Layout {
    /// The geometry for `size` ranks with the configured ring: `slots` per ring, reduced (to a
    /// power of two, at least 4) when N^2 rings would exceed [`RING_BUDGET`]. `payload` is
    /// `shm.slot_bytes`, the largest inline message; each slot adds the entry header and is
    /// rounded up to whole cache lines (so 8 KiB messages, a common size, still go inline).
    pub(crate) fn for_job(size: usize, slots: usize, payload: usize) -> Result<Layout> {
        let slot_bytes = payload
            .checked_add(crate::ring::SLOT_HEADER)
            .and_then(|b| align_up(b, 64))
            .ok_or_else(|| Error::config(format!("shm.slot_bytes = {payload} is too large")))?;
        let rings = size.saturating_mul(size).max(1);
        let per_ring = RING_BUDGET / rings;
        let mut s = slots;
        while s > 4 && s.saturating_mul(slot_bytes) > per_ring {
            s /= 2;
        }
        Layout::new(size, s, slot_bytes)
    }

    pub(crate) fn new(size: usize, slots: usize, slot_bytes: usize) -> Result<Layout> {
        let too_big = || {
            Error::config(format!(
                "shared segment for {size} ranks with {slots} slots of {slot_bytes} B overflows"
            ))
        };
        let ring_bytes = slots
            .checked_mul(slot_bytes)
            .and_then(|b| b.checked_add(RING_CTRL))
            .and_then(|b| align_up(b, 4096))
            .ok_or_else(too_big)?;
        let maps_off = size
            .checked_mul(BLOCK_BYTES)
            .and_then(|b| b.checked_add(HEADER_BYTES))
            .and_then(|b| align_up(b, 64))
            .ok_or_else(too_big)?;
        let map_words = size.div_ceil(64);
        let rings_off = size
            .checked_mul(map_words * 8)
            .and_then(|b| b.checked_add(maps_off))
            .and_then(|b| align_up(b, 4096))
            .ok_or_else(too_big)?;
        let total = size
            .checked_mul(size)
            .and_then(|n| n.checked_mul(ring_bytes))
            .and_then(|b| b.checked_add(rings_off))
            .ok_or_else(too_big)?;
        Ok(Layout {
            size,
            slots,
            slot_bytes,
            ring_bytes,
            maps_off,
            map_words,
            rings_off,
            total,
        })
    }

    fn block_off(&self, rank: usize) -> usize {
        HEADER_BYTES + rank * BLOCK_BYTES
    }

    pub(crate) fn ring_off(&self, from: usize, to: usize) -> usize {
        self.rings_off + (from * self.size + to) * self.ring_bytes
    }
}

/// One process's mapping of a job segment.
pub(crate) struct Segment {
    /// Owns the mapping (unmapped on drop, when the last transport holding the Arc<Segment>
    /// goes away); `base` is its start.
    _map: MmapRaw,
    base: *mut u8,
    len: usize,
    pub layout: Layout,
    /// The POSIX name while it exists (None for anonymous and inherited segments).
    pub name: Option<String>,
    /// Whether other processes attach (named or inherited) rather than threads of this one.
    pub shared: bool,
}

// SAFETY: the mapping is plain shared memory; all cross-thread/process access goes through
// atomics or through the ring protocol's release/acquire pairs.
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    pub(crate) fn over(
        map: MmapRaw,
        layout: Layout,
        name: Option<String>,
        shared: bool,
    ) -> Segment {
        Segment {
            base: map.as_mut_ptr(),
            len: map.len(),
            _map: map,
            layout,
            name,
            shared,
        }
    }

    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: the offset is 8-aligned and inside the mapping (layout arithmetic), the
        // mapping is page-aligned and lives as long as &self.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: as in u64_at.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// Base address of the ring from `from` to `to`.
    pub(crate) fn ring_base(&self, from: usize, to: usize) -> *mut u8 {
        let off = self.layout.ring_off(from, to);
        debug_assert!(off + self.layout.ring_bytes <= self.len);
        // SAFETY: inside the mapping by construction of the layout.
        unsafe { self.base.add(off) }
    }

    pub(crate) fn counter(&self) -> &AtomicU64 {
        self.u64_at(H_COUNTER)
    }
    pub(crate) fn attached(&self) -> &AtomicU64 {
        self.u64_at(H_ATTACHED)
    }
    pub(crate) fn probed(&self) -> &AtomicU64 {
        self.u64_at(H_PROBED)
    }
    /// Word `w` of rank `r`'s sender map (bit `s % 64` of word `s / 64`: rank `s` opened
    /// its ring to `r`).
    pub(crate) fn sender_map(&self, r: usize, w: usize) -> &AtomicU64 {
        let l = &self.layout;
        debug_assert!(r < l.size && w < l.map_words);
        self.u64_at(l.maps_off + (r * l.map_words + w) * 8)
    }

    pub(crate) fn gather_bell(&self) -> &AtomicU32 {
        self.u32_at(H_GATHER_BELL)
    }
    pub(crate) fn creator_pid(&self) -> u32 {
        self.u64_at(H_CREATOR).load(Ordering::Acquire) as u32
    }
    pub(crate) fn pid(&self, r: usize) -> &AtomicU64 {
        self.u64_at(self.layout.block_off(r) + B_PID)
    }
    pub(crate) fn state(&self, r: usize) -> &AtomicU64 {
        self.u64_at(self.layout.block_off(r) + B_STATE)
    }
    pub(crate) fn probe_addr(&self, r: usize) -> &AtomicU64 {
        self.u64_at(self.layout.block_off(r) + B_PROBE_ADDR)
    }
    pub(crate) fn probe_value(&self, r: usize) -> &AtomicU64 {
        self.u64_at(self.layout.block_off(r) + B_PROBE_VALUE)
    }
    pub(crate) fn cma_ok(&self, r: usize) -> &AtomicU64 {
        self.u64_at(self.layout.block_off(r) + B_CMA_OK)
    }
    pub(crate) fn bell(&self, r: usize) -> &AtomicU32 {
        self.u32_at(self.layout.block_off(r) + B_BELL)
    }
    pub(crate) fn sleeping(&self, r: usize) -> &AtomicU32 {
        self.u32_at(self.layout.block_off(r) + B_SLEEPING)
    }
    /// "Rank r ended after rank X failed": X + 1, or 0 while r has not failed because of a
    /// peer. Written by r when one of its operations fails because a peer died or left, read
    /// by r's peers so that they name X, the root cause, instead of r.
    pub(crate) fn blame(&self, r: usize) -> &AtomicU64 {
        self.u64_at(self.layout.block_off(r) + B_BLAME)
    }

    pub(crate) fn write_header(&self, creator: u32) {
        let l = &self.layout;
        self.u64_at(H_VERSION).store(VERSION, Ordering::Relaxed);
        self.u64_at(H_SIZE).store(l.size as u64, Ordering::Relaxed);
        self.u64_at(H_SLOTS)
            .store(l.slots as u64, Ordering::Relaxed);
        self.u64_at(H_SLOT_BYTES)
            .store(l.slot_bytes as u64, Ordering::Relaxed);
        self.u64_at(H_TOTAL)
            .store(l.total as u64, Ordering::Relaxed);
        self.u64_at(H_CREATOR)
            .store(creator as u64, Ordering::Relaxed);
        // Publishes everything above to joiners that acquire the magic.
        self.u64_at(H_MAGIC).store(MAGIC, Ordering::Release);
    }

    /// An anonymous segment shared by threads of this process (threads-as-ranks tests).
    pub(crate) fn anonymous(layout: Layout) -> Result<Segment> {
        let map = sys::map_anonymous(layout.total).map_err(|e| {
            Error::io("shm init", e).with_detail(format!("mapping {} bytes", layout.total))
        })?;
        let seg = Segment::over(map, layout, None, false);
        seg.write_header(sys::my_pid());
        Ok(seg)
    }

    /// Whether some process that claimed a rank, or the creator, still runs.
    pub(crate) fn anyone_alive(&self, size: usize) -> bool {
        if sys::pid_alive(self.creator_pid()) {
            return true;
        }
        (0..size).any(|r| {
            let p = self.pid(r).load(Ordering::Acquire) as u32;
            p != 0 && sys::pid_alive(p)
        })
    }

    /// Creates or joins the segment called `name`, with the geometry `want`.
    ///
    /// Exactly one process creates it (`O_EXCL`); the others map it once the creator has
    /// published the header. A leftover with no live process attached is removed and the race
    /// starts again. A live segment with another geometry is a configuration error (e.g. two
    /// sets of ranks started with different `FERRY_SIZE` under the same job name).
    pub(crate) fn open_named(name: &str, want: Layout, deadline: Instant) -> Result<Segment> {
        if name.contains('\0') {
            return Err(Error::config(format!(
                "segment name `{name}` contains a NUL byte"
            )));
        }
        let cname = name;
        let io_err = |what: &str, e: std::io::Error| {
            Error::io("shm init", e).with_detail(format!("{what} /dev/shm{name}"))
        };
        let mut small_since: Option<Instant> = None;
        loop {
            if Instant::now() >= deadline {
                return Err(Error::new(ErrorKind::Timeout, "shm init")
                    .with_detail(format!("could not create or join segment {name}")));
            }
            match sys::ShmFd::open(cname, true) {
                Ok(fd) => {
                    // The creator fixes the geometry; joiners adopt it from the header.
                    let want = match fit_to_shm(want) {
                        Ok(w) => w,
                        Err(e) => {
                            let _ = sys::shm_unlink(cname);
                            return Err(e);
                        }
                    };
                    if let Err(e) = fd.truncate(want.total) {
                        let _ = sys::shm_unlink(cname);
                        return Err(io_err("sizing", e));
                    }
                    let map = match fd.map(want.total) {
                        Ok(m) => m,
                        Err(e) => {
                            let _ = sys::shm_unlink(cname);
                            return Err(io_err("mapping", e));
                        }
                    };
                    let seg = Segment::over(map, want, Some(cname.to_string()), true);
                    seg.write_header(sys::my_pid());
                    tracing::debug!(segment = name, bytes = want.total, "shm: created segment");
                    return Ok(seg);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("creating", e)),
            }
            let fd = match sys::ShmFd::open(cname, false) {
                Ok(fd) => fd,
                // Removed between our two calls (stale cleanup or a finished gathering): race
                // for creation again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("opening", e)),
            };
            let len = fd.len().map_err(|e| io_err("inspecting", e))?;
            if len < HEADER_BYTES {
                // The creator has not sized it yet. If that lasts, the creator died between
                // create and truncate: remove the leftover.
                let since = *small_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(2) {
                    tracing::warn!(segment = name, "shm: removing unsized leftover segment");
                    let _ = sys::shm_unlink(cname);
                    small_since = None;
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            small_since = None;
            let map = fd.map(len).map_err(|e| io_err("mapping", e))?;
            let mut seg = Segment::over(map, want, Some(cname.to_string()), true);
            // Wait for the creator to publish the header.
            let wait_start = Instant::now();
            while seg.u64_at(H_MAGIC).load(Ordering::Acquire) != MAGIC {
                if wait_start.elapsed() > Duration::from_secs(2) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            let header_ok = seg.u64_at(H_MAGIC).load(Ordering::Acquire) == MAGIC
                && seg.u64_at(H_VERSION).load(Ordering::Relaxed) == VERSION;
            let claimed = (seg.u64_at(H_SIZE).load(Ordering::Relaxed) as usize)
                .min((len - HEADER_BYTES) / BLOCK_BYTES);
            let live = header_ok && seg.anyone_alive(claimed);
            if !header_ok || !live {
                tracing::warn!(
                    segment = name,
                    "shm: removing stale segment left by a dead job"
                );
                let _ = sys::shm_unlink(cname);
                drop(seg);
                continue;
            }
            let got = Layout::new(
                seg.u64_at(H_SIZE).load(Ordering::Relaxed) as usize,
                seg.u64_at(H_SLOTS).load(Ordering::Relaxed) as usize,
                seg.u64_at(H_SLOT_BYTES).load(Ordering::Relaxed) as usize,
            );
            match got {
                // Same job size: adopt the creator's ring geometry (it may have shrunk the
                // rings to fit /dev/shm).
                Ok(g) if g.size == want.size && g.total == len => {
                    seg.layout = g;
                    return Ok(seg);
                }
                Ok(g) => {
                    return Err(Error::config(format!(
                        "shared segment /dev/shm{name} belongs to a running job of {} ranks; \
                         this rank was started for {} ranks: use another job name \
                         (FERRY_SHM_JOB) or the same FERRY_SIZE",
                        g.size, want.size
                    )))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Removes the name, if this segment has one (S4). Missing names are fine: another rank
    /// may have removed it.
    pub(crate) fn unlink(&self) {
        if let Some(n) = &self.name {
            match sys::shm_unlink(n) {
                Ok(()) => tracing::debug!(segment = ?n, "shm: removed segment name"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(segment = ?n, "shm: cannot remove segment name: {e}"),
            }
        }
    }
}

/// Shrinks the rings of `want` (halving slots, at least 4 per ring) until the segment takes at
/// most half of the free space of /dev/shm. A tmpfs page touched beyond its size limit kills
/// the process with SIGBUS (containers often mount a 64 MiB /dev/shm), so the limit is checked
/// here, where it can still be an error value.
pub(crate) fn fit_to_shm(want: Layout) -> Result<Layout> {
    match sys::shm_free_bytes() {
        Some(free) => fit(want, free),
        None => Ok(want),
    }
}

fn fit(want: Layout, free: usize) -> Result<Layout> {
    let mut l = want;
    while l.total > free / 2 && l.slots > 4 {
        l = Layout::new(l.size, l.slots / 2, l.slot_bytes)?;
    }
    if l.total > free {
        return Err(
            Error::new(ErrorKind::ResourceExhausted, "shm init").with_detail(format!(
                "a segment for {} ranks needs {} bytes but /dev/shm has {} bytes free \
             (lower shm.ring_slots / shm.slot_bytes or enlarge /dev/shm)",
                l.size, l.total, free
            )),
        );
    }
    if l.slots != want.slots {
        tracing::info!(
            slots = l.slots,
            configured = want.slots,
            "shm: fewer ring slots to fit /dev/shm"
        );
    }
    Ok(l)
}

/// The POSIX shm name for job `job` (and node `node` in the hybrid backend): `/ferry-<uid>-`
/// followed by the job name with every character outside `[A-Za-z0-9._-]` replaced, plus a
/// hash of the original when anything was replaced or the name was shortened, so distinct job
/// names give distinct segments.
pub fn segment_name(job: &str, node: Option<usize>) -> String {
    let mut clean: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean != job || clean.len() > 160 {
        clean.truncate(160);
        clean = format!("{clean}-{:016x}", fnv1a(job.as_bytes()));
    }
    match node {
        Some(n) => format!("/ferry-{}-{}-n{}", sys::uid(), clean, n),
        None => format!("/ferry-{}-{}", sys::uid(), clean),
    }
}

/// Removes every shared-memory name a launcher job `job_id` may have left: the segment of a
/// shm job and the node segments of a hybrid job. Names are removed by the ranks themselves
/// once all have attached; this closes the remaining window (every rank killed while the job
/// was still gathering) and is meant for the launcher after the last rank ended. Returns how
/// many names it removed.
pub fn remove_job_segments(job_id: &str) -> usize {
    let base = segment_name(&format!("j{job_id}"), None);
    let file = base.trim_start_matches('/');
    let node_prefix = format!("{file}-n");
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name == file
            || name
                .strip_prefix(&node_prefix)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !ours {
            continue;
        }
        if sys::shm_unlink(&format!("/{name}")).is_ok() {
            tracing::warn!(
                segment = name,
                "shm: removed a segment left by job {job_id}"
            );
            removed += 1;
        }
    }
    removed
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_distinct() {
        let a = segment_name("job1", None);
        assert!(a.starts_with("/ferry-") && a.ends_with("-job1"), "{a}");
        let b = segment_name("a/b", None);
        let c = segment_name("a_b", None);
        assert_ne!(b, c);
        assert!(!b[1..].contains('/'), "{b}");
        let long = segment_name(&"x".repeat(1000), Some(3));
        assert!(long.len() < 255, "{}", long.len());
        assert!(long.ends_with("-n3"));
    }

    #[test]
    fn leftover_names_of_a_job_are_removed() {
        let job = format!("leftover{}", std::process::id());
        let want = Layout::new(2, 4, 256).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let a =
            Segment::open_named(&segment_name(&format!("j{job}"), None), want, deadline).unwrap();
        let b = Segment::open_named(&segment_name(&format!("j{job}"), Some(1)), want, deadline)
            .unwrap();
        let other =
            Segment::open_named(&segment_name(&format!("j{job}x"), None), want, deadline).unwrap();
        assert_eq!(remove_job_segments(&job), 2);
        assert_eq!(remove_job_segments(&job), 0);
        other.unlink();
        drop((a, b, other));
    }

    #[test]
    fn rings_shrink_to_fit_dev_shm() {
        let want = Layout::for_job(16, 64, 8192).unwrap();
        assert_eq!(fit(want, usize::MAX).unwrap(), want);
        // A 64 MiB /dev/shm (container default): half of it at most.
        let l = fit(want, 64 << 20).unwrap();
        assert!(l.total <= 32 << 20 && l.slots < 64 && l.slots >= 4, "{l:?}");
        assert_eq!(l.slot_bytes, want.slot_bytes);
        // Hopeless: an error value, not a SIGBUS later.
        let e = fit(want, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("/dev/shm"), "{e}");
    }

    #[test]
    fn layout_is_aligned_and_checked() {
        let l = Layout::new(4, 8, 256).unwrap();
        assert_eq!(l.ring_bytes % 4096, 0);
        assert_eq!(l.rings_off % 4096, 0);
        assert_eq!(l.total, l.rings_off + 16 * l.ring_bytes);
        assert!(Layout::new(usize::MAX / 2, 8, 256).is_err());
        // Many ranks: fewer slots per ring, never below 4, same answer everywhere.
        let small = Layout::for_job(8, 64, 8192).unwrap();
        assert_eq!(small.slots, 64);
        assert_eq!(
            small.slot_bytes, 8256,
            "8 KiB payload + header, whole cache lines"
        );
        let big = Layout::for_job(256, 64, 8192).unwrap();
        assert!(big.slots < 64 && big.slots >= 4 && big.slots.is_power_of_two());
        assert!(big.total <= RING_BUDGET + big.rings_off + 256 * 256 * 4096);
    }
}

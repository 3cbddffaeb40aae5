//! Segments that never have a name (S4 during start-up), and the sweep of named ones that
//! outlived their job.
//!
//! A named segment exists in /dev/shm from the first rank's arrival until the last rank's; if
//! the job dies in between (launcher SIGKILLed, a start-up that times out, ranks killed before
//! all arrived), the name outlives it. So the launcher creates the segment of a local shm job
//! itself, before it starts any rank, as an anonymous memfd: the ranks inherit the descriptor
//! (its number in `FERRY_SEGMENT_FD`), map it and close it for their own children. Nothing is ever
//! named, and the memory goes with the last process that maps it, however the job ends.
//!
//! Ranks started without the launcher (by hand, by `srun` or `mpirun`) still meet through a
//! name; a rank that starts such a job first removes the names of this user's segments whose
//! every process is dead ([`sweep_stale`]), so a crashed start-up leaves nothing for longer
//! than until the next job.

use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use ferry_core::{Config, Error, ErrorKind, Result};

use crate::segment::{
    fit_to_shm, Layout, Segment, BLOCK_BYTES, HEADER_BYTES, H_MAGIC, H_SIZE, H_SLOTS, H_SLOT_BYTES,
    H_VERSION, MAGIC, VERSION,
};
use crate::sys;

/// The variable through which the launcher tells its ranks which inherited descriptor holds
/// the job's segment.
pub const SHM_FD_VAR: &str = "FERRY_SEGMENT_FD";

/// The name memfds of ferry carry (visible in `/proc/<pid>/fd` as `/memfd:ferry-shm`).
const MEMFD_LINK: &str = "/memfd:ferry-shm";

/// Creates the shared segment of a shm job of `size` ranks before its ranks start, as an
/// anonymous memory file without close-on-exec: processes started next inherit it. Pass its
/// number to them in [`SHM_FD_VAR`] and drop it once they are started. The geometry follows
/// `config` (`shm.ring_slots`, `shm.slot_bytes`), shrunk to fit like a segment made by a
/// rank; ranks adopt it from the segment's header.
///
/// The memory is sparse: the file has the size of every ring of the job (for 64 ranks with
/// the default rings about 2 GiB), but only pages that ranks touch take memory.
pub fn create_job_segment(config: &Config, size: usize) -> Result<OwnedFd> {
    if size == 0 {
        return Err(Error::invalid("shm init", "a job needs at least one rank"));
    }
    let want = Layout::for_job(size, config.shm.ring_slots, config.shm.slot_bytes)?;
    let want = fit_to_shm(want)?;
    let io = |what: &'static str| {
        move |e: std::io::Error| Error::io("shm init", e).with_detail(what.to_string())
    };
    let fd = sys::ShmFd::anonymous(true).map_err(io("creating the job's memfd"))?;
    fd.truncate(want.total)
        .map_err(io("sizing the job's memfd"))?;
    let map = fd.map(want.total).map_err(io("mapping the job's memfd"))?;
    let seg = Segment::over(map, want, None, true);
    seg.write_header(sys::my_pid());
    drop(seg);
    Ok(fd.into_owned())
}

/// The segment the launcher passed in [`SHM_FD_VAR`], if any, checked against this rank's job
/// size. The inherited descriptor is marked close-on-exec, so programs this rank starts do
/// not keep the job's memory alive.
pub(crate) fn inherited_segment(want: Layout) -> Result<Option<Segment>> {
    let Ok(v) = std::env::var(SHM_FD_VAR) else {
        return Ok(None);
    };
    let bad = |why: String| {
        Error::config(format!(
            "{SHM_FD_VAR}={v}: {why} (it is set by `ferry run` for the ranks it starts; unset \
             it when starting ranks another way)"
        ))
    };
    let raw: RawFd = v
        .trim()
        .parse()
        .ok()
        .filter(|&n: &RawFd| n >= 0)
        .ok_or_else(|| bad("not a descriptor number".into()))?;
    // Only a descriptor that is one of ferry's memfds is touched: anything else (a number
    // inherited by a program that is not one of the job's ranks, say) is an error value.
    let link = std::fs::read_link(format!("/proc/self/fd/{raw}"))
        .map_err(|e| bad(format!("no such open descriptor ({e})")))?;
    if !link.to_string_lossy().starts_with(MEMFD_LINK) {
        return Err(bad(format!(
            "descriptor is {}, not ferry's segment",
            link.display()
        )));
    }
    // SAFETY: the descriptor is open (its /proc entry was just read) and stays open for the
    // borrow: nothing in this process owns it (it was inherited, and only this function uses
    // it), so no other code can close it meanwhile.
    let inherited = unsafe { BorrowedFd::borrow_raw(raw) };
    let _ = rustix::io::fcntl_setfd(inherited, rustix::io::FdFlags::CLOEXEC);
    let own = inherited
        .try_clone_to_owned()
        .map_err(|e| Error::io("shm init", e).with_detail(format!("{SHM_FD_VAR}={v}")))?;
    open_inherited(sys::ShmFd::from_owned(own), want).map(Some)
}

fn open_inherited(fd: sys::ShmFd, want: Layout) -> Result<Segment> {
    let io = |e: std::io::Error| {
        Error::io("shm init", e).with_detail("mapping the segment passed by the launcher")
    };
    let len = fd.len().map_err(io)?;
    if len < HEADER_BYTES {
        return Err(Error::new(ErrorKind::Protocol, "shm init")
            .with_detail(format!("the launcher's segment has only {len} bytes")));
    }
    let map = fd.map(len).map_err(io)?;
    let mut seg = Segment::over(map, want, None, true);
    let header_ok = seg.u64_at(H_MAGIC).load(Ordering::Acquire) == MAGIC
        && seg.u64_at(H_VERSION).load(Ordering::Relaxed) == VERSION;
    if !header_ok {
        return Err(Error::new(ErrorKind::Protocol, "shm init")
            .with_detail("the launcher's segment has no valid header"));
    }
    let got = Layout::new(
        seg.u64_at(H_SIZE).load(Ordering::Relaxed) as usize,
        seg.u64_at(H_SLOTS).load(Ordering::Relaxed) as usize,
        seg.u64_at(H_SLOT_BYTES).load(Ordering::Relaxed) as usize,
    )?;
    if got.size != want.size || got.total != len {
        return Err(Error::config(format!(
            "the launcher's segment is for {} ranks, this rank was started for {} (FERRY_SIZE)",
            got.size, want.size
        )));
    }
    seg.layout = got;
    Ok(seg)
}

/// How old an unpublished (header-less) named segment must be before a sweep removes it: its
/// creator may be between creating and sizing it right now.
const UNPUBLISHED_GRACE: Duration = Duration::from_secs(30);

/// Removes this user's ferry segment names in /dev/shm whose creator and ranks are all dead
/// (left by a job that died during start-up). Returns how many it removed. Segments of live
/// jobs, other users' segments and anything it cannot read are left alone.
pub(crate) fn sweep_stale() -> usize {
    let prefix = format!("ferry-{}-", sys::uid());
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return 0;
    };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) {
            continue;
        }
        let shm_name = format!("/{name}");
        if is_stale(&shm_name, entry.metadata().ok()) && sys::shm_unlink(&shm_name).is_ok() {
            tracing::warn!(segment = name, "shm: removed a segment left by a dead job");
            removed += 1;
        }
    }
    removed
}

fn is_stale(name: &str, meta: Option<std::fs::Metadata>) -> bool {
    let Ok(fd) = sys::ShmFd::open(name, false) else {
        return false;
    };
    let old = || {
        meta.as_ref()
            .and_then(|m| m.modified().ok())
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > UNPUBLISHED_GRACE)
    };
    let Ok(len) = fd.len() else {
        return false;
    };
    if len < HEADER_BYTES {
        return old();
    }
    // The header tells the size; the rank blocks follow it.
    let Ok(head) = fd.map(HEADER_BYTES) else {
        return false;
    };
    let Ok(header_only) = Layout::new(0, 4, 64) else {
        return false;
    };
    let probe = Segment::over(head, header_only, None, true);
    if probe.u64_at(H_MAGIC).load(Ordering::Acquire) != MAGIC {
        return old();
    }
    let size = probe.u64_at(H_SIZE).load(Ordering::Relaxed) as usize;
    drop(probe);
    let size = size.min((len - HEADER_BYTES) / BLOCK_BYTES);
    let Some(blocks) = size.checked_mul(BLOCK_BYTES).map(|b| b + HEADER_BYTES) else {
        return false;
    };
    let Ok(map) = fd.map(blocks) else {
        return false;
    };
    let Ok(layout) = Layout::new(size, 4, 64) else {
        return false;
    };
    let seg = Segment::over(map, layout, None, true);
    !seg.anyone_alive(size)
}

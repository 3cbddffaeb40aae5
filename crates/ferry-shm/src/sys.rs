//! The operating-system calls the backend needs, through `rustix` and `memmap2`: futex wait and
//! wake on a word of the shared segment, process liveness through pidfds, POSIX shm names and
//! memfds, mappings, and cross-memory attach (`process_vm_readv`, `process_vm_writev`).
//!
//! `process_vm_readv` and `process_vm_writev` are the calls made through `libc`: rustix does
//! not wrap them. They live in [`cma_read`] and [`cma_write`] and nowhere else.
//!
//! Every wrapper returns `std::io::Error` values or a plain answer; none panics.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::Mode;
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use rustix::thread::futex;

/// Sleeps while `*word == expected`, at most `timeout`. Returns early on a wake-up, a changed
/// word or a signal; callers re-check their condition (spurious wake-ups are allowed).
///
/// The futex is process-shared (no private flag): the word lives in a shared mapping and the
/// waker is another process (S3 blocking wait).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = futex::Timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    // EAGAIN (word changed), ETIMEDOUT and EINTR all mean "check again".
    let _ = futex::wait(word, futex::Flags::empty(), expected, Some(ts));
}

/// Wakes every process sleeping on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
}

/// Copies `dst.len()` bytes from address `remote` of process `pid` into `dst` with one
/// `process_vm_readv` per piece. This is the single copy of 001 §3.2.2, done by the receiver
/// straight into its receive buffer.
pub(crate) fn cma_read(pid: u32, remote: u64, dst: &mut [u8]) -> io::Result<()> {
    let len = dst.len();
    until_moved(len, "process_vm_readv", |done| {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let far = libc::iovec {
            iov_base: (remote as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: rustix has no wrapper for process_vm_readv. `local` describes memory we own
        // exclusively (a &mut slice) for the whole call; the remote iovec is only interpreted
        // by the kernel in the other address space, which validates it (EFAULT, not undefined
        // behaviour, for a bad address).
        unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &far, 1, 0) }
    })
}

/// Copies `src` to address `remote` of process `pid` with one `process_vm_writev` per piece:
/// the sender's half of a split single copy, written straight into the receive buffer the
/// receiver offered (see `transport.rs`).
pub(crate) fn cma_write(pid: u32, remote: u64, src: &[u8]) -> io::Result<()> {
    until_moved(src.len(), "process_vm_writev", |done| {
        let local = libc::iovec {
            iov_base: src[done..].as_ptr() as *mut libc::c_void,
            iov_len: src.len() - done,
        };
        let far = libc::iovec {
            iov_base: (remote as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: src.len() - done,
        };
        // SAFETY: rustix has no wrapper for process_vm_writev. `local` describes memory we may
        // read (a shared slice) for the whole call; the kernel only reads it (the iovec type is
        // mutable for both directions). The remote iovec is interpreted by the kernel in the
        // other address space, which validates it (EFAULT, not undefined behaviour).
        unsafe { libc::process_vm_writev(pid as libc::pid_t, &local, 1, &far, 1, 0) }
    })
}

/// Repeats one cross-memory-attach call (`once(bytes done so far)`, returning the bytes it
/// moved or -1) until `len` bytes are moved: the kernel may return short counts, and a signal
/// may interrupt the call.
fn until_moved(len: usize, call: &str, mut once: impl FnMut(usize) -> isize) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let n = once(done);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{call} moved nothing"),
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether `e` says that the process does not exist (any more).
pub(crate) fn is_no_such_process(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error())
}

/// Whether process `pid` still runs, asked without a pidfd. A zombie (killed, not yet reaped by
/// its parent) counts as dead: its memory is gone and it will never send again. A stopped
/// process is alive.
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    if rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH) {
        return false;
    }
    // The state letter follows the last ')' of /proc/<pid>/stat (the command name may contain
    // spaces and parentheses).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].trim_start().chars().next()),
            Some('Z') | Some('X') | Some('x')
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(_) => true,
    }
}

/// Watches one peer process for its end: a pidfd when the kernel offers one (Linux 5.3+),
/// which becomes readable the moment the process exits, whoever its parent is; otherwise the
/// `kill(pid, 0)` + `/proc` check of [`pid_alive`].
///
/// A pidfd also pins the identity: a recycled pid cannot make a dead peer look alive.
pub(crate) struct PeerWatch {
    pid: u32,
    fd: Option<OwnedFd>,
}

impl PeerWatch {
    /// Opens a watch on `pid`. Never fails: without a pidfd (old kernel, no file descriptor
    /// left) the watch falls back to polling the pid.
    pub(crate) fn open(pid: u32) -> PeerWatch {
        let fd = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        PeerWatch { pid, fd }
    }

    /// Whether the process still runs (a stopped process does).
    pub(crate) fn alive(&self) -> bool {
        let Some(fd) = &self.fd else {
            return pid_alive(self.pid);
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, 0) {
            Ok(0) => true,
            Ok(_) => fds[0].revents().is_empty(),
            Err(_) => pid_alive(self.pid),
        }
    }
}

/// Free bytes of the file system behind POSIX shared memory (/dev/shm), if it can be asked.
pub(crate) fn shm_free_bytes() -> Option<usize> {
    let st = rustix::fs::statvfs("/dev/shm").ok()?;
    Some((st.f_bavail as u128 * st.f_frsize as u128).min(usize::MAX as u128) as usize)
}

/// This process's id.
pub(crate) fn my_pid() -> u32 {
    std::process::id()
}

/// Real user id, part of segment names so that users never meet each other's jobs.
pub(crate) fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// A shared-memory object: opened by POSIX name, created anonymous (memfd), or inherited.
pub(crate) struct ShmFd {
    fd: OwnedFd,
}

impl ShmFd {
    /// `shm_open`; `create` adds `O_CREAT | O_EXCL` (exactly one process wins, 001 §3.1).
    pub(crate) fn open(name: &str, create: bool) -> io::Result<ShmFd> {
        use rustix::shm::OFlags;
        let mut flags = OFlags::RDWR;
        if create {
            flags |= OFlags::CREATE | OFlags::EXCL;
        }
        let fd = rustix::shm::open(name, flags, Mode::RUSR | Mode::WUSR)?;
        Ok(ShmFd { fd })
    }

    /// An anonymous object (`memfd_create`) that no other process can open by name: it is
    /// passed on by inheritance and disappears with its last descriptor and mapping.
    /// `inheritable` leaves close-on-exec off so that processes started next inherit it.
    pub(crate) fn anonymous(inheritable: bool) -> io::Result<ShmFd> {
        use rustix::fs::MemfdFlags;
        let flags = if inheritable {
            MemfdFlags::empty()
        } else {
            MemfdFlags::CLOEXEC
        };
        let fd = rustix::fs::memfd_create("ferry-shm", flags)?;
        Ok(ShmFd { fd })
    }

    /// Wraps a descriptor this process owns (an inherited memfd).
    pub(crate) fn from_owned(fd: OwnedFd) -> ShmFd {
        ShmFd { fd }
    }

    /// Sets the object's size.
    pub(crate) fn truncate(&self, len: usize) -> io::Result<()> {
        rustix::fs::ftruncate(&self.fd, len as u64)?;
        Ok(())
    }

    /// Current size.
    pub(crate) fn len(&self) -> io::Result<usize> {
        let st = rustix::fs::fstat(&self.fd)?;
        usize::try_from(st.st_size).map_err(|_| io::Error::other("negative or huge object size"))
    }

    /// Maps the first `len` bytes shared, read and write.
    pub(crate) fn map(&self, len: usize) -> io::Result<MmapRaw> {
        use std::os::fd::AsRawFd;
        MmapOptions::new()
            .len(len)
            .map_raw(self.fd.as_fd().as_raw_fd())
    }

    /// Gives up ownership of the descriptor.
    pub(crate) fn into_owned(self) -> OwnedFd {
        self.fd
    }
}

/// Removes a shared-memory name; the memory lives on while processes map it (S4).
pub(crate) fn shm_unlink(name: &str) -> io::Result<()> {
    rustix::shm::unlink(name)?;
    Ok(())
}

/// `len` bytes of anonymous memory (threads-as-ranks segments, which never leave the process).
pub(crate) fn map_anonymous(len: usize) -> io::Result<MmapRaw> {
    Ok(MmapRaw::from(MmapOptions::new().len(len).map_anon()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "system calls")]
    fn watch_sees_a_child_end_and_a_stopped_child_alive() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let w = PeerWatch::open(child.id());
        assert!(w.alive());
        let pid = Pid::from_raw(child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::Stop).expect("SIGSTOP");
        std::thread::sleep(Duration::from_millis(50));
        assert!(w.alive(), "a stopped process is alive");
        rustix::process::kill_process(pid, rustix::process::Signal::Kill).expect("SIGKILL");
        // Not reaped yet: a zombie, which must count as dead.
        let t0 = std::time::Instant::now();
        while w.alive() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!w.alive(), "a killed process is dead before it is reaped");
        assert!(!pid_alive(child.id()), "zombie counts as dead");
        let _ = child.wait();
    }
}

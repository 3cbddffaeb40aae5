//! Thin wrappers over the Linux calls the backend needs: futex wait/wake on a word in the shared
//! segment, cross-memory attach (`process_vm_readv`), process liveness and POSIX shm names.
//!
//! Every wrapper returns `std::io::Error` values; none panics.

use std::ffi::CString;
use std::io;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout`. Returns early on a wake-up, a changed
/// word or a signal; callers re-check their condition (spurious wake-ups are allowed).
///
/// The futex is process-shared (no `FUTEX_PRIVATE_FLAG`): the word lives in a `MAP_SHARED`
/// segment and the waker is another process (S3 blocking wait).
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the kernel only
    // reads it. The timeout pointer refers to a live stack value.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every process sleeping on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in `futex_wait`; FUTEX_WAKE does not dereference the remaining arguments.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Copies `dst.len()` bytes from address `remote` of process `pid` into `dst` with one
/// `process_vm_readv` per piece (the kernel may return short counts). This is the single copy
/// of 001 §3.2.2, done by the receiver straight into its receive buffer.
pub(crate) fn cma_read(pid: u32, remote: u64, dst: &mut [u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < dst.len() {
        let local = libc::iovec {
            iov_base: dst[done..].as_mut_ptr().cast(),
            iov_len: dst.len() - done,
        };
        let far = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: dst.len() - done,
        };
        // SAFETY: `local` describes memory we own exclusively (a &mut slice); the remote iovec
        // is only interpreted by the kernel in the other address space, which validates it.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &far, 1, 0) };
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
                "process_vm_readv read nothing",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether process `pid` still runs. A zombie (killed, not yet reaped by its parent) counts as
/// dead: its memory is gone and it will never send again.
pub(crate) fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
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

/// Free bytes of the file system behind POSIX shared memory (/dev/shm), if it can be asked.
pub(crate) fn shm_free_bytes() -> Option<usize> {
    let path = c"/dev/shm";
    // SAFETY: `st` is written by statvfs on success; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    if rc != 0 {
        return None;
    }
    Some((st.f_bavail as u128 * st.f_frsize as u128).min(usize::MAX as u128) as usize)
}

/// This process's id.
pub(crate) fn my_pid() -> u32 {
    std::process::id()
}

/// Real user id, part of segment names so that users never meet each other's jobs.
pub(crate) fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// A POSIX shared-memory object opened (or created) by name.
pub(crate) struct ShmFd {
    fd: libc::c_int,
}

impl ShmFd {
    /// `shm_open`; `create` adds `O_CREAT | O_EXCL` (exactly one process wins, 001 §3.1).
    pub(crate) fn open(name: &CString, create: bool) -> io::Result<ShmFd> {
        let mut flags = libc::O_RDWR | libc::O_CLOEXEC;
        if create {
            flags |= libc::O_CREAT | libc::O_EXCL;
        }
        // SAFETY: `name` is a valid NUL-terminated string.
        let fd = unsafe { libc::shm_open(name.as_ptr(), flags, 0o600 as libc::mode_t) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ShmFd { fd })
    }

    /// Sets the object's size.
    pub(crate) fn truncate(&self, len: usize) -> io::Result<()> {
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::ftruncate(self.fd, len as libc::off_t) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Current size.
    pub(crate) fn len(&self) -> io::Result<usize> {
        // SAFETY: `st` is fully written by fstat on success.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstat(self.fd, &mut st) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.st_size as usize)
    }

    /// The raw descriptor, for `mmap`.
    pub(crate) fn raw(&self) -> libc::c_int {
        self.fd
    }
}

impl Drop for ShmFd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor; a mapping made from it stays valid after close.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Removes a shared-memory name; the memory lives on while processes map it (S4).
pub(crate) fn shm_unlink(name: &CString) -> io::Result<()> {
    // SAFETY: `name` is a valid NUL-terminated string.
    let rc = unsafe { libc::shm_unlink(name.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Maps `len` bytes: of `fd` shared, or anonymous shared memory when `fd` is `None` (threads-as-
/// ranks tests). Returns the base address.
pub(crate) fn map(fd: Option<&ShmFd>, len: usize) -> io::Result<*mut u8> {
    let (flags, raw) = match fd {
        Some(f) => (libc::MAP_SHARED, f.raw()),
        None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1),
    };
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            raw,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Unmaps a mapping made by [`map`].
///
/// # Safety
/// `ptr`/`len` must describe a live mapping returned by [`map`] that nothing uses any more.
pub(crate) unsafe fn unmap(ptr: *mut u8, len: usize) {
    libc::munmap(ptr.cast(), len);
}

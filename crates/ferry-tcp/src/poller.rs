//! A level-triggered epoll set (T3).
//!
//! Level triggering is what makes fair service simple: the backend does a bounded amount of
//! work per ready socket per pass and moves on; a socket with input left over is reported again
//! by the next wait, so no socket is starved and none needs to be drained before the others get
//! a turn (000 §4.5.3). mio only offers edge-triggered readiness, hence this small wrapper.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Token of the listening socket; connections use their slot index.
pub(crate) const LISTENER: u64 = u64::MAX;

/// One ready socket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ready {
    pub token: u64,
    pub readable: bool,
    pub writable: bool,
    pub hangup: bool,
}

/// An epoll instance plus the buffer its events are returned in.
pub(crate) struct Poller {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: plain system call; the result is checked before it is wrapped.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Poller {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        let mut flags = libc::EPOLLIN | libc::EPOLLRDHUP;
        if write {
            flags |= libc::EPOLLOUT;
        }
        let mut ev = libc::epoll_event {
            events: flags as u32,
            u64: token,
        };
        // SAFETY: `ev` outlives the call; the kernel validates both descriptors.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for input (and for room to write if `write`).
    pub fn add(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, write)
    }

    /// Changes whether `fd` is also watched for room to write.
    pub fn modify(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, write)
    }

    /// Stops watching `fd` (closing it would too; explicit removal keeps the set exact even if
    /// the descriptor were duplicated).
    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `ctl`; a failure only means the descriptor was not registered.
        unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout_ms` (0 = just look, never blocks) and appends the ready sockets to
    /// `out`. EINTR counts as "nothing ready".
    pub fn wait(&mut self, out: &mut Vec<Ready>, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: the buffer holds `len` initialised events the kernel may overwrite.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(());
            }
            return Err(e);
        }
        for ev in &self.events[..n as usize] {
            let flags = ev.events as i32;
            out.push(Ready {
                token: ev.u64,
                readable: flags & (libc::EPOLLIN | libc::EPOLLRDHUP) != 0,
                writable: flags & libc::EPOLLOUT != 0,
                hangup: flags & (libc::EPOLLHUP | libc::EPOLLERR) != 0,
            });
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

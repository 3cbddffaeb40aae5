//! A level-triggered epoll set (T3).
//!
//! Level triggering is what makes fair service simple: the backend does a bounded amount of
//! work per ready socket per pass and moves on; a socket with input left over is reported again
//! by the next wait, so no socket is starved and none needs to be drained before the others get
//! a turn (000 §4.5.3). mio only offers edge-triggered readiness, hence this small wrapper.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags, EventVec};

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
    events: Events,
}

/// The event buffer. rustix's `EventVec` is not `Send` because an event's user data may hold a
/// pointer; this poller only ever registers `u64` tokens.
struct Events(EventVec);

// SAFETY: the buffer holds plain event records whose data is always a `u64` token (see `add`
// and `modify`, the only places data is created); no pointer is stored, so moving the buffer
// to another thread with its transport is sound.
unsafe impl Send for Events {}

/// Borrows a socket descriptor for one epoll call.
fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: every caller passes the descriptor of a socket it owns (a connection slot or the
    // listener) and keeps open across the call; the borrow is used only inside that call and
    // never stored, so the 'static lifetime never outlives the descriptor in practice.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

fn interest(write: bool) -> EventFlags {
    let mut flags = EventFlags::IN | EventFlags::RDHUP;
    if write {
        flags |= EventFlags::OUT;
    }
    flags
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        let fd = epoll::create(CreateFlags::CLOEXEC)?;
        Ok(Poller {
            fd,
            events: Events(EventVec::with_capacity(64)),
        })
    }

    /// Watches `fd` for input (and for room to write if `write`).
    pub fn add(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        epoll::add(
            &self.fd,
            borrow(fd),
            EventData::new_u64(token),
            interest(write),
        )?;
        Ok(())
    }

    /// Changes whether `fd` is also watched for room to write.
    pub fn modify(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        epoll::modify(
            &self.fd,
            borrow(fd),
            EventData::new_u64(token),
            interest(write),
        )?;
        Ok(())
    }

    /// Stops watching `fd` (closing it would too; explicit removal keeps the set exact even if
    /// the descriptor were duplicated). A failure only means it was not registered.
    pub fn remove(&self, fd: RawFd) {
        let _ = epoll::delete(&self.fd, borrow(fd));
    }

    /// Waits up to `timeout_ms` (0 = just look, never blocks) and appends the ready sockets to
    /// `out`. EINTR counts as "nothing ready".
    pub fn wait(&mut self, out: &mut Vec<Ready>, timeout_ms: i32) -> io::Result<()> {
        match epoll::wait(&self.fd, &mut self.events.0, timeout_ms) {
            Ok(()) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        for ev in &self.events.0 {
            let flags = ev.flags;
            out.push(Ready {
                token: ev.data.u64(),
                readable: flags.intersects(EventFlags::IN | EventFlags::RDHUP),
                writable: flags.contains(EventFlags::OUT),
                hangup: flags.intersects(EventFlags::HUP | EventFlags::ERR),
            });
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

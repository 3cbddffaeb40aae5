//! One TCP connection: its handshake phase, a bounded read buffer with the frame being read,
//! and a queue of frames waiting to be written with one vectored call (T4).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use ferry_proto::frame::{Header, HEADER_LEN};

/// Bytes of the per-connection read buffer. Payloads larger than what is buffered are read
/// straight into their destination, so this only bounds small-frame batching.
pub(crate) const READ_BUF: usize = 64 << 10;
/// Frames gathered into one `writev`.
const MAX_IOV: usize = 64;

/// Where a connection stands in its life (handshake, use, orderly close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Dialled with a non-blocking connect that has not completed yet (since the instant).
    Connecting(Instant),
    /// Accepted, waiting for the peer's `Hello` until the deadline (strangers are dropped).
    AwaitHello(Instant),
    /// Dialled; `Hello` queued, frames may follow it, nothing but `HelloAck` accepted yet.
    AwaitHelloAck,
    /// Authenticated and in use.
    Open,
    /// We asked to close (eviction) and send no new requests; waiting for the answer.
    ClosingSent,
    /// Both sides agreed to close (or the peer said `Bye`); closed once the queue is written.
    Closing,
    /// We said `Bye` (finish); waiting for the peer to close.
    ByeSent,
}

/// Destination of the payload being read.
pub(crate) enum Target {
    /// Straight into the receive buffer of `ex.recvs[index]`.
    Direct(usize),
    /// Into a vector for the inbox (or the handshake secret).
    Owned(Vec<u8>),
    /// Thrown away (a refused TRY, a frame of a broken exchange).
    Discard,
}

/// Progress of the frame being read.
pub(crate) enum ReadState {
    /// Between frames.
    Header,
    /// `done` of `header.len` payload bytes have arrived.
    Payload {
        header: Header,
        target: Target,
        done: usize,
    },
}

/// A frame waiting to be written; `off` bytes of header + payload are already out.
pub(crate) struct OutFrame {
    pub header: [u8; HEADER_LEN],
    pub payload: Option<Arc<Vec<u8>>>,
    pub off: usize,
}

impl OutFrame {
    pub fn new(h: &Header, payload: Option<Arc<Vec<u8>>>) -> OutFrame {
        OutFrame {
            header: h.encode(),
            payload,
            off: 0,
        }
    }

    fn len(&self) -> usize {
        HEADER_LEN + self.payload.as_ref().map_or(0, |p| p.len())
    }
}

/// A connection and its buffers.
pub(crate) struct Conn {
    pub sock: TcpStream,
    /// Peer rank, known at once when dialled, after `Hello` when accepted.
    pub peer: Option<usize>,
    pub phase: Phase,
    pub rbuf: Box<[u8]>,
    pub rpos: usize,
    pub rend: usize,
    pub rstate: ReadState,
    pub wq: VecDeque<OutFrame>,
    /// Requests we sent on this connection that still wait for their answer on it (TRY/ADD ->
    /// ACCEPT/REFUSE, GET -> DATA/MISS). A connection is only evicted at zero.
    pub outstanding: usize,
    /// Logical time of last use, for least-recently-used eviction.
    pub last_used: u64,
    /// Whether the poller also watches for room to write.
    pub want_write: bool,
}

impl Conn {
    pub fn new(sock: TcpStream, peer: Option<usize>, phase: Phase, tick: u64) -> Conn {
        Conn {
            sock,
            peer,
            phase,
            rbuf: vec![0u8; READ_BUF].into_boxed_slice(),
            rpos: 0,
            rend: 0,
            rstate: ReadState::Header,
            wq: VecDeque::new(),
            outstanding: 0,
            last_used: tick,
            want_write: false,
        }
    }

    /// Bytes buffered but not yet parsed.
    pub fn buffered(&self) -> usize {
        self.rend - self.rpos
    }

    /// Whether nothing is in flight on this connection in either direction we know of, so
    /// that closing it loses nothing.
    pub fn quiescent(&self) -> bool {
        self.phase == Phase::Open
            && self.outstanding == 0
            && self.wq.is_empty()
            && self.buffered() == 0
            && matches!(self.rstate, ReadState::Header)
    }

    /// Reads into the free part of the buffer; `Ok(0)` is end of stream. The flag says the
    /// read came back short, i.e. the socket is drained for now (saves a futile `read`).
    pub fn fill(&mut self) -> io::Result<(usize, bool)> {
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        } else if self.rbuf.len() - self.rend < HEADER_LEN {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rend -= self.rpos;
            self.rpos = 0;
        }
        let room = self.rbuf.len() - self.rend;
        let n = self.sock.read(&mut self.rbuf[self.rend..])?;
        self.rend += n;
        Ok((n, n < room))
    }

    /// Writes as much of the queue as the socket takes, header and payload of many frames in
    /// one `writev` (T4). Returns whether the queue is now empty.
    pub fn flush(&mut self) -> io::Result<bool> {
        while !self.wq.is_empty() {
            let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            for f in self.wq.iter() {
                if n_iov + 2 > MAX_IOV {
                    break;
                }
                if f.off < HEADER_LEN {
                    iov[n_iov] = IoSlice::new(&f.header[f.off..]);
                    n_iov += 1;
                }
                if let Some(p) = &f.payload {
                    let start = f.off.saturating_sub(HEADER_LEN);
                    if start < p.len() {
                        iov[n_iov] = IoSlice::new(&p[start..]);
                        n_iov += 1;
                    }
                }
            }
            let mut n = match self.sock.write_vectored(&iov[..n_iov]) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while n > 0 {
                let Some(f) = self.wq.front_mut() else { break };
                let left = f.len() - f.off;
                if n >= left {
                    n -= left;
                    self.wq.pop_front();
                } else {
                    f.off += n;
                    n = 0;
                }
            }
        }
        Ok(true)
    }
}

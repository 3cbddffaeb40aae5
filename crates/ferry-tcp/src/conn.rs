//! One TCP connection: its handshake phase, a bounded read buffer with the frame being read,
//! and a queue of frames waiting to be written with one vectored call (T4).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use ferry_core::{MsgKey, OpState, SendOp};
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

/// Send op progress: announced, waiting for the receiver's GET (payload still borrowed).
pub(crate) const SEND_ANNOUNCED: usize = 1;
/// Send op progress: DATA being written straight from the op's borrowed payload.
pub(crate) const SEND_STREAMING: usize = 2;

/// What follows a frame header.
pub(crate) enum Payload {
    /// Nothing.
    None,
    /// Bytes owned by the backend (outbox copy, handshake secret).
    Shared(Arc<Vec<u8>>),
    /// The payload of `ex.sends[op]`, written without a copy (zero-copy rendezvous, T4). Only a
    /// flush that is handed the exchange can write it; the op completes when it is out.
    Borrowed {
        op: usize,
        key: MsgKey,
        serial: u64,
        len: usize,
    },
}

/// A frame waiting to be written; `off` bytes of header + payload are already out.
pub(crate) struct OutFrame {
    pub header: [u8; HEADER_LEN],
    pub payload: Payload,
    pub off: usize,
}

impl OutFrame {
    pub fn new(h: &Header, payload: Option<Arc<Vec<u8>>>) -> OutFrame {
        OutFrame {
            header: h.encode(),
            payload: payload.map_or(Payload::None, Payload::Shared),
            off: 0,
        }
    }

    fn len(&self) -> usize {
        HEADER_LEN
            + match &self.payload {
                Payload::None => 0,
                Payload::Shared(p) => p.len(),
                Payload::Borrowed { len, .. } => *len,
            }
    }
}

/// Outcome of a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Everything written.
    Empty,
    /// The socket is full; wait for room.
    WouldBlock,
    /// The next frame's payload lives in the exchange, which this flush was not given.
    NeedsExchange,
}

/// The borrowed payload of `sends[op]` if that op is still the one streaming this message.
fn borrowed<'s>(
    sends: &'s [SendOp<'_>],
    op: usize,
    key: MsgKey,
    serial: u64,
    len: usize,
) -> Option<&'s [u8]> {
    let s = sends.get(op)?;
    let streaming = OpState::Active {
        serial,
        progress: SEND_STREAMING,
    };
    (s.key == key && s.data.len() == len && s.state == streaming).then_some(s.data)
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
    /// Frames in the queue with a borrowed payload.
    pub borrowed: usize,
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
            borrowed: 0,
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
    /// one `writev` (T4). Borrowed payloads are written only when `sends` is given; the send op
    /// of a completely written borrowed frame is marked done.
    pub fn flush(&mut self, mut sends: Option<&mut [SendOp<'_>]>) -> io::Result<Flushed> {
        while !self.wq.is_empty() {
            let res = {
                let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                let mut n_iov = 0;
                let view = sends.as_deref();
                for f in self.wq.iter() {
                    if n_iov + 2 > MAX_IOV {
                        break;
                    }
                    let payload: &[u8] = match &f.payload {
                        Payload::None => &[],
                        Payload::Shared(p) => p,
                        Payload::Borrowed {
                            op,
                            key,
                            serial,
                            len,
                        } => match view {
                            None => break,
                            Some(v) => borrowed(v, *op, *key, *serial, *len).ok_or_else(|| {
                                io::Error::other(
                                    "exchange abandoned while one of its messages was being written",
                                )
                            })?,
                        },
                    };
                    if f.off < HEADER_LEN {
                        iov[n_iov] = IoSlice::new(&f.header[f.off..]);
                        n_iov += 1;
                    }
                    let start = f.off.saturating_sub(HEADER_LEN);
                    if start < payload.len() {
                        iov[n_iov] = IoSlice::new(&payload[start..]);
                        n_iov += 1;
                    }
                }
                if n_iov == 0 {
                    return Ok(Flushed::NeedsExchange);
                }
                self.sock.write_vectored(&iov[..n_iov])
            };
            let mut n = match res {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flushed::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while n > 0 {
                let Some(f) = self.wq.front_mut() else { break };
                let left = f.len() - f.off;
                if n >= left {
                    n -= left;
                    if let Some(Payload::Borrowed { op, .. }) =
                        self.wq.pop_front().map(|f| f.payload)
                    {
                        self.borrowed = self.borrowed.saturating_sub(1);
                        if let Some(s) = sends.as_deref_mut().and_then(|s| s.get_mut(op)) {
                            s.state = OpState::Done;
                        }
                    }
                } else {
                    f.off += n;
                    n = 0;
                }
            }
        }
        Ok(Flushed::Empty)
    }
}

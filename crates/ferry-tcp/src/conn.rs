//! One TCP connection: its handshake phase, a bounded read buffer with the frame being read,
//! and a queue of frames waiting to be written with one vectored call (T4).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use ferry_core::{MsgKey, OpState, SendOp};
use ferry_proto::frame::{FrameType, Header, HEADER_LEN};

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
    /// This rank opened the connection (as opposed to accepting it).
    pub dialled: bool,
    /// A flush wrote bytes while zero-copy DATA was queued (the receiver is pulling); the
    /// transport reads and clears it to keep the rendezvous grace period running.
    pub streamed: bool,
    /// A flush wrote bytes (progress, for the exchange driver's polling budget); read and
    /// cleared by the transport.
    pub wrote: bool,
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
            dialled: peer.is_some(),
            streamed: false,
            wrote: false,
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

    /// Whether the queue holds a frame that must leave now. ACCEPTs alone may wait (corked)
    /// for the next frame to this peer or for this rank to block (see the transport's module
    /// documentation): a ping-pong's answer then carries them in the same `writev`.
    pub fn urgent(&self) -> bool {
        self.wq
            .iter()
            .any(|f| f.off > 0 || f.header[3] != FrameType::Accept as u8)
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
                Ok(n) => {
                    self.streamed |= self.borrowed > 0;
                    self.wrote = true;
                    n
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::Exchange;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn header(serial: u64, len: usize) -> Header {
        Header {
            ty: FrameType::Data,
            key: MsgKey::user(3),
            source: 0,
            dest: 1,
            serial,
            len: len as u64,
        }
    }

    /// Reads everything `b` receives until `want` bytes arrived, while flushing `c`.
    fn drain(
        c: &mut Conn,
        b: &mut TcpStream,
        want: usize,
        mut ex: Option<&mut Exchange<'_>>,
    ) -> Vec<u8> {
        b.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while out.len() < want {
            c.flush(ex.as_deref_mut().map(|e| &mut e.sends[..]))
                .unwrap();
            let n = b.read(&mut buf).unwrap();
            assert!(n > 0);
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[test]
    fn queued_frames_are_written_in_order_across_partial_writes() {
        let (a, mut b) = pair();
        let mut c = Conn::new(a, Some(1), Phase::Open, 0);
        let big = Arc::new(vec![7u8; 4 << 20]);
        c.wq.push_back(OutFrame::new(&header(0, 3), Some(Arc::new(vec![1, 2, 3]))));
        c.wq.push_back(OutFrame::new(&header(1, big.len()), Some(big.clone())));
        c.wq.push_back(OutFrame::new(&header(2, 0), None));
        let total = 3 * HEADER_LEN + 3 + big.len();
        let got = drain(&mut c, &mut b, total, None);
        assert_eq!(got.len(), total);
        assert_eq!(Header::decode(&got, u64::MAX).unwrap(), header(0, 3));
        assert_eq!(&got[HEADER_LEN..HEADER_LEN + 3], &[1, 2, 3]);
        let second = HEADER_LEN + 3;
        assert_eq!(
            Header::decode(&got[second..], u64::MAX).unwrap(),
            header(1, big.len())
        );
        let third = second + HEADER_LEN + big.len();
        assert!(got[second + HEADER_LEN..third].iter().all(|&x| x == 7));
        assert_eq!(
            Header::decode(&got[third..], u64::MAX).unwrap(),
            header(2, 0)
        );
        assert!(c.wq.is_empty());
    }

    #[test]
    fn borrowed_payload_waits_for_its_exchange_and_completes_the_op() {
        let (a, mut b) = pair();
        let mut c = Conn::new(a, Some(1), Phase::Open, 0);
        let data = vec![5u8; 300_000];
        let mut ex = Exchange::new();
        ex.send(1, MsgKey::user(3), &data);
        ex.sends[0].state = OpState::Active {
            serial: 9,
            progress: SEND_STREAMING,
        };
        c.wq.push_back(OutFrame {
            header: header(9, data.len()).encode(),
            payload: Payload::Borrowed {
                op: 0,
                key: MsgKey::user(3),
                serial: 9,
                len: data.len(),
            },
            off: 0,
        });
        c.borrowed = 1;
        assert_eq!(c.flush(None).unwrap(), Flushed::NeedsExchange);
        let got = drain(&mut c, &mut b, HEADER_LEN + data.len(), Some(&mut ex));
        assert!(got[HEADER_LEN..].iter().all(|&x| x == 5));
        assert_eq!(ex.sends[0].state, OpState::Done);
        assert_eq!(c.borrowed, 0);
    }

    #[test]
    fn only_a_queue_of_whole_accepts_may_wait() {
        let (a, _b) = pair();
        let mut c = Conn::new(a, Some(1), Phase::Open, 0);
        assert!(!c.urgent());
        let mut accept = header(1, 0);
        accept.ty = FrameType::Accept;
        c.wq.push_back(OutFrame::new(&accept, None));
        c.wq.push_back(OutFrame::new(&accept, None));
        assert!(!c.urgent(), "corked ACCEPTs alone wait for company");
        c.wq[0].off = 10;
        assert!(c.urgent(), "a partly written frame must be finished");
        c.wq[0].off = 0;
        let mut refuse = header(2, 0);
        refuse.ty = FrameType::Refuse;
        c.wq.push_back(OutFrame::new(&refuse, None));
        assert!(c.urgent(), "anything but an ACCEPT leaves at once");
    }

    #[test]
    fn borrowed_payload_of_another_exchange_is_an_error() {
        let (a, _b) = pair();
        let mut c = Conn::new(a, Some(1), Phase::Open, 0);
        c.wq.push_back(OutFrame {
            header: header(1, 10).encode(),
            payload: Payload::Borrowed {
                op: 0,
                key: MsgKey::user(3),
                serial: 1,
                len: 10,
            },
            off: 0,
        });
        let mut other = Exchange::new();
        assert!(c.flush(Some(&mut other.sends[..])).is_err());
    }
}

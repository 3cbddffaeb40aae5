//! One socket of the driver: the read buffer with the frame being read, and the queue of
//! frames the endpoint asked to write, written many at a time with one vectored call (T4).
//! What the frames mean is the endpoint's business (`ferry_proto::endpoint`); a link only
//! moves bytes.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use ferry_proto::endpoint::{Payload, RecvId, SendBuffers, SendId};
use ferry_proto::frame::{FrameType, Header, HEADER_LEN};

/// Bytes of the per-connection read buffer. Payloads larger than what is buffered are read
/// straight into their destination, so this only bounds small-frame batching.
pub(crate) const READ_BUF: usize = 64 << 10;
/// Frames gathered into one `writev`.
const MAX_IOV: usize = 64;
/// Bytes read ahead into the read buffer behind a payload that is read straight into its
/// destination, and by a header read after such a payload: enough for the next header and a
/// run of small frames, small enough that the next large payload is mostly read straight into
/// its own destination instead of through the read buffer (one copy fewer).
pub(crate) const READ_AHEAD: usize = 4 << 10;

/// Where the payload being read goes.
pub(crate) enum Dest {
    /// Straight into the buffer of this receive of the exchange.
    Recv(RecvId),
    /// Into a vector the endpoint keeps (inbox, handshake secret).
    Owned(Vec<u8>),
    /// Nowhere.
    Discard,
}

/// Progress of the frame being read.
pub(crate) enum ReadState {
    /// Between frames.
    Header,
    /// `done` of `header.len` payload bytes have arrived.
    Payload {
        header: Header,
        dest: Dest,
        done: usize,
    },
}

/// A frame waiting to be written; `off` bytes of header + payload are already out.
pub(crate) struct OutFrame {
    pub header: [u8; HEADER_LEN],
    pub payload: Payload,
    pub off: usize,
}

impl OutFrame {
    fn len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }
}

/// What happens to the link once its queue is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// Nothing: it stays open.
    Keep,
    /// Shut down the write side (goodbye said); keep reading until the peer closes.
    ShutdownWrite,
    /// Close it (the endpoint has forgotten it).
    Close,
}

/// Outcome of a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Everything written.
    Empty,
    /// The socket is full; wait for room.
    WouldBlock,
    /// The next frame's payload is a send's buffer, which this flush was not given.
    NeedsExchange,
}

/// A connection's socket and buffers.
pub(crate) struct Link {
    pub sock: TcpStream,
    /// The rank dialled (accepted links learn theirs in the endpoint).
    pub peer: Option<usize>,
    /// A non-blocking connect has not completed yet.
    pub connecting: bool,
    pub rbuf: Box<[u8]>,
    pub rpos: usize,
    pub rend: usize,
    pub rstate: ReadState,
    pub wq: VecDeque<OutFrame>,
    /// Whether the poller also watches for room to write.
    pub want_write: bool,
    /// Frames in the queue whose payload is a send's buffer (zero-copy DATA).
    pub borrowed: usize,
    pub after: After,
    pub write_shut: bool,
    /// A flush wrote bytes while zero-copy DATA was queued (the receiver is pulling): keeps
    /// the endpoint's rendezvous grace running. Read and cleared by the transport.
    pub streamed: bool,
    /// Bytes the flushes wrote (progress, for the polling budget). Read and cleared.
    pub wrote: usize,
    /// GETs written on this link whose DATA (or MISS) has not been read yet: while there are
    /// any, a header is read on its own, so that the large payload that likely follows lands
    /// straight in the receive's buffer instead of partly in the read buffer first.
    pub gets_out: usize,
    /// The last payload read on this link was large: the next header is read with a short
    /// read-ahead ([`READ_AHEAD`]), so that a stream of large messages does not land in the
    /// read buffer first.
    pub large: bool,
}

impl Link {
    pub fn new(sock: TcpStream, peer: Option<usize>, connecting: bool) -> Link {
        Link {
            sock,
            peer,
            connecting,
            rbuf: vec![0u8; READ_BUF].into_boxed_slice(),
            rpos: 0,
            rend: 0,
            rstate: ReadState::Header,
            wq: VecDeque::new(),
            want_write: connecting,
            borrowed: 0,
            after: After::Keep,
            write_shut: false,
            streamed: false,
            wrote: 0,
            gets_out: 0,
            large: false,
        }
    }

    /// Bytes buffered but not yet parsed.
    pub fn buffered(&self) -> usize {
        self.rend - self.rpos
    }

    /// Queues a frame.
    pub fn push(&mut self, header: &Header, payload: Payload) {
        if matches!(payload, Payload::Op(..)) {
            self.borrowed += 1;
        }
        if header.ty == FrameType::Get {
            self.gets_out += 1;
        }
        self.wq.push_back(OutFrame {
            header: header.encode(),
            payload,
            off: 0,
        });
    }

    /// Replaces the zero-copy payloads of send `op` by copies of `bytes` (its exchange is
    /// being abandoned: nothing may refer to the program's buffer afterwards).
    pub fn detach_op(&mut self, op: SendId, bytes: &[u8]) {
        for f in self.wq.iter_mut() {
            if matches!(f.payload, Payload::Op(o, len) if o == op && len == bytes.len()) {
                f.payload = Payload::Shared(Arc::new(bytes.to_vec()));
                self.borrowed = self.borrowed.saturating_sub(1);
            }
        }
    }

    /// Frames of send `op` still queued with the program's buffer as payload take it from
    /// `data` (the endpoint's copy: the send's call ends) and no longer need the exchange.
    pub fn share_op(&mut self, op: SendId, data: &Arc<Vec<u8>>) {
        for f in self.wq.iter_mut() {
            if matches!(f.payload, Payload::Op(o, len) if o == op && len == data.len()) {
                f.payload = Payload::Shared(data.clone());
                self.borrowed = self.borrowed.saturating_sub(1);
            }
        }
    }

    /// Reads into the free part of the buffer, at most `limit` bytes; `Ok(0)` is end of
    /// stream. The flag says the read came back short, i.e. the socket is drained for now
    /// (saves a futile `read`).
    pub fn fill(&mut self, limit: usize) -> io::Result<(usize, bool)> {
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        } else if self.rbuf.len() - self.rend < HEADER_LEN {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rend -= self.rpos;
            self.rpos = 0;
        }
        let room = (self.rbuf.len() - self.rend).min(limit.max(1));
        let n = self
            .sock
            .read(&mut self.rbuf[self.rend..self.rend + room])?;
        self.rend += n;
        Ok((n, n < room))
    }

    /// Reads the rest of a payload straight into `dst` and, in the same call, up to
    /// [`READ_AHEAD`] bytes of what follows into the (empty) read buffer. Returns the bytes
    /// that landed in `dst` and whether the read came back short (socket drained).
    pub fn read_direct(&mut self, dst: &mut [u8]) -> io::Result<(usize, bool)> {
        if self.rpos != self.rend {
            // Buffered bytes come first: never read past them.
            return Err(io::Error::other("direct read with bytes buffered"));
        }
        self.rpos = 0;
        self.rend = 0;
        let want = dst.len();
        let mut iov = [
            IoSliceMut::new(dst),
            IoSliceMut::new(&mut self.rbuf[..READ_AHEAD]),
        ];
        let n = self.sock.read_vectored(&mut iov)?;
        let direct = n.min(want);
        self.rend = n - direct;
        Ok((direct, n < want + READ_AHEAD))
    }

    /// Writes as much of the queue as the socket takes, header and payload of many frames in
    /// one `writev` (T4). Zero-copy payloads are written only when `bufs` is given; the sends
    /// whose frames went out completely are appended to `written`. A zero-copy payload whose
    /// send `bufs` does not hold is an error (its exchange was dropped without being
    /// abandoned, so the frame cannot be completed).
    pub fn flush(
        &mut self,
        bufs: Option<&dyn SendBuffers>,
        written: &mut Vec<SendId>,
    ) -> io::Result<Flushed> {
        while !self.wq.is_empty() {
            let res = {
                let mut iov: [IoSlice<'_>; MAX_IOV] = [IoSlice::new(&[]); MAX_IOV];
                let mut n_iov = 0;
                for f in self.wq.iter() {
                    if n_iov + 2 > MAX_IOV {
                        break;
                    }
                    let payload: &[u8] = match &f.payload {
                        Payload::None => &[],
                        Payload::Shared(p) => p,
                        Payload::Op(op, len) => match bufs {
                            None => break,
                            Some(b) => {
                                b.bytes(*op).filter(|b| b.len() == *len).ok_or_else(|| {
                                    io::Error::other(
                                        "exchange dropped while one of its messages was being \
                                         written",
                                    )
                                })?
                            }
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
                    self.wrote += n;
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
                    if let Some(Payload::Op(op, _)) = self.wq.pop_front().map(|f| f.payload) {
                        self.borrowed = self.borrowed.saturating_sub(1);
                        written.push(op);
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
    use ferry_proto::MsgKey;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn header(ty: FrameType, serial: u64, len: usize) -> Header {
        Header {
            ty,
            key: MsgKey::user(3),
            source: 0,
            dest: 1,
            serial,
            len: len as u64,
        }
    }

    struct One(SendId, Vec<u8>);

    impl SendBuffers for One {
        fn bytes(&self, op: SendId) -> Option<&[u8]> {
            (op == self.0).then_some(&self.1[..])
        }
    }

    /// Reads everything `b` receives until `want` bytes arrived, while flushing `l`.
    fn drain(
        l: &mut Link,
        b: &mut TcpStream,
        want: usize,
        bufs: Option<&dyn SendBuffers>,
        written: &mut Vec<SendId>,
    ) -> Vec<u8> {
        b.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while out.len() < want {
            l.flush(bufs, written).unwrap();
            let n = b.read(&mut buf).unwrap();
            assert!(n > 0);
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    #[test]
    fn queued_frames_are_written_in_order_across_partial_writes() {
        let (a, mut b) = pair();
        let mut l = Link::new(a, Some(1), false);
        let big = Arc::new(vec![7u8; 4 << 20]);
        let h0 = header(FrameType::Try, 0, 3);
        let h1 = header(FrameType::Try, 1, big.len());
        let h2 = header(FrameType::Accept, 2, 0);
        l.push(&h0, Payload::Shared(Arc::new(vec![1, 2, 3])));
        l.push(&h1, Payload::Shared(big.clone()));
        l.push(&h2, Payload::None);
        let total = 3 * HEADER_LEN + 3 + big.len();
        let got = drain(&mut l, &mut b, total, None, &mut Vec::new());
        assert_eq!(got.len(), total);
        assert_eq!(Header::decode(&got, u64::MAX).unwrap(), h0);
        assert_eq!(&got[HEADER_LEN..HEADER_LEN + 3], &[1, 2, 3]);
        let second = HEADER_LEN + 3;
        assert_eq!(Header::decode(&got[second..], u64::MAX).unwrap(), h1);
        let third = second + HEADER_LEN + big.len();
        assert!(got[second + HEADER_LEN..third].iter().all(|&x| x == 7));
        assert_eq!(Header::decode(&got[third..], u64::MAX).unwrap(), h2);
        assert!(l.wq.is_empty());
    }

    #[test]
    fn zero_copy_payload_waits_for_its_buffers_and_reports_the_send() {
        let (a, mut b) = pair();
        let mut l = Link::new(a, Some(1), false);
        let data = vec![5u8; 300_000];
        l.push(
            &header(FrameType::Data, 9, data.len()),
            Payload::Op(SendId(4), data.len()),
        );
        let mut written = Vec::new();
        assert_eq!(l.flush(None, &mut written).unwrap(), Flushed::NeedsExchange);
        let bufs = One(SendId(4), data.clone());
        let got = drain(
            &mut l,
            &mut b,
            HEADER_LEN + data.len(),
            Some(&bufs),
            &mut written,
        );
        assert!(got[HEADER_LEN..].iter().all(|&x| x == 5));
        assert_eq!(written, vec![SendId(4)]);
        assert_eq!(l.borrowed, 0);
    }

    #[test]
    fn a_detached_payload_no_longer_needs_the_program_buffer() {
        let (a, mut b) = pair();
        let mut l = Link::new(a, Some(1), false);
        let data = vec![6u8; 1000];
        l.push(
            &header(FrameType::Data, 1, data.len()),
            Payload::Op(SendId(1), data.len()),
        );
        l.detach_op(SendId(1), &data);
        assert_eq!(l.borrowed, 0);
        let got = drain(&mut l, &mut b, HEADER_LEN + 1000, None, &mut Vec::new());
        assert!(got[HEADER_LEN..].iter().all(|&x| x == 6));
    }

    #[test]
    fn with_a_get_outstanding_a_header_is_read_alone() {
        let (a, mut b) = pair();
        let mut l = Link::new(a, Some(1), false);
        l.push(&header(FrameType::Get, 1, 0), Payload::None);
        assert_eq!(l.gets_out, 1);
        l.flush(None, &mut Vec::new()).unwrap();
        let data = header(FrameType::Data, 1, 100_000);
        b.write_all(&data.encode()).unwrap();
        b.write_all(&vec![3u8; 100_000]).unwrap();
        l.sock.set_nonblocking(false).unwrap();
        // What the driver asks for while a GET is outstanding: the header only, so that the
        // payload can be read straight into the receive's buffer.
        let (n, _) = l.fill(HEADER_LEN).unwrap();
        assert_eq!(n, HEADER_LEN);
        assert_eq!(l.buffered(), HEADER_LEN);
        let (n, _) = l.fill(usize::MAX).unwrap();
        assert!(n > 0 && l.buffered() > HEADER_LEN);
    }

    #[test]
    fn a_payload_is_read_straight_into_its_destination_with_the_next_header_behind_it() {
        let (a, mut b) = pair();
        let mut l = Link::new(a, Some(1), false);
        l.sock.set_nonblocking(false).unwrap();
        let payload: Vec<u8> = (0..100_000).map(|i| (i % 251) as u8).collect();
        let next = header(FrameType::Accept, 4, 0);
        b.write_all(&payload).unwrap();
        b.write_all(&next.encode()).unwrap();
        let mut dst = vec![0u8; payload.len()];
        let mut done = 0;
        while done < dst.len() {
            let (n, _) = l.read_direct(&mut dst[done..]).unwrap();
            assert!(n > 0);
            done += n;
        }
        assert_eq!(dst, payload);
        // What followed the payload landed in the read buffer, not in the destination.
        while l.buffered() < HEADER_LEN {
            l.fill(READ_AHEAD).unwrap();
        }
        assert_eq!(
            Header::decode(&l.rbuf[l.rpos..l.rpos + HEADER_LEN], u64::MAX).unwrap(),
            next
        );
        // Never past buffered bytes.
        assert!(l.read_direct(&mut dst).is_err());
    }

    #[test]
    fn a_shared_copy_replaces_the_program_buffer_of_a_queued_frame() {
        let (a, mut b) = pair();
        let mut l = Link::new(a, Some(1), false);
        let data = vec![9u8; 50_000];
        l.push(
            &header(FrameType::Try, 1, data.len()),
            Payload::Op(SendId(2), data.len()),
        );
        l.share_op(SendId(2), &Arc::new(data.clone()));
        assert_eq!(l.borrowed, 0);
        // Written without the exchange: the frame no longer needs the program's buffer.
        let got = drain(
            &mut l,
            &mut b,
            HEADER_LEN + data.len(),
            None,
            &mut Vec::new(),
        );
        assert!(got[HEADER_LEN..].iter().all(|&x| x == 9));
    }

    #[test]
    fn a_zero_copy_payload_without_its_send_is_an_error() {
        let (a, _b) = pair();
        let mut l = Link::new(a, Some(1), false);
        l.push(&header(FrameType::Data, 1, 10), Payload::Op(SendId(1), 10));
        let other = One(SendId(2), vec![0; 10]);
        assert!(l.flush(Some(&other), &mut Vec::new()).is_err());
    }
}

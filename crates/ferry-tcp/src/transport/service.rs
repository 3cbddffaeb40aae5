//! Socket service (T3, T4): the level-triggered epoll pass over ready sockets, reading frames
//! with bounded work per socket and handing them to the endpoint (payloads land where it says:
//! large ones straight into the receive's buffer), and writing the frames it queued (zero-copy
//! payloads from the exchange's buffers).

use std::net::Shutdown;

use ferry_core::RecvBuf;
use ferry_proto::endpoint::{Landed, Lost, Sink};
use ferry_proto::frame::{FrameType, Header, HEADER_LEN};

use super::ops::{recv_index, ExBufs};
use super::*;
use crate::link::{After, Dest, Flushed, ReadState, READ_AHEAD};

/// Bytes read from one socket per pass before the next ready socket gets its turn (T3).
const READ_BUDGET: usize = 256 << 10;
/// Frames parsed from one socket per pass.
const FRAME_BUDGET: usize = 256;
/// Payload remainders at least this large are read straight into their destination.
const DIRECT_READ_MIN: usize = 8 << 10;

impl TcpTransport {
    /// Writes what link `id` has queued; zero-copy payloads only when `ex` is given. A write
    /// error means the connection is lost; a link the endpoint closed goes once it is written.
    pub(super) fn flush_link(&mut self, id: ConnId, ex: Option<&Exchange<'_>>) {
        let Some(l) = self.links.get_mut(&id) else {
            return;
        };
        if l.connecting {
            return;
        }
        let bufs = ex.map(|e| ExBufs(&e.sends));
        let res = l.flush(
            bufs.as_ref()
                .map(|b| b as &dyn ferry_proto::endpoint::SendBuffers),
            &mut self.written,
        );
        let streamed = std::mem::take(&mut l.streamed);
        let wrote = std::mem::take(&mut l.wrote);
        if wrote > 0 {
            self.moved = self.moved.wrapping_add(1);
        }
        let mut gone = None;
        match res {
            Ok(state) => {
                // Only a full socket needs a wake-up for room. A queue whose head waits for
                // its exchange keeps the interest it had (the flush that is handed the
                // exchange, in the next progress call, decides).
                let want = match state {
                    Flushed::WouldBlock => true,
                    Flushed::Empty => false,
                    Flushed::NeedsExchange => l.want_write,
                };
                if want != l.want_write {
                    l.want_write = want;
                    let _ = self.poller.modify(l.sock.as_raw_fd(), id.0, want);
                }
                if state == Flushed::Empty {
                    match l.after {
                        After::Close => gone = Some(None),
                        After::ShutdownWrite if !l.write_shut => {
                            l.write_shut = true;
                            let _ = l.sock.shutdown(Shutdown::Write);
                        }
                        _ => {}
                    }
                }
            }
            Err(e) => gone = Some(Some(Lost::Error(e.to_string()))),
        }
        if wrote > 0 {
            self.note_written(wrote);
            if self.ep.has_eager_borrowed() {
                // The pass's clock is as old as the pass, and a window of 4 MiB takes
                // ~0.5 ms to write: its answers can only come after that.
                self.ep.on_written(self.epoch.elapsed());
            }
        }
        let now = self.now();
        if streamed {
            self.ep.on_data_moved(now);
        }
        for op in std::mem::take(&mut self.written) {
            self.ep.on_op_written(op, now);
        }
        match gone {
            None => {}
            Some(None) => self.remove_link(id),
            Some(Some(how)) => self.link_lost(id, how),
        }
    }

    /// Writes the zero-copy DATA frames, which need the exchange that owns their payloads.
    pub(super) fn flush_borrowed(&mut self, ex: &Exchange<'_>) {
        let mut i = 0;
        while i < self.borrowing.len() {
            let id = self.borrowing[i];
            self.flush_link(id, Some(ex));
            if self.links.get(&id).is_some_and(|l| l.borrowed > 0) {
                i += 1;
            } else {
                self.borrowing.swap_remove(i);
            }
        }
    }

    /// Writes the links that got frames in this pass (one `writev` each).
    pub(super) fn flush_batch(&mut self, ex: Option<&Exchange<'_>>) {
        while let Some(id) = self.batch.pop() {
            self.flush_link(id, ex);
        }
    }

    /// Writes the corked ACCEPTs.
    pub(super) fn flush_dirty(&mut self) {
        while let Some(id) = self.dirty.pop() {
            self.flush_link(id, None);
        }
        self.dirty_since = None;
    }

    /// Serves ready sockets once, in rotating order, with bounded work each (T3).
    pub(super) fn poll_io(&mut self, ex: &mut Exchange<'_>, timeout_ms: i32) -> Result<()> {
        self.ready.clear();
        let mut ready = std::mem::take(&mut self.ready);
        if let Err(e) = self.poller.wait(&mut ready, timeout_ms) {
            self.ready = ready;
            return Err(Error::io("poll", e).on_rank(self.rank));
        }
        // Links that stopped at their per-pass budget with whole frames still buffered: their
        // socket may be drained, so epoll would not report them again.
        for id in std::mem::take(&mut self.rescan) {
            if !ready.iter().any(|r| r.token == id.0) {
                ready.push(Ready {
                    token: id.0,
                    readable: true,
                    writable: false,
                    hangup: false,
                });
            }
        }
        let n = ready.len();
        self.rr = self.rr.wrapping_add(1);
        let start = if n == 0 { 0 } else { self.rr % n };
        let mut result = Ok(());
        for k in 0..n {
            let r = ready[(start + k) % n];
            if r.token == LISTENER {
                self.accept_some();
            } else {
                self.service(ConnId(r.token), r, ex);
            }
            if let Err(e) = self.apply_actions(ex) {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        self.ready = ready;
        result
    }

    /// Serves one ready link: completes its connect, writes, reads.
    pub(super) fn service(&mut self, id: ConnId, r: Ready, ex: &mut Exchange<'_>) {
        let Some(l) = self.links.get(&id) else {
            return;
        };
        if l.connecting {
            if r.writable || r.hangup {
                self.finish_connect(id);
            }
            return;
        }
        if r.writable {
            self.flush_link(id, Some(ex));
        }
        if r.readable || r.hangup {
            self.read_frames(id, ex);
        }
        if let Some(l) = self.links.get(&id) {
            let parsable = match l.rstate {
                ReadState::Header => l.buffered() >= HEADER_LEN,
                ReadState::Payload { .. } => l.buffered() > 0,
            };
            if parsable && !self.rescan.contains(&id) {
                self.rescan.push(id);
            }
        }
    }

    /// The connection of link `id` ended or broke: the endpoint decides what that means.
    pub(super) fn link_lost(&mut self, id: ConnId, how: Lost) {
        tracing::debug!("rank {}: {id:?} lost: {how:?}", self.rank);
        if self.ep.is_live(id) {
            if let (Some(p), Lost::Error(e)) = (self.links.get(&id).and_then(|l| l.peer), &how) {
                tracing::debug!("rank {}: connection with rank {p}: {e}", self.rank);
            }
            self.ep.on_conn_lost(id, how);
        }
        self.remove_link(id);
    }

    /// A fault of link `id` that is not the peer's death (garbage, a frame that cannot be
    /// allocated): the endpoint drops the connection.
    fn link_fault(&mut self, id: ConnId, cause: String) {
        tracing::warn!("rank {}: dropped a connection: {cause}", self.rank);
        if self.ep.is_live(id) {
            self.ep.on_conn_fault(id, cause);
        }
        self.remove_link(id);
    }

    /// Reads frames from link `id` within the per-pass budget and hands them to the endpoint.
    pub(super) fn read_frames(&mut self, id: ConnId, ex: &mut Exchange<'_>) {
        let now = self.now();
        let max = self.ep.config().max_message_bytes;
        let mut budget = READ_BUDGET;
        let mut frames = 0;
        // Set after a short read: the socket has nothing more right now, so the next read
        // would only return EAGAIN; level-triggered epoll reports it again when data comes.
        let mut drained = false;
        loop {
            let Some(l) = self.links.get_mut(&id) else {
                return;
            };
            match std::mem::replace(&mut l.rstate, ReadState::Header) {
                ReadState::Header => {
                    if l.buffered() >= HEADER_LEN {
                        let h = match Header::decode(&l.rbuf[l.rpos..l.rpos + HEADER_LEN], max) {
                            Ok(h) => h,
                            Err(e) => return self.link_fault(id, format!("malformed frame: {e}")),
                        };
                        l.rpos += HEADER_LEN;
                        if matches!(h.ty, FrameType::Data | FrameType::Miss) {
                            l.gets_out = l.gets_out.saturating_sub(1);
                        }
                        frames += 1;
                        if !matches!(
                            h.ty,
                            FrameType::Add
                                | FrameType::Try
                                | FrameType::Announce
                                | FrameType::Accept
                                | FrameType::Refuse
                                | FrameType::Get
                                | FrameType::Data
                                | FrameType::Miss
                        ) {
                            tracing::debug!(
                                "rank {}: {:?} from rank {} on {id:?} (serial {:#x})",
                                self.rank,
                                h.ty,
                                h.source,
                                h.serial
                            );
                        }
                        let dest = match self.ep.on_header(id, h, now) {
                            Sink::Done => None,
                            Sink::Recv(op, len) => {
                                Some(self.recv_dest(op, len, h.source as usize, ex))
                            }
                            Sink::Owned(len) => match self.spare.take(len) {
                                Some(v) => Some(Dest::Owned(v)),
                                None => {
                                    return self.link_fault(
                                        id,
                                        format!(
                                            "cannot allocate {len} bytes for a {:?} frame",
                                            h.ty
                                        ),
                                    )
                                }
                            },
                            Sink::Discard(_) => Some(Dest::Discard),
                        };
                        if let (Some(dest), Some(l)) = (dest, self.links.get_mut(&id)) {
                            l.large = h.payload_len() as usize >= DIRECT_READ_MIN;
                            l.rstate = ReadState::Payload {
                                header: h,
                                dest,
                                done: 0,
                            };
                        }
                        if !self.ep.is_live(id) || frames >= FRAME_BUDGET {
                            return;
                        }
                        continue;
                    }
                    if budget == 0 || drained {
                        return;
                    }
                    let limit = if l.gets_out > 0 {
                        HEADER_LEN - l.buffered()
                    } else if l.large {
                        READ_AHEAD
                    } else {
                        usize::MAX
                    };
                    match l.fill(limit) {
                        Ok((0, _)) => return self.link_lost(id, Lost::Eof),
                        Ok((n, short)) => {
                            self.moved = self.moved.wrapping_add(1);
                            budget = budget.saturating_sub(n);
                            drained = short;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return self.link_lost(id, Lost::Error(e.to_string())),
                    }
                }
                ReadState::Payload {
                    header,
                    mut dest,
                    mut done,
                } => {
                    let total = header.payload_len() as usize;
                    let take = l.buffered().min(total - done);
                    if take > 0 {
                        if let Some(dst) = dest_slice(&mut dest, ex, total) {
                            dst[done..done + take].copy_from_slice(&l.rbuf[l.rpos..l.rpos + take]);
                        }
                        l.rpos += take;
                        done += take;
                    }
                    if done == total {
                        let landed = match dest {
                            Dest::Recv(_) => Landed::Direct,
                            Dest::Owned(v) => Landed::Owned(v),
                            Dest::Discard => Landed::Discarded,
                        };
                        self.ep.on_payload(id, landed, now);
                        if !self.ep.is_live(id) {
                            return;
                        }
                        continue;
                    }
                    if budget == 0 || drained {
                        l.rstate = ReadState::Payload { header, dest, done };
                        return;
                    }
                    let direct = total - done >= DIRECT_READ_MIN && l.buffered() == 0;
                    let res = match (direct, dest_slice(&mut dest, ex, total)) {
                        (true, Some(dst)) => l
                            .read_direct(&mut dst[done..total])
                            .map(|(n, short)| (n, true, short)),
                        _ => l.fill(usize::MAX).map(|(n, short)| (n, false, short)),
                    };
                    match res {
                        Ok((0, _, _)) => return self.link_lost(id, Lost::Eof),
                        Ok((n, was_direct, short)) => {
                            self.moved = self.moved.wrapping_add(1);
                            budget = budget.saturating_sub(n.max(1));
                            drained = short;
                            if was_direct {
                                done += n;
                            }
                        }
                        // Nothing more now: the next turn of the loop keeps the frame and stops.
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => drained = true,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return self.link_lost(id, Lost::Error(e.to_string())),
                    }
                    if let Some(l) = self.links.get_mut(&id) {
                        l.rstate = ReadState::Payload { header, dest, done };
                    }
                }
            }
        }
    }

    /// Waits up to `timeout_ms` for any socket, without serving it (the next pass does).
    pub(super) fn wait_io(&mut self, timeout_ms: i32) {
        self.flush_dirty();
        self.ready.clear();
        let _ = self.poller.wait(&mut self.ready, timeout_ms);
        self.ready.clear();
    }
}

/// The bytes a payload is read into, or `None` to discard. A receive that is no longer in the
/// exchange (abandoned) degrades to discarding.
fn dest_slice<'b>(
    dest: &'b mut Dest,
    ex: &'b mut Exchange<'_>,
    total: usize,
) -> Option<&'b mut [u8]> {
    let op = match dest {
        Dest::Owned(v) => return Some(&mut v[..]),
        Dest::Discard => return None,
        Dest::Recv(op) => *op,
    };
    let fits = recv_index(ex, op).filter(|&i| match &ex.recvs[i].buf {
        RecvBuf::Vec(v) => v.len() == total,
        RecvBuf::Slice(s) => s.len() == total,
    });
    let Some(i) = fits else {
        *dest = Dest::Discard;
        return None;
    };
    match &mut ex.recvs[i].buf {
        RecvBuf::Vec(v) => Some(&mut v[..]),
        RecvBuf::Slice(s) => Some(&mut s[..]),
    }
}

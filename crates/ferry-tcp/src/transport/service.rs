//! Socket service (T3, T4): the level-triggered epoll pass over ready sockets, reading frames
//! with bounded work per socket (large payloads straight into the receive buffer), writing
//! queued frames (zero-copy payloads from the exchange), and what a broken stream means.

use super::recv::direct_valid;
use super::*;

impl TcpTransport {
    /// Writes what the connection's queue holds; a write error is a connection fault.
    pub(super) fn flush_conn(&mut self, id: usize) {
        self.flush_conn_with(id, None);
    }

    /// Like [`Self::flush_conn`], also writing payloads borrowed from `sends`.
    pub(super) fn flush_conn_with(&mut self, id: usize, sends: Option<&mut [SendOp<'_>]>) {
        let Some(conn) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        if matches!(conn.phase, Phase::Connecting(_)) {
            return;
        }
        let res = conn.flush(sends);
        if std::mem::take(&mut conn.streamed) {
            self.last_get = Instant::now();
        }
        if std::mem::take(&mut conn.wrote) {
            self.moved = self.moved.wrapping_add(1);
        }
        match res {
            Ok(state) => {
                // Only a full socket needs a wake-up for room. A queue whose head waits for
                // its exchange keeps the interest it had (the flush that is handed the
                // exchange, in the next progress call, decides).
                let want = match state {
                    Flushed::WouldBlock => true,
                    Flushed::Empty => false,
                    Flushed::NeedsExchange => conn.want_write,
                };
                if want != conn.want_write {
                    conn.want_write = want;
                    let _ = self.poller.modify(conn.sock.as_raw_fd(), id as u64, want);
                }
                if state == Flushed::Empty && conn.phase == Phase::Closing {
                    if let Some(conn) = self.conns[id].take() {
                        self.drop_conn(id, conn);
                    }
                }
            }
            Err(e) => {
                if let Some(conn) = self.conns[id].take() {
                    let v = self.io_fault(&conn, e);
                    self.apply_verdict(id, conn, v);
                }
            }
        }
    }

    /// Writes the zero-copy DATA frames, which need the exchange that owns their payloads.
    pub(super) fn flush_borrowed(&mut self, ex: &mut Exchange<'_>) {
        let mut i = 0;
        while i < self.borrowing.len() {
            let id = self.borrowing[i];
            self.flush_conn_with(id, Some(&mut ex.sends));
            let still = self
                .conns
                .get(id)
                .and_then(Option::as_ref)
                .is_some_and(|c| c.borrowed > 0);
            if still {
                i += 1;
            } else {
                self.borrowing.swap_remove(i);
            }
        }
    }

    /// Marks connection `c` to be flushed at the end of the current pass.
    pub(super) fn batch_push(&mut self, c: usize) {
        if !self.batch.contains(&c) {
            self.batch.push(c);
        }
    }

    pub(super) fn flush_batch(&mut self) {
        while let Some(id) = self.batch.pop() {
            self.flush_conn(id);
        }
    }

    pub(super) fn flush_dirty(&mut self) {
        while let Some(id) = self.dirty.pop() {
            self.flush_conn(id);
        }
        self.dirty_since = None;
    }

    /// Serves ready sockets once, in rotating order, with bounded work each (T3).
    pub(super) fn poll_io(&mut self, ex: &mut Exchange<'_>, timeout_ms: i32) -> Result<()> {
        self.ready.clear();
        let mut ready = std::mem::take(&mut self.ready);
        let res = self.poller.wait(&mut ready, timeout_ms);
        if let Err(e) = res {
            self.ready = ready;
            return Err(Error::io("poll", e).on_rank(self.rank));
        }
        // Connections that stopped at their per-pass budget with whole frames still buffered:
        // their socket may be drained, so epoll would not report them again.
        for id in std::mem::take(&mut self.rescan) {
            if !ready.iter().any(|r| r.token == id as u64) {
                ready.push(Ready {
                    token: id as u64,
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
            } else if let Err(e) = self.service(r.token as usize, r, ex) {
                result = Err(e);
                break;
            }
        }
        self.ready = ready;
        result
    }

    pub(super) fn service(&mut self, id: usize, r: Ready, ex: &mut Exchange<'_>) -> Result<()> {
        let Some(mut conn) = self.conns.get_mut(id).and_then(Option::take) else {
            return Ok(());
        };
        if r.readable {
            // Receiving counts as use: an incoming flow keeps its connection out of eviction.
            conn.last_used = self.tick;
        }
        let verdict = if let Phase::Connecting(_) = conn.phase {
            self.finish_connect(&mut conn)
        } else {
            let mut v = Verdict::Keep;
            if r.writable {
                let res = conn.flush(Some(&mut ex.sends));
                if std::mem::take(&mut conn.streamed) {
                    self.last_get = Instant::now();
                }
                if std::mem::take(&mut conn.wrote) {
                    self.moved = self.moved.wrapping_add(1);
                }
                if let Err(e) = res {
                    v = self.io_fault(&conn, e);
                }
            }
            if matches!(v, Verdict::Keep) && (r.readable || r.hangup) {
                match self.read_frames(id, &mut conn, ex) {
                    Ok(verdict) => v = verdict,
                    Err(e) => {
                        if conn.buffered() >= HEADER_LEN && !self.rescan.contains(&id) {
                            self.rescan.push(id);
                        }
                        self.conns[id] = Some(conn);
                        self.dirty.push(id);
                        return Err(e);
                    }
                }
            }
            v
        };
        self.apply_verdict(id, conn, verdict);
        Ok(())
    }

    pub(super) fn apply_verdict(&mut self, id: usize, conn: Conn, v: Verdict) {
        match v {
            Verdict::Keep => {
                if conn.buffered() >= HEADER_LEN && !self.rescan.contains(&id) {
                    self.rescan.push(id);
                }
                let urgent = conn.urgent();
                self.conns[id] = Some(conn);
                if urgent {
                    self.flush_conn(id);
                }
            }
            Verdict::Close => {
                let mut conn = conn;
                let _ = conn.flush(None);
                self.drop_conn(id, conn);
            }
            Verdict::Fault { cause, peer_failed } => {
                if let Some(p) = conn.peer {
                    if peer_failed {
                        self.mark_dead(p, cause);
                    } else if matches!(conn.phase, Phase::Connecting(_)) {
                        // A failed attempt; connect_failed decides about retries.
                        tracing::debug!("rank {}: connection to rank {p}: {cause}", self.rank);
                    } else {
                        tracing::warn!(
                            "rank {}: dropped connection with rank {p}: {cause}",
                            self.rank
                        );
                    }
                } else {
                    tracing::warn!(
                        "rank {}: dropped connection from stranger {:?}: {cause}",
                        self.rank,
                        conn.sock.peer_addr().ok()
                    );
                }
                self.drop_conn(id, conn);
            }
        }
    }

    pub(super) fn io_fault(&self, conn: &Conn, e: io::Error) -> Verdict {
        self.eof_verdict(conn, Some(e))
    }

    /// What a closed or broken stream means in the connection's phase.
    pub(super) fn eof_verdict(&self, conn: &Conn, e: Option<io::Error>) -> Verdict {
        let what = match &e {
            Some(e) => format!("connection error: {e}"),
            None => "connection closed by the peer without an orderly shutdown".to_string(),
        };
        match conn.phase {
            Phase::ClosingSent | Phase::Closing | Phase::ByeSent => Verdict::Close,
            Phase::AwaitHello(_) => Verdict::Fault {
                cause: format!("{what} before the handshake"),
                peer_failed: false,
            },
            Phase::Connecting(_) => Verdict::Fault {
                cause: what,
                peer_failed: false,
            },
            Phase::AwaitHelloAck => Verdict::Fault {
                cause: format!(
                    "{what} during the handshake (the peer ended, or its job secret differs)"
                ),
                peer_failed: true,
            },
            Phase::Open => {
                let finished = conn
                    .peer
                    .is_some_and(|p| matches!(self.peers[p].status, PeerStatus::Finished(_)));
                if finished {
                    Verdict::Close
                } else {
                    Verdict::Fault {
                        cause: what,
                        peer_failed: true,
                    }
                }
            }
        }
    }

    pub(super) fn read_frames(
        &mut self,
        id: usize,
        conn: &mut Conn,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        let mut budget = READ_BUDGET;
        let mut frames = 0;
        // Set after a short read: the socket has nothing more right now, so the next read
        // would only return EAGAIN; level-triggered epoll reports it again when data comes.
        let mut drained = false;
        loop {
            let state = std::mem::replace(&mut conn.rstate, ReadState::Header);
            match state {
                ReadState::Header => {
                    if conn.buffered() >= HEADER_LEN {
                        let bytes = &conn.rbuf[conn.rpos..conn.rpos + HEADER_LEN];
                        let h = match Header::decode(bytes, self.set.max_msg) {
                            Ok(h) => h,
                            Err(e) => {
                                return Ok(Verdict::Fault {
                                    cause: format!("malformed frame: {e}"),
                                    peer_failed: false,
                                })
                            }
                        };
                        conn.rpos += HEADER_LEN;
                        frames += 1;
                        match self.on_header(id, conn, h, ex)? {
                            Verdict::Keep => {}
                            other => return Ok(other),
                        }
                        if frames >= FRAME_BUDGET {
                            return Ok(Verdict::Keep);
                        }
                        continue;
                    }
                    if budget == 0 || drained {
                        return Ok(Verdict::Keep);
                    }
                    match conn.fill() {
                        Ok((0, _)) => return Ok(self.eof_verdict(conn, None)),
                        Ok((n, short)) => {
                            self.moved = self.moved.wrapping_add(1);
                            budget = budget.saturating_sub(n);
                            drained = short;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            return Ok(Verdict::Keep)
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Ok(self.io_fault(conn, e)),
                    }
                }
                ReadState::Payload {
                    header,
                    mut target,
                    mut done,
                } => {
                    let total = header.len as usize;
                    let take = conn.buffered().min(total - done);
                    if take > 0 {
                        let src = &conn.rbuf[conn.rpos..conn.rpos + take];
                        if let Some(dst) = target_slice(&mut target, ex, &header) {
                            dst[done..done + take].copy_from_slice(src);
                        }
                        conn.rpos += take;
                        done += take;
                    }
                    if done == total {
                        match self.on_payload(id, conn, header, target, ex)? {
                            Verdict::Keep => {}
                            other => return Ok(other),
                        }
                        continue;
                    }
                    if budget == 0 || drained {
                        conn.rstate = ReadState::Payload {
                            header,
                            target,
                            done,
                        };
                        return Ok(Verdict::Keep);
                    }
                    let direct = total - done >= DIRECT_READ_MIN;
                    let res = match (direct, target_slice(&mut target, ex, &header)) {
                        (true, Some(dst)) => {
                            use std::io::Read;
                            let want = total - done;
                            conn.sock
                                .read(&mut dst[done..total])
                                .map(|n| (n, true, n < want))
                        }
                        _ => conn.fill().map(|(n, short)| (n, false, short)),
                    };
                    match res {
                        Ok((0, _, _)) => return Ok(self.eof_verdict(conn, None)),
                        Ok((n, was_direct, short)) => {
                            self.moved = self.moved.wrapping_add(1);
                            budget = budget.saturating_sub(n);
                            drained = short;
                            if was_direct {
                                done += n;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            conn.rstate = ReadState::Payload {
                                header,
                                target,
                                done,
                            };
                            return Ok(Verdict::Keep);
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Ok(self.io_fault(conn, e)),
                    }
                    conn.rstate = ReadState::Payload {
                        header,
                        target,
                        done,
                    };
                }
            }
        }
    }

    pub(super) fn wait_io(&mut self, timeout_ms: i32) {
        self.flush_dirty();
        self.ready.clear();
        let _ = self.poller.wait(&mut self.ready, timeout_ms);
        self.ready.clear();
    }
}

/// The bytes a payload is read into, or `None` to discard. A direct target whose receive is no
/// longer in the exchange (abandoned after an error) degrades to discarding.
fn target_slice<'b>(
    target: &'b mut Target,
    ex: &'b mut Exchange<'_>,
    h: &Header,
) -> Option<&'b mut [u8]> {
    match target {
        Target::Owned(v) => Some(&mut v[..]),
        Target::Discard => None,
        Target::Direct(i) => {
            if !direct_valid(ex, *i, h) {
                *target = Target::Discard;
                return None;
            }
            match &mut ex.recvs[*i].buf {
                RecvBuf::Vec(v) => Some(&mut v[..]),
                RecvBuf::Slice(s) => Some(&mut s[..]),
            }
        }
    }
}

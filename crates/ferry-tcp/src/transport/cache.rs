//! The connection cache (T2, T5, T8): lazily dialled connections, the cap and least recently
//! used eviction with the CLOSE handshake, accepting, the handshake deadline, dial retries and
//! what a failed dial means.

use super::*;

impl TcpTransport {
    /// The connection to send to `peer` on, opening one if the cap allows; `None` while one is
    /// being set up, closed, or retried.
    pub(super) fn get_conn(&mut self, peer: usize, op: &'static str) -> Result<Option<usize>> {
        if let Some(c) = self.peers[peer].conn {
            if let Some(conn) = self
                .conns
                .get_mut(c)
                .and_then(Option::as_mut)
                .filter(|conn| conn.peer == Some(peer))
            {
                match conn.phase {
                    Phase::Open | Phase::AwaitHelloAck => {
                        self.tick += 1;
                        conn.last_used = self.tick;
                        return Ok(Some(c));
                    }
                    Phase::Connecting(_) => return Ok(None),
                    _ => {}
                }
            }
            self.peers[peer].conn = None;
        }
        if let Some(e) = self.peer_gone(op, peer) {
            return Err(e);
        }
        // Another usable connection to the peer (e.g. one it opened to us)?
        let mut closing = false;
        for (i, slot) in self.conns.iter().enumerate() {
            if let Some(conn) = slot {
                if conn.peer == Some(peer) {
                    match conn.phase {
                        Phase::Open | Phase::AwaitHelloAck => {
                            self.peers[peer].conn = Some(i);
                            return Ok(Some(i));
                        }
                        Phase::Connecting(_) => return Ok(None),
                        _ => closing = true,
                    }
                }
            }
        }
        if closing {
            return Ok(None);
        }
        let now = Instant::now();
        if self.peers[peer].retry_at.is_some_and(|t| now < t) {
            return Ok(None);
        }
        if self.n_conns >= self.set.cap {
            self.evict_one();
            if self.n_conns >= self.set.cap {
                return Ok(None);
            }
        }
        let Some(addr) = self.peers[peer].addr else {
            self.reload_addresses();
            return Err(self.err(
                ErrorKind::Config,
                op,
                peer,
                format!("no usable address for rank {peer}"),
            ));
        };
        match start_connect(addr, self.set.failure_timeout) {
            Ok((sock, done)) => {
                let phase = if done {
                    Phase::AwaitHelloAck
                } else {
                    Phase::Connecting(now)
                };
                let c = self.insert_conn(Conn::new(sock, Some(peer), phase, self.tick), !done);
                self.peers[peer].conn = Some(c);
                self.count.opened += 1;
                if done {
                    self.send_hello(c);
                    return Ok(Some(c));
                }
                Ok(None)
            }
            Err(e) => {
                self.connect_failed(peer, addr, e);
                match self.peer_gone(op, peer) {
                    Some(e) => Err(e),
                    None => Ok(None),
                }
            }
        }
    }

    pub(super) fn send_hello(&mut self, c: usize) {
        let Some(conn) = self.conns[c].as_mut() else {
            return;
        };
        let Some(peer) = conn.peer else { return };
        let h = handshake::hello(self.rank, peer, &self.secret);
        conn.wq
            .push_front(OutFrame::new(&h, Some(self.secret.clone())));
        self.flush_conn(c);
    }

    pub(super) fn connect_failed(&mut self, peer: usize, addr: SocketAddr, e: io::Error) {
        if crate::limits::out_of_descriptors(&e) {
            // Out of descriptors is local pressure, not a dead peer: free one and retry. When
            // no connection is closing or can be closed, nothing will free one: report the
            // cause instead of retrying in silence.
            self.evict_one();
            self.peers[peer].retry_at = Some(Instant::now() + Duration::from_millis(5));
            let closing = self
                .conns
                .iter()
                .flatten()
                .any(|c| matches!(c.phase, Phase::ClosingSent | Phase::Closing));
            if !closing && self.pending_error.is_none() {
                self.pending_error = Some(
                    Error::new(ErrorKind::ResourceExhausted, "connect")
                        .on_rank(self.rank)
                        .with_peer(peer)
                        .with_detail(crate::limits::describe_out_of_descriptors(
                            &e,
                            &format!("connect to rank {peer} at {addr}"),
                        )),
                );
            }
            return;
        }
        if e.kind() == io::ErrorKind::ConnectionRefused && self.set.refused_is_dead {
            // Launcher mode: every address in the store was published by a bound listener,
            // which lives as long as its rank; a refusal means the rank's process is gone.
            self.mark_dead(
                peer,
                format!("connection to {addr} refused: its listener is gone (the process ended)"),
            );
            return;
        }
        let now = Instant::now();
        let p = &mut self.peers[peer];
        let first = *p.first_failure.get_or_insert(now);
        if now.duration_since(first) >= self.set.connect_timeout {
            self.mark_dead(
                peer,
                format!(
                    "cannot connect to {addr} within {:?} (tcp.connect_timeout_ms): {e}",
                    self.set.connect_timeout
                ),
            );
            return;
        }
        tracing::debug!(
            "rank {}: connect to rank {peer} at {addr}: {e}; retrying",
            self.rank
        );
        p.retry_at = Some(now + p.backoff);
        p.backoff = (p.backoff * 2).min(Duration::from_millis(200));
        self.reload_addresses();
    }

    /// File mode: picks up changed addresses (000 §5.1: a restarted rank may have moved).
    pub(super) fn reload_addresses(&mut self) {
        let Some(w) = self.watcher.as_mut() else {
            return;
        };
        match w.poll() {
            None => {}
            Some(Err(e)) => {
                tracing::warn!("rank {}: configuration reload failed: {e}", self.rank)
            }
            Some(Ok(cfg)) => {
                if cfg.tcp.addresses.len() != self.size {
                    tracing::warn!(
                        "rank {}: reloaded configuration lists {} addresses, the job has {} ranks; ignored",
                        self.rank,
                        cfg.tcp.addresses.len(),
                        self.size
                    );
                    return;
                }
                for (p, a) in cfg.tcp.addresses.iter().enumerate() {
                    if p != self.rank {
                        if let Some(addr) = resolve(a) {
                            self.peers[p].addr = Some(addr);
                        }
                    }
                }
            }
        }
    }

    pub(super) fn insert_conn(&mut self, conn: Conn, want_write: bool) -> usize {
        let fd = conn.sock.as_raw_fd();
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let mut conn = conn;
        conn.want_write = want_write;
        if let Err(e) = self.poller.add(fd, slot as u64, want_write) {
            tracing::warn!("rank {}: cannot watch a socket: {e}", self.rank);
        }
        if let Some(p) = conn.peer {
            self.peers[p].n_conns += 1;
        }
        self.conns[slot] = Some(conn);
        self.n_conns += 1;
        slot
    }

    pub(super) fn drop_conn(&mut self, id: usize, conn: Conn) {
        self.poller.remove(conn.sock.as_raw_fd());
        if let Some(p) = conn.peer {
            self.peers[p].n_conns = self.peers[p].n_conns.saturating_sub(1);
            if self.peers[p].conn == Some(id) {
                self.peers[p].conn = None;
            }
        }
        self.conns[id] = None;
        self.n_conns -= 1;
        drop(conn);
    }

    /// Starts closing the least recently used quiescent connection (T2), one at a time.
    pub(super) fn evict_one(&mut self) {
        let mut victim: Option<(u64, usize)> = None;
        for (i, slot) in self.conns.iter().enumerate() {
            let Some(c) = slot else { continue };
            if c.phase == Phase::ClosingSent {
                return;
            }
            if c.quiescent() && !matches!(victim, Some((t, _)) if c.last_used >= t) {
                victim = Some((c.last_used, i));
            }
        }
        let Some((_, id)) = victim else { return };
        if self.start_close(id) {
            self.count.evictions += 1;
        }
    }

    /// Asks the peer to close connection `id` (CLOSE_REQ); it is no longer used for sending.
    pub(super) fn start_close(&mut self, id: usize) -> bool {
        let Some(conn) = self.conns.get_mut(id).and_then(Option::as_mut) else {
            return false;
        };
        let Some(peer) = conn.peer else { return false };
        let h = Header::control(
            FrameType::CloseReq,
            MsgKey::user(0),
            self.rank as u32,
            peer as u32,
            0,
        );
        conn.wq.push_back(OutFrame::new(&h, None));
        conn.phase = Phase::ClosingSent;
        if self.peers[peer].conn == Some(id) {
            self.peers[peer].conn = None;
        }
        tracing::debug!("rank {}: closing a connection to rank {peer}", self.rank);
        self.flush_conn(id);
        true
    }

    /// Two ranks that dialled each other at once hold two connections; the one dialled by the
    /// lower rank stays, the higher rank closes its own once it is idle (saves descriptors, and
    /// a single connection per peer lets a waiting rank read that peer's socket directly).
    pub(super) fn close_duplicates(&mut self) {
        let mut left = false;
        for id in 0..self.conns.len() {
            let Some(c) = self.conns[id].as_ref() else {
                continue;
            };
            let Some(p) = c.peer else { continue };
            if c.dialled && p < self.rank && self.peers[p].n_conns > 1 {
                if c.quiescent() {
                    if self.start_close(id) {
                        self.count.duplicates_closed += 1;
                    }
                } else if matches!(
                    c.phase,
                    Phase::Open | Phase::AwaitHelloAck | Phase::Connecting(_)
                ) {
                    left = true;
                }
            }
        }
        self.dup_pending = left;
    }

    pub(super) fn accept_some(&mut self) {
        for _ in 0..ACCEPT_BUDGET {
            if self.n_conns >= self.set.cap {
                // Accept anyway: a peer's connection left in our backlog could wait for us
                // while we wait for it (both at the cap with dialled connections stuck in each
                // other's backlog). The cap is restored by closing idle connections (T2).
                self.evict_one();
            }
            match self.listener.accept() {
                Ok((sock, from)) => {
                    let setup = sock
                        .set_nonblocking(true)
                        .and(sock.set_nodelay(true))
                        .and(crate::limits::set_liveness(&sock, self.set.failure_timeout));
                    if let Err(e) = setup {
                        tracing::warn!("rank {}: accepted socket from {from}: {e}", self.rank);
                        continue;
                    }
                    let deadline = Instant::now() + self.set.connect_timeout;
                    self.insert_conn(
                        Conn::new(sock, None, Phase::AwaitHello(deadline), self.tick),
                        false,
                    );
                    self.count.accepted += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or similar: stop accepting until a
                    // connection was closed, instead of spinning on a ready listener.
                    if crate::limits::out_of_descriptors(&e) {
                        tracing::warn!(
                            "rank {}: {}",
                            self.rank,
                            crate::limits::describe_out_of_descriptors(&e, "accept")
                        );
                    } else {
                        tracing::warn!("rank {}: accept failed: {e}", self.rank);
                    }
                    self.evict_one();
                    self.pause_listener();
                    return;
                }
            }
        }
    }

    pub(super) fn pause_listener(&mut self) {
        if !self.listener_paused {
            self.paused_at = self.n_conns;
            self.poller.remove(self.listener.as_raw_fd());
            self.listener_paused = true;
        }
    }

    pub(super) fn finish_connect(&mut self, conn: &mut Conn) -> Verdict {
        let peer = conn.peer.unwrap_or(0);
        let err = match conn.sock.take_error() {
            Ok(None) => match conn.sock.peer_addr() {
                Ok(_) => None,
                // A stale readiness report (slot reused): still connecting.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Verdict::Keep,
                Err(e) => Some(e),
            },
            Ok(Some(e)) | Err(e) => Some(e),
        };
        match err {
            None => {
                conn.phase = Phase::AwaitHelloAck;
                let h = handshake::hello(self.rank, peer, &self.secret);
                conn.wq
                    .push_front(OutFrame::new(&h, Some(self.secret.clone())));
                Verdict::Keep
            }
            Some(e) => {
                if let Some(addr) = self.peers[peer].addr {
                    self.connect_failed(peer, addr, e);
                }
                // connect_failed decided whether the peer is dead; the socket just goes.
                Verdict::Fault {
                    cause: "connect failed".into(),
                    peer_failed: false,
                }
            }
        }
    }

    /// Drops strangers that never completed the handshake and connects that never finished.
    pub(super) fn expire_handshakes(&mut self) {
        let now = Instant::now();
        for id in 0..self.conns.len() {
            let expired = match self.conns[id].as_ref().map(|c| c.phase) {
                Some(Phase::AwaitHello(deadline)) => now >= deadline,
                Some(Phase::Connecting(started)) => {
                    now.duration_since(started) >= self.set.connect_timeout
                }
                _ => false,
            };
            if expired {
                if let Some(conn) = self.conns[id].take() {
                    let v = match conn.phase {
                        Phase::Connecting(_) => {
                            if let (Some(p), Some(addr)) =
                                (conn.peer, conn.peer.and_then(|p| self.peers[p].addr))
                            {
                                self.connect_failed(
                                    p,
                                    addr,
                                    io::Error::from(io::ErrorKind::TimedOut),
                                );
                            }
                            Verdict::Fault {
                                cause: "connect timed out".into(),
                                peer_failed: false,
                            }
                        }
                        _ => {
                            self.count.strangers += 1;
                            Verdict::Fault {
                                cause: "no handshake within tcp.connect_timeout_ms".into(),
                                peer_failed: false,
                            }
                        }
                    };
                    self.apply_verdict(id, conn, v);
                }
            }
        }
    }
}

/// Starts a non-blocking connect; `true` if it completed at once.
fn start_connect(addr: SocketAddr, failure_timeout: Duration) -> io::Result<(TcpStream, bool)> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_nonblocking(true)?;
    sock.set_nodelay(true)?;
    let sock: TcpStream = sock.into();
    crate::limits::set_liveness(&sock, failure_timeout)?;
    let done = match socket2::SockRef::from(&sock).connect(&addr.into()) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => false,
        Err(e) => return Err(e),
    };
    Ok((sock, done))
}

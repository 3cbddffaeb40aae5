//! Connections (T2, T5, T8): phases from dial or accept through the handshake to the close
//! handshake or the goodbye, the lazily opened and capped cache (least recently used idle
//! connection closed first), dial retries, and what a lost connection means.

use std::time::Duration;

use super::{Action, ConnId, Endpoint, Payload, PeerStatus};
use crate::frame::{FrameType, Header};
use crate::handshake;
use crate::ident::MsgKey;

/// First dial retry delay; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// Where a connection stands in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Dialled; the connect has not completed yet.
    Connecting {
        /// When the dial started.
        since: Duration,
    },
    /// Accepted; waiting for the peer's `Hello` until the deadline (strangers are dropped).
    AwaitHello {
        /// When the stranger is dropped.
        deadline: Duration,
    },
    /// Dialled and connected; `Hello` queued, requests may follow it, only `HelloAck` accepted.
    AwaitHelloAck,
    /// Authenticated and in use.
    Open,
    /// We asked to close (eviction) and send no new requests; waiting for the answer.
    ClosingSent,
    /// We said goodbye (finish); waiting for the peer to close.
    ByeSent,
}

#[derive(Debug)]
pub(crate) struct Peer {
    pub status: PeerStatus,
    /// Connection used to send to this peer.
    pub conn: Option<ConnId>,
    pub retry_at: Option<Duration>,
    pub first_failure: Option<Duration>,
    pub backoff: Duration,
    /// Connections with this peer (two when both dialled at once).
    pub n_conns: usize,
    /// Since when this rank has had no connection with the peer (liveness probe).
    pub silent_since: Duration,
}

impl Peer {
    pub fn new() -> Peer {
        Peer {
            status: PeerStatus::Alive,
            conn: None,
            retry_at: None,
            first_failure: None,
            backoff: FIRST_BACKOFF,
            n_conns: 0,
            silent_since: Duration::ZERO,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub peer: Option<usize>,
    pub phase: Phase,
    pub dialled: bool,
    /// Requests sent on this connection still waiting for their answer on it (TRY/ADD ->
    /// ACCEPT/REFUSE, GET -> DATA/MISS). A connection is only closed idle at zero.
    pub outstanding: usize,
    /// A frame's payload is being read (header seen, payload not landed).
    pub reading: Option<Header>,
    /// Logical time of last use (least recently used eviction).
    pub last_used: u64,
    /// No flow retirement is proposed on this connection before then: its peer asked to close
    /// it (or this rank needs its slot under the cap), and proposals, which are optional,
    /// would keep it busy for ever (each is an outstanding request, and a close is only
    /// agreed on a connection without any).
    pub quiet_until: Duration,
}

impl Conn {
    fn quiescent(&self) -> bool {
        self.phase == Phase::Open && self.outstanding == 0 && self.reading.is_none()
    }
}

/// Why a connect failed, as far as the protocol cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectFailure {
    /// This process is out of descriptors (EMFILE/ENFILE): local pressure, not a dead peer.
    /// The endpoint closes an idle connection and retries soon.
    OutOfDescriptors(String),
    /// The peer's host answered that nothing listens there: with
    /// [`super::EndpointConfig::refused_is_dead`] the peer's process ended, otherwise it is
    /// retried like [`ConnectFailure::Unreachable`] (it may not listen yet).
    Refused(String),
    /// Unreachable, timed out: retried with backoff until the connect timeout.
    Unreachable(String),
}

/// How a connection ended, as reported by the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// End of stream.
    Eof,
    /// A reset or another error (the text says which).
    Error(String),
}

impl Endpoint {
    fn new_conn(&mut self, peer: Option<usize>, phase: Phase) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        if let Some(p) = peer {
            self.peers[p].n_conns += 1;
        }
        self.conns.insert(
            id,
            Conn {
                peer,
                phase,
                dialled: peer.is_some(),
                outstanding: 0,
                reading: None,
                last_used: self.tick,
                quiet_until: Duration::ZERO,
            },
        );
        id
    }

    /// Forgets a connection (after the driver was told to close or drop it).
    pub(crate) fn forget(&mut self, id: ConnId) {
        self.retain_forget_conn(id);
        self.retire_conn_gone(id);
        if let Some(c) = self.conns.remove(&id) {
            if let Some(p) = c.peer {
                let peer = &mut self.peers[p];
                peer.n_conns = peer.n_conns.saturating_sub(1);
                if peer.conn == Some(id) {
                    peer.conn = None;
                }
                if peer.n_conns == 0 {
                    peer.silent_since = self.now;
                }
                if peer.n_conns == 0 && matches!(peer.status, PeerStatus::Finished { .. }) {
                    // Its last connection closed: nothing more can come from it.
                    self.fail_ops_with(p);
                }
            }
        }
    }

    pub(crate) fn transmit(&mut self, conn: ConnId, header: Header, payload: Payload) {
        if self
            .conns
            .get(&conn)
            .is_some_and(|c| c.phase == Phase::ByeSent)
        {
            // Nothing follows our goodbye (the write side is shut down); what a peer sends
            // after it is not for a receive of this rank any more.
            return;
        }
        self.actions.push_back(Action::Transmit {
            conn,
            header,
            payload,
        });
    }

    pub(crate) fn transmit_control(&mut self, conn: ConnId, ty: FrameType, h: &Header) {
        let c = crate::tcp_protocol::answer(ty, h);
        self.transmit(conn, c, Payload::None);
    }

    fn conn_frame(&self, ty: FrameType, peer: usize, serial: u64) -> Header {
        Header::control(
            ty,
            MsgKey::user(0),
            self.cfg.rank as u32,
            peer as u32,
            serial,
        )
    }

    /// The connection to send to `peer` on, dialling one if the cap allows; `None` while one
    /// is being set up, closed, or retried. Errors if the peer is gone.
    pub(crate) fn get_conn(
        &mut self,
        peer: usize,
        op: &'static str,
        now: Duration,
    ) -> Result<Option<ConnId>, super::EndpointError> {
        self.tick += 1;
        // Without retention requests may follow the `Hello` at once (one round trip less for
        // a first message). With retention they wait for the `HelloAck`: a dial can reach the
        // listener of a process that is being killed, whose kernel completes the connect and
        // then resets it, and what was queued behind the `Hello` would be lost with it while
        // counted as sent. Only an established connection's loss makes the peer down, which
        // sends everything again (`retain::reset_peer`).
        let early = self.retain.is_none();
        if let Some(c) = self.peers[peer].conn {
            if let Some(conn) = self.conns.get_mut(&c).filter(|c| c.peer == Some(peer)) {
                match conn.phase {
                    Phase::Open => {
                        conn.last_used = self.tick;
                        return Ok(Some(c));
                    }
                    Phase::AwaitHelloAck if early => {
                        conn.last_used = self.tick;
                        return Ok(Some(c));
                    }
                    Phase::Connecting { .. } | Phase::AwaitHelloAck => return Ok(None),
                    _ => {}
                }
            }
            self.peers[peer].conn = None;
        }
        if let Some(e) = self.peer_gone(op, peer) {
            return Err(e);
        }
        let mut closing = false;
        let mut found = None;
        for (&i, conn) in &self.conns {
            if conn.peer == Some(peer) {
                match conn.phase {
                    Phase::Open => {
                        found = Some(found.map_or(i, |f: ConnId| f.min(i)));
                    }
                    Phase::AwaitHelloAck if early => {
                        found = Some(found.map_or(i, |f: ConnId| f.min(i)));
                    }
                    Phase::Connecting { .. } | Phase::AwaitHelloAck => return Ok(None),
                    _ => closing = true,
                }
            }
        }
        if let Some(i) = found {
            self.peers[peer].conn = Some(i);
            return Ok(Some(i));
        }
        if closing {
            return Ok(None);
        }
        if self.peers[peer].retry_at.is_some_and(|t| now < t) {
            return Ok(None);
        }
        if self.conns.len() >= self.cfg.connection_cap {
            // Proposals pause so that a connection they keep busy can be evicted.
            self.cap_pressed = Some(now);
            self.evict_one();
            if self.conns.len() >= self.cfg.connection_cap {
                return Ok(None);
            }
        }
        let c = self.new_conn(Some(peer), Phase::Connecting { since: now });
        self.peers[peer].conn = Some(c);
        self.peers[peer].retry_at = None;
        self.counters.opened += 1;
        self.actions.push_back(Action::Dial { conn: c, peer });
        Ok(None)
    }

    /// The dial of `conn` completed: the handshake starts, and what waited for the
    /// connection may now be queued behind the `Hello`.
    pub fn on_connected(&mut self, conn: ConnId, now: Duration) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let (Phase::Connecting { .. }, Some(peer)) = (c.phase, c.peer) else {
            return;
        };
        c.phase = Phase::AwaitHelloAck;
        let mut h = handshake::hello(self.cfg.rank, peer, &self.cfg.secret);
        // With retention the serial carries this process's incarnation (T6).
        h.serial = self.own_nonce();
        let secret = self.cfg.secret.clone();
        self.transmit(conn, h, Payload::Shared(secret));
        self.progress_conns(now);
    }

    /// The dial of `conn` failed; the endpoint retries or declares the peer failed. Returns
    /// an error when this process is out of descriptors and holds no connection it could
    /// close to make room: retrying would only spin, so the program should hear the cause.
    pub fn on_connect_failed(
        &mut self,
        conn: ConnId,
        why: ConnectFailure,
        now: Duration,
    ) -> Option<super::EndpointError> {
        let c = self.conns.get(&conn)?;
        let peer = c.peer?;
        self.forget(conn);
        self.connect_failed(peer, why, now)
    }

    fn connect_failed(
        &mut self,
        peer: usize,
        why: ConnectFailure,
        now: Duration,
    ) -> Option<super::EndpointError> {
        // With retention a rank killed before it was ever reached may be restarted too: it
        // gets as long as a restart.
        let timeout = self.cfg.connect_timeout.max(self.retain_restart_timeout());
        let down = self.retain_is_down(peer);
        let p = &mut self.peers[peer];
        match why {
            ConnectFailure::OutOfDescriptors(cause) => {
                p.retry_at = Some(now + FIRST_BACKOFF);
                self.evict_one();
                let closing = self.conns.values().any(|c| c.phase == Phase::ClosingSent);
                if !closing {
                    return Some(self.error(super::ErrorKind::Exhausted, "connect", peer, cause));
                }
            }
            ConnectFailure::Refused(cause) if self.cfg.refused_is_dead => {
                self.mark_dead(
                    peer,
                    format!("{cause}: its listener is gone (the process ended)"),
                );
            }
            ConnectFailure::Refused(_) | ConnectFailure::Unreachable(_) if down => {
                // A down peer may be restarting (perhaps elsewhere): its restart timeout
                // decides, not the connect timeout.
                p.retry_at = Some(now + p.backoff);
                p.backoff = (p.backoff * 2).min(MAX_BACKOFF);
            }
            ConnectFailure::Refused(cause) | ConnectFailure::Unreachable(cause) => {
                let first = *p.first_failure.get_or_insert(now);
                if now.saturating_sub(first) >= timeout {
                    self.mark_dead(
                        peer,
                        format!(
                            "cannot connect within {timeout:?} (tcp.connect_timeout_ms): {cause}"
                        ),
                    );
                    return None;
                }
                p.retry_at = Some(now + p.backoff);
                p.backoff = (p.backoff * 2).min(MAX_BACKOFF);
            }
        }
        None
    }

    /// The driver accepted a connection; it is a stranger until its `Hello` checks out.
    pub fn on_accepted(&mut self, now: Duration) -> ConnId {
        self.counters.accepted += 1;
        self.new_conn(
            None,
            Phase::AwaitHello {
                deadline: now + self.cfg.connect_timeout,
            },
        )
    }

    /// `conn` ended (end of stream, reset, write error). Without the peer's goodbye that means
    /// the peer failed (T5).
    pub fn on_conn_lost(&mut self, conn: ConnId, how: Lost) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let what = match &how {
            Lost::Eof => "connection closed by the peer without an orderly shutdown".to_string(),
            Lost::Error(e) => format!("connection error: {e}"),
        };
        let (peer, phase) = (c.peer, c.phase);
        let nonce = self.conn_nonce(conn);
        self.forget(conn);
        let Some(p) = peer else {
            self.counters.strangers += 1;
            return;
        };
        match phase {
            Phase::ClosingSent | Phase::ByeSent => {}
            Phase::AwaitHello { .. } => {}
            Phase::Connecting { .. } => {}
            Phase::AwaitHelloAck => {
                // A peer that is ending drops connections it cannot identify yet; a wrong
                // secret fails every attempt: retried until the connect timeout decides.
                let now = self.now;
                let _ = self.connect_failed(
                    p,
                    ConnectFailure::Unreachable(format!(
                        "{what} during the handshake (wrong job secret?)"
                    )),
                    now,
                );
            }
            Phase::Open => {
                if self.peers[p].status == PeerStatus::Alive
                    && !self.retain_peer_down(nonce, p, what.clone())
                {
                    self.mark_dead(p, what);
                }
            }
        }
    }

    /// The driver found a fault on `conn` that is not the peer's death (garbage, a frame that
    /// cannot be allocated, an unknown stranger): the connection is dropped, and costs no more
    /// than itself (T8) while nothing was in flight on it. An authenticated peer whose
    /// connection breaks with requests outstanding or a frame half read is treated as failed,
    /// since those messages can no longer be trusted to arrive.
    pub fn on_conn_fault(&mut self, conn: ConnId, cause: String) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let busy = c.outstanding > 0 || c.reading.is_some();
        let peer = c.peer.filter(|_| busy);
        self.drop_conn(conn, peer, cause);
    }

    pub(crate) fn drop_conn(&mut self, conn: ConnId, peer: Option<usize>, cause: String) {
        self.forget(conn);
        self.actions.push_back(Action::Drop(conn));
        match peer {
            Some(p) => self.mark_dead(p, format!("protocol violation: {cause}")),
            None => self.counters.strangers += 1,
        }
    }

    /// The driver is short of descriptors (an accept failed): the least recently used idle
    /// connection starts to close.
    pub fn evict_idle(&mut self) {
        self.evict_one();
    }

    /// Starts closing the least recently used quiescent connection (T2), one at a time.
    pub(crate) fn evict_one(&mut self) {
        let mut victim: Option<(u64, ConnId)> = None;
        for (&i, c) in &self.conns {
            if c.phase == Phase::ClosingSent {
                return;
            }
            if c.quiescent() && !matches!(victim, Some((t, v)) if (c.last_used, i) >= (t, v)) {
                victim = Some((c.last_used, i));
            }
        }
        if let Some((_, id)) = victim {
            if self.start_close(id) {
                self.counters.evictions += 1;
            }
        }
    }

    /// Asks the peer to close `id` (CLOSE_REQ); it is no longer used for sending.
    fn start_close(&mut self, id: ConnId) -> bool {
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        let Some(peer) = c.peer else { return false };
        c.phase = Phase::ClosingSent;
        if self.peers[peer].conn == Some(id) {
            self.peers[peer].conn = None;
        }
        let h = self.conn_frame(FrameType::CloseReq, peer, 0);
        self.transmit(id, h, Payload::None);
        true
    }

    /// Two ranks that dialled each other at once hold two connections; the one dialled by the
    /// lower rank stays, the higher rank closes its own once it is idle.
    pub(crate) fn close_duplicates(&mut self) {
        let mut left = false;
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            let Some(p) = c.peer else { continue };
            if c.dialled && p < self.cfg.rank && self.peers[p].n_conns > 1 {
                if c.quiescent() {
                    if self.start_close(id) {
                        self.counters.duplicates_closed += 1;
                    }
                } else if matches!(
                    c.phase,
                    Phase::Open | Phase::AwaitHelloAck | Phase::Connecting { .. }
                ) {
                    left = true;
                }
            }
        }
        self.dup_pending = left;
    }

    /// Drops strangers that never completed the handshake and dials that never completed.
    pub(crate) fn expire_handshakes(&mut self, now: Duration) {
        let mut expired = Vec::new();
        for (&id, c) in &self.conns {
            match c.phase {
                Phase::AwaitHello { deadline } if now >= deadline => expired.push((id, None)),
                Phase::Connecting { since } if now >= since + self.cfg.connect_timeout => {
                    expired.push((id, c.peer))
                }
                _ => {}
            }
        }
        expired.sort_unstable();
        for (id, peer) in expired {
            self.forget(id);
            self.actions.push_back(Action::Drop(id));
            match peer {
                Some(p) => {
                    let _ = self.connect_failed(
                        p,
                        ConnectFailure::Unreachable("connect timed out".into()),
                        now,
                    );
                }
                None => self.counters.strangers += 1,
            }
        }
    }

    /// Handles the handshake frames (`Hello` with its secret on an accepted connection,
    /// `HelloAck` on a dialled one).
    pub(crate) fn on_handshake(&mut self, conn: ConnId, h: &Header, secret: &[u8], now: Duration) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match (h.ty, c.phase) {
            (FrameType::Hello, Phase::AwaitHello { .. }) => {
                match handshake::check_hello(
                    h,
                    secret,
                    &self.cfg.secret,
                    self.cfg.rank,
                    self.cfg.size,
                ) {
                    Ok(p) if self.cfg.is_excluded(p) => {
                        self.drop_conn(
                            conn,
                            None,
                            format!("rank {p} is served by another transport"),
                        );
                    }
                    Ok(p) if matches!(self.peers[p].status, PeerStatus::Dead { .. }) => {
                        // Its late connection (still in our backlog when it died) brings
                        // nothing a receive may take any more.
                        self.drop_conn(conn, None, format!("rank {p} already failed"));
                    }
                    Ok(p) => {
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.peer = Some(p);
                            c.phase = Phase::Open;
                        }
                        self.peers[p].n_conns += 1;
                        if self.peers[p].n_conns > 1 {
                            self.dup_pending = true;
                        }
                        let mut ack = handshake::hello_ack(self.cfg.rank, p, &self.cfg.secret);
                        ack.serial = self.own_nonce();
                        let secret = self.cfg.secret.clone();
                        self.transmit(conn, ack, Payload::Shared(secret));
                        if self.peers[p].conn.is_none() || p < self.cfg.rank {
                            // A lower rank's connection is the one both keep.
                            self.peers[p].conn = Some(conn);
                        }
                        self.retain_hello(conn, p, h.serial, now);
                        if self.said_goodbye() {
                            // Dialled while this rank was ending: the peer learns it at once.
                            self.goodbye_on(conn, p);
                        }
                        self.progress_conns(now);
                    }
                    Err(e) => self.drop_conn(conn, None, format!("handshake rejected: {e}")),
                }
            }
            (FrameType::HelloAck, Phase::AwaitHelloAck) => {
                let peer = c.peer.unwrap_or(usize::MAX);
                match handshake::check_hello_ack(h, secret, &self.cfg.secret, self.cfg.rank, peer) {
                    Ok(()) => {
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.phase = Phase::Open;
                        }
                        let p = &mut self.peers[peer];
                        p.first_failure = None;
                        p.retry_at = None;
                        p.backoff = FIRST_BACKOFF;
                        self.retain_hello(conn, peer, h.serial, now);
                        if self.said_goodbye() {
                            // Dialled before this rank began to end: the goodbye waited for
                            // the handshake to complete.
                            self.goodbye_on(conn, peer);
                        }
                        if self.retain.is_some() {
                            // What waited for the handshake goes now.
                            self.progress_conns(now);
                        }
                    }
                    Err(e) => {
                        self.forget(conn);
                        self.actions.push_back(Action::Drop(conn));
                        self.mark_dead(peer, format!("handshake answer rejected: {e}"));
                    }
                }
            }
            _ => {}
        }
    }

    /// Connection control frames: the close handshake and the goodbye.
    pub(crate) fn on_conn_control(&mut self, conn: ConnId, peer: usize, h: &Header) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        match h.ty {
            FrameType::CloseReq => match c.phase {
                Phase::Open if c.outstanding == 0 && c.reading.is_none() => {
                    self.transmit_control(conn, FrameType::CloseAck, h);
                    self.forget(conn);
                    self.actions.push_back(Action::Close(conn));
                }
                Phase::Open => {
                    // Busy: refused for now. The peer asks again; meanwhile no proposal of
                    // ours starts on it, so that only real traffic can keep it open.
                    c.quiet_until = self.now + 2 * self.cfg.retire_every;
                    self.transmit_control(conn, FrameType::CloseNak, h)
                }
                Phase::ClosingSent => {
                    self.transmit_control(conn, FrameType::CloseAck, h);
                    self.forget(conn);
                    self.actions.push_back(Action::Close(conn));
                }
                _ => {}
            },
            FrameType::CloseAck if c.phase == Phase::ClosingSent => {
                self.forget(conn);
                self.actions.push_back(Action::Close(conn));
            }
            FrameType::CloseNak if c.phase == Phase::ClosingSent => {
                c.phase = Phase::Open;
                if self.peers[peer].conn.is_none() {
                    self.peers[peer].conn = Some(conn);
                }
            }
            FrameType::Bye => {
                // The serial carries the rank whose failure ended the peer, plus one (0: an
                // orderly end).
                let after = (h.serial > 0)
                    .then(|| (h.serial - 1) as usize)
                    .filter(|&x| x < self.cfg.size);
                if self.peers[peer].status == PeerStatus::Alive {
                    self.peers[peer].status = PeerStatus::Finished {
                        after_failure_of: after,
                    };
                    if let Some(x) = after.filter(|&x| x != peer) {
                        self.first_failed.get_or_insert(x);
                    }
                }
                // Both said goodbye, or the peer did: once what is queued is written this side
                // closes too (the peer reads until it sees the end of the stream).
                self.forget(conn);
                self.actions.push_back(Action::Close(conn));
                self.fail_ops_with(peer);
            }
            _ => {}
        }
    }
}

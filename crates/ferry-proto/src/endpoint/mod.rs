//! The TCP backend's protocol as a sans-I/O state machine (000 §4.4-4.5, §5.3; T1-T5): one
//! [`Endpoint`] per rank holds the outbox, the inbox, the GET bookkeeping, the connection
//! phases, the close handshake, the goodbye and the timers, and never touches a socket or a
//! clock.
//!
//! The driver (`ferry-tcp`, or the simulation in this crate's tests) feeds it *events* and
//! executes the *actions* it returns, in the style of quinn-proto's `Connection`:
//!
//! - events: a send or receive posted ([`Endpoint::post_send`], [`Endpoint::post_recv`]), a
//!   frame header read from a connection ([`Endpoint::on_header`]) and its payload landed
//!   ([`Endpoint::on_payload`]), a connection accepted, connected, refused or lost, a zero-copy
//!   payload written ([`Endpoint::on_op_written`]), and the time (every call that may start a
//!   timer takes `now`, a [`Duration`] since an epoch the driver chooses);
//! - actions ([`Endpoint::poll_action`]): frames to write on a connection, connections to dial
//!   or close, completed and failed operations. [`Endpoint::poll_timeout`] says when
//!   [`Endpoint::handle_timeout`] wants to run next.
//!
//! # Buffers
//! Payloads never pass through the endpoint when they need not: a frame's payload is
//! [`Payload::Shared`] (an outbox copy the endpoint owns) or [`Payload::Op`] (write the bytes
//! of send operation `k` straight from the program's buffer: zero-copy rendezvous, T4), and an
//! incoming payload goes where [`Sink`] says (straight into the buffer of receive `k`, into a
//! vector the driver allocates for the inbox, or nowhere). The endpoint copies only what the
//! protocol needs: small messages into the bounded outbox (their send is then complete), TRY
//! messages written from the program's buffer that are still unanswered when the send's call
//! ends ([`Endpoint::release_eager`]; the receiver may still refuse and pull them), and
//! announced messages whose GET does not come in time (so blocking sends in a cycle never
//! deadlock). It reads the program's bytes through [`SendBuffers`] when it does.
//!
//! # Failures
//! A connection that ends without the peer's BYE means the peer failed (T5); a peer that cannot
//! be dialled within [`EndpointConfig::connect_timeout`] failed too. Every operation that waits
//! for a failed peer fails with an [`EndpointError`] naming this rank, the operation, the peer
//! and the rank that originally failed: a peer whose goodbye says it ended because rank X
//! failed is reported as "ended after rank X failed". Nothing fails because it waited long.

mod config;
mod conn;
mod failure;
mod inbox;
mod input;
mod outbox;
mod retain;
mod retire;
mod shutdown;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::fasthash::FastMap;
use crate::frame::Header;
use crate::ident::{FlowTable, MsgKey};
use crate::matching::{Arrival, EarlyArrivals};

pub use config::EndpointConfig;
pub use conn::{ConnectFailure, Lost, Phase};
pub use outbox::SendStatus;
pub use retain::{RetainConfig, RetainCounters};

/// A send operation, named by the driver (unique while the operation is live).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendId(pub u64);

/// A receive operation, named by the driver (unique while the operation is live).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecvId(pub u64);

/// A connection, named by the endpoint (dialled) or handed out on accept; never reused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// An operation of either direction (in errors).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpRef {
    /// A send.
    Send(SendId),
    /// A receive.
    Recv(RecvId),
}

/// The program's bytes of live send operations, read when the endpoint must copy a message
/// (into the outbox) instead of leaving it in place.
pub trait SendBuffers {
    /// The payload of send `op`, or `None` if the driver no longer has it.
    fn bytes(&self, op: SendId) -> Option<&[u8]>;
}

/// No send buffers (for calls that cannot need any).
pub struct NoBuffers;

impl SendBuffers for NoBuffers {
    fn bytes(&self, _: SendId) -> Option<&[u8]> {
        None
    }
}

/// What follows a frame header on the wire.
#[derive(Clone, Debug)]
pub enum Payload {
    /// Nothing.
    None,
    /// Bytes the endpoint owns (outbox copy, handshake secret).
    Shared(Arc<Vec<u8>>),
    /// The bytes of send `SendId`, written straight from the program's buffer; the driver calls
    /// [`Endpoint::on_op_written`] once the whole frame is out. The driver may write such a
    /// frame only while the send's call is active; when the call ends first, the endpoint
    /// hands over a copy ([`Endpoint::release_eager`], [`Endpoint::abandon_send`]) that the
    /// driver writes the rest from.
    Op(SendId, usize),
}

impl Payload {
    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Shared(v) => v.len(),
            Payload::Op(_, len) => *len,
        }
    }

    /// Whether there are no payload bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the payload of the frame whose header was just read goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// Nothing follows the header (or the frame was handled completely).
    Done,
    /// Straight into the buffer of receive `RecvId` (`len` bytes); report
    /// [`Landed::Direct`].
    Recv(RecvId, usize),
    /// Into a new vector of `len` bytes; report [`Landed::Owned`]. The driver allocates it
    /// fallibly: a peer-announced size that memory cannot hold is a fault of the connection
    /// ([`Endpoint::on_conn_fault`]), never an abort.
    Owned(usize),
    /// Read and throw away `len` bytes; report [`Landed::Discarded`].
    Discard(usize),
}

/// Where a payload went (answer to a [`Sink`]).
#[derive(Debug)]
pub enum Landed {
    /// Into the receive's buffer.
    Direct,
    /// Into this vector.
    Owned(Vec<u8>),
    /// Nowhere.
    Discarded,
}

/// Something the driver must do.
#[derive(Debug)]
pub enum Action {
    /// Open a connection to `peer` and report [`Endpoint::on_connected`] or
    /// [`Endpoint::on_connect_failed`].
    Dial {
        /// The new connection.
        conn: ConnId,
        /// Rank to dial.
        peer: usize,
    },
    /// Write this frame on `conn` after those queued before it.
    Transmit {
        /// Connection.
        conn: ConnId,
        /// Header.
        header: Header,
        /// Payload.
        payload: Payload,
    },
    /// Finish writing what is queued on `conn`, then shut down its write side (goodbye said);
    /// keep reading until the peer closes.
    ShutdownWrite(ConnId),
    /// Finish writing what is queued on `conn`, then close it. The endpoint has forgotten it.
    Close(ConnId),
    /// Close `conn` at once (a fault: stranger, garbage, failed peer). Forgotten too.
    Drop(ConnId),
    /// Send `SendId` is complete: its buffer is the program's again.
    SendDone(SendId),
    /// Receive `RecvId` is complete with `len` bytes; `data` holds them unless they were read
    /// straight into the receive's buffer.
    RecvDone {
        /// The receive.
        op: RecvId,
        /// The payload, when it did not land in the receive's buffer.
        data: Option<Vec<u8>>,
        /// Message length.
        len: usize,
    },
    /// An operation failed.
    Failed(OpRef, EndpointError),
}

/// Why something failed, with everything a report needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rank {rank}: {op} (peer rank {peer}): {cause}")]
pub struct EndpointError {
    /// Kind.
    pub kind: ErrorKind,
    /// This rank.
    pub rank: usize,
    /// The operation ("send", "recv", "finish", ...).
    pub op: &'static str,
    /// The peer concerned.
    pub peer: usize,
    /// The rank that originally failed (the peer itself, or the rank whose failure made the
    /// peer end).
    pub origin: usize,
    /// What happened.
    pub cause: String,
    /// The message the operation was about, where the error concerns one message and not the
    /// peer as a whole ([`ErrorKind::Withdrawn`]): several receives from one peer can be
    /// pending, and only the one for this message is interrupted.
    pub key: Option<MsgKey>,
}

/// Classes of [`EndpointError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The peer died, cannot be reached, or ended.
    PeerFailed,
    /// The peer broke the protocol.
    Protocol,
    /// The program's request cannot be carried out (peer out of range, message too large).
    Invalid,
    /// The program gave up waiting for the peer (an operation timeout): messages it did not
    /// take are reported, not waited for.
    Timeout,
    /// This process is out of a local resource (descriptors) and nothing it holds can be
    /// released to make room: back-pressure, not a failed peer.
    Exhausted,
    /// The peer withdrew a message it had announced because its sending operation was
    /// abandoned (the fault-tolerance layer gave up on it after a revoke or a failure
    /// elsewhere): the receive is interrupted the same way, it is not a protocol breach.
    Withdrawn,
}

/// Counters (T7).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Retirements of idle point-to-point flows this rank proposed as their sender.
    pub retire_proposed: u64,
    /// Point-to-point flows this rank forgot by agreement with their other side.
    pub retired_flows: u64,
    /// Connections dialled.
    pub opened: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Idle connections closed to stay under the cap.
    pub evictions: u64,
    /// TRYs this rank refused.
    pub refusals_sent: u64,
    /// TRYs of this rank that were refused.
    pub refusals_received: u64,
    /// GETs sent.
    pub gets_sent: u64,
    /// GETs served.
    pub gets_served: u64,
    /// Connections dropped before or at the handshake.
    pub strangers: u64,
    /// Messages announced.
    pub announced: u64,
    /// Announced messages copied into the outbox after their grace period.
    pub rndv_copies: u64,
    /// TRY messages written from the program's buffer that were still unanswered when their
    /// call ended, and were copied into the outbox then ([`Endpoint::release_eager`]).
    pub eager_copies: u64,
    /// Duplicate connections closed.
    pub duplicates_closed: u64,
}

/// How a peer stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerStatus {
    /// Alive as far as we know.
    Alive,
    /// Said goodbye; `after_failure_of` names the rank whose failure made it end, if any.
    Finished {
        /// Rank whose failure ended the peer.
        after_failure_of: Option<usize>,
    },
    /// Died or unreachable.
    Dead {
        /// What showed it.
        cause: String,
    },
}

/// Sizes of the endpoint's tables (the simulation checks that they empty).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableSizes {
    /// Outbox entries.
    pub outbox: usize,
    /// Outbox bytes.
    pub outbox_bytes: usize,
    /// Inbox messages.
    pub inbox: usize,
    /// Never-refused arrivals (ADD, GET answers) waiting for their receive.
    pub overflow: usize,
    /// Messages known to wait in a sender's outbox.
    pub remote: usize,
    /// Posted receives.
    pub posted: usize,
    /// Sends not yet complete.
    pub sends: usize,
    /// Connections.
    pub conns: usize,
    /// Flow counters.
    pub flows: usize,
}

/// Test-only protocol faults, to show that the simulation catches a broken endpoint.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mutations {
    /// Answer every GET with two DATA frames.
    pub get_answered_twice: bool,
    /// Deliver a stored message to a receive without removing it from the inbox.
    pub inbox_not_emptied: bool,
    /// Hold TRY sends for their answers a second after the last answer, post or write.
    pub eager_hold_unbounded: bool,
}

/// Shortest delay before a deadline that could not be acted on is reported again.
const RETRY_TICK: Duration = Duration::from_micros(100);

/// (peer, key, serial): a message of this rank in its outbox.
pub(crate) type MsgId = (usize, MsgKey, u64);

/// One rank's protocol state. See the module documentation.
pub struct Endpoint {
    pub(crate) cfg: EndpointConfig,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) flows: FlowTable,
    pub(crate) peers: Vec<conn::Peer>,
    pub(crate) conns: FastMap<ConnId, conn::Conn>,
    pub(crate) next_conn: u64,
    pub(crate) tick: u64,
    pub(crate) dup_pending: bool,
    // ----- send side -----
    pub(crate) outbox: FastMap<MsgId, outbox::OutMsg>,
    pub(crate) outbox_bytes: usize,
    /// Outbox messages waiting for a connection.
    pub(crate) unsent: VecDeque<MsgId>,
    /// Sends that wait for room (outbox, or this rank's own inbox for sends to itself).
    pub(crate) waiting_sends: VecDeque<outbox::WaitingSend>,
    /// Announced sends whose payload is still the program's: send -> message.
    pub(crate) announced: FastMap<SendId, MsgId>,
    /// TRY sends whose payload is still the program's (written from its buffer, see
    /// [`EndpointConfig::eager_direct_min`]): send -> message.
    pub(crate) eager_out: FastMap<SendId, MsgId>,
    /// When a TRY of `eager_out` was last posted or answered (see
    /// [`EndpointConfig::eager_hold`]).
    pub(crate) eager_activity: Duration,
    /// When the last GET was served or zero-copy data moved (rendezvous grace).
    pub(crate) last_get: Duration,
    // ----- receive side -----
    pub(crate) inbox: EarlyArrivals,
    pub(crate) overflow: FastMap<Arrival, Vec<u8>>,
    /// Messages known to wait in a sender's outbox: whether GET was sent.
    pub(crate) remote: FastMap<Arrival, bool>,
    pub(crate) posted: FastMap<Arrival, inbox::Posted>,
    pub(crate) recv_ids: FastMap<RecvId, Arrival>,
    /// Posted receives that want to GET but had no connection.
    pub(crate) want_get: VecDeque<Arrival>,
    // ----- end -----
    pub(crate) finishing: Option<shutdown::Finish>,
    /// Messages of this rank that a gone peer never took, per peer (reported by finish).
    pub(crate) lost: std::collections::BTreeMap<usize, usize>,
    pub(crate) counters: Counters,
    /// When [`Endpoint::handle_timeout`] last ran: a deadline it could not act on (no room,
    /// cap reached) is not reported as due again at once, so a driver never spins on it.
    pub(crate) timeout_ran: Option<Duration>,
    /// The latest time the driver told (for events that carry none).
    pub(crate) now: Duration,
    /// The first rank seen to fail (directly, or named by a peer's goodbye): the goodbye of
    /// this rank names it unless [`Endpoint::finish`] is told otherwise.
    pub(crate) first_failed: Option<usize>,
    /// Peers an operation timed out on: finish neither waits for them to take messages nor
    /// lingers for them to close.
    pub(crate) gave_up: Vec<bool>,
    /// This rank survives peer failures (a fault-tolerant layer is in use): its goodbye
    /// names no failure, since a failure is not why it ends.
    pub(crate) tolerant: bool,
    /// Retained messages (T6), when on.
    pub(crate) retain: Option<retain::Retain>,
    /// Retirements of this rank's outgoing flows waiting for their answers.
    pub(crate) retiring: FastMap<(usize, MsgKey), retire::Retiring>,
    /// Outgoing flows at which the next retirement sweep runs.
    pub(crate) retire_sweep_at: usize,
    /// When the last retirement sweep ran.
    pub(crate) retire_last: Duration,
    /// When a connection was last wanted at the cap (retirement pauses meanwhile).
    pub(crate) cap_pressed: Option<Duration>,
    #[doc(hidden)]
    pub mutations: Mutations,
}

impl Endpoint {
    /// A fresh endpoint: no connections, every peer alive.
    pub fn new(cfg: EndpointConfig) -> Endpoint {
        let peers = (0..cfg.size).map(|_| conn::Peer::new()).collect();
        let gave_up = vec![false; cfg.size];
        let retain = cfg.retain.clone().map(|r| retain::Retain::new(r, cfg.size));
        Endpoint {
            inbox: EarlyArrivals::new(cfg.inbox_messages, cfg.inbox_bytes),
            cfg,
            actions: VecDeque::new(),
            flows: FlowTable::new(),
            peers,
            conns: FastMap::default(),
            next_conn: 0,
            tick: 0,
            dup_pending: false,
            outbox: FastMap::default(),
            outbox_bytes: 0,
            unsent: VecDeque::new(),
            waiting_sends: VecDeque::new(),
            announced: FastMap::default(),
            eager_out: FastMap::default(),
            eager_activity: Duration::ZERO,
            last_get: Duration::ZERO,
            overflow: FastMap::default(),
            remote: FastMap::default(),
            posted: FastMap::default(),
            recv_ids: FastMap::default(),
            want_get: VecDeque::new(),
            finishing: None,
            lost: Default::default(),
            counters: Counters::default(),
            timeout_ran: None,
            now: Duration::ZERO,
            first_failed: None,
            gave_up,
            tolerant: false,
            retain,
            retiring: FastMap::default(),
            retire_sweep_at: 0,
            retire_last: Duration::ZERO,
            cap_pressed: None,
            mutations: Mutations::default(),
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    /// The settings.
    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    /// The next thing the driver must do, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether actions are queued.
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Counters (T7).
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// How `peer` stands.
    pub fn peer_status(&self, peer: usize) -> Option<&PeerStatus> {
        self.peers.get(peer).map(|p| &p.status)
    }

    /// Sizes of the tables, to check that nothing grows once all messages are delivered.
    pub fn table_sizes(&self) -> TableSizes {
        TableSizes {
            outbox: self.outbox.len(),
            outbox_bytes: self.outbox_bytes,
            inbox: self.inbox.len(),
            overflow: self.overflow.len(),
            remote: self.remote.len(),
            posted: self.posted.len(),
            sends: self.waiting_sends.len()
                + self.announced.len()
                + self.eager_out.len()
                + self.retiring.len(),
            conns: self.conns.len(),
            flows: self.flows.len(),
        }
    }

    /// A one-line dump of the connection and send state, for simulation traces.
    #[doc(hidden)]
    pub fn debug_state(&self) -> String {
        let mut conns: Vec<_> = self.conns.iter().collect();
        conns.sort_by_key(|c| c.0);
        format!(
            "conns {conns:?} waiting {:?} unsent {:?} announced {:?} eager {:?} outbox {:?} \
             retiring {:?}",
            self.waiting_sends,
            self.unsent,
            self.announced,
            self.eager_out,
            self.outbox
                .iter()
                .map(|(k, m)| (k.0, k.2, m.state, m.len))
                .collect::<Vec<_>>(),
            self.retiring
                .iter()
                .map(|(k, r)| (k.0, k.1.tag, r.n, r.held.len()))
                .collect::<Vec<_>>()
        )
    }

    /// A dump of the receive side and the peers, for diagnosing a stalled exchange.
    #[doc(hidden)]
    pub fn debug_recv_state(&self) -> String {
        let mut posted: Vec<_> = self.posted.iter().map(|(a, p)| (a, p.state)).collect();
        posted.sort_by_key(|(a, _)| (a.source, a.key, a.serial));
        let mut remote: Vec<_> = self.remote.iter().collect();
        remote.sort_by_key(|(a, _)| (a.source, a.key, a.serial));
        let peers: Vec<_> = self
            .peers
            .iter()
            .map(|p| (&p.status, p.conn, p.n_conns, p.retry_at))
            .collect();
        format!(
            "posted {posted:?} remote {remote:?} want_get {:?} inbox {} overflow {} peers {peers:?} retain {:?}",
            self.want_get,
            self.inbox.len(),
            self.overflow.len(),
            self.retain.as_ref().map(|r| r.debug())
        )
    }

    /// Forgets the flows of generations before `generation` (a group ended): their counters,
    /// early arrivals and pull bookkeeping can no longer be wanted, so a run that keeps
    /// creating groups stays bounded. Outbox entries stay until their receiver takes them or
    /// fails.
    pub fn retire_generations_before(&mut self, generation: u32) {
        // With retention the counters stay: they tell a restarted peer's duplicates.
        if self.retain.is_none() {
            self.flows.retire_generations_before(generation);
        }
        self.overflow.retain(|a, _| a.key.generation >= generation);
        self.remote.retain(|a, _| a.key.generation >= generation);
        self.inbox.retain(|a| a.key.generation >= generation);
    }

    /// Forgets the flows whose key `retired` selects (their group or container ended), like
    /// [`Endpoint::retire_generations_before`] for an arbitrary set of flows.
    pub fn retire_where(&mut self, retired: impl Fn(&MsgKey) -> bool) {
        if self.retain.is_none() {
            self.flows.retire_where(&retired);
        }
        self.overflow.retain(|a, _| !retired(&a.key));
        self.remote.retain(|a, _| !retired(&a.key));
        self.inbox.retain(|a| !retired(&a.key));
    }

    /// Flow counters held (bounded-state checks).
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// The first rank this endpoint saw fail, directly or named by a peer's goodbye.
    pub fn first_failure(&self) -> Option<usize> {
        self.first_failed
    }

    /// This rank survives the failure of peers (a fault-tolerant layer handles them): a
    /// failure it saw is no longer the reason it ends, so its goodbye names none and peers do
    /// not report "ended after rank X failed" for it.
    pub fn tolerate_failures(&mut self) {
        self.tolerant = true;
    }

    /// An operation of the program gave up waiting for `peer` (operation timeout): the end of
    /// this rank neither waits for it to take its messages nor lingers for it.
    pub fn give_up(&mut self, peer: usize) {
        if let Some(g) = self.gave_up.get_mut(peer) {
            *g = true;
        }
    }

    /// Whether the endpoint still uses connection `conn` (the driver stops reading one it
    /// was told to close or drop).
    pub fn is_live(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// The only connection with `peer`, if there is exactly one and it is established: a
    /// driver waiting for that peer alone may read its socket directly.
    pub fn sole_conn(&self, peer: usize) -> Option<ConnId> {
        let p = self.peers.get(peer)?;
        if p.n_conns != 1 {
            return None;
        }
        let c = p.conn?;
        (self.conns.get(&c)?.phase == Phase::Open).then_some(c)
    }

    /// The earliest time [`Endpoint::handle_timeout`] wants to run, if any.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let mut t: Option<Duration> = None;
        let mut at = |d: Duration| t = Some(t.map_or(d, |t| t.min(d)));

        for c in self.conns.values() {
            match c.phase {
                Phase::Connecting { since } => at(since + self.cfg.connect_timeout),
                Phase::AwaitHello { deadline } => at(deadline),
                _ => {}
            }
        }
        if !self.announced.is_empty() && !self.waits_for_receive() {
            let grace = self.grace();
            for id in self.announced.values() {
                if let Some(m) = self.outbox.get(id) {
                    if m.awaits_pull() {
                        at((m.since + grace).max(self.last_get + grace));
                    }
                }
            }
        }
        for p in self.waited_peers() {
            let peer = &self.peers[p];
            if peer.status == PeerStatus::Alive && (peer.n_conns == 0 || peer.conn.is_none()) {
                // A dial retry, or the liveness probe of a peer nothing talks to.
                match peer.retry_at {
                    Some(r) => at(r),
                    None if peer.n_conns == 0 => at(peer.silent_since + self.cfg.probe_after),
                    None => {}
                }
            }
        }
        if let Some(f) = self.finishing.as_ref().filter(|f| !f.done) {
            if let Some(l) = f.linger_until {
                at(l);
            }
        }
        if let Some(d) = self.retain_deadline() {
            at(d);
        }
        match (t, self.timeout_ran) {
            (Some(t), Some(ran)) if t <= ran => Some(ran + self.cfg.rndv_grace.max(RETRY_TICK)),
            _ => t,
        }
    }

    /// Runs what is due at `now`: connect retries and deadlines, rendezvous copies, the end of
    /// the goodbye linger. Cheap when nothing is due; the driver may also call it on every pass.
    pub fn handle_timeout(&mut self, now: Duration, bufs: &dyn SendBuffers) {
        self.timeout_ran = Some(now);
        self.now = self.now.max(now);
        self.expire_handshakes(now);
        self.retain_expire(now);
        self.rndv_copies(now, bufs);
        self.probe_silent_peers(now);
        self.progress(now, bufs);
    }

    /// Retries what waits for a connection, for room, or for the goodbye to complete.
    pub fn progress(&mut self, now: Duration, bufs: &dyn SendBuffers) {
        if !self.waiting_sends.is_empty() {
            self.retry_waiting_sends(now, bufs);
        }
        self.progress_conns(now);
    }

    /// The part of [`Endpoint::progress`] that needs no program buffers: what waited for a
    /// connection goes, duplicates close, the goodbye advances.
    pub(crate) fn progress_conns(&mut self, now: Duration) {
        self.now = self.now.max(now);
        if !self.unsent.is_empty() {
            self.retry_unsent(now);
        }
        if !self.want_get.is_empty() {
            self.retry_gets(now);
        }
        if self.dup_pending {
            self.close_duplicates();
        }
        if self.finishing.is_some() {
            self.advance_finish(now);
        }
        self.maybe_retire();
    }

    /// Whether a receive the program still wants is posted (abandoned ones that only wait to
    /// consume their message do not hold back rendezvous copies).
    pub(crate) fn waits_for_receive(&self) -> bool {
        !self.posted.is_empty() && self.posted.values().any(|p| !p.abandoned)
    }

    /// Peers this rank waits for: sources of waiting receives, receivers of outbox messages
    /// and of sends that wait for room.
    pub(crate) fn waited_peers(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .posted
            .values()
            // A GET sent on a connection that broke during its handshake is lost with it:
            // such a receive keeps the peer watched too (re-dialled, probed), so that its
            // death is noticed.
            .filter(|p| p.state != inbox::RecvState::Receiving)
            .map(|p| p.peer)
            .chain(self.outbox.keys().map(|k| k.0))
            .chain(self.waiting_sends.iter().map(|w| w.peer))
            .chain(
                self.retiring
                    .iter()
                    .filter(|(_, r)| !r.held.is_empty())
                    .map(|(k, _)| k.0),
            )
            .chain(self.want_get.iter().map(|a| a.source))
            .filter(|&p| p != self.cfg.rank)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

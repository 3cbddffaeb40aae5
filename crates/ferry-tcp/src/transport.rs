//! The TCP transport: ADD/TRY/GET over a capped connection cache (000 §4.4, §4.5; T1-T5, T7, T8).
//!
//! # Protocol
//! Every message gets a flow serial (M2). Small messages (`tcp.eager_bytes`) are copied into
//! the bounded outbox (the send is then complete) and travel at once as TRY with their payload;
//! the receiver answers ACCEPT (matched to a posted receive and read straight into its buffer,
//! or kept in the bounded inbox) or REFUSE (inbox full: 000 §4.4.2). Large messages are
//! ANNOUNCEd without payload and stay in the program's buffer: when the receiver's receive is
//! posted it pulls them with GET and the DATA answer is written from the sender's buffer and
//! read into the receiver's (no copy in user space, T4). An announced message whose GET does not
//! come in time while nothing else of the exchange is pending is copied into the outbox and its
//! send completes, so blocking sends in both directions (or around a ring) never deadlock: in
//! time is 1 ms when this rank itself holds messages waiting to be pulled (it may be part of
//! such a cycle), 20 ms otherwise (the receiver is merely late). A refused message
//! is pulled the same way (000 §4.4.3). ACCEPT (also sent for DATA) frees the outbox entry.
//! Control messages (kind CONTROL, at most 4 KiB) use ADD, which the receiver never refuses
//! (000 §4.4.1).
//!
//! ACCEPTs are corked: reading a frame never writes an ACCEPT by itself. It leaves with the next
//! frame written to that peer (a ping-pong's answer carries the ACCEPT of the ping in the same
//! `writev`, so a message costs one write system call), as soon as an exchange of this rank has
//! to wait, before it blocks, and at the latest after 8 progress calls or once 32 answers are
//! queued. The delay only postpones when a sender may free an outbox entry, never whether.
//!
//! # Shutdown
//! [`Transport::finish`] serves peers until every message of the outbox was ACCEPTed by a live
//! peer (so no rank exits while a peer still needs one of its messages, the purpose of 000's
//! "shutdown OK?" exchange): as long as they are alive, however long that takes, unless
//! `general.operation_timeout_ms` bounds it. Dead peers are skipped at once, and so are peers an
//! operation already timed out on (reported once, never after a second wait). Then it says BYE
//! on every connection and waits at most 2 s (less with a shorter operation timeout; not at all
//! for peers given up on) for the peers to close, so that its BYE is not destroyed by a reset.
//! The BYE names the rank whose failure this rank saw first, if any, so that peers report
//! "rank 2 ended after rank 1 failed". A connection that ends without BYE means the peer died
//! (T5).
//!
//! # Liveness
//! A waiting operation fails because its peer is dead or unreachable, never because it waited
//! long: a reset or an end of stream without BYE is noticed at once; every connection carries
//! `TCP_USER_TIMEOUT` and keepalive derived from `general.failure_timeout_ms`, so the kernel
//! reports a cut-off host within that time even while this rank computes; and a receive that
//! waits 100 ms for a peer this rank has no connection with dials it (a refusal in launcher
//! mode means the peer's process ended).
//!
//! # Connections
//! Connections are opened lazily on first use with a non-blocking connect; the dialler sends
//! HELLO (secret) and may queue frames right behind it, the acceptor answers HELLO_ACK, so
//! simultaneous connects never deadlock. A pair may end up with two connections; serials make
//! that harmless. Beyond `tcp.connection_cap` the least recently used *quiescent* connection
//! (nothing outstanding either way) is closed with a CLOSE_REQ/CLOSE_ACK handshake, so eviction
//! never loses a frame in flight; a busy peer answers CLOSE_NAK and the connection stays.
//! Incoming connections are always accepted (a peer stuck in our backlog could be waiting for
//! us while we wait for it), so the cap can be exceeded briefly until idle connections close.
//! A peer that refuses connections for `tcp.connect_timeout_ms` is declared failed.
//!
//! # Waiting
//! Readiness comes from a level-triggered epoll set; each pass serves the ready sockets in
//! rotating order with a bounded amount of work per socket (T3). When all a rank waits for is
//! one peer, its socket is read directly (epoll every 16th pass). [`Transport::exchange`] polls
//! until `general.spin_us` passed without any byte moving (not since the exchange started: a
//! long stream keeps polling through its short gaps), yielding now and then (on every idle poll
//! when the host is oversubscribed, `WaitPolicy::yield_each_poll`), before it blocks in epoll:
//! a wake-up from sleep costs ~25 us on the target VMs, a message ~4 us.
//! A composite backend can add [`TcpTransport::poll_fd`] to its own poll set.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::config::ConfigWatcher;
use ferry_core::transport::check_peer;
use ferry_core::{
    Config, Error, ErrorKind, Exchange, MsgKey, OpState, RecvBuf, Result, SendOp, Stats, Store,
    Transport, WaitPolicy,
};
use ferry_proto::frame::{FrameType, Header, HEADER_LEN};
use ferry_proto::{handshake, tcp_protocol};
use ferry_proto::{Arrival, EarlyArrivals, FlowTable, MatchError};

use crate::conn::{
    Conn, Flushed, OutFrame, Payload, Phase, ReadState, Target, SEND_ANNOUNCED, SEND_STREAMING,
};
use crate::poller::{Poller, Ready, LISTENER};

const NAME: &str = "tcp";
/// Bytes read from one socket per pass before the next ready socket gets its turn (T3).
const READ_BUDGET: usize = 256 << 10;
/// Frames parsed from one socket per pass.
const FRAME_BUDGET: usize = 256;
/// Connections accepted per pass.
const ACCEPT_BUDGET: usize = 16;
/// Payload remainders at least this large are read straight into their destination.
const DIRECT_READ_MIN: usize = 8 << 10;
/// Outbox buffers at least this large are recycled (smaller ones are cheap to allocate).
const SPARE_MIN: usize = 64 << 10;
/// Bound on recycled buffers kept.
const SPARE_MAX_BUFFERS: usize = 128;
/// Bound on recycled bytes kept.
const SPARE_MAX_BYTES: usize = 128 << 20;
/// How long an announced message waits for its GET before it is copied into the outbox so
/// that its send can complete (at least the spin time), when this rank holds messages that
/// wait to be pulled itself: it may be one of a cycle of ranks blocked in sends to each other,
/// which only copies can break.
/// While GETs keep coming or zero-copy DATA keeps leaving (the receiver is pulling a window of
/// messages) the wait goes on.
const RNDV_GRACE: Duration = Duration::from_millis(1);
/// The same wait when nothing waits to be pulled from this rank's peers: no cycle of blocked
/// senders runs through this rank, so the receiver is only late (descheduled on a loaded host,
/// computing) and the copy (1 MiB: a memcpy and 256 page faults) is usually wasted. Measured at
/// load 3 on 2 cores: 1 ms copied up to a quarter of a 1 MiB osu_bw window.
const RNDV_GRACE_IDLE: Duration = Duration::from_millis(20);
/// Progress calls a corked ACCEPT may wait for a frame to travel with (bounded delay).
const CORK_CALLS: u64 = 8;
/// A receive that waits this long for a peer this rank has no connection with dials it: a
/// peer that died without ever talking to us is then noticed (its listener refuses, or its
/// host does not answer within the failure timeout) instead of being waited for forever.
const PROBE_AFTER: Duration = Duration::from_millis(100);
/// Recv op progress values (OpState::Active::progress).
const WAITING: usize = 0;
const GET_SENT: usize = 1;
const RECEIVING: usize = 2;

/// (peer, key, serial): a message in the outbox.
type MsgId = (usize, MsgKey, u64);

#[derive(Debug, Clone)]
enum PeerStatus {
    Alive,
    /// Said BYE: finished in order; after the failure of the rank it names, if any (the BYE's
    /// serial carries that rank plus one, so errors name the rank that originally failed).
    Finished(Option<usize>),
    /// Gone without BYE, or unreachable; the cause.
    Dead(String),
}

#[derive(Debug)]
struct Peer {
    addr: Option<SocketAddr>,
    status: PeerStatus,
    /// Connection used to send to this peer.
    conn: Option<usize>,
    retry_at: Option<Instant>,
    first_failure: Option<Instant>,
    backoff: Duration,
    /// Connections with this peer (two when both dialled at once).
    n_conns: usize,
    /// Since when a receive has waited for this peer without any connection with it (the
    /// liveness probe dials it after [`PROBE_AFTER`]).
    silent_since: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutState {
    /// Waiting for a connection.
    Unsent,
    /// TRY/ADD written, or ANNOUNCE written and waiting for GET.
    Sent,
    /// Refused; waiting for GET.
    Refused,
    /// DATA written in answer to GET; waiting for its ACCEPT.
    Served,
}

struct OutMsg {
    /// The payload, or `None` while it is still borrowed from the announcing send op.
    data: Option<Arc<Vec<u8>>>,
    len: usize,
    state: OutState,
    /// When the message was announced (zero-copy grace period).
    since: Instant,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    opened: u64,
    accepted: u64,
    evictions: u64,
    refusals_sent: u64,
    refusals_received: u64,
    gets_sent: u64,
    gets_served: u64,
    strangers: u64,
    announced: u64,
    rndv_copies: u64,
    duplicates_closed: u64,
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    cap: usize,
    outbox_cap: usize,
    eager: usize,
    max_msg: u64,
    connect_timeout: Duration,
    failure_timeout: Duration,
    /// A refused connection means the peer's process ended (launcher mode: addresses come from
    /// bound listeners), rather than a peer that has not started yet (file mode).
    refused_is_dead: bool,
    policy: WaitPolicy,
}

/// What happens to a connection after it was served.
enum Verdict {
    Keep,
    /// Close in order (nothing lost).
    Close,
    /// Drop because of a fault; `peer_failed` marks an authenticated peer as dead.
    Fault {
        cause: String,
        peer_failed: bool,
    },
}

/// One rank's TCP backend (seed 000; T1-T5, T7, T8). See the module documentation.
pub struct TcpTransport {
    rank: usize,
    size: usize,
    secret: Arc<Vec<u8>>,
    set: Settings,
    listener: TcpListener,
    listener_paused: bool,
    /// Connections open when the listener was paused; it resumes below that.
    paused_at: usize,
    local_addr: SocketAddr,
    poller: Poller,
    ready: Vec<Ready>,
    rr: usize,
    conns: Vec<Option<Conn>>,
    n_conns: usize,
    peers: Vec<Peer>,
    excluded: Vec<bool>,
    watcher: Option<ConfigWatcher>,
    flows: FlowTable,
    inbox: EarlyArrivals,
    /// ADD messages and GET answers whose receive is gone: never refused, bounded by what this
    /// rank asked for (GET) or by the senders' small control traffic (ADD).
    overflow: HashMap<Arrival, Vec<u8>>,
    outbox: HashMap<MsgId, OutMsg>,
    outbox_bytes: usize,
    unsent: VecDeque<MsgId>,
    /// Messages known to wait in a sender's outbox (refused or announced): whether GET was sent.
    remote: HashMap<Arrival, bool>,
    dirty: Vec<usize>,
    /// Connections with requests queued in the current pass (flushed at its end, so a window
    /// of messages leaves in one `writev` instead of one per message).
    batch: Vec<usize>,
    /// Progress call (`tick`) at which `dirty` was first seen non-empty (cork age).
    dirty_since: Option<u64>,
    tick: u64,
    stats: Stats,
    count: Counters,
    pending_error: Option<Error>,
    /// The first rank this rank saw fail (directly, or named by a peer's goodbye).
    blame: Option<usize>,
    /// Peers an operation already timed out on (`general.operation_timeout_ms`): finish
    /// neither waits for them to take messages nor lingers for them to close.
    gave_up: Vec<bool>,
    finished: bool,
    /// Recycled outbox buffers: a fresh large allocation per message costs page faults that
    /// dominate a copy (measured: ~30% of a 1 MiB stream), so buffers are reused.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// Connections with zero-copy DATA frames queued.
    borrowing: Vec<usize>,
    /// When the last GET was served or zero-copy DATA last made progress on a socket: a
    /// receiver that is pulling keeps the remaining announced messages borrowed (no copy).
    last_get: Instant,
    /// Connections with whole frames buffered but not parsed yet (stopped at their budget).
    rescan: Vec<usize>,
    /// Bumped whenever something a waiting receive may match was stored (inbox, overflow,
    /// known remote messages); `seen_epoch` is the value the last matching pass saw.
    stored_epoch: u64,
    seen_epoch: u64,
    /// Some peer may have two connections with us (see `close_duplicates`).
    dup_pending: bool,
    /// Bumped on every read or write that moved bytes: the exchange driver keeps polling while
    /// it changes (see [`TcpTransport::drive`]).
    moved: u64,
}

impl TcpTransport {
    /// Launcher mode (R1): binds an ephemeral port on `tcp.bind` (`FERRY_TCP_BIND`), publishes
    /// `tcp/addr/<rank>` in `store` and reads every other rank's address from it. No fixed
    /// ports, so two jobs on one host never collide.
    pub fn from_store(
        rank: usize,
        size: usize,
        store: &dyn Store,
        config: &Config,
        secret: &str,
    ) -> Result<TcpTransport> {
        TcpTransport::from_store_excluding(rank, size, store, config, secret, &[])
    }

    /// Like [`TcpTransport::from_store`], but the ranks in `excluded` are served by another
    /// transport over the same [`Exchange`] (the hybrid backend: shared memory on the node,
    /// TCP between nodes). Their addresses are not read, operations with them are skipped by
    /// [`Transport::progress_exchange`], which still returns `ex.is_complete()`, so the hybrid
    /// can drive both transports over one exchange.
    pub fn from_store_excluding(
        rank: usize,
        size: usize,
        store: &dyn Store,
        config: &Config,
        secret: &str,
        excluded: &[usize],
    ) -> Result<TcpTransport> {
        if rank >= size {
            return Err(Error::invalid(
                "tcp init",
                format!("rank {rank} of {size} ranks"),
            ));
        }
        let bind = format!("{}:0", config.tcp.bind);
        let listener = TcpListener::bind(&bind).map_err(|e| {
            Error::io("tcp init", e)
                .on_rank(rank)
                .with_detail(format!("cannot bind {bind} (tcp.bind / FERRY_TCP_BIND)"))
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("tcp init", e).on_rank(rank))?;
        // Bound to every interface (`tcp.bind = "0.0.0.0"`): publish the host name, which
        // peers on other hosts resolve, instead of an address nobody can dial.
        let published = if local.ip().is_unspecified() {
            format!("{}:{}", host_name(), local.port())
        } else {
            local.to_string()
        };
        store
            .set(&format!("tcp/addr/{rank}"), published.as_bytes())
            .map_err(|e| e.context("tcp init").or_rank(rank))?;
        let mut excl = vec![false; size];
        for &p in excluded {
            check_peer(rank, size, p, "tcp init")?;
            excl[p] = true;
        }
        let mut addrs = vec![None; size];
        for (p, slot) in addrs.iter_mut().enumerate() {
            if p == rank || excl[p] {
                continue;
            }
            let raw = store
                .get(&format!("tcp/addr/{p}"), config.startup_timeout())
                .map_err(|e| e.context("tcp init").or_rank(rank))?;
            let text = String::from_utf8_lossy(&raw);
            let addr = text
                .parse::<SocketAddr>()
                .ok()
                .or_else(|| resolve(&text))
                .ok_or_else(|| {
                    Error::new(ErrorKind::Protocol, "tcp init")
                        .on_rank(rank)
                        .with_peer(p)
                        .with_detail(format!(
                            "store holds `{text}` as the address of rank {p}, which does not resolve"
                        ))
                })?;
            *slot = Some(addr);
        }
        TcpTransport::build(rank, listener, addrs, excl, config, secret.as_bytes(), None)
    }

    /// File mode (R2a, 000 §4.3): `tcp.addresses` lists N `host:port`; this process takes the
    /// rank of the first address it can bind, the job has N ranks. The secret is `tcp.secret`,
    /// else `FERRY_SECRET`. The file named by `FERRY_CONFIG` is re-read every `tcp.reload_ms`
    /// while a peer cannot be reached, so a rank may move to a new address (000 §5.1).
    pub fn from_address_list(config: &Config) -> Result<TcpTransport> {
        let list = &config.tcp.addresses;
        if list.is_empty() {
            return Err(Error::config(
                "tcp.addresses is empty: file mode needs the address of every rank",
            ));
        }
        let mut bound = None;
        for (i, a) in list.iter().enumerate() {
            let Ok(candidates) = a.to_socket_addrs() else {
                continue;
            };
            if let Some(l) = candidates
                .into_iter()
                .find_map(|s| TcpListener::bind(s).ok())
            {
                bound = Some((i, l));
                break;
            }
        }
        let Some((rank, listener)) = bound else {
            return Err(Error::config(format!(
                "none of the {} addresses in tcp.addresses can be bound on this host \
                 (all taken by other ranks, or not local)",
                list.len()
            )));
        };
        let addrs = list
            .iter()
            .enumerate()
            .map(|(i, a)| if i == rank { None } else { resolve(a) })
            .collect();
        let secret = config
            .tcp
            .secret
            .clone()
            .or_else(|| std::env::var("FERRY_SECRET").ok())
            .unwrap_or_else(|| {
                tracing::warn!(
                    "rank {rank}: no tcp.secret and no FERRY_SECRET: any process can join this job"
                );
                String::new()
            });
        let watcher = ConfigWatcher::from_env(Duration::from_millis(config.tcp.reload_ms));
        let excl = vec![false; list.len()];
        TcpTransport::build(
            rank,
            listener,
            addrs,
            excl,
            config,
            secret.as_bytes(),
            Some(watcher),
        )
    }

    fn build(
        rank: usize,
        listener: TcpListener,
        addrs: Vec<Option<SocketAddr>>,
        excluded: Vec<bool>,
        config: &Config,
        secret: &[u8],
        watcher: Option<ConfigWatcher>,
    ) -> Result<TcpTransport> {
        let size = addrs.len();
        let init_err = |e: io::Error| Error::io("tcp init", e).on_rank(rank);
        listener.set_nonblocking(true).map_err(init_err)?;
        let local_addr = listener.local_addr().map_err(init_err)?;
        let poller = Poller::new().map_err(init_err)?;
        poller
            .add(listener.as_raw_fd(), LISTENER, false)
            .map_err(init_err)?;
        let t = &config.tcp;
        let set = Settings {
            cap: crate::limits::connection_cap(t.connection_cap, crate::limits::open_file_limit()),
            outbox_cap: if t.outbox_bytes == 0 {
                usize::MAX
            } else {
                t.outbox_bytes
            },
            eager: t.eager_bytes,
            max_msg: t.max_message_bytes,
            connect_timeout: Duration::from_millis(t.connect_timeout_ms.max(1)),
            failure_timeout: config.failure_timeout(),
            refused_is_dead: watcher.is_none(),
            policy: config.wait_policy(ferry_core::config::local_ranks_hint(size)),
        };
        tracing::debug!("rank {rank}: tcp backend listening on {local_addr}, {size} ranks");
        Ok(TcpTransport {
            rank,
            size,
            secret: Arc::new(secret.to_vec()),
            spare: Vec::new(),
            spare_bytes: 0,
            borrowing: Vec::new(),
            last_get: Instant::now(),
            rescan: Vec::new(),
            stored_epoch: 1,
            seen_epoch: 0,
            dup_pending: false,
            moved: 0,
            set,
            listener,
            listener_paused: false,
            paused_at: 0,
            local_addr,
            poller,
            ready: Vec::with_capacity(64),
            rr: 0,
            conns: Vec::new(),
            n_conns: 0,
            peers: addrs
                .into_iter()
                .map(|addr| Peer {
                    addr,
                    status: PeerStatus::Alive,
                    conn: None,
                    retry_at: None,
                    first_failure: None,
                    backoff: Duration::from_millis(5),
                    n_conns: 0,
                    silent_since: None,
                })
                .collect(),
            excluded,
            watcher,
            flows: FlowTable::new(),
            inbox: EarlyArrivals::new(t.inbox_messages, t.inbox_bytes),
            overflow: HashMap::new(),
            outbox: HashMap::new(),
            outbox_bytes: 0,
            unsent: VecDeque::new(),
            remote: HashMap::new(),
            dirty: Vec::new(),
            batch: Vec::new(),
            dirty_since: None,
            tick: 0,
            stats: Stats::new(rank, size, NAME),
            count: Counters::default(),
            pending_error: None,
            blame: None,
            gave_up: vec![false; size],
            finished: false,
        })
    }

    /// The address this rank listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The epoll descriptor that becomes readable whenever a socket of this transport has
    /// input or room for pending output. A composite backend (hybrid) can add it to its own
    /// poll set and call [`Transport::progress_exchange`] when it fires, instead of blocking in
    /// [`Transport::wait_for_input`].
    pub fn poll_fd(&self) -> BorrowedFd<'_> {
        self.poller.fd()
    }

    /// Forgets the flows of communicator generations before `generation` (their groups ended):
    /// serial counters, early arrivals nobody can receive any more and pull bookkeeping, so a run
    /// that keeps creating groups stays bounded. Outbox entries stay until their receivers take
    /// them or fail. Not yet reachable through `dyn Transport`: the data layer needs a trait hook
    /// to call it when a generation ends.
    pub fn retire_generations_before(&mut self, generation: u32) {
        self.flows.retire_generations_before(generation);
        self.inbox.retain(|a| a.key.generation >= generation);
        self.overflow.retain(|a, _| a.key.generation >= generation);
        self.remote.retain(|a, _| a.key.generation >= generation);
    }

    /// Number of flow counters held (for tests that the flow table stays bounded).
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// Number of open connections (for tests of the connection cap, T2).
    pub fn open_connections(&self) -> usize {
        self.n_conns
    }

    // ----- errors -----

    fn err(&self, kind: ErrorKind, op: &'static str, peer: usize, detail: String) -> Error {
        Error::new(kind, op)
            .on_rank(self.rank)
            .with_peer(peer)
            .with_detail(detail)
    }

    fn peer_gone(&self, op: &'static str, peer: usize) -> Option<Error> {
        match &self.peers[peer].status {
            PeerStatus::Alive => None,
            PeerStatus::Finished(None) => Some(self.err(
                ErrorKind::PeerFailed,
                op,
                peer,
                format!("rank {peer} already finished (orderly shutdown)"),
            )),
            PeerStatus::Finished(Some(x)) => Some(self.err(
                ErrorKind::PeerFailed,
                op,
                peer,
                format!("rank {peer} ended after rank {x} failed"),
            )),
            PeerStatus::Dead(cause) => Some(self.err(
                ErrorKind::PeerFailed,
                op,
                peer,
                format!("rank {peer} failed: {cause}"),
            )),
        }
    }

    fn mark_dead(&mut self, peer: usize, cause: String) {
        if matches!(self.peers[peer].status, PeerStatus::Alive) {
            tracing::warn!("rank {}: rank {peer} failed: {cause}", self.rank);
            self.peers[peer].status = PeerStatus::Dead(cause);
            self.blame.get_or_insert(peer);
        }
    }

    // ----- sending -----

    fn frame_type_for(&self, key: MsgKey, len: usize) -> FrameType {
        tcp_protocol::request_for(key, len, self.set.eager)
    }

    /// Starts and advances the exchange's sends; the requests of one pass leave together, one
    /// `writev` per connection (T4).
    fn start_sends(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let res = self.start_sends_inner(ex);
        self.flush_batch();
        res
    }

    fn start_sends_inner(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let Exchange { sends, recvs } = ex;
        // Announced messages are copied into the outbox (and their sends completed) only when
        // nothing else of this exchange is pending and the receiver did not ask within the
        // grace period: a receiver that is ready pulls straight from the program's buffer
        // (zero-copy), one that is not cannot deadlock a blocking send.
        let recvs_done = recvs
            .iter()
            .all(|r| r.state == OpState::Done || r.peer >= self.size || self.excluded[r.peer]);
        let grace = if recvs_done && self.remote.values().any(|&asked| !asked) {
            self.set.policy.spin.max(RNDV_GRACE)
        } else {
            self.set.policy.spin.max(RNDV_GRACE_IDLE)
        };
        for s in sends.iter_mut() {
            let serial = match s.state {
                OpState::Done => continue,
                OpState::New => {
                    check_peer(self.rank, self.size, s.peer, "send")?;
                    if self.excluded[s.peer] {
                        continue;
                    }
                    if s.data.len() as u64 > self.set.max_msg {
                        return Err(Error::invalid(
                            "send",
                            format!(
                                "message of {} bytes exceeds tcp.max_message_bytes = {}",
                                s.data.len(),
                                self.set.max_msg
                            ),
                        )
                        .on_rank(self.rank)
                        .with_peer(s.peer));
                    }
                    let serial = self.flows.take_send_serial(s.peer, s.key);
                    s.state = OpState::Active {
                        serial,
                        progress: 0,
                    };
                    serial
                }
                OpState::Active { serial, progress } => {
                    // Active ops of another transport (hybrid) may name any peer: skip them.
                    if s.peer >= self.size || self.excluded[s.peer] || progress == SEND_STREAMING {
                        continue;
                    }
                    if progress == SEND_ANNOUNCED {
                        let id = (s.peer, s.key, serial);
                        let len = s.data.len();
                        let waited = !matches!(self.outbox.get(&id), Some(m) if m.since.elapsed() < grace)
                            && self.last_get.elapsed() >= grace;
                        let room = self.outbox_bytes.saturating_add(len) <= self.set.outbox_cap
                            || self.outbox_bytes == 0;
                        if recvs_done && waited && room {
                            let data = self.buffer_from(s.data);
                            if let Some(m) = self.outbox.get_mut(&id) {
                                m.data = Some(data);
                                self.outbox_bytes += len;
                            }
                            self.count.rndv_copies += 1;
                            s.state = OpState::Done;
                        }
                        continue;
                    }
                    serial
                }
            };
            let len = s.data.len();
            if s.peer == self.rank {
                // To self: straight into a posted receive, else into the inbox when it has
                // room (the send waits otherwise, like any sender facing a full inbox).
                let arrival = Arrival {
                    source: self.rank,
                    key: s.key,
                    serial,
                };
                if let Some(i) = find_posted(recvs, arrival) {
                    let r = &mut recvs[i];
                    r.buf.fill_from(s.data.to_vec()).map_err(|want| {
                        Error::invalid("recv", format!("message of {len} bytes, buffer of {want}"))
                            .on_rank(self.rank)
                            .with_peer(self.rank)
                    })?;
                    r.state = OpState::Done;
                    self.stats.record_recv(self.rank, len);
                } else if self.inbox.insert(arrival, s.data.to_vec()).is_err() {
                    continue;
                }
                self.stored_epoch += 1;
                self.stats.record_send(self.rank, len);
                s.state = OpState::Done;
                continue;
            }
            if let Some(e) = self.peer_gone("send", s.peer) {
                return Err(e);
            }
            if self.frame_type_for(s.key, len) == FrameType::Announce {
                if let Some(c) = self.get_conn(s.peer, "send")? {
                    let id = (s.peer, s.key, serial);
                    self.outbox.insert(
                        id,
                        OutMsg {
                            data: None,
                            len,
                            state: OutState::Sent,
                            since: Instant::now(),
                        },
                    );
                    let h = Header {
                        ty: FrameType::Announce,
                        key: s.key,
                        source: self.rank as u32,
                        dest: s.peer as u32,
                        serial,
                        len: len as u64,
                    };
                    if let Some(conn) = self.conns.get_mut(c).and_then(Option::as_mut) {
                        conn.wq.push_back(OutFrame::new(&h, None));
                    }
                    self.count.announced += 1;
                    self.batch_push(c);
                    self.stats.record_send(s.peer, len);
                    s.state = OpState::Active {
                        serial,
                        progress: SEND_ANNOUNCED,
                    };
                    continue;
                }
            }
            if self.outbox_bytes.saturating_add(len) > self.set.outbox_cap
                && !self.outbox.is_empty()
            {
                // Full outbox: the send waits while the exchange keeps serving sockets (T1).
                continue;
            }
            let id = (s.peer, s.key, serial);
            let data = self.buffer_from(s.data);
            self.outbox.insert(
                id,
                OutMsg {
                    data: Some(data),
                    len,
                    state: OutState::Unsent,
                    since: Instant::now(),
                },
            );
            self.outbox_bytes += len;
            if !self.transmit(id)? {
                self.unsent.push_back(id);
            }
            self.stats.record_send(s.peer, len);
            s.state = OpState::Done;
        }
        Ok(())
    }

    /// Queues the outbox message `id` on a connection (written at the end of the pass); false
    /// if none is available yet.
    fn transmit(&mut self, id: MsgId) -> Result<bool> {
        let (peer, key, serial) = id;
        let Some(c) = self.get_conn(peer, "send")? else {
            return Ok(false);
        };
        let Some(len) = self.outbox.get(&id).map(|m| m.len) else {
            return Ok(true);
        };
        let ty = self.frame_type_for(key, len);
        let Some(msg) = self.outbox.get_mut(&id) else {
            return Ok(true);
        };
        let header = Header {
            ty,
            key,
            source: self.rank as u32,
            dest: peer as u32,
            serial,
            len: len as u64,
        };
        let Some(conn) = self.conns.get_mut(c).and_then(Option::as_mut) else {
            return Ok(false);
        };
        let payload = if ty == FrameType::Announce {
            None
        } else {
            msg.data.clone()
        };
        msg.state = OutState::Sent;
        if ty == FrameType::Announce {
            self.count.announced += 1;
        }
        if ty != FrameType::Announce {
            conn.outstanding += 1;
        }
        conn.wq.push_back(OutFrame::new(&header, payload));
        self.batch_push(c);
        Ok(true)
    }

    /// The connection to send to `peer` on, opening one if the cap allows; `None` while one is
    /// being set up, closed, or retried.
    fn get_conn(&mut self, peer: usize, op: &'static str) -> Result<Option<usize>> {
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

    fn send_hello(&mut self, c: usize) {
        let Some(conn) = self.conns[c].as_mut() else {
            return;
        };
        let Some(peer) = conn.peer else { return };
        let h = handshake::hello(self.rank, peer, &self.secret);
        conn.wq
            .push_front(OutFrame::new(&h, Some(self.secret.clone())));
        self.flush_conn(c);
    }

    fn connect_failed(&mut self, peer: usize, addr: SocketAddr, e: io::Error) {
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
    fn reload_addresses(&mut self) {
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

    fn insert_conn(&mut self, conn: Conn, want_write: bool) -> usize {
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

    fn drop_conn(&mut self, id: usize, conn: Conn) {
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
    fn evict_one(&mut self) {
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
    fn start_close(&mut self, id: usize) -> bool {
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
    fn close_duplicates(&mut self) {
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

    // ----- writing -----

    /// Writes what the connection's queue holds; a write error is a connection fault.
    fn flush_conn(&mut self, id: usize) {
        self.flush_conn_with(id, None);
    }

    /// Like [`Self::flush_conn`], also writing payloads borrowed from `sends`.
    fn flush_conn_with(&mut self, id: usize, sends: Option<&mut [SendOp<'_>]>) {
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
    fn flush_borrowed(&mut self, ex: &mut Exchange<'_>) {
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
    fn batch_push(&mut self, c: usize) {
        if !self.batch.contains(&c) {
            self.batch.push(c);
        }
    }

    fn flush_batch(&mut self) {
        while let Some(id) = self.batch.pop() {
            self.flush_conn(id);
        }
    }

    fn flush_dirty(&mut self) {
        while let Some(id) = self.dirty.pop() {
            self.flush_conn(id);
        }
        self.dirty_since = None;
    }

    // ----- receiving -----

    /// Matches posted receives against what arrived; the GETs of one pass leave together.
    fn match_recvs(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let res = self.match_recvs_inner(ex);
        self.flush_batch();
        res
    }

    fn match_recvs_inner(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        // Waiting receives were checked against everything stored when nothing was stored
        // since: skip the lookups (they dominated the polling loop's cost).
        let changed = self.stored_epoch != self.seen_epoch;
        self.seen_epoch = self.stored_epoch;
        for i in 0..ex.recvs.len() {
            let r = &mut ex.recvs[i];
            let (serial, progress) = match r.state {
                OpState::Done => continue,
                OpState::Active { .. } if !changed => continue,
                OpState::New => {
                    check_peer(self.rank, self.size, r.peer, "recv")?;
                    if self.excluded[r.peer] {
                        continue;
                    }
                    let serial = self.flows.take_recv_serial(r.peer, r.key);
                    r.state = OpState::Active {
                        serial,
                        progress: WAITING,
                    };
                    (serial, WAITING)
                }
                OpState::Active { serial, progress } => {
                    if r.peer >= self.size || self.excluded[r.peer] {
                        continue;
                    }
                    (serial, progress)
                }
            };
            if progress == RECEIVING {
                continue;
            }
            let arrival = Arrival {
                source: r.peer,
                key: r.key,
                serial,
            };
            let stored = if self.inbox.is_empty() {
                None
            } else {
                self.inbox.take(&arrival)
            };
            let stored = match stored {
                None if !self.overflow.is_empty() => self.overflow.remove(&arrival),
                other => other,
            };
            if let Some(payload) = stored {
                let len = payload.len();
                r.buf.fill_from(payload).map_err(|want| {
                    Error::invalid("recv", format!("message of {len} bytes, buffer of {want}"))
                        .on_rank(self.rank)
                        .with_peer(arrival.source)
                })?;
                r.state = OpState::Done;
                self.stats.record_recv(arrival.source, len);
                continue;
            }
            if progress == WAITING
                && !self.remote.is_empty()
                && self.remote.get(&arrival) == Some(&false)
            {
                // The message waits in the sender's outbox: pull it (000 §4.4.3).
                let peer = arrival.source;
                let conn = self.get_conn(peer, "recv")?;
                if conn.is_none() {
                    // No connection yet: look again next time.
                    self.stored_epoch += 1;
                }
                if let Some(c) = conn {
                    let h = Header::control(
                        FrameType::Get,
                        arrival.key,
                        peer as u32,
                        self.rank as u32,
                        serial,
                    );
                    let Some(conn) = self.conns.get_mut(c).and_then(Option::as_mut) else {
                        continue;
                    };
                    conn.wq.push_back(OutFrame::new(&h, None));
                    conn.outstanding += 1;
                    self.remote.insert(arrival, true);
                    self.count.gets_sent += 1;
                    ex.recvs[i].state = OpState::Active {
                        serial,
                        progress: GET_SENT,
                    };
                    self.batch_push(c);
                }
            }
        }
        Ok(())
    }

    /// Serves ready sockets once, in rotating order, with bounded work each (T3).
    fn poll_io(&mut self, ex: &mut Exchange<'_>, timeout_ms: i32) -> Result<()> {
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

    fn accept_some(&mut self) {
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

    fn pause_listener(&mut self) {
        if !self.listener_paused {
            self.paused_at = self.n_conns;
            self.poller.remove(self.listener.as_raw_fd());
            self.listener_paused = true;
        }
    }

    fn service(&mut self, id: usize, r: Ready, ex: &mut Exchange<'_>) -> Result<()> {
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

    fn apply_verdict(&mut self, id: usize, conn: Conn, v: Verdict) {
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

    fn finish_connect(&mut self, conn: &mut Conn) -> Verdict {
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

    fn io_fault(&self, conn: &Conn, e: io::Error) -> Verdict {
        self.eof_verdict(conn, Some(e))
    }

    /// What a closed or broken stream means in the connection's phase.
    fn eof_verdict(&self, conn: &Conn, e: Option<io::Error>) -> Verdict {
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

    fn read_frames(
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

    /// Queues an answer to `h`. Message-level answers keep the message's identity (source and
    /// destination of the message); connection-level ones come from this rank.
    fn queue_control(&mut self, id: usize, conn: &mut Conn, ty: FrameType, h: &Header) {
        let c = tcp_protocol::answer(ty, h);
        conn.wq.push_back(OutFrame::new(&c, None));
        self.dirty.push(id);
    }

    fn on_header(
        &mut self,
        id: usize,
        conn: &mut Conn,
        h: Header,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        let payload_state = |target: Target| ReadState::Payload {
            header: h,
            target,
            done: 0,
        };
        match conn.phase {
            Phase::AwaitHello(_) | Phase::AwaitHelloAck => {
                let want = if matches!(conn.phase, Phase::AwaitHello(_)) {
                    FrameType::Hello
                } else {
                    FrameType::HelloAck
                };
                if h.ty != want {
                    return Ok(Verdict::Fault {
                        cause: format!("expected {want:?} first, got {:?}", h.ty),
                        peer_failed: false,
                    });
                }
                // Handshake payloads are capped at MAX_HELLO_LEN by the decoder.
                conn.rstate = payload_state(Target::Owned(vec![0; h.len as usize]));
                return self.maybe_empty_payload(id, conn, ex);
            }
            Phase::Connecting(_) => {
                return Ok(Verdict::Fault {
                    cause: "data before the connection was established".into(),
                    peer_failed: false,
                })
            }
            _ => {}
        }
        let Some(p) = conn.peer else {
            return Ok(Verdict::Fault {
                cause: "frame on a connection without peer".into(),
                peer_failed: false,
            });
        };
        if let Err(e) = tcp_protocol::check_route(&h, self.rank, p) {
            return Ok(Verdict::Fault {
                cause: e.to_string(),
                peer_failed: false,
            });
        }
        let arrival = Arrival {
            source: h.source as usize,
            key: h.key,
            serial: h.serial,
        };
        match h.ty {
            FrameType::Try | FrameType::Add | FrameType::Data => {
                let len = h.len as usize;
                if h.ty == FrameType::Data {
                    // Only answers to our own GETs are taken: they are bounded by what this
                    // rank asked for, so they may bypass the inbox cap.
                    if self.remote.remove(&arrival) != Some(true) {
                        return Ok(Verdict::Fault {
                            cause: format!("DATA for {arrival:?} that was never requested"),
                            peer_failed: false,
                        });
                    }
                    conn.outstanding = conn.outstanding.saturating_sub(1);
                }
                let alloc_fault = |what: &str| Verdict::Fault {
                    cause: format!(
                        "cannot allocate {len} bytes for {what} announced by rank {p} \
                         (out of memory; tcp.max_message_bytes = {})",
                        self.set.max_msg
                    ),
                    peer_failed: true,
                };
                let target = match find_posted(&ex.recvs, arrival) {
                    Some(i) => {
                        let r = &mut ex.recvs[i];
                        if let RecvBuf::Vec(v) = &mut r.buf {
                            // A peer-announced size is reserved fallibly: too much for memory
                            // is an error naming the peer, never an abort.
                            if v.try_reserve_exact(len.saturating_sub(v.len())).is_err() {
                                return Ok(alloc_fault("a message"));
                            }
                        }
                        match r.buf.prepare(len) {
                            Ok(_) => {
                                r.state = OpState::Active {
                                    serial: h.serial,
                                    progress: RECEIVING,
                                };
                                Target::Direct(i)
                            }
                            Err(want) => {
                                // The program's buffer is wrong: the message is consumed and
                                // the receive fails with the reason.
                                r.state = OpState::Done;
                                self.pending_error = Some(
                                    Error::invalid(
                                        "recv",
                                        format!("message of {len} bytes, buffer of {want}"),
                                    )
                                    .on_rank(self.rank)
                                    .with_peer(p),
                                );
                                Target::Discard
                            }
                        }
                    }
                    None if h.ty != FrameType::Try || self.inbox.has_room_for(len) => {
                        match alloc_zeroed(len) {
                            Some(v) => Target::Owned(v),
                            None => return Ok(alloc_fault("an early message")),
                        }
                    }
                    None => Target::Discard,
                };
                conn.rstate = payload_state(target);
                self.maybe_empty_payload(id, conn, ex)
            }
            FrameType::Announce => {
                self.remote.insert(arrival, false);
                self.stored_epoch += 1;
                Ok(Verdict::Keep)
            }
            FrameType::Miss => {
                conn.outstanding = conn.outstanding.saturating_sub(1);
                Err(self.err(
                    ErrorKind::Protocol,
                    "recv",
                    p,
                    format!(
                        "rank {p} no longer holds message {:?} serial {} it announced",
                        h.key, h.serial
                    ),
                ))
            }
            FrameType::Accept | FrameType::Refuse => {
                conn.outstanding = conn.outstanding.saturating_sub(1);
                let key = (p, h.key, h.serial);
                if h.ty == FrameType::Accept {
                    if let Some(m) = self.outbox.remove(&key) {
                        if let Some(d) = m.data {
                            self.outbox_bytes -= m.len;
                            self.recycle(d);
                        }
                    }
                } else if let Some(m) = self.outbox.get_mut(&key) {
                    m.state = OutState::Refused;
                    self.count.refusals_received += 1;
                }
                Ok(Verdict::Keep)
            }
            FrameType::Get => {
                self.count.gets_served += 1;
                self.last_get = Instant::now();
                let key = (p, h.key, h.serial);
                let Some(m) = self.outbox.get_mut(&key) else {
                    self.queue_control(id, conn, FrameType::Miss, &h);
                    return Ok(Verdict::Keep);
                };
                // The entry stays until the receiver ACCEPTs the DATA: finish() must not say
                // BYE (on another connection, possibly overtaking it) before.
                let d = Header {
                    ty: FrameType::Data,
                    len: m.len as u64,
                    ..h
                };
                let payload = match &m.data {
                    Some(data) => Payload::Shared(data.clone()),
                    None => {
                        // Zero-copy: the payload is still the announcing op's buffer.
                        let announced = OpState::Active {
                            serial: h.serial,
                            progress: SEND_ANNOUNCED,
                        };
                        let op = ex
                            .sends
                            .iter()
                            .position(|s| s.peer == p && s.key == h.key && s.state == announced);
                        let Some(op) = op else {
                            // Its exchange was abandoned (after an error): nothing to send.
                            self.outbox.remove(&key);
                            self.queue_control(id, conn, FrameType::Miss, &h);
                            return Ok(Verdict::Keep);
                        };
                        ex.sends[op].state = OpState::Active {
                            serial: h.serial,
                            progress: SEND_STREAMING,
                        };
                        conn.borrowed += 1;
                        if !self.borrowing.contains(&id) {
                            self.borrowing.push(id);
                        }
                        Payload::Borrowed {
                            op,
                            key: h.key,
                            serial: h.serial,
                            len: m.len,
                        }
                    }
                };
                m.state = OutState::Served;
                conn.wq.push_back(OutFrame {
                    header: d.encode(),
                    payload,
                    off: 0,
                });
                conn.outstanding += 1;
                self.dirty.push(id);
                Ok(Verdict::Keep)
            }
            FrameType::CloseReq => {
                match conn.phase {
                    Phase::Open if conn.outstanding == 0 => {
                        self.queue_control(id, conn, FrameType::CloseAck, &h);
                        conn.phase = Phase::Closing;
                        self.detach(id, p);
                    }
                    Phase::Open => self.queue_control(id, conn, FrameType::CloseNak, &h),
                    Phase::ClosingSent => {
                        self.queue_control(id, conn, FrameType::CloseAck, &h);
                        conn.phase = Phase::Closing;
                    }
                    _ => {}
                }
                Ok(Verdict::Keep)
            }
            FrameType::CloseAck => Ok(if conn.phase == Phase::ClosingSent {
                Verdict::Close
            } else {
                Verdict::Keep
            }),
            FrameType::CloseNak => {
                if conn.phase == Phase::ClosingSent {
                    conn.phase = Phase::Open;
                    if self.peers[p].conn.is_none() {
                        self.peers[p].conn = Some(id);
                    }
                }
                Ok(Verdict::Keep)
            }
            FrameType::Bye => {
                let after = (h.serial > 0)
                    .then(|| (h.serial - 1) as usize)
                    .filter(|&x| x < self.size && x != p);
                if let Some(x) = after {
                    self.blame.get_or_insert(x);
                }
                self.peers[p].status = PeerStatus::Finished(after);
                conn.phase = Phase::Closing;
                self.detach(id, p);
                self.dirty.push(id);
                Ok(Verdict::Keep)
            }
            FrameType::Hello | FrameType::HelloAck => unreachable_frame(),
        }
    }

    fn detach(&mut self, id: usize, peer: usize) {
        if self.peers[peer].conn == Some(id) {
            self.peers[peer].conn = None;
        }
    }

    /// Completes a frame whose payload is empty right away.
    fn maybe_empty_payload(
        &mut self,
        id: usize,
        conn: &mut Conn,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        if let ReadState::Payload { header, .. } = &conn.rstate {
            if header.len == 0 {
                let ReadState::Payload { header, target, .. } =
                    std::mem::replace(&mut conn.rstate, ReadState::Header)
                else {
                    return Ok(Verdict::Keep);
                };
                return self.on_payload(id, conn, header, target, ex);
            }
        }
        Ok(Verdict::Keep)
    }

    fn on_payload(
        &mut self,
        id: usize,
        conn: &mut Conn,
        h: Header,
        target: Target,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        match h.ty {
            FrameType::Hello => {
                let Target::Owned(secret) = target else {
                    return Ok(Verdict::Keep);
                };
                match handshake::check_hello(&h, &secret, &self.secret, self.rank, self.size) {
                    Ok(p) if !self.excluded[p] => {
                        conn.peer = Some(p);
                        self.peers[p].n_conns += 1;
                        if self.peers[p].n_conns > 1 {
                            self.dup_pending = true;
                        }
                        conn.phase = Phase::Open;
                        let ack = handshake::hello_ack(self.rank, p, &self.secret);
                        conn.wq
                            .push_back(OutFrame::new(&ack, Some(self.secret.clone())));
                        self.dirty.push(id);
                        if self.peers[p].conn.is_none() || p < self.rank {
                            // A lower rank's connection is the one both keep.
                            self.peers[p].conn = Some(id);
                        }
                        Ok(Verdict::Keep)
                    }
                    Ok(p) => {
                        self.count.strangers += 1;
                        Ok(Verdict::Fault {
                            cause: format!("rank {p} is served by another transport"),
                            peer_failed: false,
                        })
                    }
                    Err(e) => {
                        self.count.strangers += 1;
                        Ok(Verdict::Fault {
                            cause: format!("handshake rejected: {e}"),
                            peer_failed: false,
                        })
                    }
                }
            }
            FrameType::HelloAck => {
                let Target::Owned(secret) = target else {
                    return Ok(Verdict::Keep);
                };
                let peer = conn.peer.unwrap_or(usize::MAX);
                match handshake::check_hello_ack(&h, &secret, &self.secret, self.rank, peer) {
                    Ok(()) => {
                        conn.phase = Phase::Open;
                        let p = &mut self.peers[peer];
                        p.first_failure = None;
                        p.retry_at = None;
                        p.backoff = Duration::from_millis(5);
                        Ok(Verdict::Keep)
                    }
                    Err(e) => Ok(Verdict::Fault {
                        cause: format!("handshake answer rejected: {e}"),
                        peer_failed: true,
                    }),
                }
            }
            FrameType::Try | FrameType::Add | FrameType::Data => {
                let source = h.source as usize;
                let arrival = Arrival {
                    source,
                    key: h.key,
                    serial: h.serial,
                };
                let len = h.len as usize;
                let mut refuse = false;
                match target {
                    Target::Direct(i) if direct_valid(ex, i, &h) => {
                        ex.recvs[i].state = OpState::Done;
                        self.stats.record_recv(source, len);
                    }
                    Target::Direct(_) | Target::Discard => {
                        if self.pending_error.is_none() {
                            refuse = true;
                        }
                    }
                    Target::Owned(v) => {
                        if h.ty == FrameType::Try {
                            match self.inbox.insert(arrival, v) {
                                Ok(()) => self.stored_epoch += 1,
                                Err(MatchError::Full { .. }) => refuse = true,
                                Err(MatchError::Duplicate(..)) => {
                                    return Ok(Verdict::Fault {
                                        cause: format!("duplicate message {arrival:?}"),
                                        peer_failed: false,
                                    })
                                }
                            }
                        } else {
                            self.overflow.insert(arrival, v);
                            self.stored_epoch += 1;
                        }
                    }
                }
                if h.ty == FrameType::Data {
                    if refuse {
                        tracing::warn!(
                            "rank {}: answer to GET {arrival:?} arrived for an abandoned receive",
                            self.rank
                        );
                    }
                    self.queue_control(id, conn, FrameType::Accept, &h);
                } else if refuse {
                    self.count.refusals_sent += 1;
                    self.remote.insert(arrival, false);
                    self.stored_epoch += 1;
                    self.queue_control(id, conn, FrameType::Refuse, &h);
                } else {
                    self.queue_control(id, conn, FrameType::Accept, &h);
                }
                Ok(Verdict::Keep)
            }
            _ => Ok(Verdict::Keep),
        }
    }

    /// A shared copy of `data` in a recycled buffer when one is large enough.
    fn buffer_from(&mut self, data: &[u8]) -> Arc<Vec<u8>> {
        if data.len() >= SPARE_MIN {
            if let Some(i) = self.spare.iter().position(|v| v.capacity() >= data.len()) {
                let mut v = self.spare.swap_remove(i);
                self.spare_bytes -= v.capacity();
                v.clear();
                v.extend_from_slice(data);
                return Arc::new(v);
            }
        }
        Arc::new(data.to_vec())
    }

    /// Keeps a delivered message's buffer for reuse, within a bounded pool.
    fn recycle(&mut self, data: Arc<Vec<u8>>) {
        let Ok(v) = Arc::try_unwrap(data) else {
            return;
        };
        if v.capacity() >= SPARE_MIN
            && self.spare.len() < SPARE_MAX_BUFFERS
            && self.spare_bytes + v.capacity() <= SPARE_MAX_BYTES
        {
            self.spare_bytes += v.capacity();
            self.spare.push(v);
        }
    }

    // ----- housekeeping -----

    fn maintain(&mut self) -> Result<()> {
        let res = self.maintain_inner();
        self.flush_batch();
        res
    }

    fn maintain_inner(&mut self) -> Result<()> {
        for _ in 0..self.unsent.len() {
            let Some(id) = self.unsent.pop_front() else {
                break;
            };
            if !self.outbox.contains_key(&id) {
                continue;
            }
            if !matches!(self.peers[id.0].status, PeerStatus::Alive) {
                self.unsent.push_back(id);
                continue;
            }
            match self.transmit(id) {
                Ok(true) => {}
                Ok(false) => self.unsent.push_back(id),
                Err(e) => {
                    self.unsent.push_back(id);
                    return Err(e);
                }
            }
        }
        if self.listener_paused {
            if self.n_conns < self.paused_at {
                if self
                    .poller
                    .add(self.listener.as_raw_fd(), LISTENER, false)
                    .is_ok()
                {
                    self.listener_paused = false;
                }
            } else {
                self.evict_one();
            }
        }
        if self.tick & 63 == 0 {
            self.expire_handshakes();
        }
        if self.dup_pending {
            self.close_duplicates();
        }
        Ok(())
    }

    /// Drops strangers that never completed the handshake and connects that never finished.
    fn expire_handshakes(&mut self) {
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

    /// Fails pending operations with a dead or finished peer (T5).
    fn check_failures(&mut self, ex: &Exchange<'_>) -> Result<()> {
        for s in ex.sends.iter().filter(|s| s.state != OpState::Done) {
            if s.peer < self.size && !self.excluded[s.peer] {
                if let Some(e) = self.peer_gone("send", s.peer) {
                    return Err(e);
                }
            }
        }
        let mut now = None;
        for r in ex.recvs.iter().filter(|r| r.state != OpState::Done) {
            if r.peer < self.size
                && !self.excluded[r.peer]
                && r.peer != self.rank
                && !self.may_still_deliver(r.peer)
            {
                if let Some(e) = self.peer_gone("recv", r.peer) {
                    return Err(e);
                }
                // Liveness probe: nothing would ever tell us that a peer we have no
                // connection with died, so dial it.
                let p = &mut self.peers[r.peer];
                if p.n_conns > 0 {
                    p.silent_since = None;
                } else {
                    let now = *now.get_or_insert_with(Instant::now);
                    let since = *p.silent_since.get_or_insert(now);
                    if now.duration_since(since) >= PROBE_AFTER {
                        self.get_conn(r.peer, "recv")?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The connection to poll directly when all this rank waits for is input from one peer
    /// over an idle connection (no pending sends, nothing queued to write, nothing buffered).
    fn hot_conn(&self, ex: &Exchange<'_>) -> Option<usize> {
        if !self.rescan.is_empty() || !self.unsent.is_empty() {
            return None;
        }
        let mut peer = None;
        for r in ex.recvs.iter().filter(|r| r.state != OpState::Done) {
            if r.peer >= self.size || self.excluded[r.peer] {
                continue;
            }
            if peer.is_some_and(|p| p != r.peer) {
                return None;
            }
            peer = Some(r.peer);
        }
        let busy_send = ex
            .sends
            .iter()
            .any(|s| s.state != OpState::Done && s.peer < self.size && !self.excluded[s.peer]);
        if busy_send {
            return None;
        }
        let peer = peer?;
        if self.peers[peer].n_conns != 1 {
            // Its messages may come on either of two connections.
            return None;
        }
        let c = self.peers[peer].conn?;
        let conn = self.conns.get(c)?.as_ref()?;
        (conn.phase == Phase::Open && !conn.want_write && conn.wq.is_empty()).then_some(c)
    }

    /// A peer that said BYE on one connection may still have frames in flight on another
    /// (two ranks that dialled each other at once): it is only done once all are closed.
    fn may_still_deliver(&self, peer: usize) -> bool {
        matches!(self.peers[peer].status, PeerStatus::Finished(_))
            && self.conns.iter().flatten().any(|c| c.peer == Some(peer))
    }

    fn own_part_complete(&self, ex: &Exchange<'_>) -> bool {
        ex.sends
            .iter()
            .all(|s| s.state == OpState::Done || s.peer >= self.size || self.excluded[s.peer])
            && ex
                .recvs
                .iter()
                .all(|r| r.state == OpState::Done || r.peer >= self.size || self.excluded[r.peer])
    }

    fn shutdown(&mut self) -> Result<()> {
        // Peers that are alive get all the time they need to take what they are owed (a slow
        // rank is not a dead one); only the optional operation timeout bounds the wait.
        let deadline = self.set.policy.timeout.map(|limit| Instant::now() + limit);
        let mut empty = Exchange::new();
        // 1. Deliver what peers may still need from the outbox (000 §4.4.1: a rank must not
        //    exit while a peer still needs one of its messages).
        let mut result = Ok(());
        loop {
            self.tick += 1;
            if let Err(e) = self.maintain().and_then(|_| self.poll_io(&mut empty, 0)) {
                if !e.is_peer_failure() {
                    result = Err(e);
                    break;
                }
            }
            self.flush_dirty();
            let waiting: Vec<usize> = self
                .outbox
                .keys()
                .map(|k| k.0)
                .filter(|&p| {
                    !self.gave_up[p]
                        && (matches!(self.peers[p].status, PeerStatus::Alive)
                            || self.may_still_deliver(p))
                })
                .collect();
            if waiting.is_empty() {
                break;
            }
            if let Some(limit) = self
                .set
                .policy
                .timeout
                .filter(|_| deadline.is_some_and(|deadline| Instant::now() >= deadline))
            {
                let mut peers = waiting;
                peers.sort_unstable();
                peers.dedup();
                result = Err(Error::new(ErrorKind::Timeout, "finish")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "{} messages to ranks {peers:?} were not taken within {limit:?} \
                         (general.operation_timeout_ms)",
                        self.outbox.len(),
                    )));
                break;
            }
            self.wait_io(10);
        }
        if result.is_ok() {
            let lost: Vec<usize> = self.outbox.keys().map(|k| k.0).collect();
            if let Some(&p) = lost.first() {
                let n = lost.iter().filter(|&&q| q == p).count();
                result = Err(self.peer_gone("finish", p).unwrap_or_else(|| {
                    Error::new(ErrorKind::Timeout, "finish")
                        .on_rank(self.rank)
                        .with_peer(p)
                        .with_detail(format!(
                            "{n} messages to rank {p} were not taken: an operation already \
                             timed out waiting for it (general.operation_timeout_ms)"
                        ))
                }));
            }
        }
        // 2. Say goodbye on every connection, then wait briefly for the peers to close theirs
        //    (closing with unread input would reset the connection and could destroy the BYE).
        for id in 0..self.conns.len() {
            let Some(conn) = self.conns[id].as_mut() else {
                continue;
            };
            match (conn.phase, conn.peer) {
                (Phase::Open | Phase::ClosingSent | Phase::AwaitHelloAck, Some(p)) => {
                    // The serial names the rank whose failure this rank saw first (plus
                    // one), so that peers still waiting for us blame that rank, not us.
                    let h = Header::control(
                        FrameType::Bye,
                        MsgKey::user(0),
                        self.rank as u32,
                        p as u32,
                        self.blame.map_or(0, |x| x as u64 + 1),
                    );
                    conn.wq.push_back(OutFrame::new(&h, None));
                    conn.phase = Phase::ByeSent;
                    let _ = conn.flush(None);
                    let _ = conn.sock.shutdown(Shutdown::Write);
                }
                _ => {
                    if let Some(conn) = self.conns[id].take() {
                        self.drop_conn(id, conn);
                    }
                }
            }
        }
        let linger = Instant::now()
            + self
                .set
                .policy
                .timeout
                .map_or(Duration::from_secs(2), |t| t.min(Duration::from_secs(2)));
        while self.n_conns > 0 && Instant::now() < linger {
            let only_given_up = self
                .conns
                .iter()
                .flatten()
                .all(|c| c.peer.is_some_and(|p| self.gave_up[p]));
            if only_given_up {
                break;
            }
            let _ = self.poll_io(&mut empty, 10);
        }
        for id in 0..self.conns.len() {
            if let Some(conn) = self.conns[id].take() {
                self.drop_conn(id, conn);
            }
        }
        result
    }

    /// Runs `ex` to completion like `ferry_core::transport::drive_exchange`, except that the
    /// polling budget (`general.spin_us`) counts from the last time bytes moved, not from the
    /// start of the exchange. A stream of large messages has short gaps (the socket buffer is
    /// momentarily full or empty) all through a window of many milliseconds; blocking in epoll
    /// in each gap cost a wake-up (~25 us on the target VMs) every few hundred kilobytes: at
    /// 1 MiB osu_bw both ranks slept 1300-2100 times a second and used 25-30 % of a core.
    /// Idle polls yield as the policy says (every poll on oversubscribed hosts).
    fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        if self.progress_exchange(ex)? {
            return Ok(());
        }
        let policy = self.set.policy;
        let start = Instant::now();
        let mut active = start;
        let mut mark = self.moved;
        let mut polls: u32 = 0;
        loop {
            if self.progress_exchange(ex)? {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            let now = Instant::now();
            if self.moved != mark {
                mark = self.moved;
                active = now;
            }
            let elapsed = now.duration_since(start);
            if let Some(limit) = policy.timeout.filter(|&limit| elapsed >= limit) {
                // Reported once: finish does not wait for these peers a second time.
                for p in ex.pending_peers() {
                    if let Some(g) = self.gave_up.get_mut(p) {
                        *g = true;
                    }
                }
                return Err(ferry_core::transport::operation_timeout_error(
                    self.rank, ex, limit,
                ));
            }
            if now.duration_since(active) < policy.spin {
                std::hint::spin_loop();
                if policy.yield_each_poll || polls.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            } else {
                let slice = Duration::from_millis(10);
                let left = policy.timeout.map_or(slice, |limit| limit - elapsed);
                self.wait_for_input(left.min(slice))?;
            }
        }
    }

    fn wait_io(&mut self, timeout_ms: i32) {
        self.flush_dirty();
        self.ready.clear();
        let _ = self.poller.wait(&mut self.ready, timeout_ms);
        self.ready.clear();
    }
}

fn unreachable_frame() -> Result<Verdict> {
    // on_header rejects handshake frames on established connections before dispatching.
    Ok(Verdict::Fault {
        cause: "handshake frame on an established connection".into(),
        peer_failed: false,
    })
}

/// `len` zero bytes, or `None` when memory cannot hold them (never an abort).
fn alloc_zeroed(len: usize) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 0);
    Some(v)
}

/// This host's name (for addresses published when bound to every interface).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn resolve(a: &str) -> Option<SocketAddr> {
    a.to_socket_addrs().ok()?.next()
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
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
        Err(e) => return Err(e),
    };
    Ok((sock, done))
}

/// Index of the posted receive waiting for exactly this message (M2).
fn find_posted(recvs: &[ferry_core::RecvOp<'_>], a: Arrival) -> Option<usize> {
    recvs.iter().position(|r| {
        r.peer == a.source
            && r.key == a.key
            && matches!(r.state, OpState::Active { serial, progress } if serial == a.serial && progress != RECEIVING)
    })
}

fn direct_valid(ex: &Exchange<'_>, i: usize, h: &Header) -> bool {
    ex.recvs.get(i).is_some_and(|r| {
        r.peer == h.source as usize
            && r.key == h.key
            && r.state
                == OpState::Active {
                    serial: h.serial,
                    progress: RECEIVING,
                }
    })
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

impl Transport for TcpTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn name(&self) -> &'static str {
        NAME
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.set.policy
    }

    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        self.tick += 1;
        self.start_sends(ex)?;
        self.match_recvs(ex)?;
        if !self.own_part_complete(ex) || self.tick & 15 == 0 {
            let polled = match self.hot_conn(ex) {
                // Waiting for one peer only: read its socket directly instead of asking epoll
                // first (one system call per poll instead of two); every 16th pass still
                // serves everything (listener, other connections) for fairness (T3).
                Some(c) if self.tick & 15 != 0 => {
                    let r = Ready {
                        token: c as u64,
                        readable: true,
                        writable: false,
                        hangup: false,
                    };
                    self.service(c, r, ex)
                }
                _ => self.poll_io(ex, 0),
            };
            self.flush_borrowed(ex);
            polled?;
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            self.match_recvs(ex)?;
            self.maintain()?;
            // Corked ACCEPTs must not wait forever on a rank whose receives all complete
            // without blocking (from the inbox): senders free their outboxes on them. They
            // leave after CORK_CALLS progress calls at the latest, or when 32 are queued.
            if self.dirty.is_empty() {
                self.dirty_since = None;
            } else {
                let since = *self.dirty_since.get_or_insert(self.tick);
                if self.dirty.len() >= 32 || self.tick.wrapping_sub(since) >= CORK_CALLS {
                    self.flush_dirty();
                }
            }
            if !self.own_part_complete(ex) {
                self.start_sends(ex)?;
                self.flush_dirty();
                self.check_failures(ex)?;
            }
        }
        Ok(ex.is_complete())
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.flush_dirty();
        if !self.rescan.is_empty() {
            // Buffered input is waiting to be parsed: do not sleep.
            return Ok(());
        }
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as i32;
        self.ready.clear();
        self.poller
            .wait(
                &mut self.ready,
                ms.max(if timeout.is_zero() { 0 } else { 1 }),
            )
            .map_err(|e| Error::io("wait", e).on_rank(self.rank))?;
        self.ready.clear();
        Ok(())
    }

    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.stats.calls += 1;
        self.drive(ex)
    }

    fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        let c = self.count;
        for (name, v) in [
            ("tcp connections opened", c.opened),
            ("tcp connections accepted", c.accepted),
            ("tcp evictions", c.evictions),
            ("tcp refusals sent", c.refusals_sent),
            ("tcp refusals received", c.refusals_received),
            ("tcp announced", c.announced),
            ("tcp announced then copied", c.rndv_copies),
            ("tcp gets sent", c.gets_sent),
            ("tcp gets served", c.gets_served),
            ("tcp strangers rejected", c.strangers),
            ("tcp duplicate connections closed", c.duplicates_closed),
        ] {
            s.bump(name, v);
        }
        s
    }

    fn finish(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        self.shutdown()
    }
}

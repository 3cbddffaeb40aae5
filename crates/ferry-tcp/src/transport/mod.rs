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

mod cache;
mod progress;
mod recv;
mod send;
mod service;
mod shutdown;

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
    /// Survives peer failures (fault-tolerant communicator): the goodbye names no failure.
    tolerant: bool,
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
            tolerant: false,
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

    /// Number of open connections (for tests of the connection cap, T2).
    pub fn open_connections(&self) -> usize {
        self.n_conns
    }

    /// Serves the peers once without waiting, for a rank whose current operation involves no
    /// TCP peer (the hybrid backend waiting for ranks of its own node): accepts connections,
    /// keeps arriving messages, answers GETs from the outbox, writes queued frames and the
    /// corked ACCEPTs. Needed because a completed send may still owe its message: an announced
    /// message copied into the outbox waits there until the receiver pulls it, and senders
    /// blocked on a full outbox wait for our ACCEPTs. Failed peers are recorded, not reported:
    /// they surface in the next operation that involves them.
    pub fn serve_peers(&mut self) -> Result<()> {
        self.tick += 1;
        let mut idle = Exchange::new();
        self.poll_io(&mut idle, 0)?;
        self.maintain()?;
        self.flush_dirty();
        Ok(())
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
}

/// This host's name (for addresses published when bound to every interface).
fn host_name() -> String {
    let name = ferry_core::launch::hostname();
    if name.is_empty() {
        "localhost".to_string()
    } else {
        name
    }
}

fn resolve(a: &str) -> Option<SocketAddr> {
    a.to_socket_addrs().ok()?.next()
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

    fn tolerate_failures(&mut self) {
        self.tolerant = true;
    }

    fn retire_flows(&mut self, flows: ferry_core::RetiredFlows) {
        self.flows.retire_where(|k| flows.contains(k));
    }

    fn flow_count(&self) -> Option<usize> {
        Some(self.flows.len())
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

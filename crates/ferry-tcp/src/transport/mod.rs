//! The TCP transport: the I/O driver around `ferry_proto::endpoint::Endpoint` (000 §4.4, §4.5;
//! T1-T5, T7, T8).
//!
//! The protocol (ADD/TRY/GET over a bounded inbox and outbox, the rendezvous of large
//! messages, the capped connection cache with its CLOSE handshake, the handshake secret, the
//! goodbye naming the rank whose failure ended this one, liveness probes, what a lost
//! connection means) is the endpoint's, a sans-I/O state machine that the seeded simulation in
//! `ferry-proto/tests/sim/` drives through drops, kills and full inboxes. This driver owns
//! what the endpoint must not: sockets, the epoll set, the clock and the program's buffers.
//! It feeds the endpoint events (frames read, connections accepted, connected, refused or
//! lost, time) and carries out its actions (dial, write a frame, shut down, close, complete or
//! fail an operation). Split by concern:
//! - `cache`: dialling (non-blocking connect, what a failed connect means), accepting,
//!   closing and dropping sockets, descriptor exhaustion, address reloads in file mode;
//! - `service`: the level-triggered epoll pass over ready sockets with bounded work per
//!   socket (T3), reading frames (large payloads straight into the receive's buffer) and
//!   writing queued frames many per `writev` (T4);
//! - `ops`: the exchange's operations as endpoint operations (rendezvous and zero-copy: a
//!   send's buffer is written from where it is, a receive's buffer read into), completions
//!   and failures, and abandoning a failed exchange so that nothing refers to its buffers;
//! - `progress`: the polling loop, timers, the corked ACCEPTs;
//! - `shutdown`: the end of a rank.
//!
//! # Writing
//! ACCEPTs are corked: reading a frame never writes an ACCEPT by itself. It leaves with the next
//! frame written to that peer (a ping-pong's answer carries the ACCEPT of the ping in the same
//! `writev`, so a message costs one write system call), as soon as an exchange of this rank has
//! to wait, before it blocks, and at the latest after 8 progress calls or once 32 connections
//! hold some. The delay only postpones when a sender may free an outbox entry, never whether.
//!
//! # Liveness
//! A waiting operation fails because its peer is dead or unreachable, never because it waited
//! long: a reset or an end of stream without BYE is noticed at once; every connection carries
//! `TCP_USER_TIMEOUT` and keepalive derived from `general.failure_timeout_ms`, so the kernel
//! reports a cut-off host within that time even while this rank computes; and a receive that
//! waits 100 ms for a peer this rank has no connection with dials it (a refusal in launcher
//! mode means the peer's process ended). A failed peer fails only the operations that involve
//! it: the transport goes on serving the others.
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

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use ferry_core::config::ConfigWatcher;
use ferry_core::transport::check_peer;
use ferry_core::{Config, Error, ErrorKind, Exchange, Result, Stats, Store, Transport, WaitPolicy};
use ferry_proto::endpoint::{
    ConnId, Endpoint, EndpointConfig, EndpointError, RetainConfig, SendId,
};
use ferry_proto::fasthash::FastMap;

use crate::link::Link;
use crate::poller::{Poller, Ready, LISTENER};
use crate::spare::Spare;

mod cache;
mod ops;
mod progress;
mod retain;
mod service;
mod shutdown;

const NAME: &str = "tcp";
/// How long an announced message waits for its GET before it is copied into the outbox so
/// that its send can complete (at least the spin time), when this rank holds messages that
/// wait to be pulled itself: it may be one of a cycle of ranks blocked in sends to each other,
/// which only copies can break.
const RNDV_GRACE: Duration = Duration::from_millis(1);
/// The same wait when nothing waits to be pulled from this rank's peers: the receiver is only
/// late (descheduled on a loaded host, computing) and the copy (1 MiB: a memcpy and 256 page
/// faults) is usually wasted. Measured at load 3 on 2 cores: 1 ms copied up to a quarter of a
/// 1 MiB osu_bw window.
const RNDV_GRACE_IDLE: Duration = Duration::from_millis(20);
/// How long a call that waits only for TRY sends written from the program's buffer waits
/// for the next of their answers before it copies them (at least the spin time), besides the
/// time to read all unanswered ones at [`EAGER_HOLD_RATE`]; see `EndpointConfig::eager_hold`.
const EAGER_HOLD: Duration = Duration::from_micros(50);
/// The receiver's reading rate assumed for that wait (bytes per second): half of what a
/// loopback reader does on the target machines, so that a reader that keeps up is waited for.
const EAGER_HOLD_RATE: u64 = 1_000_000_000;
/// A receive that waits this long for a peer this rank has no connection with dials it.
const PROBE_AFTER: Duration = Duration::from_millis(100);
/// Longest wait for the peers to close after the goodbye.
const LINGER: Duration = Duration::from_secs(2);

/// Driver settings that the endpoint does not need.
#[derive(Debug, Clone, Copy)]
struct Settings {
    failure_timeout: Duration,
    policy: WaitPolicy,
}

/// One rank's TCP backend (seed 000; T1-T5, T7, T8). See the module documentation.
pub struct TcpTransport {
    rank: usize,
    size: usize,
    set: Settings,
    ep: Endpoint,
    /// Origin of the endpoint's clock.
    epoch: Instant,
    /// The clock, read once per pass (a read per event cost ~6 % of a 1 MiB stream).
    clock: Duration,
    listener: TcpListener,
    listener_paused: bool,
    /// Links open when the listener was paused; it resumes below that.
    paused_at: usize,
    local_addr: SocketAddr,
    addrs: Vec<Option<SocketAddr>>,
    excluded: Vec<bool>,
    watcher: Option<ConfigWatcher>,
    poller: Poller,
    ready: Vec<Ready>,
    rr: usize,
    links: FastMap<ConnId, Link>,
    /// Links with frames queued in the current pass (flushed at its end, so a window of
    /// messages leaves in one `writev` instead of one per message).
    batch: Vec<ConnId>,
    /// Links holding corked ACCEPTs only.
    dirty: Vec<ConnId>,
    /// Progress call at which `dirty` was first seen non-empty (cork age).
    dirty_since: Option<u64>,
    /// Links with zero-copy DATA queued (written only when the exchange is at hand).
    borrowing: Vec<ConnId>,
    /// Links that stopped at their per-pass budget with whole frames still buffered.
    rescan: Vec<ConnId>,
    /// Sends whose zero-copy frames a flush just completed (reported to the endpoint).
    written: Vec<SendId>,
    /// Vectors of early arrivals whose payload was copied out, reused for the next ones.
    spare: Spare,
    tick: u64,
    /// Exchange generation: operation ids are `generation << 32 | index`.
    op_gen: u64,
    /// When the endpoint's timers run next (cached `poll_timeout`).
    next_timer: Option<Duration>,
    /// Bumped whenever bytes move (the exchange driver keeps polling while it changes).
    moved: u64,
    /// The current write burst: bytes written with gaps shorter than the spin, and when the
    /// last of them was written (see `progress::note_written`).
    burst: (u64, Duration),
    /// The exchange driver polls at least until then: peers are still reading a large burst
    /// this rank wrote, and their answer follows.
    poll_until: Duration,
    stats: Stats,
    pending_error: Option<Error>,
    finished: bool,
}

impl TcpTransport {
    /// Launcher mode: publishes this rank's listening address in the store and reads every
    /// peer's (`tcp/addr/<rank>`), waiting up to `general.startup_timeout_ms` for each.
    pub fn from_store(
        rank: usize,
        size: usize,
        store: &dyn Store,
        config: &Config,
        secret: &str,
    ) -> Result<TcpTransport> {
        TcpTransport::from_store_excluding(rank, size, store, config, secret, &[])
    }

    /// Like [`TcpTransport::from_store`], for a composite backend that reaches the ranks in
    /// `excluded` by other means: their addresses are not awaited, operations with them are
    /// left to the other transport, and their connections are rejected.
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
        let policy = config.wait_policy(ferry_core::config::local_ranks_hint(size));
        let mut cfg = EndpointConfig::new(rank, size, secret);
        cfg.eager_bytes = t.eager_bytes;
        cfg.inbox_messages = t.inbox_messages;
        cfg.inbox_bytes = t.inbox_bytes;
        cfg.outbox_bytes = if t.outbox_bytes == 0 {
            usize::MAX
        } else {
            t.outbox_bytes
        };
        cfg.max_message_bytes = t.max_message_bytes;
        cfg.connection_cap =
            crate::limits::connection_cap(t.connection_cap, crate::limits::open_file_limit());
        cfg.connect_timeout = Duration::from_millis(t.connect_timeout_ms.max(1));
        cfg.eager_hold = policy.spin.max(EAGER_HOLD);
        cfg.eager_hold_rate = EAGER_HOLD_RATE;
        cfg.rndv_grace = policy.spin.max(RNDV_GRACE);
        cfg.rndv_grace_idle = policy.spin.max(RNDV_GRACE_IDLE);
        cfg.probe_after = PROBE_AFTER;
        cfg.linger = policy.timeout.map_or(LINGER, |t| t.min(LINGER));
        cfg.excluded = excluded.clone();
        // Launcher mode: every address in the store was published by a bound listener, which
        // lives as long as its rank; a refusal means the rank's process is gone.
        cfg.refused_is_dead = watcher.is_none();
        cfg.retire_p2p_above = EndpointConfig::retire_bound(t.retire_flows_above, size);
        if t.retain {
            if watcher.is_none() {
                return Err(Error::config(
                    "tcp.retain is for jobs started by hand from tcp.addresses (a killed rank \
                     restarted by hand catches up); under `ferry run` a failed rank ends the \
                     job, or is replaced with --respawn",
                )
                .on_rank(rank));
            }
            cfg.retain = Some(RetainConfig {
                cap_bytes: t.retain_bytes,
                restart_timeout: config.failure_timeout(),
                nonce: retain::fresh_nonce(),
            });
        }
        tracing::debug!("rank {rank}: tcp backend listening on {local_addr}, {size} ranks");
        Ok(TcpTransport {
            rank,
            size,
            set: Settings {
                failure_timeout: config.failure_timeout(),
                policy,
            },
            ep: Endpoint::new(cfg),
            epoch: Instant::now(),
            clock: Duration::ZERO,
            listener,
            listener_paused: false,
            paused_at: 0,
            local_addr,
            addrs,
            excluded,
            watcher,
            poller,
            ready: Vec::with_capacity(64),
            rr: 0,
            links: FastMap::default(),
            batch: Vec::new(),
            dirty: Vec::new(),
            dirty_since: None,
            borrowing: Vec::new(),
            rescan: Vec::new(),
            written: Vec::new(),
            spare: Spare::default(),
            tick: 0,
            op_gen: 0,
            next_timer: None,
            moved: 0,
            burst: (0, Duration::ZERO),
            poll_until: Duration::ZERO,
            stats: Stats::new(rank, size, NAME),
            pending_error: None,
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
    /// them or fail.
    pub fn retire_generations_before(&mut self, generation: u32) {
        self.ep.retire_generations_before(generation);
    }

    /// Number of open connections (for tests of the connection cap, T2).
    pub fn open_connections(&self) -> usize {
        self.links.len()
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
        self.advance_clock();
        let mut idle = Exchange::new();
        let res = self.poll_io(&mut idle, 0);
        // No operation of this rank waits on TCP now: there is nothing to fail.
        let _ = self.housekeeping(&mut idle, true);
        self.flush_dirty();
        res
    }

    /// The endpoint's clock as of this pass: time since this transport was built.
    fn now(&self) -> Duration {
        self.clock
    }

    /// Reads the clock (at the start of a pass, after waiting).
    fn advance_clock(&mut self) -> Duration {
        self.clock = self.epoch.elapsed();
        self.clock
    }

    /// The program's error for an endpoint error.
    fn error(&self, e: EndpointError) -> Error {
        use ferry_proto::endpoint::ErrorKind as K;
        let kind = match e.kind {
            K::PeerFailed => ErrorKind::PeerFailed,
            K::Protocol => ErrorKind::Protocol,
            K::Invalid => ErrorKind::InvalidArgument,
            K::Timeout => ErrorKind::Timeout,
            K::Exhausted => ErrorKind::ResourceExhausted,
            K::Withdrawn => ErrorKind::Revoked,
        };
        let err = Error::new(kind, e.op)
            .on_rank(e.rank)
            .with_peer(e.peer)
            .with_detail(e.cause);
        match e.key {
            Some(k) => err.with_key(k),
            None => err,
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
        // An error fails one operation; the others stay live (a fault-tolerant caller goes
        // on with them). A caller that gives the exchange up abandons it.
        self.progress_inner(ex)
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.flush_dirty();
        if !self.rescan.is_empty() {
            // Buffered input is waiting to be parsed: do not sleep.
            return Ok(());
        }
        let now = self.advance_clock();
        let timeout = match self.ep.poll_timeout() {
            Some(t) => timeout.min(t.saturating_sub(now)),
            None => timeout,
        };
        // A call holding TRY sends for their answers wakes when it should copy them instead;
        // a time already past is acted on by the next pass that can end the call.
        let timeout = match self.ep.eager_release_at().filter(|&t| t > now) {
            Some(t) => timeout.min(t - now),
            None => timeout,
        };
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
        // The exchange fails as a whole: nothing may refer to its buffers afterwards.
        self.drive(ex).inspect_err(|_| self.abandon_ops(ex))
    }

    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, _why: &Error) {
        self.abandon_ops(ex);
    }

    fn tolerate_failures(&mut self) {
        self.ep.tolerate_failures();
    }

    fn checkpoint_mark(&mut self) -> Result<bool> {
        self.mark_checkpoint()
    }

    fn retain_token(&mut self) -> Option<Vec<u8>> {
        self.ep.retains().then(|| self.ep.retain_token())
    }

    fn is_restart(&mut self) -> Result<bool> {
        self.learn_restart()
    }

    fn retain_resume(&mut self, token: &[u8]) -> Result<()> {
        if !self.ep.retains() {
            return Err(Error::new(ErrorKind::Unsupported, "resume")
                .on_rank(self.rank)
                .with_detail("tcp.retain is off"));
        }
        self.ep.retain_resume(token).map_err(|why| {
            Error::new(ErrorKind::InvalidArgument, "resume")
                .on_rank(self.rank)
                .with_detail(why)
        })
    }

    fn retire_flows(&mut self, flows: ferry_core::RetiredFlows) {
        self.ep.retire_where(|k| flows.contains(k));
    }

    fn flow_count(&self) -> Option<usize> {
        Some(self.ep.flow_count())
    }

    fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        let c = self.ep.counters();
        for (name, v) in [
            ("tcp connections opened", c.opened),
            ("tcp connections accepted", c.accepted),
            ("tcp evictions", c.evictions),
            ("tcp refusals sent", c.refusals_sent),
            ("tcp refusals received", c.refusals_received),
            ("tcp announced", c.announced),
            ("tcp announced then copied", c.rndv_copies),
            ("tcp eager sent then copied", c.eager_copies),
            ("tcp gets sent", c.gets_sent),
            ("tcp gets served", c.gets_served),
            ("tcp strangers rejected", c.strangers),
            ("tcp duplicate connections closed", c.duplicates_closed),
        ] {
            s.bump(name, v);
        }
        if let Some(r) = self.ep.retain_counters() {
            for (name, v) in [
                ("tcp retained bytes", r.retained_bytes as u64),
                ("tcp retained bytes peak", r.peak_bytes as u64),
                ("tcp restarts seen", r.restarts_seen),
                ("tcp messages sent again", r.resent),
                ("tcp duplicates dropped", r.duplicates_dropped),
                (
                    "tcp retained dropped at checkpoints",
                    r.dropped_by_checkpoint,
                ),
            ] {
                s.bump(name, v);
            }
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

//! `ShmTransport`: one rank of a shared-memory job (S1, S3), or the node-local part of a hybrid
//! job (S2).
//!
//! Messages up to a slot's payload travel inline through the pair's ring (2 copies, the lowest
//! latency). Larger ones are pipelined by default (`shm.pipeline`): the sender copies them into
//! the ring in chunks of up to `CHUNK_SPAN` consecutive slots, one header each, while the
//! receiver copies earlier chunks out into its receive buffer, so the two copies run at once
//! on two cores (001 §3.2.1 with chunks instead of slot-sized fragments). The first chunk of a
//! message whose receive is not posted yet stays in the ring for a while (`defer_early`), so
//! it is not copied a third time through a buffer of its own. When pipelining is off (or the
//! host's cores are oversubscribed) messages of at least `shm.single_copy_threshold` bytes are
//! moved with one copy: the sender posts a descriptor (pid, address, length) and the receiver
//! reads the sender's buffer with `process_vm_readv` straight into its receive buffer, then
//! completes the descriptor (001 §3.2.2, with cross-memory attach instead of SysV segments).
//! Under `auto` with a core per rank, messages of at least `split::SPLIT_MIN` bytes go by
//! descriptor too, and the receiver lets the sender write half of them (`split.rs`): both
//! sides copy once, at the same time. Everything else goes as chunks too.
//!
//! A pipelined message never exposes the caller's memory to a peer (each side copies its own
//! buffer), so a failed exchange only has to tell the receiver that the rest of a cut-off
//! message will not come: an abort entry, pushed as soon as the ring has room for it (every
//! progress pass retries), after which the receiver fails the receive rather than taking the
//! part it has for the whole.
//!
//! A sender never blocks on one message: an exchange progresses all its sends and receives
//! together, so two ranks sending large messages to each other both serve the other's
//! descriptor while waiting for their own completion (no deadlock).
//!
//! Waiting spins for `general.spin_us`, then sleeps on a futex doorbell in the rank's block;
//! a peer that changes something this rank waits for rings the doorbell only when the rank has
//! advertised that it sleeps, so the fast path has no system call.

use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::config::{Pipeline, SingleCopy};
use ferry_core::transport::{check_peer, drive_exchange};
use ferry_core::{
    Config, Error, ErrorKind, Exchange, LaunchInfo, MsgKey, OpState, PrepareError, RecvBuf, RecvOp,
    Result, RetiredFlows, SendOp, Stats, Transport, WaitPolicy,
};
use ferry_proto::{Arrival, EarlyArrivals};

use crate::flows::Flows;
use crate::heap_map::HeapMaps;

use crate::ring::{
    self, decode_cma, encode_desc, window_free, Claim, CmaDesc, Consumer, Entry, Offer, Producer,
    RingRef, CMA_DESC, T_ABORT, T_CMA, T_FRAG, T_INLINE, T_WRITE,
};
use crate::segment::{
    segment_name, Layout, Segment, ACK_WINDOW, STATE_ATTACHED, STATE_EMPTY, STATE_FINISHED,
    STATE_GONE,
};
use crate::sys::{self, PeerWatch};

/// How often a waiting rank checks that the peers it waits for still live (a poll of their
/// pidfds): a peer's death is reported within about this long.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);
/// Flag in a send's progress: single copy was withdrawn, the message goes as fragments.
const FORCED_FRAG: usize = 1 << (usize::BITS - 1);
/// Flag in a send's progress: a failed operation settled this send (nothing of it is offered
/// any more); it is never progressed again.
const SETTLED: usize = 1 << (usize::BITS - 2);
/// Slots one chunk of a pipelined message covers at most (8 x 8 KiB by default: 64 KiB, the
/// chunk of the ring floor program; see docs/PERFORMANCE.md for the measurement).
const CHUNK_SPAN: usize = 8;
/// How long the lean receive path spins before it starts yielding the core.
const PURE_SPIN: Duration = Duration::from_micros(5);
/// How long `wait_for_input` yield-polls before it sleeps on the doorbell.
const YIELD_PHASE: Duration = Duration::from_micros(300);
/// Default job name of hand-started ranks (R2b) when `shm.job` / `FERRY_SHM_JOB` is unset.
pub const DEFAULT_JOB: &str = "default";

mod build;
mod failure;
mod recv;
mod rings;
mod send;
mod split;
mod startup;
mod waits;

pub use startup::StartupWatch;
use startup::{arrive, attach_block, decide_single_copy, wait_all};

/// Where a partially received fragmented message goes.
enum Target {
    /// Index of the posted receive in the current exchange.
    Op(usize),
    /// An early arrival being assembled.
    Buf(Vec<u8>),
    /// A message whose receive was given up (its operation abandoned): the rest of its
    /// fragments is consumed and dropped, so the stream stays in step for the next message.
    Discard,
}

struct Partial {
    arrival: Arrival,
    total: usize,
    received: usize,
    target: Target,
}

/// Who a rank of the segment is, for error messages.
#[derive(Clone, Copy)]
enum PeerTrouble {
    Died(u32),
    Finished,
    Left,
}

/// One rank of a shared-memory job.
pub struct ShmTransport {
    seg: Arc<Segment>,
    /// Global rank and size (the hybrid backend's numbering; equal to local ones standalone).
    rank: usize,
    size: usize,
    /// This rank's index in the segment.
    me: usize,
    /// Global rank -> index in the segment, None for ranks on other nodes.
    local_of: Vec<Option<usize>>,
    /// Index in the segment -> global rank.
    global_of: Vec<usize>,
    /// Rings are opened on first use (X5): the producer when this rank first sends to a peer,
    /// the consumer when it first receives from one or finds it in its sender map.
    tx: Vec<Option<Producer>>,
    rx: Vec<Option<Consumer>>,
    /// Segment indices with an open consumer, in opening order: the rings a progress pass
    /// drains (not all N).
    active_rx: Vec<usize>,
    /// This rank's sender map as last seen (see `discover_senders`).
    known_senders: Vec<u64>,
    /// Per segment index: whether any ring to or from it was opened (for the statistics).
    peer_open: Vec<bool>,
    pids: Vec<u32>,
    /// Per segment index: the peer process's pidfd, opened with the first ring to or from it
    /// (None before, for this rank, and for ranks that are threads of this process).
    watch: Vec<Option<PeerWatch>>,
    send_flows: Flows,
    recv_flows: Flows,
    inbox: EarlyArrivals,
    inbox_cap_bytes: usize,
    inbox_cap_messages: usize,
    pending_cma: HashMap<Arrival, CmaDesc>,
    partial: Vec<Option<Partial>>,
    partial_bytes: usize,
    partial_count: usize,
    cma_next: Vec<u64>,
    /// When each outstanding descriptor was posted, by (peer, seq % ACK_WINDOW).
    posted_at: Vec<Instant>,
    /// An unclaimed descriptor is withdrawn and sent as fragments once it and the peer's
    /// consumption of this rank's single-copy sends have both been idle this long.
    eager_wait: Duration,
    /// Per peer: when this rank last saw the peer take one of its single-copy sends (claimed
    /// or completed) or make room for its fragments. A peer busy copying earlier descriptors
    /// of a window is not stalled, so its later descriptors stay offered (issue 02).
    peer_progress: Vec<Instant>,
    /// Per peer: the pipelined message at the head of its ring left there because its receive
    /// was not posted yet, and since when (see `defer_early`).
    deferred: Vec<Option<(Arrival, Instant)>>,
    /// The fragmented message currently streaming to each peer, by (key, serial).
    frag_owner: Vec<Option<(MsgKey, u64)>>,
    /// Per peer: messages whose fragments a failed operation cut off (or whose descriptors
    /// it had withdrawn for fragments), to be announced with abort entries before the next
    /// fragmented message to that peer: (key, serial, length).
    abort_pending: Vec<Vec<(MsgKey, u64, u64)>>,
    /// Whether some abort entry could not be pushed yet (its ring was full, as it usually is
    /// while a pipelined message streams): every progress pass retries, so a receiver holding
    /// part of a message learns that the rest will not come without waiting for this rank's
    /// next fragmented message to it.
    aborts_queued: bool,
    /// Messages their senders abandoned before this rank posted the receive.
    abandoned: std::collections::HashSet<Arrival>,
    /// Messages whose receive this rank gave up (an abandoned or failed operation) before
    /// they arrived: the flow serial is spent, so no later receive can match them, and
    /// whatever of them comes is dropped (a descriptor is completed without reading).
    given_up: std::collections::HashSet<Arrival>,
    /// Single-copy reads claimed during a drain, performed after it: (recv index, desc).
    to_read: Vec<(usize, CmaDesc)>,
    /// Split single copies waiting for the sender's half (`split.rs`).
    splits: Vec<split::Split>,
    /// Split copies that the sender finished while another exchange was driven: their
    /// receive is completed when its own exchange is driven again (`split.rs`).
    splits_done: Vec<split::SplitDone>,
    /// Whether large messages are split between both sides (`split.rs`): the default path
    /// (`shm.pipeline = auto`) on a host with a core per rank.
    split: bool,
    /// Mappings of peers' shared-heap regions, for descriptors that name one (`heap_map.rs`).
    heap_maps: HeapMaps,
    /// Operation vectors reused by the single-message paths.
    spare_sends: Vec<SendOp<'static>>,
    spare_recvs: Vec<RecvOp<'static>>,
    single_copy: bool,
    inline_cap: usize,
    /// Slots one chunk of a pipelined (fragmented) message covers at most.
    chunk_span: usize,
    /// Whether large messages stream pipelined through the rings rather than by single copy
    /// (`shm.pipeline`, decided at start-up).
    pipelined: bool,
    threshold: usize,
    stats: Stats,
    /// Where waiting time goes, recorded only with statistics on (`waits.rs`).
    waits: waits::WaitLog,
    policy: WaitPolicy,
    /// Per progress pass: peers with a send that could not push completely.
    blocked: Vec<bool>,
    /// Per progress pass: peers seen copying one of this rank's single-copy sends. Later
    /// descriptors to such a peer are not polled in that pass: the peer consumes (nothing to
    /// withdraw), and every poll of a completion word the peer is about to write costs it a
    /// cache-line transfer (a window of 64 sends polled all 64 words per pass).
    busy: Vec<bool>,
    /// Filled by each progress pass, read by wait_for_input: what this rank waits for.
    waiting: Vec<usize>,
    want_acks: Vec<(usize, u64)>,
    want_space: Vec<usize>,
    drain_start: usize,
    last_liveness: Instant,
    /// Survives peer failures (fault-tolerant communicator): a failed operation does not
    /// record the failed peer as the reason this rank ends.
    tolerant: bool,
    finished: bool,
    /// Value other ranks read through cross-memory attach at start-up.
    _probe: Box<u64>,
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("local_size", &self.global_of.len())
            .field("single_copy", &self.single_copy)
            .finish()
    }
}

impl ShmTransport {
    /// Whether large messages use the single-copy path (decided at start-up).
    pub fn single_copy(&self) -> bool {
        self.single_copy
    }

    /// Whether large messages stream pipelined through the rings (decided at start-up).
    pub fn pipelined(&self) -> bool {
        self.pipelined
    }

    /// Whether the message `data` goes by single copy (a descriptor) rather than
    /// through the ring.
    #[inline]
    fn by_single_copy(&self, data: &[u8]) -> bool {
        // A buffer in the shared heap goes by descriptor even where large messages are
        // pipelined: the receiver copies it with one memcpy from its mapping of the region.
        // So does a message of at least SPLIT_MIN bytes where both sides copy half of it.
        self.single_copy
            && data.len() >= self.threshold
            && (!self.pipelined
                || (self.split && data.len() >= split::SPLIT_MIN)
                || crate::heap::find(data).is_some())
    }

    /// Number of ranks sharing this segment (the node's ranks in a hybrid job).
    pub fn local_size(&self) -> usize {
        self.global_of.len()
    }

    /// Whether `rank` (global) is reachable through this segment.
    pub fn is_local(&self, rank: usize) -> bool {
        self.local_of.get(rank).is_some_and(|l| l.is_some())
    }

    /// Point-to-point calls on a node-local transport only reach ranks of its node.
    fn check_local(&self, peer: usize, op: &'static str) -> Result<()> {
        if self.local_of[peer].is_none() {
            return Err(self
                .err(ErrorKind::InvalidArgument, op)
                .with_peer(peer)
                .with_detail(format!("rank {peer} is not on this node's shared segment")));
        }
        Ok(())
    }

    fn err(&self, kind: ErrorKind, op: &'static str) -> Error {
        Error::new(kind, op).on_rank(self.rank)
    }

    fn room_for(&self, len: usize) -> bool {
        self.inbox.len() + self.partial_count < self.inbox_cap_messages
            && self
                .inbox
                .bytes()
                .saturating_add(self.partial_bytes)
                .saturating_add(len)
                <= self.inbox_cap_bytes
    }

    /// Rings `l`'s doorbell if it advertised that it sleeps.
    ///
    /// Callers have just published what `l` may wait for (a slot, a head, a completion word)
    /// with a SeqCst read-modify-write; this SeqCst load of the flag then pairs with the
    /// sleeper's SeqCst store of the flag and SeqCst fence before its last check: in the single
    /// total order either our publication comes before its fence (it sees the change and does
    /// not sleep) or its flag store comes before our load (we see the flag and wake it).
    #[inline]
    fn wake(&self, l: usize) {
        if self.seg.sleeping(l).load(Ordering::SeqCst) != 0 {
            self.seg.bell(l).fetch_add(1, Ordering::Release);
            sys::futex_wake(self.seg.bell(l));
        }
    }
}

impl Transport for ShmTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn name(&self) -> &'static str {
        "shm"
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.waiting.clear();
        self.want_acks.clear();
        self.want_space.clear();
        if self.aborts_queued {
            self.flush_aborts();
        }
        // Callers may drive the exchange themselves (the data layer's first pass), so an error
        // here settles it too: nothing of it stays offered (see `settle_failed`).
        if let Err(e) = self
            .progress_sends(ex)
            .and_then(|()| self.progress_recvs(ex))
        {
            self.settle_failed(ex, &e);
            return Err(e);
        }
        Ok(ex.is_complete())
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        self.check_liveness_if_due()?;
        // Yield-poll a little before sleeping: on a loaded machine the peer is often only
        // descheduled, and a rank that stays runnable gets the core back without the ~25 us
        // futex wake-up; ranks outnumbering cores still hand their core over at every yield.
        let yield_until = Instant::now() + YIELD_PHASE.min(timeout);
        loop {
            if self.input_ready() {
                return Ok(());
            }
            if Instant::now() >= yield_until {
                break;
            }
            self.waits.yield_now();
        }
        let me = self.me;
        let bell = self.seg.bell(me).load(Ordering::Acquire);
        self.seg.sleeping(me).store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !self.input_ready() {
            self.stats.bump("shm sleeps", 1);
            // Unclaimed descriptors may have to be withdrawn after eager_wait.
            let cap = if self.want_acks.is_empty() {
                LIVENESS_EVERY
            } else {
                self.eager_wait
            };
            let slept = self.waits.start();
            sys::futex_wait(self.seg.bell(me), bell, timeout.min(cap));
            if let Some(t) = slept {
                self.waits.sleep_ns = self.waits.sleep_ns.saturating_add(waits::ns_since(t));
            }
        }
        self.seg.sleeping(me).store(0, Ordering::Relaxed);
        Ok(())
    }

    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.stats.calls += 1;
        self.drive(ex).map_err(|e| self.failed(ex, e))
    }

    fn send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        self.stats.calls += 1;
        check_peer(self.rank, self.size, peer, "send")?;
        self.check_local(peer, "send")?;
        let Some(serial) = self.send_start(peer, key, data) else {
            return Ok(());
        };
        // The general path, over recycled operation vectors (no allocation per message).
        let mut ex = Exchange::from_parts(
            std::mem::take(&mut self.spare_sends),
            std::mem::take(&mut self.spare_recvs),
        );
        ex.sends.push(SendOp {
            peer,
            key,
            data,
            state: OpState::Active {
                serial,
                progress: 0,
            },
        });
        let result = self.drive(&mut ex).map_err(|e| self.failed(&mut ex, e));
        (self.spare_sends, self.spare_recvs) = ex.into_parts();
        result
    }

    fn recv(&mut self, peer: usize, key: MsgKey, buf: &mut Vec<u8>) -> Result<()> {
        self.stats.calls += 1;
        check_peer(self.rank, self.size, peer, "recv")?;
        self.check_local(peer, "recv")?;
        self.recv_lean(peer, key, RecvBuf::Vec(buf))
    }

    fn sendrecv(
        &mut self,
        to: usize,
        send_key: MsgKey,
        data: &[u8],
        from: usize,
        recv_key: MsgKey,
        buf: RecvBuf<'_>,
    ) -> Result<()> {
        self.stats.calls += 1;
        check_peer(self.rank, self.size, to, "sendrecv")?;
        check_peer(self.rank, self.size, from, "sendrecv")?;
        self.check_local(to, "sendrecv")?;
        self.check_local(from, "sendrecv")?;
        // The send goes first only if it fits into the ring right now: then it never waits
        // for `to`, and the receive may block alone without risking a deadlock (T1).
        let Some(serial) = self.send_start(to, send_key, data) else {
            return self.recv_lean(from, recv_key, buf);
        };
        // Anything else (full ring, fragmented or single-copy send, self-send) is progressed
        // together with the receive.
        let mut ex = Exchange::from_parts(
            std::mem::take(&mut self.spare_sends),
            std::mem::take(&mut self.spare_recvs),
        );
        ex.sends.push(SendOp {
            peer: to,
            key: send_key,
            data,
            state: OpState::Active {
                serial,
                progress: 0,
            },
        });
        ex.recvs.push(RecvOp {
            peer: from,
            key: recv_key,
            buf,
            state: OpState::New,
        });
        let result = self.drive(&mut ex).map_err(|e| self.failed(&mut ex, e));
        (self.spare_sends, self.spare_recvs) = ex.into_parts();
        result
    }

    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, why: &Error) {
        self.abandon(ex, why);
    }

    fn tolerate_failures(&mut self) {
        self.tolerant = true;
    }

    fn retire_flows(&mut self, flows: RetiredFlows) {
        self.send_flows.retire(|k| flows.contains(k));
        self.recv_flows.retire(|k| flows.contains(k));
        // Nothing of a retired flow is received any more: forget what was kept for it.
        self.given_up.retain(|a| !flows.contains(&a.key));
        self.abandoned.retain(|a| !flows.contains(&a.key));
    }

    fn flow_count(&self) -> Option<usize> {
        Some(self.send_flows.len() + self.recv_flows.len())
    }

    fn stats(&self) -> Stats {
        let mut stats = self.stats.clone();
        self.waits.report(&mut stats);
        stats
    }

    fn shared_memory(&self) -> Option<Arc<dyn ferry_core::SharedMemory>> {
        Some(Arc::new(crate::shared_alloc::ShmShared::new(
            self.seg.clone(),
            self.local_of.clone(),
            self.rank,
        )))
    }

    fn finish(&mut self) -> Result<()> {
        if !self.finished {
            self.finished = true;
            self.seg
                .state(self.me)
                .store(STATE_FINISHED, Ordering::Release);
        }
        Ok(())
    }
}

impl ShmTransport {
    /// The general path: the exchange driver, timed when statistics are on.
    fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let Some(t) = self.waits.start() else {
            return drive_exchange(self, ex);
        };
        let result = drive_exchange(self, ex);
        self.waits.driven += 1;
        self.waits.driven_ns = self.waits.driven_ns.saturating_add(waits::ns_since(t));
        result
    }

    /// One receive without the exchange machinery when [`ShmTransport::recv_start`] takes it;
    /// otherwise the general path. `peer` has been validated.
    fn recv_lean(&mut self, peer: usize, key: MsgKey, mut buf: RecvBuf<'_>) -> Result<()> {
        let Some(serial) = self.recv_start(peer, key, &mut buf)? else {
            return Ok(());
        };
        let mut ex = Exchange::from_parts(
            std::mem::take(&mut self.spare_sends),
            std::mem::take(&mut self.spare_recvs),
        );
        ex.recvs.push(RecvOp {
            peer,
            key,
            buf,
            state: OpState::Active {
                serial,
                progress: 0,
            },
        });
        let result = self.drive(&mut ex).map_err(|e| self.failed(&mut ex, e));
        (self.spare_sends, self.spare_recvs) = ex.into_parts();
        result
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        if !self.finished {
            self.seg.state(self.me).store(STATE_GONE, Ordering::Release);
        }
    }
}

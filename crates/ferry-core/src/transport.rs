//! The transport API every backend implements (M1, M3).
//!
//! A backend moves byte blobs between ranks of one job. Everything a phase of the program sends
//! and receives is handed over at once as an [`Exchange`]; the backend progresses all of its
//! operations together, so no send ever waits for an unrelated receive (M3) and a full receiver
//! never deadlocks its senders (T1).
//!
//! A backend implements two primitives:
//! - [`Transport::progress_exchange`]: do whatever can be done *now* without blocking, and say
//!   whether every operation has completed;
//! - [`Transport::wait_for_input`]: sleep until something may have arrived, or a timeout.
//!
//! The provided [`Transport::exchange`] drives them: it polls for a bounded time (waking a
//! sleeping process costs ~25 us on a VM, far more than a message), then blocks, and gives up
//! with a [`ErrorKind::Timeout`] naming the peers still pending. Backends may override `send`
//! and `recv` with faster single-message paths.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_proto::{MsgKey, MsgKind};

use crate::error::{Error, ErrorKind, Result};
use crate::shared::SharedMemory;
use crate::stats::Stats;

/// Progress of one operation of an exchange. Backends own the meaning of the fields between
/// [`OpState::New`] and [`OpState::Done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OpState {
    /// Not yet seen by the backend.
    #[default]
    New,
    /// Under way: the flow serial assigned to it and a backend-defined progress counter
    /// (e.g. bytes written).
    Active {
        /// Serial of the message within its flow (M2).
        serial: u64,
        /// Backend-defined progress (bytes moved, protocol step, ...).
        progress: usize,
    },
    /// Completed.
    Done,
}

/// One message to send.
#[derive(Debug)]
pub struct SendOp<'a> {
    /// Destination rank.
    pub peer: usize,
    /// Generation, kind and tag.
    pub key: MsgKey,
    /// Payload. Borrowed until the exchange completes.
    pub data: &'a [u8],
    /// Progress, owned by the backend.
    pub state: OpState,
}

/// Where a received message goes.
#[derive(Debug)]
pub enum RecvBuf<'a> {
    /// Any length: the vector is resized to the message (its capacity is reused).
    Vec(&'a mut Vec<u8>),
    /// Exactly this length: a message of another length is a protocol error.
    Slice(&'a mut [u8]),
}

/// Why a received message cannot be placed in a [`RecvBuf`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareError {
    /// The receive buffer has a fixed length, and it is this one, not the message's.
    Length(usize),
    /// Growing the vector to the message's length failed (the length announced by the peer
    /// is more than this process can allocate).
    Memory,
}

impl PrepareError {
    /// The error of receiving a message of `len` bytes from `peer` (operation `op`).
    pub fn to_error(self, op: &'static str, len: usize) -> Error {
        match self {
            PrepareError::Length(want) => Error::invalid(
                op,
                format!("message of {len} bytes, receive buffer of {want} bytes"),
            ),
            PrepareError::Memory => Error::new(ErrorKind::ResourceExhausted, op).with_detail(
                format!("cannot allocate a receive buffer for a message of {len} bytes"),
            ),
        }
    }
}

impl std::fmt::Display for PrepareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrepareError::Length(want) => write!(f, "{want}"),
            PrepareError::Memory => f.write_str("no memory"),
        }
    }
}

impl RecvBuf<'_> {
    /// Makes the buffer `len` bytes long (Vec) or checks that it is (Slice), and returns it.
    /// A vector grows with `try_reserve`: a length announced by a peer that cannot be
    /// allocated is an error, never an abort.
    pub fn prepare(&mut self, len: usize) -> std::result::Result<&mut [u8], PrepareError> {
        match self {
            RecvBuf::Vec(v) => {
                if len > v.len() {
                    v.try_reserve(len - v.len())
                        .map_err(|_| PrepareError::Memory)?;
                }
                v.resize(len, 0);
                Ok(&mut v[..])
            }
            RecvBuf::Slice(s) => {
                if s.len() == len {
                    Ok(&mut s[..])
                } else {
                    Err(PrepareError::Length(s.len()))
                }
            }
        }
    }

    /// Stores a whole payload that already sits in a vector, moving it when possible.
    pub fn fill_from(&mut self, payload: Vec<u8>) -> std::result::Result<(), PrepareError> {
        match self {
            RecvBuf::Vec(v) => {
                **v = payload;
                Ok(())
            }
            RecvBuf::Slice(s) => {
                if s.len() == payload.len() {
                    s.copy_from_slice(&payload);
                    Ok(())
                } else {
                    Err(PrepareError::Length(s.len()))
                }
            }
        }
    }

    /// Expected length, if fixed.
    pub fn fixed_len(&self) -> Option<usize> {
        match self {
            RecvBuf::Vec(_) => None,
            RecvBuf::Slice(s) => Some(s.len()),
        }
    }
}

/// One message to receive.
#[derive(Debug)]
pub struct RecvOp<'a> {
    /// Source rank.
    pub peer: usize,
    /// Generation, kind and tag.
    pub key: MsgKey,
    /// Destination buffer.
    pub buf: RecvBuf<'a>,
    /// Progress, owned by the backend.
    pub state: OpState,
}

/// Everything one phase sends and receives, progressed together (M1's batched exchange).
#[derive(Debug, Default)]
pub struct Exchange<'a> {
    /// Messages to send.
    pub sends: Vec<SendOp<'a>>,
    /// Messages to receive.
    pub recvs: Vec<RecvOp<'a>>,
}

impl<'a> Exchange<'a> {
    /// An empty exchange.
    pub fn new() -> Exchange<'a> {
        Exchange {
            sends: Vec::new(),
            recvs: Vec::new(),
        }
    }

    /// An empty exchange that reuses the allocations of `sends` and `recvs` (which must be
    /// empty; see [`Exchange::into_parts`]). Lets a precomputed transition run without
    /// allocating (D5).
    pub fn from_parts(sends: Vec<SendOp<'a>>, recvs: Vec<RecvOp<'a>>) -> Exchange<'a> {
        debug_assert!(sends.is_empty() && recvs.is_empty());
        Exchange { sends, recvs }
    }

    /// Clears the exchange and hands back its vectors with the borrow released, so that their
    /// capacity can be reused by the next exchange.
    pub fn into_parts(self) -> (Vec<SendOp<'static>>, Vec<RecvOp<'static>>) {
        let Exchange {
            mut sends,
            mut recvs,
        } = self;
        sends.clear();
        recvs.clear();
        // Collecting an emptied vector into one of the same layout reuses its allocation.
        (
            sends.into_iter().map(|_| unreachable_op()).collect(),
            recvs.into_iter().map(|_| unreachable_op()).collect(),
        )
    }

    /// Adds a send.
    pub fn send(&mut self, peer: usize, key: MsgKey, data: &'a [u8]) {
        self.sends.push(SendOp {
            peer,
            key,
            data,
            state: OpState::New,
        });
    }

    /// Adds a receive of any length into `buf`.
    pub fn recv(&mut self, peer: usize, key: MsgKey, buf: &'a mut Vec<u8>) {
        self.recvs.push(RecvOp {
            peer,
            key,
            buf: RecvBuf::Vec(buf),
            state: OpState::New,
        });
    }

    /// Adds a receive of exactly `buf.len()` bytes into `buf`.
    pub fn recv_into(&mut self, peer: usize, key: MsgKey, buf: &'a mut [u8]) {
        self.recvs.push(RecvOp {
            peer,
            key,
            buf: RecvBuf::Slice(buf),
            state: OpState::New,
        });
    }

    /// Whether every operation has completed.
    pub fn is_complete(&self) -> bool {
        self.sends.iter().all(|s| s.state == OpState::Done)
            && self.recvs.iter().all(|r| r.state == OpState::Done)
    }

    /// Ranks with an operation still pending, for error messages.
    pub fn pending_peers(&self) -> Vec<usize> {
        let mut peers: Vec<usize> = self
            .sends
            .iter()
            .filter(|s| s.state != OpState::Done)
            .map(|s| s.peer)
            .chain(
                self.recvs
                    .iter()
                    .filter(|r| r.state != OpState::Done)
                    .map(|r| r.peer),
            )
            .collect();
        peers.sort_unstable();
        peers.dedup();
        peers
    }
}

fn unreachable_op<T>() -> T {
    // Only called on elements of an empty iterator.
    unreachable!("map over an emptied vector")
}

/// How long to poll before blocking, and how long to wait at most.
#[derive(Debug, Clone, Copy)]
pub struct WaitPolicy {
    /// Busy-poll this long before blocking (bounded polling, perf-anchors: wake-ups cost ~25 us).
    pub spin: Duration,
    /// Optional per-operation timeout: give up after this long without completing. `None`
    /// (the default) waits as long as the peers are alive; backends detect dead peers.
    pub timeout: Option<Duration>,
    /// How long a peer host may be unreachable before it is declared failed (used by
    /// backends for keepalive, user timeouts and heartbeats; never for waiting on live peers).
    pub failure_timeout: Duration,
    /// Yield the core on every idle poll (oversubscribed hosts: the rank we wait for may be
    /// waiting for our core). Otherwise only every 64th idle poll yields, if
    /// [`WaitPolicy::spin_yields`].
    pub yield_each_poll: bool,
    /// Yield every 64th idle poll while spinning, so that a process sharing our core gets a
    /// turn. False for a rank bound alone to its CPU on a host its job does not oversubscribe
    /// (see [`crate::config::spins_alone`]): nobody of the job wants that CPU, and a yield
    /// only delays noticing the message.
    pub spin_yields: bool,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy {
            spin: Duration::from_micros(50),
            timeout: None,
            failure_timeout: Duration::from_secs(10),
            yield_each_poll: false,
            spin_yields: true,
        }
    }
}

/// Message flows that will carry no more messages, named for [`Transport::retire_flows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetiredFlows {
    /// Every flow of this generation: a group or communicator whose every copy is gone.
    Generation(u32),
    /// Every flow of this kind and tag in any generation: e.g. a data container that is gone
    /// (its messages carry its creation number as the tag).
    Tag {
        /// Kind of the retired messages.
        kind: MsgKind,
        /// Their tag.
        tag: u32,
    },
}

impl RetiredFlows {
    /// Whether messages with `key` belong to the retired flows.
    pub fn contains(&self, key: &MsgKey) -> bool {
        match *self {
            RetiredFlows::Generation(g) => key.generation == g,
            RetiredFlows::Tag { kind, tag } => key.kind == kind && key.tag == tag,
        }
    }
}

/// A communication backend: one rank's view of a job (M1).
///
/// Implementations never panic or abort on I/O, peer or user errors; they return an [`Error`]
/// naming this rank, the operation and, where there is one, the peer.
pub trait Transport: Send {
    /// This process's rank, 0 to size-1.
    fn rank(&self) -> usize;

    /// Number of ranks in the job.
    fn size(&self) -> usize;

    /// The backend's `FERRY_BACKEND` name.
    fn name(&self) -> &'static str;

    /// Node (host) number of `rank`; ranks with the same number share memory. Node-aware
    /// collectives use it. The default puts every rank on node 0.
    fn node_of(&self, rank: usize) -> usize {
        let _ = rank;
        0
    }

    /// Makes all possible progress on `ex` without blocking; returns whether it is complete.
    ///
    /// On an error the exchange may still be under way in the backend (a peer may hold a
    /// descriptor of one of its buffers, a send may be half written from one): a caller that
    /// drives the exchange itself must give it up with [`Transport::abandon_exchange`] before
    /// it returns the buffers to anyone, as each backend's own [`Transport::exchange`] does.
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool>;

    /// Blocks until input may have arrived for this rank, or `timeout` passes. Spurious
    /// wake-ups are allowed.
    fn wait_for_input(&mut self, timeout: Duration) -> Result<()>;

    /// The polling and timeout policy used by [`Transport::exchange`].
    fn wait_policy(&self) -> WaitPolicy {
        WaitPolicy::default()
    }

    /// Runs `ex` to completion: polls for a bounded time, then blocks; fails with a timeout
    /// error naming the pending peers.
    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        drive_exchange(self, ex)
    }

    /// Sends one message (blocking until the payload may be reused).
    fn send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        let mut ex = Exchange::new();
        ex.send(peer, key, data);
        self.exchange(&mut ex)
    }

    /// Receives one message of any length into `buf`.
    fn recv(&mut self, peer: usize, key: MsgKey, buf: &mut Vec<u8>) -> Result<()> {
        let mut ex = Exchange::new();
        ex.recv(peer, key, buf);
        self.exchange(&mut ex)
    }

    /// Sends `data` to `to` and receives one message from `from` into `buf`, progressed
    /// together so that neither waits for the other (M3): the one-peer step of recursive
    /// doubling, ring and pairwise collectives.
    ///
    /// The default runs one [`Exchange`] holding both operations. Backends may override it
    /// with a leaner path (no operation vectors for a step that moves two small messages),
    /// but only where the send cannot wait for the receiver: a send that might block must be
    /// progressed together with the receive, or two ranks sending to each other deadlock (T1).
    fn sendrecv(
        &mut self,
        to: usize,
        send_key: MsgKey,
        data: &[u8],
        from: usize,
        recv_key: MsgKey,
        buf: RecvBuf<'_>,
    ) -> Result<()> {
        let mut ex = Exchange::new();
        ex.send(to, send_key, data);
        ex.recvs.push(RecvOp {
            peer: from,
            key: recv_key,
            buf,
            state: OpState::New,
        });
        self.exchange(&mut ex)
    }

    /// Node-shared memory, if this backend has it (S3): the data layer keeps containers in it
    /// so that a peer on the same node ([`Transport::node_of`]) copies straight from the
    /// owner's memory. `None` (the default): the backend cannot share memory, and callers move
    /// data through messages.
    fn shared_memory(&self) -> Option<Arc<dyn SharedMemory>> {
        None
    }

    /// Reports that `bytes` of flow `key` moved between this rank and `peer` through
    /// node-shared memory (S3) instead of as a message: out of this rank's memory when `sent`,
    /// else into it. Nothing travels and backends ignore it; a wrapper that accounts for
    /// traffic (the monitor) counts it as the message it replaces, so that its figures stay
    /// those of the message path. An error is the wrapper's (a monitor check that failed).
    fn note_shared_copy(
        &mut self,
        peer: usize,
        key: MsgKey,
        bytes: usize,
        sent: bool,
    ) -> Result<()> {
        let _ = (peer, key, bytes, sent);
        Ok(())
    }

    /// Communication statistics of this rank so far (T7).
    fn stats(&self) -> Stats;

    /// Forgets the per-flow state (serial counters, M2) of `flows`, so that a long run that
    /// keeps creating groups or containers keeps bounded tables. The caller promises that this
    /// rank sent and received every message of those flows and will use them no more (their
    /// generation or tag is never handed out again); peers retire them at their own pace. The
    /// default does nothing: for backends without per-flow state.
    fn retire_flows(&mut self, flows: RetiredFlows) {
        let _ = flows;
    }

    /// Number of flows this rank keeps state for (diagnostics and tests of bounded state);
    /// `None` when the backend keeps no such table.
    fn flow_count(&self) -> Option<usize> {
        None
    }

    /// Gives up on `ex` for good (the fault-tolerance layer abandons an operation interrupted
    /// by a revoke or by a failure elsewhere, `why`): afterwards no peer reads from or writes
    /// into the buffers of its operations, so the caller may reuse or free them. Backends that
    /// expose a caller's buffer to peers (single-copy descriptors) withdraw or settle it here.
    /// Operations left incomplete are never resumed (tcp copies what it still owes a peer,
    /// and throws away what it would have received). The default does nothing: for backends
    /// that copy every payload.
    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, why: &Error) {
        let _ = (ex, why);
    }

    /// Tells the backend that this rank survives the failure of peers (a fault-tolerant
    /// communicator is in use): a peer failure it saw is no longer the reason this rank ends,
    /// so its orderly end must not make peers blame that failure (issue 06's "rank 2 ended after
    /// rank 1 failed" is for jobs that end because of a failure). The default does nothing.
    fn tolerate_failures(&mut self) {}

    /// Marks a checkpoint of the program for retained messages (T6, `tcp.retain`): every
    /// message this rank consumed so far will never be asked for again (a restart of this rank
    /// resumes after this point), so its senders drop their retained copies. Call it with no
    /// receive pending. `Ok(false)` when the backend retains nothing (the default).
    fn checkpoint_mark(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// With retained messages: this rank's flow counters as a token the program saves with
    /// its checkpoint (before [`Transport::checkpoint_mark`]); `None` when the backend retains
    /// nothing (the default).
    fn retain_token(&mut self) -> Option<Vec<u8>> {
        None
    }

    /// With retained messages: whether this process is a restart of its rank (a peer knew an
    /// earlier process of it), found out by contacting the peers; call it before
    /// [`Transport::retain_resume`] and before any other communication. `Ok(false)` when the
    /// backend retains nothing (the default).
    fn is_restart(&mut self) -> Result<bool> {
        Ok(false)
    }

    /// With retained messages: a restarted rank resumes the flow counters of its checkpoint
    /// token, before it communicates, so that it continues where the checkpoint was.
    fn retain_resume(&mut self, token: &[u8]) -> Result<()> {
        let _ = token;
        Err(
            Error::new(ErrorKind::Unsupported, "resume").with_detail(format!(
                "the {} backend retains no messages (tcp.retain is for hand-started tcp jobs)",
                self.name()
            )),
        )
    }

    /// Orderly shutdown: delivers what is still owed to peers and releases resources. Called
    /// once at the end; dropping without it must still release OS resources.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The default exchange driver: bounded polling, then blocking waits; fails when the backend
/// reports a failed peer, or after the optional per-operation timeout.
pub fn drive_exchange<T: Transport + ?Sized>(t: &mut T, ex: &mut Exchange<'_>) -> Result<()> {
    if t.progress_exchange(ex)? {
        return Ok(());
    }
    let policy = t.wait_policy();
    let start = Instant::now();
    let mut polls: u32 = 0;
    loop {
        if t.progress_exchange(ex)? {
            return Ok(());
        }
        polls = polls.wrapping_add(1);
        let elapsed = start.elapsed();
        if let Some(limit) = policy.timeout.filter(|&limit| elapsed >= limit) {
            return Err(operation_timeout_error(t.rank(), ex, limit));
        }
        if elapsed < policy.spin {
            std::hint::spin_loop();
            // Every few polls let another process on an oversubscribed core run.
            if policy.yield_each_poll || (policy.spin_yields && polls.is_multiple_of(64)) {
                std::thread::yield_now();
            }
        } else {
            let slice = Duration::from_millis(10);
            let left = policy.timeout.map_or(slice, |limit| limit - elapsed);
            t.wait_for_input(left.min(slice))?;
        }
    }
}

/// The error of an exchange that hit the optional per-operation timeout, naming the ranks it
/// still waited for.
pub fn operation_timeout_error(rank: usize, ex: &Exchange<'_>, limit: Duration) -> Error {
    let pending = ex.pending_peers();
    let mut err = Error::new(ErrorKind::Timeout, "exchange")
        .on_rank(rank)
        .with_detail(format!(
            "not complete within {limit:?} (general.operation_timeout_ms); still waiting for ranks {pending:?}"
        ));
    if let [single] = pending[..] {
        err = err.with_peer(single);
    }
    err
}

/// Validates that `peer` is a rank of a job of `size` ranks.
pub fn check_peer(rank: usize, size: usize, peer: usize, op: &'static str) -> Result<()> {
    if peer >= size {
        return Err(
            Error::invalid(op, format!("rank {peer} out of range 0..{size}")).on_rank(rank),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_reports_an_unallocatable_length_instead_of_aborting() {
        let mut v = vec![1u8; 4];
        let mut b = RecvBuf::Vec(&mut v);
        assert_eq!(b.prepare(usize::MAX / 2), Err(PrepareError::Memory));
        let e = PrepareError::Memory.to_error("recv", usize::MAX / 2);
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted, "{e}");
        assert_eq!(b.prepare(3).map(|s| s.len()), Ok(3));
        let mut fixed = [0u8; 8];
        let mut b = RecvBuf::Slice(&mut fixed);
        assert_eq!(b.prepare(9).err(), Some(PrepareError::Length(8)));
        assert!(b.prepare(8).is_ok());
    }

    #[test]
    fn retired_flows_select_by_generation_or_tag() {
        let k = MsgKey::new(7, MsgKind::DATA, 3);
        assert!(RetiredFlows::Generation(7).contains(&k));
        assert!(!RetiredFlows::Generation(8).contains(&k));
        let data3 = RetiredFlows::Tag {
            kind: MsgKind::DATA,
            tag: 3,
        };
        assert!(data3.contains(&k));
        assert!(!data3.contains(&MsgKey::new(7, MsgKind::COLLECTIVE, 3)));
    }
}

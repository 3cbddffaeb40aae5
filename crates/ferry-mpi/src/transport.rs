//! [`MpiTransport`]: ferry's transport over nonblocking MPI point-to-point calls.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::time::{Duration, Instant};

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::stats::Stats;
use ferry_core::transport::{check_peer, Exchange, OpState, RecvBuf, RecvOp, WaitPolicy};
use ferry_core::{Config, LaunchInfo, MsgKey, Transport};
use mpi::environment::{Threading, Universe};
use mpi::ffi;

use crate::tags::{decode_header, encode_header, TagMap, WireTag, HEADER_LEN};

/// Most payload bytes of sends that MPI has not yet completed. A send beyond it waits (inside
/// the exchange, which keeps progressing its receives) until earlier sends drain: back-pressure
/// instead of unbounded buffering (T1).
pub const MAX_INFLIGHT_SEND_BYTES: usize = 256 << 20;

/// Most bytes of hashed-tag messages kept aside because they arrived for another key (see
/// [`crate::tags`]); exceeding it is a [`ErrorKind::ResourceExhausted`] error.
pub const MAX_EARLY_BYTES: usize = 256 << 20;

/// Most messages kept aside, as [`MAX_EARLY_BYTES`].
const MAX_EARLY_MESSAGES: usize = 65_536;

/// Free buffers kept for reuse, the largest one kept, and the most bytes kept in all: enough
/// for the steady state of halo exchanges without holding on to the memory of huge messages.
const POOL_BUFFERS: usize = 64;
const POOL_MAX_CAPACITY: usize = 16 << 20;
const POOL_MAX_BYTES: usize = 64 << 20;

/// After `general.spin_us` in an exchange without completion, the waiting rank yields the core
/// to other processes; after [`YIELD_FOR`] more it sleeps in short naps. Yielding early is
/// deliberate: on shared 2-core machines, pure spinning (as MPI libraries do unless
/// oversubscribed) measured 3-13 us ping-pong latency for 1 B against 0.5-1.3 us with yields,
/// because a spinning rank keeps the core from the peer or from whatever else must run.
const YIELD_FOR: Duration = Duration::from_millis(2);
const NAP: Duration = Duration::from_micros(50);
/// Settling borrowed buffers after a failed exchange warns once it has waited this long without
/// an operation timeout (the wait itself continues: MPI may still touch the buffers).
const SETTLE_WARN_AFTER: Duration = Duration::from_secs(10);

/// Smallest message moved without a copy through caller memory inside [`Transport::exchange`]
/// (below it a copy costs less than the bookkeeping).
const ZERO_COPY_MIN: usize = 32 << 10;

/// `OpState::Active::serial` of an operation whose MPI request works on the caller's memory
/// (the other active receives hold a backend slot and use serial 0).
const BORROWED: u64 = u64::MAX;

/// An MPI request on memory of the exchange being run by [`Transport::exchange`]: the index of
/// its operation, which completes when the request does.
#[derive(Debug, Clone, Copy)]
enum Borrowed {
    Send { op: usize },
    Recv { op: usize, peer: usize, len: usize },
}

/// A receive whose message MPI has matched (`MPI_Improbe`) and is filling (`MPI_Imrecv`) into a
/// buffer owned by the backend.
struct RecvSlot {
    req: ffi::MPI_Request,
    buf: Vec<u8>,
    len: usize,
}

/// One rank of a job over MPI (`FERRY_BACKEND=mpi`).
///
/// [`Transport::progress_exchange`] hands MPI only buffers owned by the transport, never
/// memory borrowed from the [`Exchange`]: the caller may drop the exchange after any call, and
/// MPI must never write into or read from freed memory. Sends are therefore copied (and
/// complete for the caller as soon as MPI has them, like a buffered send, bounded by
/// [`MAX_INFLIGHT_SEND_BYTES`]); receives land in a backend buffer that is moved into a
/// `RecvBuf::Vec` without copying or copied into a `RecvBuf::Slice`.
///
/// [`Transport::exchange`] may lend the exchange's memory to MPI, because it does not return
/// while MPI uses it: fixed-length receives of at least 32 KiB are received in place once
/// matched, and with `FERRY_MPI_ZERO_COPY_SENDS=1` sends of at least 32 KiB leave from the
/// caller's buffer. After a failure it waits for those requests before returning; for sends
/// that may be long (until the receiver takes the message), which is why it is opt-in.
///
/// MPI is initialised with `MPI_THREAD_SERIALIZED` (the transport may move between threads,
/// but `&mut self` keeps calls from overlapping), and finalised by [`Transport::finish`] or on
/// drop — only if this transport initialised it. A process can initialise MPI once: a second
/// transport after the first was finished is an error, not an abort.
pub struct MpiTransport {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    nodes: Vec<usize>,
    tags: TagMap,
    policy: WaitPolicy,
    send_reqs: Vec<ffi::MPI_Request>,
    send_bufs: Vec<Vec<u8>>,
    inflight_bytes: usize,
    done_indices: Vec<c_int>,
    slots: Vec<Option<RecvSlot>>,
    free_slots: Vec<usize>,
    early: HashMap<(usize, MsgKey), VecDeque<Vec<u8>>>,
    early_bytes: usize,
    early_messages: usize,
    /// Flows `(peer, MPI tag)` whose earliest pending receive has no message yet, rebuilt on
    /// every progress call. A vector: exchanges have few receives, and a linear scan beats
    /// hashing for them.
    blocked: Vec<(usize, i32)>,
    pool: Vec<Vec<u8>>,
    pool_bytes: usize,
    borrowed_reqs: Vec<ffi::MPI_Request>,
    borrowed_ops: Vec<Borrowed>,
    zero_copy_sends: bool,
    stats: Stats,
    hashed_messages: u64,
    kept_aside_total: u64,
    zero_copy_messages: u64,
    universe: Option<Universe>,
    finished: bool,
}

// SAFETY: the raw MPI handles are plain values owned by this transport; MPI is initialised
// with MPI_THREAD_SERIALIZED so calls from different threads are allowed as long as they do not
// overlap, which `&mut self` on every communicating method guarantees. The transport is moved
// between threads, never shared (`Transport` requires `Send`, not `Sync`).
unsafe impl Send for MpiTransport {}

/// The text of an MPI error code.
fn error_string(code: c_int) -> String {
    let mut buf = [0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters as the standard requires.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return format!("MPI error code {code}");
    }
    let len = (len.max(0) as usize).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
    format!("{} (code {code})", String::from_utf8_lossy(&bytes))
}

fn mpi_error(rank: usize, op: &'static str, code: c_int) -> Error {
    Error::new(ErrorKind::Mpi, op)
        .on_rank(rank)
        .with_detail(error_string(code))
}

/// Turns an MPI return code into a result.
fn check(rc: c_int, rank: usize, op: &'static str) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(mpi_error(rank, op, rc))
    }
}

impl MpiTransport {
    /// Initialises MPI (unless the program already did) and sets up this rank: a private
    /// duplicate of `MPI_COMM_WORLD` that returns errors, the tag layout from `MPI_TAG_UB`, and
    /// the node of every rank (ranks that can share memory, `MPI_COMM_TYPE_SHARED`).
    pub fn init(config: &Config) -> Result<MpiTransport> {
        let universe = match mpi::initialize_with_threading(Threading::Serialized) {
            Some((universe, provided)) => {
                if provided < Threading::Serialized {
                    tracing::warn!(
                        ?provided,
                        "the MPI library does not provide MPI_THREAD_SERIALIZED; keep ferry's \
                         calls on the thread that called init"
                    );
                }
                Some(universe)
            }
            None if mpi::is_finalized() => {
                return Err(Error::new(ErrorKind::Unsupported, "mpi init").with_detail(
                    "MPI was already finalised in this process (an earlier ferry world was \
                     finished); MPI cannot be initialised twice",
                ))
            }
            // The program initialised MPI itself: use it, and leave finalisation to it.
            None => None,
        };
        let mut t = MpiTransport {
            comm: unsafe { ffi::RSMPI_COMM_NULL },
            rank: 0,
            size: 1,
            nodes: Vec::new(),
            tags: TagMap::new(i32::MAX).ok_or_else(|| Error::new(ErrorKind::Mpi, "mpi init"))?,
            policy: config.wait_policy(ferry_core::config::local_ranks_hint(1)),
            send_reqs: Vec::new(),
            send_bufs: Vec::new(),
            inflight_bytes: 0,
            done_indices: Vec::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            early: HashMap::new(),
            early_bytes: 0,
            early_messages: 0,
            blocked: Vec::new(),
            pool: Vec::new(),
            pool_bytes: 0,
            borrowed_reqs: Vec::new(),
            borrowed_ops: Vec::new(),
            zero_copy_sends: std::env::var("FERRY_MPI_ZERO_COPY_SENDS").is_ok_and(|v| v == "1"),
            stats: Stats::new(0, 1, "mpi"),
            hashed_messages: 0,
            kept_aside_total: 0,
            zero_copy_messages: 0,
            universe,
            finished: false,
        };
        t.setup()?;
        Ok(t)
    }

    /// Like [`MpiTransport::init`], and checks that MPI's view of the job agrees with the
    /// launch environment: a program started by `ferry run` (which sets `FERRY_SIZE`) instead
    /// of `mpirun` would otherwise run as several independent one-rank MPI jobs.
    pub fn init_for(config: &Config, launch: &LaunchInfo) -> Result<MpiTransport> {
        let t = MpiTransport::init(config)?;
        let mismatch = |what: &str, ours: usize, theirs: usize| {
            Error::new(ErrorKind::Config, "mpi init")
                .on_rank(t.rank)
                .with_detail(format!(
                    "MPI reports {what} {ours} but the launch environment says {theirs}: \
                     start the mpi backend with mpirun/srun, not with `ferry run`"
                ))
        };
        if let Some(n) = launch.size {
            if n != t.size {
                return Err(mismatch("size", t.size, n));
            }
        }
        if let Some(r) = launch.rank {
            if r != t.rank {
                return Err(mismatch("rank", t.rank, r));
            }
        }
        Ok(t)
    }

    fn setup(&mut self) -> Result<()> {
        // SAFETY: plain MPI calls on handles created here; out-pointers point to locals.
        unsafe {
            let mut comm = ffi::RSMPI_COMM_NULL;
            check(
                ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut comm),
                0,
                "mpi init (MPI_Comm_dup)",
            )?;
            self.comm = comm;
            check(
                ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN),
                0,
                "mpi init (MPI_Comm_set_errhandler)",
            )?;
            let (mut rank, mut size): (c_int, c_int) = (0, 0);
            check(ffi::MPI_Comm_rank(comm, &mut rank), 0, "mpi init")?;
            check(ffi::MPI_Comm_size(comm, &mut size), 0, "mpi init")?;
            self.rank = rank as usize;
            self.size = size as usize;
            self.stats = Stats::new(self.rank, self.size, "mpi");

            let mut ub_ptr: *mut c_int = ptr::null_mut();
            let mut flag: c_int = 0;
            check(
                ffi::MPI_Comm_get_attr(
                    ffi::RSMPI_COMM_WORLD,
                    ffi::MPI_TAG_UB as c_int,
                    (&mut ub_ptr as *mut *mut c_int).cast::<c_void>(),
                    &mut flag,
                ),
                self.rank,
                "mpi init (MPI_TAG_UB)",
            )?;
            let tag_ub = if flag != 0 && !ub_ptr.is_null() {
                *ub_ptr
            } else {
                32767
            };
            self.tags = TagMap::new(tag_ub).ok_or_else(|| {
                Error::new(ErrorKind::Mpi, "mpi init")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "MPI_TAG_UB is {tag_ub}, below the 32767 the MPI standard guarantees"
                    ))
            })?;

            // Node discovery: the lowest rank of each shared-memory group names the node.
            let mut node_comm = ffi::RSMPI_COMM_NULL;
            check(
                ffi::MPI_Comm_split_type(
                    comm,
                    ffi::RSMPI_COMM_TYPE_SHARED,
                    rank,
                    ffi::RSMPI_INFO_NULL,
                    &mut node_comm,
                ),
                self.rank,
                "mpi init (MPI_Comm_split_type)",
            )?;
            let mut leader: c_int = rank;
            let rc = ffi::MPI_Bcast(
                (&mut leader as *mut c_int).cast::<c_void>(),
                1,
                ffi::RSMPI_INT32_T,
                0,
                node_comm,
            );
            ffi::MPI_Comm_free(&mut node_comm);
            check(rc, self.rank, "mpi init (MPI_Bcast)")?;
            let mut leaders: Vec<c_int> = vec![0; self.size];
            check(
                ffi::MPI_Allgather(
                    (&leader as *const c_int).cast::<c_void>(),
                    1,
                    ffi::RSMPI_INT32_T,
                    leaders.as_mut_ptr().cast::<c_void>(),
                    1,
                    ffi::RSMPI_INT32_T,
                    comm,
                ),
                self.rank,
                "mpi init (MPI_Allgather)",
            )?;
            let mut distinct = leaders.clone();
            distinct.sort_unstable();
            distinct.dedup();
            self.nodes = leaders
                .iter()
                .map(|l| distinct.binary_search(l).unwrap_or(0))
                .collect();
        }
        tracing::debug!(
            rank = self.rank,
            size = self.size,
            max_exact_tag = self.tags.max_exact_tag(),
            "mpi backend ready"
        );
        Ok(())
    }

    /// The largest user tag that maps to an MPI tag without a key header.
    pub fn max_exact_tag(&self) -> u32 {
        self.tags.max_exact_tag()
    }

    /// The key-to-tag mapping in use (derived from this library's `MPI_TAG_UB`).
    pub fn tag_map(&self) -> TagMap {
        self.tags
    }

    /// An empty buffer with room for `capacity` bytes: the smallest pooled one that fits (so a
    /// small message does not pin a large block), else a new one.
    fn take_buffer(&mut self, capacity: usize) -> Vec<u8> {
        let best = self
            .pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut buf = self.pool.swap_remove(i);
                self.pool_bytes -= buf.capacity();
                buf.clear();
                buf
            }
            None => Vec::with_capacity(capacity),
        }
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if self.pool.len() < POOL_BUFFERS
            && cap > 0
            && cap <= POOL_MAX_CAPACITY
            && self.pool_bytes + cap <= POOL_MAX_BYTES
        {
            self.pool_bytes += cap;
            self.pool.push(buf);
        }
    }

    /// Completes whatever sends MPI has finished and releases their buffers.
    fn progress_sends(&mut self) -> Result<()> {
        if self.send_reqs.is_empty() {
            return Ok(());
        }
        let n = self.send_reqs.len();
        self.done_indices.resize(n, 0);
        let mut outcount: c_int = 0;
        // SAFETY: the request and index arrays hold `n` entries each.
        let rc = unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                self.send_reqs.as_mut_ptr(),
                &mut outcount,
                self.done_indices.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        check(rc, self.rank, "send (MPI_Testsome)")?;
        if outcount <= 0 {
            // MPI_UNDEFINED (no active request) cannot happen: completed requests are removed.
            return Ok(());
        }
        let mut done: Vec<usize> = self.done_indices[..outcount as usize]
            .iter()
            .map(|&i| i as usize)
            .collect();
        // Remove from the back so that swap_remove never moves an index still to be removed.
        done.sort_unstable_by(|a, b| b.cmp(a));
        for i in done {
            self.send_reqs.swap_remove(i);
            let buf = self.send_bufs.swap_remove(i);
            self.inflight_bytes -= buf.len();
            self.recycle(buf);
        }
        Ok(())
    }

    /// Starts one send from a copy of `data`; returns false (nothing done) when the in-flight
    /// cap is reached and earlier sends must drain first.
    fn start_send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<bool> {
        let wire = self.tags.wire(key);
        let len = data.len() + if wire.hashed { HEADER_LEN } else { 0 };
        if len > i32::MAX as usize {
            return Err(Error::new(ErrorKind::Unsupported, "send")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "message of {len} bytes: the MPI backend sends at most {} bytes per \
                     message (an MPI count is a C int)",
                    i32::MAX
                )));
        }
        if !self.send_reqs.is_empty() && self.inflight_bytes + len > MAX_INFLIGHT_SEND_BYTES {
            return Ok(false);
        }
        let mut buf = self.take_buffer(len);
        if wire.hashed {
            buf.extend_from_slice(&encode_header(key));
            self.hashed_messages += 1;
        }
        buf.extend_from_slice(data);
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` is owned by the transport and kept (not moved on the heap) in
        // `send_bufs` until MPI reports the request complete.
        let rc = unsafe {
            ffi::MPI_Isend(
                buf.as_ptr().cast::<c_void>(),
                len as c_int,
                ffi::RSMPI_UINT8_T,
                peer as c_int,
                wire.tag,
                self.comm,
                &mut req,
            )
        };
        if rc != ffi::MPI_SUCCESS as c_int {
            self.recycle(buf);
            return Err(mpi_error(self.rank, "send (MPI_Isend)", rc).with_peer(peer));
        }
        self.send_reqs.push(req);
        self.send_bufs.push(buf);
        self.inflight_bytes += len;
        self.stats.record_send(peer, data.len());
        Ok(true)
    }

    /// Matches the next message of `(peer, wire)` if one is there: its MPI message handle and
    /// length. The caller must receive it (`MPI_Imrecv`).
    fn probe(&mut self, peer: usize, wire: WireTag) -> Result<Option<(ffi::MPI_Message, c_int)>> {
        let mut flag: c_int = 0;
        let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
        // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: out-pointers point to locals.
        let rc = unsafe {
            ffi::MPI_Improbe(
                peer as c_int,
                wire.tag,
                self.comm,
                &mut flag,
                &mut message,
                &mut status,
            )
        };
        if rc != ffi::MPI_SUCCESS as c_int {
            return Err(mpi_error(self.rank, "recv (MPI_Improbe)", rc).with_peer(peer));
        }
        if flag == 0 {
            return Ok(None);
        }
        let mut count: c_int = 0;
        // SAFETY: status was filled by MPI_Improbe.
        let rc = unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
        if rc != ffi::MPI_SUCCESS as c_int || count < 0 {
            return Err(mpi_error(self.rank, "recv (MPI_Get_count)", rc).with_peer(peer));
        }
        Ok(Some((message, count)))
    }

    /// Receives a matched message into a backend buffer; returns the slot.
    fn recv_owned(
        &mut self,
        peer: usize,
        mut message: ffi::MPI_Message,
        count: c_int,
    ) -> Result<usize> {
        let len = count as usize;
        let mut buf = self.take_buffer(len);
        let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` has capacity for `len` bytes and stays owned by the slot (its heap
        // block does not move) until the request completes; its length is set only then.
        let rc = unsafe {
            ffi::MPI_Imrecv(
                buf.as_mut_ptr().cast::<c_void>(),
                count,
                ffi::RSMPI_UINT8_T,
                &mut message,
                &mut req,
            )
        };
        if rc != ffi::MPI_SUCCESS as c_int {
            return Err(mpi_error(self.rank, "recv (MPI_Imrecv)", rc).with_peer(peer));
        }
        let slot = RecvSlot { req, buf, len };
        let idx = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        Ok(idx)
    }

    /// Applies the completions of requests on caller memory to their operations. A request
    /// that failed is complete too (MPI no longer touches its buffer); the first error is
    /// returned after all completions were applied.
    fn progress_borrowed(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let mut first_err = None;
        let mut i = 0;
        while i < self.borrowed_reqs.len() {
            let mut flag: c_int = 0;
            // SAFETY: the request is live; MPI_Test frees it when it completes.
            let rc = unsafe {
                ffi::MPI_Test(
                    &mut self.borrowed_reqs[i],
                    &mut flag,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            };
            if rc == ffi::MPI_SUCCESS as c_int && flag == 0 {
                i += 1;
                continue;
            }
            self.borrowed_reqs.swap_remove(i);
            let done = self.borrowed_ops.swap_remove(i);
            let (state, peer) = match done {
                Borrowed::Send { op } => (ex.sends.get_mut(op).map(|o| &mut o.state), None),
                Borrowed::Recv { op, peer, len } => {
                    if rc == ffi::MPI_SUCCESS as c_int {
                        self.stats.record_recv(peer, len);
                    }
                    (ex.recvs.get_mut(op).map(|o| &mut o.state), Some(peer))
                }
            };
            if let Some(state) = state {
                *state = OpState::Done;
            }
            if rc != ffi::MPI_SUCCESS as c_int && first_err.is_none() {
                let mut e = mpi_error(self.rank, "exchange (MPI_Test)", rc);
                if let Some(p) = peer {
                    e = e.with_peer(p);
                }
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// After a failed exchange: waits until MPI has finished with every request on the
    /// exchange's memory, which the caller may free as soon as `exchange` returns. These are
    /// receives whose message MPI already matched (they finish as soon as the sender's MPI
    /// library moves the data) and, with `FERRY_MPI_ZERO_COPY_SENDS=1`, sends (which finish
    /// only once the receiver takes them: that mode trades the timeout for the copy).
    fn settle_borrowed(&mut self, ex: &mut Exchange<'_>) {
        let start = Instant::now();
        let mut warned = false;
        while !self.borrowed_reqs.is_empty() {
            if let Err(e) = self.progress_borrowed(ex) {
                tracing::warn!("{e}");
            }
            if !warned && start.elapsed() > self.policy.timeout.unwrap_or(SETTLE_WARN_AFTER) {
                warned = true;
                tracing::warn!(
                    rank = self.rank,
                    pending = self.borrowed_reqs.len(),
                    "exchange failed, but MPI still works on its buffers; waiting for MPI"
                );
            }
            std::thread::sleep(NAP);
        }
    }

    /// One progress pass; `zero_copy` lets operations work on the exchange's memory (only
    /// inside [`Transport::exchange`], which does not return while MPI uses it).
    fn progress(&mut self, ex: &mut Exchange<'_>, zero_copy: bool) -> Result<bool> {
        if self.finished {
            return Err(Error::new(ErrorKind::InvalidArgument, "exchange")
                .on_rank(self.rank)
                .with_detail("the MPI transport was already finished"));
        }
        self.progress_sends()?;
        if !self.borrowed_reqs.is_empty() {
            self.progress_borrowed(ex)?;
        }
        for i in 0..ex.sends.len() {
            if ex.sends[i].state != OpState::New {
                continue;
            }
            let (peer, key, data) = (ex.sends[i].peer, ex.sends[i].key, ex.sends[i].data);
            check_peer(self.rank, self.size, peer, "send")?;
            if zero_copy && self.zero_copy_sends && data.len() >= ZERO_COPY_MIN {
                let wire = self.tags.wire(key);
                if !wire.hashed && data.len() <= i32::MAX as usize {
                    let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
                    // SAFETY: `data` is borrowed by the exchange, which `exchange` does not
                    // release before this request completed (`settle_borrowed`).
                    let rc = unsafe {
                        ffi::MPI_Isend(
                            data.as_ptr().cast::<c_void>(),
                            data.len() as c_int,
                            ffi::RSMPI_UINT8_T,
                            peer as c_int,
                            wire.tag,
                            self.comm,
                            &mut req,
                        )
                    };
                    if rc != ffi::MPI_SUCCESS as c_int {
                        return Err(mpi_error(self.rank, "send (MPI_Isend)", rc).with_peer(peer));
                    }
                    self.borrowed_reqs.push(req);
                    self.zero_copy_messages += 1;
                    self.borrowed_ops.push(Borrowed::Send { op: i });
                    self.stats.record_send(peer, data.len());
                    ex.sends[i].state = OpState::Active {
                        serial: BORROWED,
                        progress: 0,
                    };
                    continue;
                }
            }
            if self.start_send(peer, key, data)? {
                ex.sends[i].state = OpState::Done;
            } else {
                break;
            }
        }
        let recvs_done = self.progress_recvs(ex, zero_copy)?;
        Ok(recvs_done && ex.sends.iter().all(|s| s.state == OpState::Done))
    }

    /// Returns the message of `slot` if MPI has finished receiving it.
    fn test_slot(&mut self, idx: usize, peer: usize) -> Result<Option<Vec<u8>>> {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return Err(Error::new(ErrorKind::InvalidArgument, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(
                    "receive state refers to no pending MPI receive (was the exchange \
                     used with another transport?)",
                ));
        };
        let mut flag: c_int = 0;
        // SAFETY: the request belongs to this slot.
        let rc = unsafe { ffi::MPI_Test(&mut slot.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        if rc != ffi::MPI_SUCCESS as c_int {
            return Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer));
        }
        if flag == 0 {
            return Ok(None);
        }
        let Some(slot) = self.slots[idx].take() else {
            return Ok(None);
        };
        self.free_slots.push(idx);
        let mut buf = slot.buf;
        // SAFETY: MPI wrote exactly `len` bytes (the probed count) into the capacity.
        unsafe { buf.set_len(slot.len) };
        Ok(Some(buf))
    }

    fn take_early(&mut self, peer: usize, key: MsgKey) -> Option<Vec<u8>> {
        if self.early_messages == 0 {
            return None;
        }
        let queue = self.early.get_mut(&(peer, key))?;
        let msg = queue.pop_front()?;
        if queue.is_empty() {
            self.early.remove(&(peer, key));
        }
        self.early_bytes -= msg.len();
        self.early_messages -= 1;
        Some(msg)
    }

    fn put_early(&mut self, peer: usize, key: MsgKey, msg: Vec<u8>) -> Result<()> {
        if self.early_messages >= MAX_EARLY_MESSAGES
            || self.early_bytes + msg.len() > MAX_EARLY_BYTES
        {
            return Err(Error::new(ErrorKind::ResourceExhausted, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "{} messages / {} bytes of other keys are already kept aside (cap {} / {}); \
                     a message for {key:?} does not fit",
                    self.early_messages, self.early_bytes, MAX_EARLY_MESSAGES, MAX_EARLY_BYTES
                )));
        }
        self.early_bytes += msg.len();
        self.early_messages += 1;
        self.kept_aside_total += 1;
        self.early.entry((peer, key)).or_default().push_back(msg);
        Ok(())
    }

    /// Hands a received message (header already stripped) to the receive.
    fn deliver(&mut self, op: &mut RecvOp<'_>, msg: Vec<u8>) -> Result<()> {
        let len = msg.len();
        match &mut op.buf {
            RecvBuf::Vec(v) => {
                let old = std::mem::replace(&mut **v, msg);
                self.recycle(old);
            }
            RecvBuf::Slice(s) => {
                if s.len() != len {
                    let expected = s.len();
                    self.recycle(msg);
                    return Err(Error::new(ErrorKind::Protocol, "recv")
                        .on_rank(self.rank)
                        .with_peer(op.peer)
                        .with_detail(format!(
                            "message {:?} has {len} bytes, the receive expects {expected}",
                            op.key
                        )));
                }
                s.copy_from_slice(&msg);
                self.recycle(msg);
            }
        }
        self.stats.record_recv(op.peer, len);
        op.state = OpState::Done;
        Ok(())
    }

    fn progress_recvs(&mut self, ex: &mut Exchange<'_>, zero_copy: bool) -> Result<bool> {
        let mut all_done = true;
        self.blocked.clear();
        for (i, op) in ex.recvs.iter_mut().enumerate() {
            if op.state == OpState::Done {
                continue;
            }
            all_done = false;
            check_peer(self.rank, self.size, op.peer, "recv")?;
            let wire = self.tags.wire(op.key);
            let flow = (op.peer, wire.tag);
            // An earlier receive of the same MPI flow has no message yet: it must match first
            // (serial order, M2).
            if self.blocked.contains(&flow) {
                continue;
            }
            let slot = match op.state {
                // Matched and filling the caller's memory: `progress_borrowed` completes it.
                OpState::Active {
                    serial: BORROWED, ..
                } => continue,
                OpState::Active { progress, .. } => progress,
                _ => {
                    if let Some(msg) = self.take_early(op.peer, op.key) {
                        self.deliver(op, msg)?;
                        continue;
                    }
                    let Some((mut message, count)) = self.probe(op.peer, wire)? else {
                        self.blocked.push(flow);
                        continue;
                    };
                    let len = count as usize;
                    if zero_copy && !wire.hashed && len >= ZERO_COPY_MIN {
                        if let RecvBuf::Slice(buf) = &mut op.buf {
                            if buf.len() == len {
                                let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
                                // SAFETY: the slice is borrowed by the exchange, which
                                // `exchange` does not release before this request completed
                                // (`settle_borrowed`); the matched message has exactly its
                                // length.
                                let rc = unsafe {
                                    ffi::MPI_Imrecv(
                                        buf.as_mut_ptr().cast::<c_void>(),
                                        count,
                                        ffi::RSMPI_UINT8_T,
                                        &mut message,
                                        &mut req,
                                    )
                                };
                                if rc != ffi::MPI_SUCCESS as c_int {
                                    return Err(mpi_error(self.rank, "recv (MPI_Imrecv)", rc)
                                        .with_peer(op.peer));
                                }
                                self.borrowed_reqs.push(req);
                                self.zero_copy_messages += 1;
                                self.borrowed_ops.push(Borrowed::Recv {
                                    op: i,
                                    peer: op.peer,
                                    len,
                                });
                                op.state = OpState::Active {
                                    serial: BORROWED,
                                    progress: 0,
                                };
                                continue;
                            }
                        }
                    }
                    let slot = self.recv_owned(op.peer, message, count)?;
                    op.state = OpState::Active {
                        serial: 0,
                        progress: slot,
                    };
                    slot
                }
            };
            match self.test_slot(slot, op.peer)? {
                None => {
                    // In hashed mode the message may turn out to belong to another key, so
                    // later receives of the flow wait until this one is verified.
                    if wire.hashed {
                        self.blocked.push(flow);
                    }
                }
                Some(mut msg) if wire.hashed => {
                    let Some(key) = decode_header(&msg) else {
                        return Err(Error::new(ErrorKind::Protocol, "recv")
                            .on_rank(self.rank)
                            .with_peer(op.peer)
                            .with_detail(format!(
                                "message of {} bytes on a hashed tag lacks the key header",
                                msg.len()
                            )));
                    };
                    msg.drain(..HEADER_LEN);
                    if key == op.key {
                        self.deliver(op, msg)?;
                    } else {
                        self.put_early(op.peer, key, msg)?;
                        op.state = OpState::New;
                        self.blocked.push(flow);
                    }
                }
                Some(msg) => self.deliver(op, msg)?,
            }
        }
        Ok(all_done || ex.recvs.iter().all(|r| r.state == OpState::Done))
    }

    /// Runs `ex` to completion or failure: busy polling (MPI needs calls to make progress),
    /// then yielding the core, then short naps — never a blocking MPI call, so the timeout
    /// always fires (T5).
    fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.stats.calls += 1;
        // Most small exchanges complete on the first pass: no clock read for them.
        if self.progress(ex, true)? {
            return Ok(());
        }
        let start = Instant::now();
        let mut polls: u32 = 0;
        let mut elapsed = Duration::ZERO;
        loop {
            if self.progress(ex, true)? {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            // While spinning, read the clock every 8th poll only (a read costs as much as a
            // poll); afterwards each poll is slow anyway.
            if polls & 7 == 0 || elapsed >= self.policy.spin {
                elapsed = start.elapsed();
            }
            if let Some(limit) = self.policy.timeout.filter(|&limit| elapsed >= limit) {
                return Err(ferry_core::transport::operation_timeout_error(
                    self.rank, ex, limit,
                ));
            }
            if elapsed < self.policy.spin {
                std::hint::spin_loop();
            } else if elapsed < self.policy.spin + YIELD_FOR {
                std::thread::yield_now();
            } else if polls & 3 == 0 {
                std::thread::sleep(NAP);
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Shuts down: waits (bounded) for sends and abandoned receives still in MPI's hands, frees
    /// the communicator and finalises MPI if this transport initialised it.
    fn shutdown(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        // MPI reports a dead peer itself (or the job is ended by mpirun); live receivers get
        // all the time they need, bounded only by the optional operation timeout.
        let deadline = self.policy.timeout.map(|limit| Instant::now() + limit);
        let mut result = Ok(());
        loop {
            if let Err(e) = self.progress_sends() {
                result = Err(e);
                break;
            }
            let mut pending_recvs = false;
            for idx in 0..self.slots.len() {
                if self.slots[idx].is_some() {
                    match self.test_slot(idx, self.rank) {
                        Ok(Some(buf)) => self.recycle(buf),
                        Ok(None) => pending_recvs = true,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
            }
            if result.is_err() || (self.send_reqs.is_empty() && !pending_recvs) {
                break;
            }
            if let Some(limit) = self
                .policy
                .timeout
                .filter(|_| deadline.is_some_and(|d| Instant::now() >= d))
            {
                result = Err(Error::new(ErrorKind::Timeout, "finish")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "{} sends were not taken by their receivers within {limit:?} \
                         (general.operation_timeout_ms)",
                        self.send_reqs.len(),
                    )));
                break;
            }
            std::thread::sleep(NAP);
        }
        // Buffers MPI may still touch are leaked on purpose: freeing them could let MPI write
        // into memory that is reused.
        for buf in self.send_bufs.drain(..) {
            std::mem::forget(buf);
        }
        self.send_reqs.clear();
        for slot in self.slots.drain(..).flatten() {
            std::mem::forget(slot.buf);
        }
        // SAFETY: the communicator was created by MPI_Comm_dup in `setup`.
        unsafe {
            if self.comm != ffi::RSMPI_COMM_NULL {
                ffi::MPI_Comm_free(&mut self.comm);
            }
        }
        // Dropping the universe calls MPI_Finalize (only when this transport initialised MPI).
        self.universe.take();
        result
    }
}

impl Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn name(&self) -> &'static str {
        "mpi"
    }

    fn node_of(&self, rank: usize) -> usize {
        self.nodes.get(rank).copied().unwrap_or(0)
    }

    /// Never works on the exchange's memory: the caller may drop the exchange after any call.
    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.progress(ex, false)
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            self.progress_sends()?;
            let mut flag: c_int = 0;
            // SAFETY: out-pointer to a local; status ignored.
            let rc = unsafe {
                ffi::MPI_Iprobe(
                    ffi::RSMPI_ANY_SOURCE,
                    ffi::RSMPI_ANY_TAG,
                    self.comm,
                    &mut flag,
                    ffi::RSMPI_STATUS_IGNORE,
                )
            };
            check(rc, self.rank, "wait (MPI_Iprobe)")?;
            if flag != 0 || start.elapsed() >= timeout {
                return Ok(());
            }
            std::thread::sleep(NAP);
        }
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    /// Progresses the exchange until it completes or fails (polling, then yielding, then naps;
    /// never a blocking MPI call, so the timeout always fires, T5). Large
    /// fixed-length receives (and, with `FERRY_MPI_ZERO_COPY_SENDS=1`, large sends) work on
    /// the exchange's memory without a copy; if the exchange fails, this waits until MPI has
    /// finished with that memory before returning.
    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let result = self.drive(ex);
        if !self.borrowed_reqs.is_empty() {
            self.settle_borrowed(ex);
        }
        result
    }

    /// MPI keeps message order per flow itself (non-overtaking), so the only per-flow state
    /// here is messages kept aside for later receives; those of retired flows can no longer be
    /// wanted and are freed.
    fn retire_flows(&mut self, flows: ferry_core::RetiredFlows) {
        let (mut bytes, mut messages) = (0, 0);
        self.early.retain(|(_, k), q| {
            let keep = !flows.contains(k);
            if !keep {
                messages += q.len();
                bytes += q.iter().map(Vec::len).sum::<usize>();
            }
            keep
        });
        self.early_bytes -= bytes;
        self.early_messages -= messages;
    }

    fn flow_count(&self) -> Option<usize> {
        Some(self.early.len())
    }

    fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.extra
            .push(("mpi_hashed_tag_messages", self.hashed_messages));
        s.extra
            .push(("mpi_kept_aside_now", self.early_messages as u64));
        s.extra
            .push(("mpi_kept_aside_total", self.kept_aside_total));
        s.extra
            .push(("mpi_zero_copy_messages", self.zero_copy_messages));
        s
    }

    fn finish(&mut self) -> Result<()> {
        self.shutdown()
    }
}

impl Drop for MpiTransport {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!("mpi shutdown: {e}");
        }
    }
}

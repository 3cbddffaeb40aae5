//! [`MpiTransport`]: ferry's transport over nonblocking MPI point-to-point calls.
//!
//! - `mod.rs`: the transport, its set-up and the [`Transport`] implementation;
//! - `call.rs`: the raw MPI calls, each turned into a ferry error on failure;
//! - `poll.rs`: one batched test of every request the transport has in MPI's hands;
//! - `progress.rs`: one progress pass over an exchange (sends, requests on the caller's memory,
//!   draining of messages nobody asked for yet);
//! - `setup.rs`: the communicator, the tag layout and node discovery at start-up;
//! - `recv.rs`: receives (posted first parts, probed messages, the parts of split messages);
//! - `split.rs`: the wire format of messages of [`EAGER_BYTES`] and more;
//! - `wait.rs`: waiting (the exchange driver, the single-message fast paths, shutdown);
//! - `store.rs`: memory the transport owns (buffer pool, messages kept aside).

mod call;
mod poll;
mod progress;
mod recv;
mod setup;
mod split;
mod store;
mod wait;

pub use split::EAGER_BYTES;

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::time::{Duration, Instant};

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::stats::Stats;
use ferry_core::transport::{Exchange, WaitPolicy};
use ferry_core::{Config, LaunchInfo, MsgKey, Transport};
use mpi::environment::{Threading, Universe};
use mpi::ffi;

use crate::tags::TagMap;
use call::check;

/// Most payload bytes of copied sends that MPI has not yet completed. A send beyond it waits
/// (inside the exchange, which keeps progressing its receives) until earlier sends drain:
/// back-pressure instead of unbounded buffering (T1).
pub const MAX_INFLIGHT_SEND_BYTES: usize = 256 << 20;

/// Most bytes of messages kept aside because they arrived for another key (see
/// [`crate::tags`]) or were drained before their receive was posted; a hashed-tag message
/// beyond it is a [`ErrorKind::ResourceExhausted`] error, and draining stops at it.
pub const MAX_EARLY_BYTES: usize = 256 << 20;

/// Most messages kept aside, as [`MAX_EARLY_BYTES`].
const MAX_EARLY_MESSAGES: usize = 65_536;

/// Most messages one drain pass takes off MPI's queue (the rest wait for the next poll).
const DRAIN_BATCH: usize = 16;

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

/// The thread level ferry asks MPI for unless `FERRY_MPI_THREAD_LEVEL` says otherwise.
/// `MPI_THREAD_SINGLE`, because Open MPI 4.1 takes a mutex around every match, every queued
/// fragment and every request start at any higher level (`FUNNELED` included): measured
/// with callgrind on `osu_latency` 8 B, four lock/unlock pairs per message, about a fifth of
/// direct MPI's small-message latency. Ferry calls MPI only from the thread that created the
/// transport at that level (checked on every call, see [`MpiTransport::ensure_open`]).
const DEFAULT_THREAD_LEVEL: Threading = Threading::Single;

thread_local! {
    /// Whether this thread initialised MPI (or is MPI's main thread, when the program
    /// initialised MPI itself). MPI is initialised once per process, so one flag per thread
    /// says exactly which thread may call MPI below `MPI_THREAD_SERIALIZED`; a thread-local
    /// `const` cell costs one load, cheap enough for every call.
    static MPI_HOME: Cell<bool> = const { Cell::new(false) };
}

/// The thread level asked for by `FERRY_MPI_THREAD_LEVEL` (`single`, `funneled`,
/// `serialized` or `multiple`; unset or empty: [`DEFAULT_THREAD_LEVEL`]).
fn requested_thread_level() -> Result<Threading> {
    let value = std::env::var("FERRY_MPI_THREAD_LEVEL").unwrap_or_default();
    parse_thread_level(&value)
}

fn parse_thread_level(value: &str) -> Result<Threading> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" => Ok(DEFAULT_THREAD_LEVEL),
        "single" => Ok(Threading::Single),
        "funneled" => Ok(Threading::Funneled),
        "serialized" => Ok(Threading::Serialized),
        "multiple" => Ok(Threading::Multiple),
        other => Err(
            Error::new(ErrorKind::Config, "mpi init").with_detail(format!(
            "FERRY_MPI_THREAD_LEVEL={other:?}: expected single, funneled, serialized or multiple"
        )),
        ),
    }
}

/// `OpState::Active::serial` of an operation whose MPI request works on the caller's memory
/// (the other active receives hold a backend slot and use serial 0).
const BORROWED: u64 = u64::MAX;

/// An MPI request on memory of the exchange being run by [`Transport::exchange`]: the index of
/// its operation, which completes when the request does.
#[derive(Debug, Clone, Copy)]
enum Borrowed {
    Send {
        op: usize,
    },
    /// The rest of a split message of `len` bytes in all, received after its first part's
    /// prefix (see [`split`]).
    Rest {
        op: usize,
        peer: usize,
        len: usize,
    },
}

/// A request on the caller's memory, the operation it belongs to, and what the last batched
/// test said about it.
struct BorrowedReq {
    req: ffi::MPI_Request,
    op: Borrowed,
    polled: Polled,
}

/// What the last batched test of a progress pass ([`MpiTransport::poll_all`]) said about a
/// request, so that the pass does not test it again: every `MPI_Test` of an unfinished
/// request runs MPI's whole progress engine, so testing the requests of a pass one by one
/// costs that many engine runs, where one `MPI_Testsome` over all of them costs one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Polled {
    /// Not covered by a batched test since it was last looked at: test it directly.
    #[default]
    Unknown,
    /// Not complete at the last batched test.
    Pending,
    /// Complete (MPI freed the request): bytes received (0 for a send), or the MPI error code.
    Done(std::result::Result<usize, c_int>),
}

/// What a backend-owned receive buffer is receiving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    /// A message MPI matched (`MPI_Improbe`) of exactly `len` bytes (`MPI_Imrecv`).
    Whole { len: usize },
    /// A receive of [`EAGER_BYTES`] posted before its message was there (`MPI_Irecv`): a
    /// whole short message or the first part of a split one.
    First,
    /// The rest of a split message of `len` bytes in all; the buffer already holds the prefix.
    Rest { len: usize },
}

/// An MPI receive into a buffer owned by the backend.
struct RecvSlot {
    req: ffi::MPI_Request,
    buf: Vec<u8>,
    kind: SlotKind,
    polled: Polled,
}

/// A message taken off MPI's queue while waiting, before any receive asked for it
/// ([`MpiTransport::drain`]).
#[derive(Debug)]
struct Drained {
    peer: usize,
    tag: i32,
    state: DrainState,
}

#[derive(Debug)]
enum DrainState {
    /// Still being received into slot `slot` (a whole message, a first part, or a rest).
    Receiving(usize),
    /// The first part of a split message: its rest is received once every earlier first
    /// part of the flow has asked for its own rest (rests are matched in that order).
    AwaitRest(Vec<u8>),
}

/// One rank of a job over MPI (`FERRY_BACKEND=mpi`).
///
/// **Inside [`Transport::exchange`]** (and `send`/`recv`, which are one-operation exchanges)
/// MPI works on the caller's memory, because the call does not return while MPI uses it: every
/// exact-tag receive posts `MPI_Irecv` of [`EAGER_BYTES`] at once (see `split.rs`) and receives
/// the rest of a longer message straight into the caller's `Vec` or slice, and every exact-tag
/// send is an `MPI_Isend` from the caller's buffer (after a copied first part, if split).
/// A large send therefore completes when the receiver's MPI library takes the message, not at
/// once. So that such a send never waits for an unrelated receive (M3) and two ranks that send
/// to each other before receiving never deadlock (T1), a rank that waits longer than
/// `general.spin_us` with no receive of its own under way takes every message nobody asked
/// for yet off MPI's queue into backend memory ([`MAX_EARLY_BYTES`] at most) and keeps it for
/// its receive. If an exchange fails, it waits for MPI to be done with the caller's memory
/// before returning (for a send: until the receiver's MPI takes it, which every waiting
/// rank does). `FERRY_MPI_ZERO_COPY_SENDS=0` turns the sends back into copies that complete
/// at once (bounded by [`MAX_INFLIGHT_SEND_BYTES`]).
///
/// **[`Transport::progress_exchange`]** hands MPI only buffers owned by the transport: the
/// caller may drop the exchange after any call, and MPI must never touch freed memory. Sends
/// are copied; receives land in a backend buffer that is moved into a `RecvBuf::Vec` or copied
/// into a `RecvBuf::Slice`.
///
/// MPI is initialised with `MPI_THREAD_SINGLE` (what `MPI_Init` gives a C program; Open MPI
/// locks its matching at every higher level), so the transport calls MPI only from the thread
/// that created it: a call from another thread is an `Unsupported` error, and a drop there
/// leaves MPI alone. `FERRY_MPI_THREAD_LEVEL=serialized` lets the transport move between
/// threads (`&mut self` keeps calls from overlapping). MPI is finalised by
/// [`Transport::finish`] or on drop — only if this transport initialised it. A process can initialise MPI once: a second
/// transport after the first was finished is an error, not an abort.
pub struct MpiTransport {
    /// `MPI_COMM_WORLD` itself when ferry initialised MPI (the program has no MPI traffic of
    /// its own to keep apart from), else a private duplicate; see [`MpiTransport::init`].
    comm: ffi::MPI_Comm,
    /// Where the rests of split messages travel: a second duplicate of `MPI_COMM_WORLD`, or
    /// `comm` itself with [`MpiTransport::rest_bit`] set in the tag. Either way draining
    /// (`MPI_ANY_TAG` on `comm`) never takes a rest whose first part another receive holds.
    rest_comm: ffi::MPI_Comm,
    /// 0 with duplicated communicators; on `MPI_COMM_WORLD`, the tag bit that marks rests
    /// (above every key's tag, see [`TagMap::with_rest_bit`]).
    rest_bit: i32,
    /// Whether `comm` is `MPI_COMM_WORLD` (not freed at shutdown).
    world: bool,
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
    /// Free buffers of [`EAGER_BYTES`] (posted first parts, first parts being sent).
    eager_free: Vec<Vec<u8>>,
    /// Flows `(peer, MPI tag)` with a posted first-part receive whose rest is not yet asked
    /// for: rests of drained first parts of these flows wait (see [`DrainState::AwaitRest`]).
    posted_flows: Vec<(usize, i32)>,
    /// Slots receiving rests nobody will read (of a message whose receive failed on its
    /// length), so that the flow's later rests match their own first parts.
    discards: Vec<usize>,
    early: HashMap<(usize, MsgKey), VecDeque<Vec<u8>>>,
    early_bytes: usize,
    early_messages: usize,
    /// Drained messages still being received, in the order MPI matched them.
    drained: Vec<Drained>,
    drained_bytes: usize,
    /// Flows `(peer, MPI tag)` whose earliest pending receive has no message yet, rebuilt on
    /// every progress call, each with whether later receives of the flow may post their
    /// first parts already (see `progress_recvs`). A vector: exchanges have few flows, and a
    /// linear scan beats hashing for them.
    blocked: Vec<((usize, i32), bool)>,
    pool: Vec<Vec<u8>>,
    pool_bytes: usize,
    borrowed: Vec<BorrowedReq>,
    /// Scratch arrays of the batched test ([`MpiTransport::poll_all`]).
    poll: poll::Scratch,
    zero_copy_sends: bool,
    stats: Stats,
    hashed_messages: u64,
    kept_aside_total: u64,
    drained_total: u64,
    zero_copy_messages: u64,
    probed_receives: u64,
    split_messages: u64,
    /// Progress passes over exchanges, and MPI calls testing requests (`MPI_Test`, and
    /// `MPI_Testsome` counting once however many requests it tests): a pass makes one batched
    /// test plus direct tests of requests started during the pass (see [`poll`]).
    passes: u64,
    request_tests: u64,
    /// First parts posted behind an earlier receive of their flow (see `progress_recvs`).
    posted_ahead: u64,
    /// Sends made with one blocking `MPI_Send` (see `send_short`).
    short_sends: u64,
    /// Driver passes that walked the exchange's operations (the others only tested the
    /// requests in MPI's hands, see `drive_pass`).
    full_passes: u64,
    /// The last full driver pass left every unfinished operation waiting on a request in
    /// MPI's hands, so only a completion can move the exchange (see `drive_pass`).
    settled: bool,
    /// Set during a pass by a step that needs the next pass to walk the operations again
    /// even without a completion (a probe that found nothing, first parts left unposted).
    unsettled: bool,
    /// Operations completed so far; the exchange driver drains only once this stops moving.
    completions: u64,
    universe: Option<Universe>,
    /// MPI was initialised at `MPI_THREAD_SERIALIZED` or above: any thread may call it (one at
    /// a time, which `&mut self` ensures); below, only the thread marked in `MPI_HOME`.
    any_thread: bool,
    /// The thread level MPI provides.
    thread_level: Threading,
    finished: bool,
}

// SAFETY: the raw MPI handles are plain values owned by this transport. Below
// MPI_THREAD_SERIALIZED every method that calls MPI first checks that it runs on the thread that
// initialised MPI (`ensure_open`, `shutdown`), so a moved transport refuses to call MPI; at
// MPI_THREAD_SERIALIZED and above calls from different threads are allowed as long as they do
// not overlap, which `&mut self` on every communicating method guarantees. The transport is
// moved between threads, never shared (`Transport` requires `Send`, not `Sync`).
unsafe impl Send for MpiTransport {}

impl MpiTransport {
    /// Initialises MPI (unless the program already did) and sets up this rank: the
    /// communicator (below), the tag layout from `MPI_TAG_UB`, and the node of every rank.
    ///
    /// **Which communicator.** When ferry initialises MPI, the program makes no MPI calls of
    /// its own, so ferry uses `MPI_COMM_WORLD` (set to return errors) and tells the rests of
    /// split messages apart by a tag bit; the node of every rank comes from gathering
    /// `MPI_Get_processor_name`. No communicator is created: in Open MPI 4.1 creating one
    /// (`MPI_Comm_dup`, `MPI_Comm_split_type`) allocates its context id with a nonblocking
    /// collective, which leaves libnbc's progress callback registered for the rest of the run,
    /// about 30 instructions on every poll of every wait. When the program initialised MPI
    /// itself, ferry works on two private duplicates of `MPI_COMM_WORLD` (its messages and the
    /// rests), so that the program's own traffic can never match ferry's, and finds nodes with
    /// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`. `FERRY_MPI_DUP_COMM=1` forces the
    /// duplicates (and `MPI_COMM_TYPE_SHARED`) in both cases, as does an `MPI_TAG_UB` too small to
    /// spare the rest bit. The ranks agree (one `MPI_Allreduce` at start-up): if any rank needs
    /// duplicates, all use them.
    pub fn init(config: &Config) -> Result<MpiTransport> {
        let requested = requested_thread_level()?;
        let (universe, provided) = match mpi::initialize_with_threading(requested) {
            Some((universe, provided)) => {
                MPI_HOME.with(|home| home.set(true));
                if provided < requested {
                    tracing::warn!(
                        ?requested,
                        ?provided,
                        "the MPI library provides a lower thread level than asked for; ferry \
                         calls MPI only from the thread that created the transport"
                    );
                }
                (Some(universe), provided)
            }
            None if mpi::is_finalized() => {
                return Err(Error::new(ErrorKind::Unsupported, "mpi init").with_detail(
                    "MPI was already finalised in this process (an earlier ferry world was \
                     finished); MPI cannot be initialised twice",
                ))
            }
            // The program initialised MPI itself: use it at the level it chose, and leave
            // finalisation to it.
            None => {
                let mut main: c_int = 0;
                // SAFETY: out-pointer to a local; MPI is initialised.
                let rc = unsafe { ffi::MPI_Is_thread_main(&mut main) };
                check(rc, 0, "mpi init (MPI_Is_thread_main)")?;
                if main != 0 {
                    MPI_HOME.with(|home| home.set(true));
                }
                (None, mpi::environment::threading_support())
            }
        };
        let mut t = MpiTransport {
            // SAFETY: reading a constant handle exported by the MPI binding.
            comm: unsafe { ffi::RSMPI_COMM_NULL },
            // SAFETY: as above.
            rest_comm: unsafe { ffi::RSMPI_COMM_NULL },
            rest_bit: 0,
            world: false,
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
            eager_free: Vec::new(),
            posted_flows: Vec::new(),
            discards: Vec::new(),
            early: HashMap::new(),
            early_bytes: 0,
            early_messages: 0,
            drained: Vec::new(),
            drained_bytes: 0,
            blocked: Vec::new(),
            pool: Vec::new(),
            pool_bytes: 0,
            borrowed: Vec::new(),
            poll: poll::Scratch::default(),
            // On unless FERRY_MPI_ZERO_COPY_SENDS=0 (see the type's documentation).
            zero_copy_sends: std::env::var("FERRY_MPI_ZERO_COPY_SENDS").map_or(true, |v| v != "0"),
            stats: Stats::new(0, 1, "mpi"),
            hashed_messages: 0,
            kept_aside_total: 0,
            drained_total: 0,
            zero_copy_messages: 0,
            probed_receives: 0,
            split_messages: 0,
            passes: 0,
            request_tests: 0,
            posted_ahead: 0,
            short_sends: 0,
            full_passes: 0,
            settled: false,
            unsettled: false,
            completions: 0,
            universe,
            any_thread: provided >= Threading::Serialized,
            thread_level: provided,
            finished: false,
        };
        t.setup()?;
        Ok(t)
    }

    /// Like [`MpiTransport::init`], and checks that MPI's view of the job agrees with the
    /// launch environment: a program whose ranks were started one by one (e.g. by `ferry run`
    /// with `FERRY_BACKEND=mpi` in the environment but another `--backend`) instead of by
    /// `mpirun` would otherwise run as several independent one-rank MPI jobs.
    pub fn init_for(config: &Config, launch: &LaunchInfo) -> Result<MpiTransport> {
        let t = MpiTransport::init(config)?;
        let mismatch = |what: &str, ours: usize, theirs: usize| {
            Error::new(ErrorKind::Config, "mpi init")
                .on_rank(t.rank)
                .with_detail(format!(
                    "MPI reports {what} {ours} but the launch environment says {theirs}: \
                     start the mpi backend through mpirun/srun (`ferry run --backend mpi` \
                     does that), not as separately started processes"
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

    /// The MPI tag of the rest of a split message whose first part has tag `tag` (on
    /// `rest_comm`).
    #[inline]
    fn rest_tag(&self, tag: i32) -> i32 {
        tag | self.rest_bit
    }

    /// Whether this rank works on `MPI_COMM_WORLD` itself rather than private duplicates (see
    /// [`MpiTransport::init`]).
    pub fn on_world(&self) -> bool {
        self.world
    }

    /// The largest user tag that maps to an MPI tag without a key header.
    pub fn max_exact_tag(&self) -> u32 {
        self.tags.max_exact_tag()
    }

    /// The MPI thread level in effect: `"single"`, `"funneled"`, `"serialized"` or
    /// `"multiple"` (see `FERRY_MPI_THREAD_LEVEL`).
    pub fn thread_level(&self) -> &'static str {
        match self.thread_level {
            Threading::Single => "single",
            Threading::Funneled => "funneled",
            Threading::Serialized => "serialized",
            Threading::Multiple => "multiple",
        }
    }

    /// The key-to-tag mapping in use (derived from this library's `MPI_TAG_UB`).
    pub fn tag_map(&self) -> TagMap {
        self.tags
    }

    /// An error unless `peer` is a rank of the job; inlined, as it runs for every message
    /// (the error path is the shared one).
    #[inline]
    fn check_peer(&self, peer: usize, op: &'static str) -> Result<()> {
        if peer < self.size {
            return Ok(());
        }
        ferry_core::transport::check_peer(self.rank, self.size, peer, op)
    }

    /// An error if the transport was already finished, or if this thread may not call MPI
    /// (see [`MpiTransport::on_mpi_thread`]).
    #[inline]
    fn ensure_open(&self, op: &'static str) -> Result<()> {
        if self.finished {
            return Err(Error::new(ErrorKind::InvalidArgument, op)
                .on_rank(self.rank)
                .with_detail("the MPI transport was already finished"));
        }
        if !self.on_mpi_thread() {
            return Err(self.wrong_thread(op));
        }
        Ok(())
    }

    /// Whether the calling thread may call MPI: any thread at `MPI_THREAD_SERIALIZED` and
    /// above, else only the thread that initialised MPI (MPI's rule for the lower levels).
    #[inline]
    fn on_mpi_thread(&self) -> bool {
        self.any_thread || MPI_HOME.with(Cell::get)
    }

    /// The error of a call from a thread MPI does not allow at the level it was initialised
    /// with.
    #[cold]
    fn wrong_thread(&self, op: &'static str) -> Error {
        Error::new(ErrorKind::Unsupported, op)
            .on_rank(self.rank)
            .with_detail(
                "the MPI backend is used from a thread other than the one that initialised \
                 MPI, which the MPI thread level in use (below MPI_THREAD_SERIALIZED) does not \
                 allow; set FERRY_MPI_THREAD_LEVEL=serialized to move a world between threads",
            )
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
        self.ensure_open("wait")?;
        let start = Instant::now();
        loop {
            self.progress_sends()?;
            // A matched message or a rest still arriving needs only polling to finish.
            if self
                .slots
                .iter()
                .any(|s| matches!(s, Some(slot) if slot.kind != SlotKind::First))
            {
                return Ok(());
            }
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
    /// never a blocking MPI call). Exact-tag receives and sends work on the exchange's memory
    /// without a copy (see [`MpiTransport`]); if the exchange fails, this waits until MPI has
    /// finished with that memory before returning.
    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        // Before anything else: the clean-up below calls MPI too.
        self.ensure_open("exchange")?;
        let result = self.drive(ex);
        if result.is_err() {
            self.cancel_posted(ex);
        }
        if !self.borrowed.is_empty() {
            self.settle_borrowed(ex);
        }
        result
    }

    /// Gives up on an exchange a caller drove itself with `progress_exchange` (the data
    /// layer's first pass) as a failed `exchange` does: posted first parts are cancelled and
    /// requests on the exchange's memory are waited out, so MPI no longer touches its buffers.
    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, _why: &Error) {
        if self.ensure_open("abandon").is_err() {
            // MPI is finalized: no request of this rank can still be live.
            return;
        }
        self.cancel_posted(ex);
        if !self.borrowed.is_empty() {
            self.settle_borrowed(ex);
        }
    }

    /// `MPI_Isend` from `data`; returns at once when MPI completes it at once (small messages),
    /// else waits as [`Transport::exchange`] does.
    fn send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        self.send_direct(peer, key, data)
    }

    /// Posts the receive at once (exact tags, no probe), copies a short message into `buf` or
    /// receives a split one's rest straight into it; waits as [`Transport::exchange`] does.
    fn recv(&mut self, peer: usize, key: MsgKey, buf: &mut Vec<u8>) -> Result<()> {
        self.recv_direct(peer, key, buf)
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
        s.extra.push(("mpi_drained_total", self.drained_total));
        s.extra.push(("mpi_probed_receives", self.probed_receives));
        s.extra.push(("mpi_split_messages", self.split_messages));
        s.extra.push(("mpi_progress_passes", self.passes));
        s.extra.push(("mpi_request_tests", self.request_tests));
        s.extra.push(("mpi_posted_ahead", self.posted_ahead));
        s.extra.push(("mpi_short_sends", self.short_sends));
        s.extra.push(("mpi_full_passes", self.full_passes));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_level_names_parse_and_others_are_config_errors() {
        assert_eq!(parse_thread_level("").unwrap(), Threading::Single);
        assert_eq!(parse_thread_level("single").unwrap(), Threading::Single);
        assert_eq!(parse_thread_level("Funneled").unwrap(), Threading::Funneled);
        assert_eq!(
            parse_thread_level(" serialized ").unwrap(),
            Threading::Serialized
        );
        assert_eq!(parse_thread_level("multiple").unwrap(), Threading::Multiple);
        let e = parse_thread_level("threads").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        assert!(e.to_string().contains("FERRY_MPI_THREAD_LEVEL"), "{e}");
    }
}

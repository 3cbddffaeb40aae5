//! The sections of the configuration file and their defaults (`docs/CONFIGURATION.md` lists
//! every key).

use serde::{Deserialize, Serialize};

/// Settings that apply to every backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct General {
    /// Optional per-operation timeout: an operation still waiting after this long fails with a
    /// timeout naming the peers it waited for. 0 (the default) turns it off: failures are
    /// detected by liveness (a dead or unreachable peer), never by how long a wait took, so a
    /// rank may compute for hours before a barrier. `timeout_ms` is accepted as its old name.
    #[serde(alias = "timeout_ms")]
    pub operation_timeout_ms: u64,
    /// How long a peer *host* may be unreachable (no acknowledgement of our data, no keepalive
    /// answer, no heartbeat) before it is declared failed. Process death on a reachable host
    /// is noticed at once (socket reset, pidfd), not after this.
    pub failure_timeout_ms: u64,
    /// Bound on start-up waits: rendezvous, address lookup, shared-memory attach. A rank that
    /// does not arrive within it fails the start-up with an error naming it.
    pub startup_timeout_ms: u64,
    /// Busy-poll this long before blocking while waiting for messages.
    pub spin_us: u64,
    /// Print per-rank statistics to stderr at exit (same as `FERRY_STATS=1`).
    pub stats: bool,
    /// Whether a waiting rank yields its core on every idle poll: `auto` does so when this
    /// host runs more ranks than it has cores (then the rank we wait for may need our core),
    /// `always`, or `never`. Yielding costs ~1 us per poll on an idle core, so `auto` only
    /// turns it on when oversubscribed.
    pub yield_when_idle: YieldWhenIdle,
    /// Whether `ferry run` binds each rank it starts on this host to a CPU of its own: `auto`
    /// when the ranks do not outnumber the CPUs the launcher may use (as mpirun does), `core`
    /// always (oversubscribed ranks take the CPUs in turn), `none` never. Jobs started
    /// otherwise (mpirun, srun, by hand) are not touched.
    pub bind: Bind,
}

/// How `ferry run` binds ranks to CPUs (see [`General::bind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bind {
    /// One CPU per rank when the ranks on this host do not outnumber the usable CPUs.
    Auto,
    /// One CPU per rank, CPUs shared in turn when the ranks outnumber them.
    Core,
    /// Ranks are not bound.
    None,
}

/// When a waiting rank yields its core (see [`General::yield_when_idle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum YieldWhenIdle {
    /// Yield on every idle poll when the host runs more ranks than it has cores.
    Auto,
    /// Always yield on every idle poll.
    Always,
    /// Only yield occasionally (every 64 idle polls).
    Never,
}

impl Default for General {
    fn default() -> Self {
        General {
            operation_timeout_ms: 0,
            failure_timeout_ms: 10_000,
            startup_timeout_ms: 60_000,
            spin_us: 50,
            stats: false,
            yield_when_idle: YieldWhenIdle::Auto,
            bind: Bind::None,
        }
    }
}

/// Settings of the TCP backend (seed 000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Tcp {
    /// Addresses `host:port` of ranks 0..N-1 for starts without the launcher (R2a): each process
    /// takes the rank of the first address it can bind.
    pub addresses: Vec<String>,
    /// Inbox cap in messages (early arrivals kept before their receive is posted).
    pub inbox_messages: usize,
    /// Inbox cap in bytes.
    pub inbox_bytes: usize,
    /// Outbox cap in bytes (messages kept until the receiver took them); a full outbox blocks
    /// the sender while it keeps serving its peers. 0 means unbounded.
    pub outbox_bytes: usize,
    /// Most connections kept open at once; least recently used ones are closed beyond it.
    pub connection_cap: usize,
    /// Timeout of one connection attempt including the handshake.
    pub connect_timeout_ms: u64,
    /// Interval between re-reads of the configuration file while running.
    pub reload_ms: u64,
    /// Per-job secret checked in the connection handshake (T8). Normally set by the launcher
    /// through the environment; required in the file for hand-started jobs to be protected.
    pub secret: Option<String>,
    /// Address (host or IP, no port) the launcher-started backend binds its ephemeral listening
    /// port on and publishes in the rendezvous store (`FERRY_TCP_BIND`).
    pub bind: String,
    /// Messages up to this many bytes travel with their TRY request (eager, one write); larger
    /// ones are announced and pulled by the receiver with GET straight into the posted receive
    /// buffer (rendezvous, 000 §4.4, §7.2.1).
    pub eager_bytes: usize,
    /// Largest message accepted from a peer or sent (default 4 GiB); a frame announcing more is
    /// a protocol error and the connection is dropped (bounds what a broken or hostile peer can
    /// make us allocate; allocations below it are fallible too).
    pub max_message_bytes: u64,
    /// Retained messages for hand-started jobs (T6, 000 §5.3.3-5.3.4): every sent message is
    /// kept until its receiver marks a checkpoint or ends, so that a rank killed and restarted
    /// by hand (possibly at a new address in the re-read file) gets again what it lost.
    pub retain: bool,
    /// Cap on the bytes of sent messages a rank keeps with `retain` (retained plus not yet
    /// taken); a send beyond it fails with an error naming this key.
    pub retain_bytes: usize,
    /// Once a rank has counters for more outgoing point-to-point flows (peer and tag) than
    /// this, or 8 per rank of the job if that is more, it agrees with the receivers of its
    /// idle ones to forget them (a new tag per message keeps the tables bounded). 0: never
    /// (the default while a connection loss seen once with it on is not understood).
    pub retire_flows_above: usize,
}

impl Default for Tcp {
    fn default() -> Self {
        Tcp {
            addresses: Vec::new(),
            inbox_messages: 4096,
            inbox_bytes: 256 << 20,
            outbox_bytes: 1 << 30,
            connection_cap: 1024,
            connect_timeout_ms: 10_000,
            reload_ms: 1_000,
            secret: None,
            bind: "127.0.0.1".to_string(),
            eager_bytes: 64 << 10,
            max_message_bytes: 1 << 32,
            retain: false,
            retain_bytes: 1 << 30,
            retire_flows_above: 0,
        }
    }
}

/// How the shared-memory backend moves large messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SingleCopy {
    /// Use cross-memory attach when the kernel permits it, else fall back (reported once).
    Auto,
    /// Require cross-memory attach; fail at start-up if not permitted.
    Cma,
    /// Always copy through the shared rings (2 copies).
    Off,
}

/// Whether the shared-memory backend streams large messages pipelined through its rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pipeline {
    /// Pipelined unless the host runs more of the job's ranks than it has cores (then a
    /// pipelined copy, which needs sender and receiver running at once, waits for the core the
    /// other side needs; single copy needs only the receiver).
    Auto,
    /// Always pipelined.
    On,
    /// Never: single copy from `single_copy_threshold` (fragments where it is not permitted).
    Off,
}

/// Settings of the shared-memory backend (seed 001).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Shm {
    /// Slots per ring (one ring per ordered pair of ranks).
    pub ring_slots: usize,
    /// Payload bytes per slot: messages up to this size travel inline (each slot adds a 40-byte
    /// header, rounded up to whole cache lines).
    pub slot_bytes: usize,
    /// Messages above a slot's payload stream through the ring in chunks while the receiver
    /// copies earlier chunks out (two copies running at once): `auto`, `on` or `off`.
    pub pipeline: Pipeline,
    /// Messages at least this large use the single-copy path where they are not pipelined.
    pub single_copy_threshold: usize,
    /// Single-copy mode.
    pub single_copy: SingleCopy,
    /// Job name for hand-started ranks (R2b); ranks of different names never meet. Unset:
    /// `default` (the segment is `/dev/shm/ferry-<uid>-hdefault` while ranks gather; launcher
    /// jobs use `ferry-<uid>-j<FERRY_JOB_ID>`, so the two kinds never meet either).
    pub job: Option<String>,
    /// Cap in bytes of messages kept before their receive is posted (early arrivals); beyond
    /// it the receiver leaves messages in its rings and the senders wait (back-pressure).
    pub inbox_bytes: usize,
    /// Cap in messages of early arrivals.
    pub inbox_messages: usize,
}

impl Default for Shm {
    fn default() -> Self {
        Shm {
            ring_slots: 64,
            slot_bytes: 8192,
            pipeline: Pipeline::Auto,
            single_copy_threshold: 32 * 1024,
            single_copy: SingleCopy::Auto,
            job: None,
            inbox_bytes: 256 << 20,
            inbox_messages: 65_536,
        }
    }
}

/// Settings of the data layer (LAIK model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Data {
    /// Keep containers in node-shared memory when the backend offers it (S3): a switch between
    /// ranks of one node copies straight from the old owner's memory.
    pub shared_containers: bool,
    /// With shared containers, pairs of ranks that move fewer bytes than this in a switch keep
    /// the message path.
    pub shared_min_bytes: usize,
}

impl Default for Data {
    fn default() -> Self {
        Data {
            shared_containers: false,
            shared_min_bytes: 32 * 1024,
        }
    }
}

//! Configuration (R4): one TOML file named by `FERRY_CONFIG`, plus `FERRY_<SECTION>_<KEY>`
//! environment overrides (e.g. `FERRY_TCP_CONNECTION_CAP=2`, `FERRY_GENERAL_FAILURE_TIMEOUT_MS=3000`).
//!
//! Unknown keys and bad values are errors that name the key. Every key, its meaning and its
//! default is listed in `docs/CONFIGURATION.md`; the defaults are the `Default` impls below.
//! The file may be re-read while the job runs ([`ConfigWatcher`]) so that a rank's address can
//! change (seed 000 §5.1).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::transport::WaitPolicy;

/// Cores this process may run on (1 if unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Cores of this host that the job's ranks share: the online CPUs, capped by a cgroup (v2)
/// CPU quota, but not narrowed by this process's affinity mask. A launcher that binds each
/// rank to its own core (`mpirun`'s default) leaves every rank an affinity mask of one CPU,
/// which says nothing about how many ranks share the host's cores.
pub fn host_cores() -> usize {
    // SAFETY: sysconf only reads a system value.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let online = if online > 0 {
        online as usize
    } else {
        available_cores()
    };
    let quota = std::fs::read_to_string("/sys/fs/cgroup/cpu.max")
        .ok()
        .and_then(|text| cgroup_quota_cores(&text));
    quota.map_or(online, |q| q.min(online))
}

/// Whole cores a cgroup v2 `cpu.max` line (`"QUOTA PERIOD"` or `"max PERIOD"`) allows,
/// rounded up; `None` without a quota.
fn cgroup_quota_cores(text: &str) -> Option<usize> {
    let mut parts = text.split_whitespace();
    let quota: u64 = parts.next()?.parse().ok()?;
    let period: u64 = parts.next()?.parse().ok()?;
    if period == 0 {
        return None;
    }
    Some(quota.div_ceil(period).max(1) as usize)
}

/// Whether `local_ranks` ranks of the job on a host with `host_cores` cores outnumber them
/// (then a waiting rank may hold the core the rank it waits for needs).
pub fn oversubscribed(local_ranks: usize, host_cores: usize) -> bool {
    local_ranks > host_cores
}

/// How many ranks of a job of `size` ranks run on this host: `FERRY_LOCAL_SIZE` (set by the
/// launcher), else Open MPI's or Slurm's local count, else `size` (all local, the launcher's
/// default placement).
pub fn local_ranks_hint(size: usize) -> usize {
    [
        "FERRY_LOCAL_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
    .filter(|&n| n >= 1)
    .unwrap_or(size)
}

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

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Settings for every backend.
    pub general: General,
    /// TCP backend.
    pub tcp: Tcp,
    /// Shared-memory backend.
    pub shm: Shm,
    /// Data layer.
    pub data: Data,
}

const SECTIONS: &[&str] = &["general", "tcp", "shm", "data"];

impl Config {
    /// The optional per-operation timeout (`general.operation_timeout_ms`; `None` when 0).
    pub fn operation_timeout(&self) -> Option<Duration> {
        match self.general.operation_timeout_ms {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// How long an unreachable peer host is given before it is declared failed.
    pub fn failure_timeout(&self) -> Duration {
        Duration::from_millis(self.general.failure_timeout_ms)
    }

    /// Bound on start-up waits (rendezvous, shared-memory attach).
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_millis(self.general.startup_timeout_ms)
    }

    /// Polling time before blocking.
    pub fn spin(&self) -> Duration {
        Duration::from_micros(self.general.spin_us)
    }

    /// The waiting policy of a transport whose host runs `local_ranks` ranks of the job.
    pub fn wait_policy(&self, local_ranks: usize) -> WaitPolicy {
        let yield_each_poll = match self.general.yield_when_idle {
            YieldWhenIdle::Always => true,
            YieldWhenIdle::Never => false,
            YieldWhenIdle::Auto => oversubscribed(local_ranks, host_cores()),
        };
        WaitPolicy {
            spin: self.spin(),
            timeout: self.operation_timeout(),
            failure_timeout: self.failure_timeout(),
            yield_each_poll,
        }
    }

    /// Parses TOML text (no environment overrides). `origin` names the source in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config> {
        let value: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| syntax_error(text, origin, &e))?;
        Config::from_table(value, &Origins::file(origin))
    }

    fn from_table(table: toml::Table, origins: &Origins) -> Result<Config> {
        let origin = &origins.file;
        for key in table.keys() {
            if !SECTIONS.contains(&key.as_str()) {
                return Err(Error::config(format!(
                    "{origin}: unknown section `{key}` (known: {})",
                    SECTIONS.join(", ")
                )));
            }
        }
        let cfg: Config = match toml::Value::Table(table.clone()).try_into() {
            Ok(cfg) => cfg,
            Err(e) => {
                let e: toml::de::Error = e;
                let key = offending_key(&table);
                return Err(Error::config(format!(
                    "{}: {}{}",
                    origins.of(key.as_deref().unwrap_or("")),
                    key.map(|k| format!("`{k}`: ")).unwrap_or_default(),
                    e.message()
                )));
            }
        };
        cfg.validate(origins)?;
        Ok(cfg)
    }

    /// Loads the file named by `FERRY_CONFIG` (if set) and applies `FERRY_<SECTION>_<KEY>`
    /// overrides from the environment.
    pub fn from_env() -> Result<Config> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        let path = std::env::var_os("FERRY_CONFIG").map(PathBuf::from);
        Config::load(path.as_deref(), &vars)
    }

    /// Loads `path` (if any) and applies overrides from `vars` (name, value) pairs.
    pub fn load(path: Option<&Path>, vars: &[(String, String)]) -> Result<Config> {
        let (mut table, origin) = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    Error::config(format!("cannot read configuration file {}", p.display()))
                        .with_source(e)
                })?;
                let t: toml::Table = text.parse().map_err(|e: toml::de::Error| {
                    syntax_error(&text, &p.display().to_string(), &e)
                })?;
                (t, p.display().to_string())
            }
            None => (toml::Table::new(), "defaults".to_string()),
        };
        let env = apply_env_overrides(&mut table, vars)?;
        Config::from_table(table, &Origins { file: origin, env })
    }

    fn validate(&self, origins: &Origins) -> Result<()> {
        let bad = |key: &str, why: &str| {
            let origin = origins.of(key);
            Err(Error::config(format!("{origin}: `{key}` {why}")))
        };
        if self.general.failure_timeout_ms == 0 {
            return bad("general.failure_timeout_ms", "must be at least 1");
        }
        if self.general.startup_timeout_ms == 0 {
            return bad("general.startup_timeout_ms", "must be at least 1");
        }
        if self.tcp.connection_cap < 1 {
            return bad("tcp.connection_cap", "must be at least 1");
        }
        if self.tcp.inbox_messages < 1 {
            return bad("tcp.inbox_messages", "must be at least 1");
        }
        if self.shm.ring_slots < 2 || !self.shm.ring_slots.is_power_of_two() {
            return bad("shm.ring_slots", "must be a power of two, at least 2");
        }
        if self.shm.slot_bytes < 64 || !self.shm.slot_bytes.is_multiple_of(64) {
            return bad("shm.slot_bytes", "must be a multiple of 64, at least 64");
        }
        if self.shm.inbox_messages < 1 {
            return bad("shm.inbox_messages", "must be at least 1");
        }
        for (i, a) in self.tcp.addresses.iter().enumerate() {
            if a.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_none()
            {
                return bad(
                    &format!("tcp.addresses[{i}]"),
                    &format!("is `{a}`, expected host:port"),
                );
            }
        }
        Ok(())
    }
}

/// Finds the first `section.key` whose value alone fails to deserialize, so that type errors
/// name the key (serde's message alone only says what type was expected).
fn offending_key(table: &toml::Table) -> Option<String> {
    for (section, value) in table {
        let toml::Value::Table(keys) = value else {
            return Some(section.clone());
        };
        for (key, v) in keys {
            let mut one = toml::Table::new();
            let mut inner = toml::Table::new();
            inner.insert(key.clone(), v.clone());
            one.insert(section.clone(), toml::Value::Table(inner));
            if toml::Value::Table(one).try_into::<Config>().is_err() {
                return Some(format!("{section}.{key}"));
            }
        }
    }
    None
}

/// Environment variables that are not configuration keys (set by the launcher or the user).
const NON_CONFIG_VARS: &[&str] = &[
    "FERRY_BACKEND",
    "FERRY_CONFIG",
    "FERRY_SIZE",
    "FERRY_RANK",
    "FERRY_LOG",
    "FERRY_STATS",
    "FERRY_LOCAL_SIZE",
];

/// Where the settings came from, so that an error names the source of the bad value: the
/// file (or `defaults`), or the environment variable that set the key.
struct Origins {
    /// The configuration file's path, or `defaults` without one.
    file: String,
    /// `(section.key, NAME=value)` of every key set from the environment.
    env: Vec<(String, String)>,
}

impl Origins {
    fn file(origin: &str) -> Origins {
        Origins {
            file: origin.to_string(),
            env: Vec::new(),
        }
    }

    /// The source of `key` (`section.key`, or `section.key[i]` for an element of a list).
    fn of(&self, key: &str) -> &str {
        let key = key.split('[').next().unwrap_or(key);
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map_or(self.file.as_str(), |(_, var)| var.as_str())
    }
}

/// A TOML syntax error with the line and key it is on (the parser's message alone names
/// neither), and the limit when a number does not fit TOML's 64-bit signed integers.
fn syntax_error(text: &str, origin: &str, e: &toml::de::Error) -> Error {
    let mut msg = origin.to_string();
    if let Some(span) = e.span() {
        let start = span.start.min(text.len());
        let line_no = text[..start].matches('\n').count() + 1;
        msg.push_str(&format!(", line {line_no}"));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line = text[line_start..].lines().next().unwrap_or("");
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            if !key.is_empty() && !key.starts_with('[') {
                msg.push_str(&format!(": `{key}`"));
            }
        }
    }
    msg.push_str(&format!(": {}", e.message()));
    if e.message().contains("too large") {
        msg.push_str(&format!(
            " (configuration integers are at most {})",
            i64::MAX
        ));
    }
    Error::config(msg)
}

/// Applies the `FERRY_<SECTION>_<KEY>` variables of `vars` to `table`; returns which keys
/// they set (for error messages).
fn apply_env_overrides(
    table: &mut toml::Table,
    vars: &[(String, String)],
) -> Result<Vec<(String, String)>> {
    let mut set = Vec::new();
    for (name, raw) in vars {
        let Some(rest) = name.strip_prefix("FERRY_") else {
            continue;
        };
        if NON_CONFIG_VARS.contains(&name.as_str()) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        let Some((section, key)) = SECTIONS.iter().find_map(|s| {
            lower
                .strip_prefix(&format!("{s}_"))
                .map(|k| (*s, k.to_string()))
        }) else {
            // Other FERRY_ variables belong to the launcher and backends (rendezvous, node,
            // secret, ...); they are not configuration keys.
            continue;
        };
        let value = parse_env_value(raw)
            .map_err(|why| Error::config(format!("{name}={raw}: `{section}.{key}`: {why}")))?;
        set.push((format!("{section}.{key}"), format!("{name}={raw}")));
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match entry {
            toml::Value::Table(t) => {
                t.insert(key, value);
            }
            _ => {
                return Err(Error::config(format!(
                    "`{section}` must be a table (overridden by {name})"
                )))
            }
        }
    }
    Ok(set)
}

/// Environment values are TOML scalars when they parse as such (numbers, booleans, arrays),
/// strings otherwise. A whole number TOML cannot hold (beyond 64-bit signed) is an error
/// saying so, not a string that the key then rejects as the wrong type.
fn parse_env_value(raw: &str) -> std::result::Result<toml::Value, String> {
    let doc = format!("v = {raw}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => Ok(t
            .remove("v")
            .unwrap_or(toml::Value::String(raw.to_string()))),
        Err(_) => {
            let digits = raw.trim().trim_start_matches(['+', '-']).replace('_', "");
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "{} is out of range (configuration integers are at most {})",
                    raw.trim(),
                    i64::MAX
                ));
            }
            Ok(toml::Value::String(raw.to_string()))
        }
    }
}

/// Re-reads the configuration file when it changes (000 §5.1), at most once per interval.
#[derive(Debug)]
pub struct ConfigWatcher {
    path: Option<PathBuf>,
    vars: Vec<(String, String)>,
    modified: Option<SystemTime>,
    interval: Duration,
    last_check: std::time::Instant,
}

impl ConfigWatcher {
    /// Watches the file named by `FERRY_CONFIG`, if any.
    pub fn from_env(interval: Duration) -> ConfigWatcher {
        ConfigWatcher::new(
            std::env::var_os("FERRY_CONFIG").map(PathBuf::from),
            std::env::vars().collect(),
            interval,
        )
    }

    /// Watches `path` (none: nothing to watch), applying the overrides in `vars` to every
    /// re-read, at most once per `interval`.
    pub fn new(path: Option<PathBuf>, vars: Vec<(String, String)>, interval: Duration) -> Self {
        let modified = path
            .as_deref()
            .and_then(|p| std::fs::metadata(p).ok())
            .and_then(|m| m.modified().ok());
        ConfigWatcher {
            path,
            vars,
            modified,
            interval,
            last_check: std::time::Instant::now(),
        }
    }

    /// Returns the new configuration if the file changed since the last call and its interval
    /// has passed; errors in the new file are returned (the caller keeps the old settings).
    pub fn poll(&mut self) -> Option<Result<Config>> {
        let path = self.path.as_deref()?;
        if self.last_check.elapsed() < self.interval {
            return None;
        }
        self.last_check = std::time::Instant::now();
        let modified = std::fs::metadata(path).ok()?.modified().ok();
        if modified == self.modified {
            return None;
        }
        self.modified = modified;
        Some(Config::load(Some(path), &self.vars))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let c = Config::load(None, &[]).unwrap();
        assert_eq!(c, Config::default());
    }

    /// `mpirun` binds every rank to one core: its affinity mask then holds one CPU, yet two
    /// ranks on a two-core host are not oversubscribed, and `auto` must not make them yield
    /// on every poll. Runs on a thread whose mask is narrowed to one CPU.
    #[test]
    fn auto_yield_counts_the_hosts_cores_not_the_affinity_mask() {
        let host = host_cores();
        let policies = std::thread::spawn(move || {
            // SAFETY: cpu_set_t is a plain bit set; the calls read and write this thread's mask.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                let size = std::mem::size_of::<libc::cpu_set_t>();
                assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
                let first = (0..libc::CPU_SETSIZE as usize)
                    .find(|&c| libc::CPU_ISSET(c, &set))
                    .expect("a CPU in the mask");
                libc::CPU_ZERO(&mut set);
                libc::CPU_SET(first, &mut set);
                assert_eq!(libc::sched_setaffinity(0, size, &set), 0);
            }
            assert_eq!(available_cores(), 1, "the mask was narrowed");
            assert_eq!(
                host_cores(),
                host,
                "the host's cores do not depend on the mask"
            );
            let c = Config::default();
            (c.wait_policy(host), c.wait_policy(host + 1))
        })
        .join()
        .expect("policy thread");
        assert!(
            !policies.0.yield_each_poll,
            "{host} ranks on {host} cores are not oversubscribed"
        );
        assert!(
            policies.1.yield_each_poll,
            "{} ranks on {host} cores are",
            host + 1
        );
        assert_eq!(cgroup_quota_cores("max 100000\n"), None);
        assert_eq!(cgroup_quota_cores("150000 100000\n"), Some(2));
        assert_eq!(cgroup_quota_cores("50000 100000"), Some(1));
        assert_eq!(cgroup_quota_cores("garbage"), None);
    }

    #[test]
    fn waits_are_bounded_by_liveness_unless_an_operation_timeout_is_set() {
        let c = Config::default();
        assert_eq!(c.operation_timeout(), None);
        assert_eq!(c.wait_policy(1).timeout, None);
        assert_eq!(c.failure_timeout(), Duration::from_secs(10));
        // The old key name still sets the optional operation timeout, from a file or the
        // environment.
        let f = Config::from_toml("[general]\ntimeout_ms = 500\n", "f.toml").unwrap();
        assert_eq!(f.operation_timeout(), Some(Duration::from_millis(500)));
        let vars = [("FERRY_GENERAL_TIMEOUT_MS".to_string(), "700".to_string())];
        let e = Config::load(None, &vars).unwrap();
        assert_eq!(e.wait_policy(1).timeout, Some(Duration::from_millis(700)));
        let z = Config::from_toml("[general]\nfailure_timeout_ms = 0\n", "f.toml").unwrap_err();
        assert!(z.to_string().contains("general.failure_timeout_ms"), "{z}");
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Config::from_toml("[tcp]\nconection_cap = 3\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("conection_cap"), "{e}");
        let e = Config::from_toml("[tpc]\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("tpc"), "{e}");
    }

    #[test]
    fn bad_value_is_named() {
        let e = Config::from_toml("[tcp]\nconnection_cap = \"many\"\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("connection_cap"), "{e}");
        let e = Config::from_toml("[tcp]\nconnection_cap = 0\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("tcp.connection_cap"), "{e}");
        let e = Config::from_toml("[tcp]\naddresses = [\"nohost\"]\n", "f.toml").unwrap_err();
        assert!(e.to_string().contains("tcp.addresses[0]"), "{e}");
    }

    #[test]
    fn bad_environment_values_name_the_variable() {
        let vars = vec![("FERRY_TCP_CONNECTION_CAP".to_string(), "abc".to_string())];
        let e = Config::load(None, &vars).unwrap_err().to_string();
        assert!(
            e.contains("FERRY_TCP_CONNECTION_CAP=abc: `tcp.connection_cap`"),
            "{e}"
        );
        assert!(!e.contains("defaults"), "{e}");
        let vars = vec![("FERRY_SHM_RING_SLOTS".to_string(), "3".to_string())];
        let e = Config::load(None, &vars).unwrap_err().to_string();
        assert!(
            e.contains("FERRY_SHM_RING_SLOTS=3: `shm.ring_slots`"),
            "{e}"
        );
        let vars = vec![("FERRY_TCP_ADDRESSES".to_string(), "[\"x\"]".to_string())];
        let e = Config::load(None, &vars).unwrap_err().to_string();
        assert!(e.contains("FERRY_TCP_ADDRESSES="), "{e}");
    }

    #[test]
    fn integers_beyond_toml_range_are_range_errors() {
        let big = u64::MAX.to_string();
        let vars = vec![("FERRY_TCP_MAX_MESSAGE_BYTES".to_string(), big.clone())];
        let e = Config::load(None, &vars).unwrap_err().to_string();
        assert!(!e.contains("invalid type"), "{e}");
        assert!(
            e.contains(&format!("FERRY_TCP_MAX_MESSAGE_BYTES={big}")),
            "{e}"
        );
        assert!(e.contains("out of range"), "{e}");
        assert!(e.contains(&i64::MAX.to_string()), "{e}");
        // i64::MAX itself fits.
        let vars = vec![(
            "FERRY_TCP_MAX_MESSAGE_BYTES".to_string(),
            i64::MAX.to_string(),
        )];
        assert_eq!(
            Config::load(None, &vars).unwrap().tcp.max_message_bytes,
            i64::MAX as u64
        );
        let e = Config::from_toml(&format!("[tcp]\n\nmax_message_bytes = {big}\n"), "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.toml, line 3: `max_message_bytes`"), "{e}");
        assert!(e.contains(&i64::MAX.to_string()), "{e}");
    }

    #[test]
    fn watcher_sees_a_changed_address_and_reports_a_broken_file() {
        let dir = std::env::temp_dir().join(format!("ferry-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("job.toml");
        std::fs::write(
            &file,
            "[tcp]\naddresses = [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]\n",
        )
        .unwrap();
        let vars = vec![("FERRY_TCP_CONNECTION_CAP".to_string(), "2".to_string())];
        let mut w = ConfigWatcher::new(Some(file.clone()), vars, Duration::ZERO);
        assert!(w.poll().is_none(), "unchanged file must not reload");
        // A rank moved to another port while the job runs (000 §5.1).
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(
            &file,
            "[tcp]\naddresses = [\"127.0.0.1:7000\", \"127.0.0.1:7101\"]\n",
        )
        .unwrap();
        let c = w.poll().expect("changed file reloads").unwrap();
        assert_eq!(c.tcp.addresses[1], "127.0.0.1:7101");
        assert_eq!(c.tcp.connection_cap, 2, "overrides apply to re-reads too");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "[tcp]\naddreses = []\n").unwrap();
        let e = w.poll().expect("changed file reloads").unwrap_err();
        assert!(e.to_string().contains("addreses"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn environment_overrides_file_and_is_checked() {
        let vars = vec![
            ("FERRY_TCP_CONNECTION_CAP".to_string(), "2".to_string()),
            ("FERRY_RANK".to_string(), "3".to_string()),
        ];
        let c = Config::load(None, &vars).unwrap();
        assert_eq!(c.tcp.connection_cap, 2);
        let vars = vec![("FERRY_TCP_NO_SUCH_KEY".to_string(), "1".to_string())];
        let e = Config::load(None, &vars).unwrap_err();
        assert!(e.to_string().contains("no_such_key"), "{e}");
        let vars = vec![("FERRY_SHM_SINGLE_COPY".to_string(), "off".to_string())];
        assert_eq!(
            Config::load(None, &vars).unwrap().shm.single_copy,
            SingleCopy::Off
        );
    }
}

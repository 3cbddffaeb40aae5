//! Bootstrap glue between the launch environment and the backends: the rendezvous store a
//! rank uses to publish its addresses and find its peers' (R1; the role of PMI under MPI).
//!
//! Under `ferry run` every rank gets `FERRY_RENDEZVOUS` (host:port of the launcher's store)
//! and `FERRY_SECRET` (the per-job secret the store and the backends' handshakes check, T8).
//! Backends receive the store from [`connect_store`] and never parse these variables themselves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_core::file_store::FileStore;
use ferry_core::store::TcpStoreClient;
use ferry_core::{Error, ErrorKind, LaunchInfo, Result, Store};

/// How long a rank keeps trying to reach the launcher's store at start-up. Generous because
/// on a loaded machine a rank may start long before the launcher is scheduled again.
pub const STORE_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to the job's rendezvous store, if the environment names one.
///
/// Under `ferry run` this is the launcher's TCP store (`FERRY_RENDEZVOUS`). Without it, ranks
/// whose rank, size and job id are known (`mpirun`/`srun`, R2c) share a per-job file store;
/// otherwise (hand-started jobs, R2a/R2b) the result is `Ok(None)`. A rendezvous set without
/// its secret, or one that cannot be reached, is an error naming the variable and the rank.
pub fn connect_store(launch: &LaunchInfo) -> Result<Option<Arc<dyn Store>>> {
    connect_store_with(launch, STORE_CONNECT_TIMEOUT)
}

/// Like [`connect_store`] with an explicit connection timeout.
pub fn connect_store_with(
    launch: &LaunchInfo,
    connect_timeout: Duration,
) -> Result<Option<Arc<dyn Store>>> {
    let Some(addr) = launch.rendezvous.as_deref() else {
        return job_file_store(launch);
    };
    let with_rank = |e: Error| match launch.rank {
        Some(r) => e.or_rank(r),
        None => e,
    };
    let Some(secret) = launch.secret.as_deref() else {
        return Err(with_rank(Error::config(format!(
            "FERRY_RENDEZVOUS={addr} is set but FERRY_SECRET is not: the store admits only \
             members of the job (T8)"
        ))));
    };
    let client = TcpStoreClient::connect(addr, secret, connect_timeout)
        .map_err(|e| with_rank(e.context("bootstrap")))?;
    Ok(Some(Arc::new(client)))
}

/// Without `FERRY_RENDEZVOUS` but with rank, size and job id known — from `mpirun`/`srun`
/// variables (R2c, [`ferry_core::discovery`]) or set by hand — the ranks rendezvous through a
/// per-job directory ([`FileStore`]); the last rank to drop the store removes it.
fn job_file_store(launch: &LaunchInfo) -> Result<Option<Arc<dyn Store>>> {
    let (Some(rank), Some(size), Some(job)) = (launch.rank, launch.size, launch.job_id.as_deref())
    else {
        return Ok(None);
    };
    let store = FileStore::for_job(job)
        .map_err(|e| e.or_rank(rank).context("bootstrap"))?
        .remove_when_released_by(size);
    Ok(Some(Arc::new(store)))
}

/// What the launcher (`ferry run`) reports about the other ranks while this one starts: a rank
/// that ends during start-up fails the others' start-up at once with an error naming it,
/// instead of leaving them waiting for `general.startup_timeout_ms` for what it will never
/// publish. The launcher writes its process table to the store
/// ([`ferry_core::respawn::LAUNCHER_STATUS_KEY`]) whenever a rank ends or is replaced; this
/// reads it, at most once per interval (longer for larger jobs, so that waiting ranks do not
/// crowd the launcher's store), and only while this rank waits for something a peer has not
/// published yet. Without the launcher's table it never reports anything.
pub struct LauncherWatch {
    launch: LaunchInfo,
    rank: usize,
    every: Duration,
    /// Connected on first use: most start-ups never wait long enough to ask.
    store: Mutex<Option<Arc<dyn Store>>>,
    last: Mutex<Option<std::time::Instant>>,
}

impl LauncherWatch {
    /// The watch of rank `rank` of a job of `size` ranks started as `launch` says; `store`
    /// is the job's store if this rank is connected already.
    pub fn new(
        launch: &LaunchInfo,
        rank: usize,
        size: usize,
        store: Option<Arc<dyn Store>>,
    ) -> LauncherWatch {
        let every = Duration::from_millis((size as u64).saturating_mul(5).clamp(100, 1000));
        LauncherWatch {
            launch: launch.clone(),
            rank,
            every,
            store: Mutex::new(store),
            last: Mutex::new(None),
        }
    }

    /// How often it reads the launcher's table at most.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The error this rank's start-up fails with because of a rank the launcher saw end
    /// (or replace) before the job was up; `None` while every other rank runs or ended well,
    /// when it was asked less than [`LauncherWatch::every`] ago, or without a launcher.
    pub fn failed(&self) -> Option<Error> {
        self.launch.rendezvous.as_ref()?;
        {
            let mut last = self.last.lock().ok()?;
            if last.is_some_and(|t| t.elapsed() < self.every) {
                return None;
            }
            *last = Some(std::time::Instant::now());
        }
        let store = {
            let mut guard = self.store.lock().ok()?;
            if guard.is_none() {
                *guard = connect_store(&self.launch).ok().flatten();
            }
            guard.clone()?
        };
        let table = store
            .get(ferry_core::respawn::LAUNCHER_STATUS_KEY, Duration::ZERO)
            .ok()?;
        startup_failure(&String::from_utf8_lossy(&table), self.rank)
    }
}

/// What a start-up asks while it waits for peers: whether to give up (a peer is known to be
/// gone), and how often it is worth asking.
pub trait StartWatch: Send + Sync {
    /// The longest a wait goes between two questions.
    fn every(&self) -> Duration;
    /// The error the start-up ends with, if it must give up.
    fn failed(&self) -> Option<Error>;
}

impl StartWatch for LauncherWatch {
    fn every(&self) -> Duration {
        LauncherWatch::every(self)
    }

    fn failed(&self) -> Option<Error> {
        LauncherWatch::failed(self)
    }
}

/// A rebuild epoch's start-up gives up when the launcher called the epoch off.
impl StartWatch for ferry_core::respawn::boot::EpochWatch {
    fn every(&self) -> Duration {
        ferry_core::respawn::boot::EpochWatch::every(self)
    }

    fn failed(&self) -> Option<Error> {
        self.called_off()
    }
}

/// The first rank but `me` in the launcher's process table (lines
/// `L<id>:<host>:<pid> rank <r> <state>`) whose state says it ended badly or was replaced.
fn startup_failure(table: &str, me: usize) -> Option<Error> {
    let mut failed = Vec::new();
    for line in table.lines() {
        let mut words = line.splitn(4, ' ');
        let (Some(_), Some("rank"), Some(r), Some(state)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            continue;
        };
        let Ok(r) = r.parse::<usize>() else { continue };
        if r == me || state == "running" || state == "done" {
            continue;
        }
        let what = if state.starts_with("running (replacement") {
            "failed (the launcher started a replacement, which cannot join a job that never \
             started)"
                .to_string()
        } else {
            state.to_string()
        };
        failed.push((r, what));
    }
    let first = failed.first()?.0;
    // The table does not say which went first: a rank that gave up because of another one
    // is listed as well, so every one is named.
    let all: Vec<String> = failed
        .iter()
        .map(|(r, what)| format!("rank {r} {what}"))
        .collect();
    Some(
        Error::new(ErrorKind::PeerFailed, "init")
            .on_rank(me)
            .with_peer(first)
            .with_detail(format!(
                "{} during start-up, before this rank's start-up completed (the launcher's \
                 report); the job cannot start without {}",
                all.join(" and "),
                if all.len() == 1 { "it" } else { "them" }
            )),
    )
}

/// The job's store for a rank's start-up: a read that waits longer than the watch's
/// interval waits in slices of it and gives up as soon as the watch reports a failed rank
/// (a [`LauncherWatch`] for the job's start, an epoch's watch for a rebuild's).
pub struct WatchedStore {
    inner: Arc<dyn Store>,
    watch: Arc<dyn StartWatch>,
}

impl WatchedStore {
    /// `inner` under `watch`.
    pub fn new(inner: Arc<dyn Store>, watch: Arc<dyn StartWatch>) -> WatchedStore {
        WatchedStore { inner, watch }
    }
}

impl Store for WatchedStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(key, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left <= self.watch.every() {
                return self.inner.get(key, left);
            }
            match self.inner.get(key, self.watch.every()) {
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    if let Some(failed) = self.watch.failed() {
                        return Err(failed);
                    }
                }
                other => return other,
            }
        }
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.fetch_add(key, delta)
    }
}

/// Prefix of the keys under which TCP ranks publish their listening addresses.
const TCP_ADDR_PREFIX: &str = "tcp/addr/";
/// Key of the bundle of every rank's address, written by rank 0.
const TCP_ADDR_BUNDLE: &str = "tcp/addr-bundle";
/// Largest job whose addresses travel as one bundle (it must fit one store value).
pub const MAX_BUNDLED_RANKS: usize = 16384;

/// A store in front of the job's that answers the reads of the TCP ranks' addresses from one
/// bundle (X8).
///
/// Each rank reading every other's address is N^2 requests to the launcher's store: 65,000 at
/// 256 ranks, about 3 s of the start-up. Through this store rank 0 reads the N addresses and
/// writes them as one value, and every other rank reads that value: 2N requests. Any other key
/// goes to the store unchanged.
pub struct AddressBundle {
    inner: Arc<dyn Store>,
    rank: usize,
    size: usize,
    addrs: Mutex<Option<Vec<Vec<u8>>>>,
    requests: std::sync::atomic::AtomicUsize,
}

impl AddressBundle {
    /// Wraps the store of rank `rank` of a job of `size` ranks.
    pub fn new(inner: Arc<dyn Store>, rank: usize, size: usize) -> AddressBundle {
        AddressBundle {
            inner,
            rank,
            size,
            addrs: Mutex::new(None),
            requests: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Requests this rank sent to the job's store so far.
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn address(&self, p: usize, timeout: Duration) -> Result<Vec<u8>> {
        let mut guard = self.addrs.lock().map_err(|_| {
            Error::new(ErrorKind::Io, "bootstrap").with_detail("address cache poisoned by a panic")
        })?;
        if guard.is_none() {
            let all = if self.rank == 0 {
                let mut all = Vec::with_capacity(self.size);
                for q in 0..self.size {
                    self.count();
                    all.push(self.inner.get(&format!("{TCP_ADDR_PREFIX}{q}"), timeout)?);
                }
                self.count();
                self.inner.set(TCP_ADDR_BUNDLE, &encode_bundle(&all))?;
                all
            } else {
                self.count();
                decode_bundle(&self.inner.get(TCP_ADDR_BUNDLE, timeout)?, self.size)?
            };
            *guard = Some(all);
        }
        Ok(guard.as_ref().map(|a| a[p].clone()).unwrap_or_default())
    }
}

impl Store for AddressBundle {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.count();
        self.inner.set(key, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        if let Some(p) = key
            .strip_prefix(TCP_ADDR_PREFIX)
            .and_then(|r| r.parse::<usize>().ok())
            .filter(|&p| p < self.size)
        {
            return self.address(p, timeout);
        }
        self.count();
        self.inner.get(key, timeout)
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        self.count();
        self.inner.fetch_add(key, delta)
    }
}

/// Each address as a 4-byte little-endian length and its bytes.
fn encode_bundle(all: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(all.iter().map(|a| a.len() + 4).sum());
    for a in all {
        out.extend_from_slice(&(a.len() as u32).to_le_bytes());
        out.extend_from_slice(a);
    }
    out
}

fn decode_bundle(mut raw: &[u8], size: usize) -> Result<Vec<Vec<u8>>> {
    let bad = |why: &str| {
        Error::new(ErrorKind::Protocol, "bootstrap")
            .with_detail(format!("the bundle of TCP addresses is malformed: {why}"))
    };
    let mut all = Vec::with_capacity(size.min(MAX_BUNDLED_RANKS));
    while all.len() < size {
        let (len, rest) = raw
            .split_first_chunk::<4>()
            .ok_or_else(|| bad("truncated"))?;
        let len = u32::from_le_bytes(*len) as usize;
        if rest.len() < len {
            return Err(bad("an address runs past its end"));
        }
        all.push(rest[..len].to_vec());
        raw = &rest[len..];
    }
    if !raw.is_empty() {
        return Err(bad("bytes after the last address"));
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::store::TestStoreServer;

    #[test]
    fn no_rendezvous_means_no_store() {
        assert!(connect_store(&LaunchInfo::default()).unwrap().is_none());
    }

    #[test]
    fn discovered_jobs_without_rendezvous_share_a_file_store() {
        let job = format!("bootstrap-test-{}", std::process::id());
        let launch = |rank| LaunchInfo {
            rank: Some(rank),
            size: Some(2),
            job_id: Some(job.clone()),
            ..LaunchInfo::default()
        };
        let a = connect_store(&launch(0)).unwrap().unwrap();
        let b = connect_store(&launch(1)).unwrap().unwrap();
        a.set("tcp/addr/0", b"127.0.0.1:1").unwrap();
        assert_eq!(
            b.get("tcp/addr/0", Duration::from_secs(5)).unwrap(),
            b"127.0.0.1:1"
        );
        let dir = FileStore::job_dir(&std::env::temp_dir(), &job);
        if std::env::var_os("FERRY_STORE_DIR").is_none() {
            assert!(dir.exists());
            drop(a);
            drop(b);
            assert!(!dir.exists(), "the last rank removes the job directory");
        }
    }

    #[test]
    fn connects_with_the_secret_and_names_missing_secret() {
        let srv = TestStoreServer::start("s3cret").unwrap();
        let mut launch = LaunchInfo {
            rank: Some(1),
            size: Some(2),
            rendezvous: Some(srv.local_addr().to_string()),
            ..LaunchInfo::default()
        };
        let e = connect_store(&launch).err().unwrap();
        assert!(e.to_string().contains("FERRY_SECRET"), "{e}");
        launch.secret = Some("wrong".into());
        let e = connect_store_with(&launch, Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(e.to_string().contains("rank 1"), "{e}");
        launch.secret = Some("s3cret".into());
        let store = connect_store(&launch).unwrap().unwrap();
        store.set("tcp/addr/1", b"127.0.0.1:9").unwrap();
        assert_eq!(
            srv.store().get("tcp/addr/1", Duration::ZERO).unwrap(),
            b"127.0.0.1:9"
        );
    }

    #[test]
    fn addresses_come_from_one_bundle() {
        let mem: Arc<dyn Store> = Arc::new(ferry_core::store::MemStore::new());
        let n = 5;
        let stores: Vec<AddressBundle> = (0..n)
            .map(|r| AddressBundle::new(mem.clone(), r, n))
            .collect();
        for (r, s) in stores.iter().enumerate() {
            s.set(
                &format!("tcp/addr/{r}"),
                format!("127.0.0.1:{}", 1000 + r).as_bytes(),
            )
            .unwrap();
        }
        std::thread::scope(|scope| {
            for (r, s) in stores.iter().enumerate() {
                scope.spawn(move || {
                    for p in 0..n {
                        let a = s
                            .get(&format!("tcp/addr/{p}"), Duration::from_secs(5))
                            .unwrap();
                        assert_eq!(a, format!("127.0.0.1:{}", 1000 + p).as_bytes(), "rank {r}");
                    }
                });
            }
        });
        // One set each; rank 0 reads N addresses and writes the bundle, the others read it.
        assert_eq!(stores[0].requests(), 1 + n + 1);
        for s in &stores[1..] {
            assert_eq!(s.requests(), 2);
        }
        let e = decode_bundle(&[3, 0, 0, 0, b'a'], 1).unwrap_err();
        assert!(e.to_string().contains("malformed"), "{e}");
        assert!(decode_bundle(&encode_bundle(&[b"x".to_vec()]), 2).is_err());
        assert!(decode_bundle(&[1, 0, 0, 0, b'a', b'b'], 1).is_err());
    }

    #[test]
    fn the_launcher_table_names_the_ranks_that_ended_during_start_up() {
        let ok = "L0:h:10 rank 0 running\nL1:h:11 rank 1 done\nL2:h:12 rank 2 running\n";
        assert!(startup_failure(ok, 0).is_none());
        let table = "L0:h:10 rank 0 running\nL1:h:11 rank 1 exited with code 3\n\
                     L2:h:13 rank 2 running (replacement 1)\n";
        let e = startup_failure(table, 0).unwrap();
        assert_eq!(e.kind(), ErrorKind::PeerFailed);
        let text = e.to_string();
        assert!(
            text.contains("rank 0")
                && text.contains("rank 1 exited with code 3 and rank 2 failed (the launcher")
                && text.contains("during start-up"),
            "{text}"
        );
        // Its own line does not count (a replacement reads a table that shows itself).
        let mine = "L0:h:10 rank 0 running (replacement 1)\nL1:h:11 rank 1 running\n";
        assert!(startup_failure(mine, 0).is_none());
        assert!(startup_failure("garbage\n\n", 0).is_none());
    }

    #[test]
    fn a_watched_read_gives_up_when_the_launcher_reports_a_failed_rank() {
        let srv = TestStoreServer::start("s").unwrap();
        let launch = LaunchInfo {
            rank: Some(0),
            size: Some(2),
            rendezvous: Some(srv.local_addr().to_string()),
            secret: Some("s".into()),
            ..LaunchInfo::default()
        };
        let store = connect_store(&launch).unwrap().unwrap();
        let watch = Arc::new(LauncherWatch::new(&launch, 0, 2, None));
        let watched = WatchedStore::new(store.clone(), watch);
        // Present keys come at once; a missing one waits while every rank runs.
        store.set("k", b"v").unwrap();
        assert_eq!(watched.get("k", Duration::from_secs(5)).unwrap(), b"v");
        store
            .set(
                ferry_core::respawn::LAUNCHER_STATUS_KEY,
                b"L0:h:1 rank 0 running\nL1:h:2 rank 1 running\n",
            )
            .unwrap();
        let t0 = std::time::Instant::now();
        let e = watched
            .get("missing", Duration::from_millis(600))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(550));
        // Rank 1 ended: the wait ends within about one interval, naming it.
        store
            .set(
                ferry_core::respawn::LAUNCHER_STATUS_KEY,
                b"L0:h:1 rank 0 running\nL1:h:2 rank 1 was killed by signal 9 (SIGKILL)\n",
            )
            .unwrap();
        let t0 = std::time::Instant::now();
        let e = watched.get("missing", Duration::from_secs(30)).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5), "{e}");
        assert_eq!(
            (e.kind(), e.peer()),
            (ErrorKind::PeerFailed, Some(1)),
            "{e}"
        );
        assert!(
            e.to_string().contains("rank 1 was killed by signal 9"),
            "{e}"
        );
    }
}

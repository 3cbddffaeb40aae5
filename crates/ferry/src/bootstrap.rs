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
}

//! Bootstrap glue between the launch environment and the backends: the rendezvous store a
//! rank uses to publish its addresses and find its peers' (R1; the role of PMI under MPI).
//!
//! Under `ferry run` every rank gets `FERRY_RENDEZVOUS` (host:port of the launcher's store)
//! and `FERRY_SECRET` (the per-job secret the store and the backends' handshakes check, T8).
//! Backends receive the store from [`connect_store`] and never parse these variables themselves.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::file_store::FileStore;
use ferry_core::store::TcpStoreClient;
use ferry_core::{Error, LaunchInfo, Result, Store};

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
}

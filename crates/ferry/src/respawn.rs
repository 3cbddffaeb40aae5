//! REBUILD jobs under `ferry run --respawn K` (F3, issue 08): the facade's part of
//! [`ferry_ft::rebuild`], the bootstrap of a rebuild epoch's transport on the job's backend.
//!
//! An epoch's transport is built as the job's first one, through the launcher's store, but
//! under the epoch's own keys ([`ferry_core::respawn::epoch_prefix`]) and job id
//! ([`ferry_core::respawn::epoch_job`], which names shared-memory segments): tcp, shm
//! (through a named segment, since the launcher's inherited one belongs to epoch 0) and hybrid.
//! The communication monitor (`FERRY_MONITOR`) watches epoch 0 only.
//!
//! Every wait of an epoch's start-up for another member gives up as soon as the launcher
//! calls the epoch off because a member died ([`ferry_core::respawn::boot`]).
//!
//! Test hook: `FERRY_TEST_REBUILD_KILL=R:E:STEP[,...]` makes the process of rank `R` SIGKILL
//! itself in the start-up of rebuild epoch `E`, at `STEP`: `answered` (the launcher restarted
//! the ranks the epoch replaces; nothing of the epoch's transport is built yet) or `built`
//! (its transport is built, the others not known to be). It prints one line on stderr first.

use std::sync::Arc;

use ferry_core::respawn::boot::{EpochWatch, MemberBoot};
use ferry_core::respawn::RESPAWN_VAR;
use ferry_core::respawn::{epoch_job, epoch_prefix, EpochRecord, PrefixStore, INCARNATION_VAR};
use ferry_core::{BackendKind, Config, Error, ErrorKind, LaunchInfo, Result, Store, Transport};
use ferry_ft::rebuild::{find_epoch, start_epoch, Joined, Respawn, TransportBuilder};

use crate::bootstrap::WatchedStore;

/// The test hook's variable (see the module doc).
pub const TEST_KILL_VAR: &str = "FERRY_TEST_REBUILD_KILL";

/// Whether the launcher restarts failed ranks of this job (`ferry run --respawn K`, K > 0).
pub(crate) fn available(launch: &LaunchInfo) -> bool {
    launch.rendezvous.is_some()
        && std::env::var(RESPAWN_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .is_some_and(|k| k > 0)
}

/// `FERRY_INCARNATION`: 0 for a process the job started with, `i` for the `i`-th replacement
/// of its rank.
pub(crate) fn incarnation() -> Result<u32> {
    match std::env::var(INCARNATION_VAR) {
        Ok(v) => v.trim().parse().map_err(|_| {
            Error::config(format!(
                "{INCARNATION_VAR}=`{v}` is not a number (it is set by `ferry run --respawn`)"
            ))
        }),
        Err(_) => Ok(0),
    }
}

fn store(launch: &LaunchInfo) -> Result<Arc<dyn Store>> {
    crate::bootstrap::connect_store(launch)?.ok_or_else(|| {
        Error::config("REBUILD needs the launcher's store (FERRY_RENDEZVOUS): start the job with `ferry run --respawn K`")
    })
}

/// A replacement's start: the epoch it joins and its transport there.
pub(crate) fn join(
    config: &Config,
    launch: &LaunchInfo,
    incarnation: u32,
) -> Result<(Box<dyn Transport>, Joined)> {
    let rank = launch
        .rank
        .ok_or_else(|| Error::config(format!("{INCARNATION_VAR} is set but FERRY_RANK is not")))?;
    let size = launch
        .size
        .ok_or_else(|| Error::config(format!("{INCARNATION_VAR} is set but FERRY_SIZE is not")))?;
    let store = store(launch)?;
    let wait = config.startup_timeout();
    let start = find_epoch(&*store, rank, incarnation, wait)?;
    let boot = MemberBoot::new(rank, size, start.record, start.counts, start.fresh);
    let mut build = builder(config, launch);
    let (t, booted) = start_epoch(&store, boot, rank, wait, &mut *build)?;
    Ok((t, Joined { booted }))
}

/// The respawn service of this process for [`ferry_ft::Communicator::with_respawn`].
pub(crate) fn service(
    config: &Config,
    launch: &LaunchInfo,
    joined: Option<Joined>,
) -> Result<Respawn> {
    let store = store(launch)?;
    let build = builder(config, launch);
    Ok(Respawn::new(store, build, config.startup_timeout(), joined))
}

/// Builds this rank's transports of rebuild epochs (with the test hook's steps).
fn builder(config: &Config, launch: &LaunchInfo) -> TransportBuilder {
    let (config, launch) = (config.clone(), launch.clone());
    Box::new(move |record: &EpochRecord, watch: Arc<EpochWatch>| {
        let rank = launch.rank.unwrap_or(usize::MAX);
        test_kill(rank, record.epoch, "answered");
        let t = epoch_transport(&config, &launch, record, watch)?;
        test_kill(rank, record.epoch, "built");
        Ok(t)
    })
}

/// The test hook (see the module doc).
fn test_kill(rank: usize, epoch: u64, step: &str) {
    let Ok(spec) = std::env::var(TEST_KILL_VAR) else {
        return;
    };
    let hit = spec.split(',').any(|item| {
        let mut f = item.trim().split(':');
        f.next().and_then(|r| r.parse::<usize>().ok()) == Some(rank)
            && f.next().and_then(|e| e.parse::<u64>().ok()) == Some(epoch)
            && f.next() == Some(step)
    });
    if hit {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "ferry: test hook {TEST_KILL_VAR}: rank {rank} kills itself at `{step}` in the \
             start-up of rebuild epoch {epoch}"
        );
        // SAFETY: kill(2) and getpid(2) have no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// This rank's transport of the epoch `record` describes.
fn epoch_transport(
    config: &Config,
    launch: &LaunchInfo,
    record: &EpochRecord,
    watch: Arc<EpochWatch>,
) -> Result<Box<dyn Transport>> {
    let need = |what: &str| Error::config(format!("REBUILD needs {what} (set by `ferry run`)"));
    let rank = launch.rank.ok_or_else(|| need("FERRY_RANK"))?;
    let size = launch.size.ok_or_else(|| need("FERRY_SIZE"))?;
    let job = launch
        .job_id
        .as_deref()
        .ok_or_else(|| need("FERRY_JOB_ID"))?;
    let job = epoch_job(job, record.epoch);
    let secret = launch.secret.as_deref().unwrap_or_default();
    let store: Arc<dyn Store> =
        Arc::new(PrefixStore::new(store(launch)?, epoch_prefix(record.epoch)));
    let store: Arc<dyn Store> = Arc::new(WatchedStore::new(store, watch.clone()));
    let called_off = || watch.called_off();
    let backend = launch.backend.unwrap_or(if size > 1 {
        BackendKind::Shm
    } else {
        BackendKind::Single
    });
    Ok(match backend {
        BackendKind::Tcp => {
            let bundle = crate::bootstrap::AddressBundle::new(store, rank, size);
            Box::new(ferry_tcp::TcpTransport::from_store(
                rank, size, &bundle, config, secret,
            )?)
        }
        BackendKind::Shm => Box::new(ferry_shm::ShmTransport::join_node_watched(
            &job,
            0,
            (0..size).collect(),
            rank,
            size,
            config,
            &called_off,
        )?),
        BackendKind::Hybrid => Box::new(ferry_hybrid::HybridTransport::from_store_watched(
            rank,
            size,
            &launch.node_name(),
            &job,
            &*store,
            config,
            secret,
            &called_off,
        )?),
        other => {
            return Err(Error::new(ErrorKind::Unsupported, "rebuild")
                .on_rank(rank)
                .with_detail(format!(
                    "REBUILD works on the tcp, shm and hybrid backends, not on {other}"
                )))
        }
    })
}

//! REBUILD jobs under `ferry run --respawn K` (F3, issue 08): the facade's part of
//! [`ferry_ft::rebuild`], the bootstrap of a rebuild epoch's transport on the job's backend.
//!
//! An epoch's transport is built as the job's first one, through the launcher's store, but
//! under the epoch's own keys ([`ferry_core::respawn::epoch_prefix`]) and job id
//! ([`ferry_core::respawn::epoch_job`], which names shared-memory segments): tcp, shm
//! (through a named segment, since the launcher's inherited one belongs to epoch 0) and hybrid.
//! The communication monitor (`FERRY_MONITOR`) watches epoch 0 only.

use std::sync::Arc;

use ferry_core::respawn::RESPAWN_VAR;
use ferry_core::respawn::{epoch_job, epoch_prefix, EpochRecord, PrefixStore, INCARNATION_VAR};
use ferry_core::{BackendKind, Config, Error, ErrorKind, LaunchInfo, Result, Store, Transport};
use ferry_ft::rebuild::{find_epoch, Joined, Respawn, TransportBuilder};

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
    let store = store(launch)?;
    let joined = find_epoch(&*store, rank, incarnation, config.startup_timeout())?;
    let t = epoch_transport(config, launch, &joined.record)?;
    Ok((t, joined))
}

/// The respawn service of this process for [`ferry_ft::Communicator::with_respawn`].
pub(crate) fn service(
    config: &Config,
    launch: &LaunchInfo,
    joined: Option<Joined>,
) -> Result<Respawn> {
    let store = store(launch)?;
    let (config2, launch2) = (config.clone(), launch.clone());
    let build: TransportBuilder =
        Box::new(move |record: &EpochRecord| epoch_transport(&config2, &launch2, record));
    Ok(Respawn::new(store, build, config.startup_timeout(), joined))
}

/// This rank's transport of the epoch `record` describes.
fn epoch_transport(
    config: &Config,
    launch: &LaunchInfo,
    record: &EpochRecord,
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
        BackendKind::Shm => Box::new(ferry_shm::ShmTransport::join_node(
            &job,
            0,
            (0..size).collect(),
            rank,
            size,
            config,
        )?),
        BackendKind::Hybrid => Box::new(ferry_hybrid::HybridTransport::from_store(
            rank,
            size,
            &launch.node_name(),
            &job,
            &*store,
            config,
            secret,
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

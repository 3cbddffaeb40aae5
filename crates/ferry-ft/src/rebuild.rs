//! REBUILD (F3, seed 002 §3; issue 08): failed ranks are replaced by new processes with the
//! same rank numbers, and the communicator keeps its size.
//!
//! It needs a launcher that restarts failed ranks, `ferry run --respawn K`, whose store the
//! survivors, the launcher and the replacements meet in (the keys are in
//! [`ferry_core::respawn`]). A rebuild is a new *epoch* of the job:
//!
//! 1. the survivors agree on the failed members (the agreement every recovery starts with);
//! 2. each writes the record of the next epoch (same value everywhere: its generation and the
//!    replaced ranks) and waits until the launcher says it restarted every one of them;
//! 3. each ends its old transport in order and bootstraps a new one with the replacements,
//!    over the same backend, under the epoch's own store keys and job id;
//! 4. a replacement process, started by the launcher with `FERRY_INCARNATION=i`, reads the
//!    epoch records in order until the `i`-th that replaces its rank ([`find_epoch`]) and
//!    bootstraps the same transport; its communicator says it is a replacement
//!    ([`Communicator::is_replacement`]).
//!
//! A fresh transport, rather than admitting a new process into the old one, keeps every
//! backend's invariants (a rank's flows, rings and connections never outlive its process) at
//! the cost of one start-up per rebuild. A rank that dies while the others bootstrap the new
//! epoch makes the rebuild fail on every survivor (the bootstrap errors name it); a program
//! cannot recover from that in REBUILD mode.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_coll::Group;
use ferry_core::respawn::{
    epoch_key, respawn_key, respawn_started, EpochRecord, LAUNCHER_STATUS_KEY,
};
use ferry_core::{Error, ErrorKind, Result, Store, Transport};

use crate::comm::message_generation;
use crate::engine::{Engine, FT_GENERATION_BASE, MAX_GENERATIONS};
use crate::{Communicator, FailureMode, Options};

/// Builds this process's transport of an epoch (the facade's bootstrap, given the record).
pub type TransportBuilder = Box<dyn FnMut(&EpochRecord) -> Result<Box<dyn Transport>>>;

/// How often a replacement waiting for its epoch looks whether anybody is left to join.
const POLL: Duration = Duration::from_millis(200);

/// The error of REBUILD without a launcher that restarts ranks.
pub(crate) fn refusal(me: usize) -> Error {
    Error::new(ErrorKind::Unsupported, "communicator")
        .on_rank(me)
        .with_detail(
            "failure mode REBUILD replaces failed ranks by new processes, which \
             needs a launcher that restarts them: start the job with `ferry run --respawn K` \
             and make the communicator with `ferry::World::ft_communicator` (jobs started by \
             hand, by mpirun or by srun cannot rebuild); use SHRINK or BLANK otherwise",
        )
}

/// Where a replacement process joins the job: found by [`find_epoch`] at start-up.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The rebuild that replaced this process's rank.
    pub record: EpochRecord,
    /// How often each rank was replaced up to and including that epoch.
    counts: BTreeMap<usize, u32>,
}

/// The launcher's respawn service as a communicator uses it (see the module doc).
pub struct Respawn {
    store: Arc<dyn Store>,
    build: TransportBuilder,
    /// How long survivors wait for the launcher's answer about a replacement, and a
    /// replacement for its epoch (the start-up timeout).
    wait: Duration,
    /// Epoch of the transport in use.
    epoch: u64,
    /// Replacements of each rank so far.
    counts: BTreeMap<usize, u32>,
    joined: Option<Joined>,
}

impl Respawn {
    /// The service over the launcher's `store`, building epoch transports with `build`;
    /// `joined` is `Some` in a replacement process ([`find_epoch`]).
    pub fn new(
        store: Arc<dyn Store>,
        build: TransportBuilder,
        wait: Duration,
        joined: Option<Joined>,
    ) -> Respawn {
        Respawn {
            store,
            build,
            wait,
            epoch: 0,
            counts: BTreeMap::new(),
            joined,
        }
    }

    /// Waits until the launcher answered for every rank `record` replaces; fails naming the
    /// first rank it did not restart.
    fn await_replacements(&self, record: &EpochRecord, me: usize) -> Result<()> {
        for &k in &record.replaced {
            let incarnation = self.counts.get(&k).copied().unwrap_or(0) + 1;
            let value = self
                .store
                .get(&respawn_key(k, incarnation), self.wait)
                .map_err(|e| {
                    Error::new(e.kind(), "rebuild")
                        .on_rank(me)
                        .with_peer(k)
                        .with_detail(format!(
                            "the launcher did not say within {:?} whether it restarted rank {k} \
                             ({e})",
                            self.wait
                        ))
                })?;
            if !respawn_started(&value) {
                return Err(Error::new(ErrorKind::Unsupported, "rebuild")
                    .on_rank(me)
                    .with_peer(k)
                    .with_detail(format!(
                        "rank {k} cannot be replaced: the launcher says `{}`",
                        String::from_utf8_lossy(&value)
                    )));
            }
        }
        Ok(())
    }

    fn advance(&mut self, record: &EpochRecord) {
        self.epoch = record.epoch;
        for &k in &record.replaced {
            *self.counts.entry(k).or_default() += 1;
        }
    }
}

/// A replacement's start-up: the epoch whose rebuild it joins, being the `incarnation`-th
/// replacement of `rank`. Waits up to `wait` for the survivors to write it, and gives up at
/// once when the launcher's table shows no other rank running.
pub fn find_epoch(
    store: &dyn Store,
    rank: usize,
    incarnation: u32,
    wait: Duration,
) -> Result<Joined> {
    let deadline = Instant::now() + wait;
    let mut counts: BTreeMap<usize, u32> = BTreeMap::new();
    let mut seen = 0;
    let mut epoch = 1u64;
    loop {
        let value = loop {
            match store.get(&epoch_key(epoch), POLL) {
                Ok(v) => break v,
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    let why = if Instant::now() >= deadline {
                        Some(format!("no rebuild took it in within {wait:?}"))
                    } else if nobody_else_runs(store, rank) {
                        Some("no other rank of the job is running".to_string())
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        return Err(Error::new(ErrorKind::Timeout, "rebuild")
                            .on_rank(rank)
                            .with_detail(format!(
                                "this process replaces rank {rank} (replacement {incarnation}) \
                                 but {why}; does the program recover in REBUILD mode?"
                            )));
                    }
                }
                Err(e) => return Err(e.or_rank(rank).context("rebuild")),
            }
        };
        let record = EpochRecord::decode(epoch, &value).map_err(|e| e.or_rank(rank))?;
        for &r in &record.replaced {
            *counts.entry(r).or_default() += 1;
        }
        if record.replaced.contains(&rank) {
            seen += 1;
            if seen == incarnation {
                return Ok(Joined { record, counts });
            }
        }
        epoch += 1;
    }
}

/// Whether the launcher's process table (`ferry ctl NAME status`) shows no rank but `me`
/// running; unknown counts as "somebody runs".
fn nobody_else_runs(store: &dyn Store, me: usize) -> bool {
    let Ok(table) = store.get(LAUNCHER_STATUS_KEY, Duration::ZERO) else {
        return false;
    };
    let table = String::from_utf8_lossy(&table);
    let mut any = false;
    for line in table.lines() {
        let mut words = line.split_whitespace();
        let (_, _, rank, state) = (words.next(), words.next(), words.next(), words.next());
        let Some(rank) = rank.and_then(|r| r.parse::<usize>().ok()) else {
            return false;
        };
        any = true;
        if rank != me && state == Some("running") {
            return false;
        }
    }
    any
}

/// REBUILD's part of a communicator: the respawn service and what the rebuild that made it
/// did.
#[derive(Default)]
pub(crate) struct RebuildState {
    service: Option<Rc<RefCell<Respawn>>>,
    /// World ranks that are new processes since the rebuild that made this communicator.
    replaced: Vec<usize>,
    /// This process is one of them.
    replacement: bool,
}

impl RebuildState {
    /// What a communicator made from this one without a rebuild keeps.
    pub(crate) fn carried(&self) -> RebuildState {
        RebuildState {
            service: self.service.clone(),
            replaced: Vec::new(),
            replacement: false,
        }
    }
}

impl Communicator {
    /// A communicator over every rank of the job that, in REBUILD mode, recovers by replacing
    /// failed ranks with new processes from the launcher's `respawn` service (see the module
    /// doc). In a replacement process (`respawn` made with a [`Joined`]) the communicator is
    /// the rebuilt one the survivors get from [`Communicator::recover`]. In other modes it is
    /// [`Communicator::new`]. Programs get it from `ferry::World::ft_communicator`.
    pub fn with_respawn(
        transport: Box<dyn Transport>,
        opts: Options,
        mut respawn: Respawn,
    ) -> Result<Communicator> {
        if opts.failure != FailureMode::Rebuild {
            return Communicator::new(transport, opts);
        }
        if transport.name() == "mpi" {
            return Err(refusal(transport.rank()));
        }
        let joined = respawn.joined.take();
        let record = match &joined {
            Some(j) => {
                respawn.epoch = j.record.epoch;
                respawn.counts = j.counts.clone();
                j.record.clone()
            }
            None => EpochRecord {
                epoch: 0,
                generation: 0,
                replaced: Vec::new(),
            },
        };
        Communicator::over_epoch(
            transport,
            opts,
            &record,
            Rc::new(RefCell::new(respawn)),
            joined.is_some(),
        )
    }

    fn over_epoch(
        mut transport: Box<dyn Transport>,
        opts: Options,
        record: &EpochRecord,
        service: Rc<RefCell<Respawn>>,
        replacement: bool,
    ) -> Result<Communicator> {
        let me = transport.rank();
        transport.tolerate_failures();
        let members: Vec<usize> = (0..transport.size()).collect();
        let group = Group::new(members.clone(), message_generation(record.generation))?;
        let mut eng = Engine::new(transport, FT_GENERATION_BASE, members.clone(), false);
        if record.generation > 0 {
            eng.enter_generation(0, record.generation, members.clone());
        }
        Ok(Communicator {
            eng: Rc::new(RefCell::new(eng)),
            id: 0,
            base: 0,
            opts,
            generation: record.generation,
            members,
            gaps: Default::default(),
            group,
            my_index: me,
            rebuild: RebuildState {
                service: Some(service),
                replaced: record.replaced.clone(),
                replacement,
            },
        })
    }

    /// Whether this process joined the job as the replacement of a failed rank, by the rebuild
    /// that made this communicator (REBUILD mode); such a process restores its data from the
    /// survivors (e.g. `Recoverable::restore`) instead of starting afresh.
    pub fn is_replacement(&self) -> bool {
        self.rebuild.replacement
    }

    /// World ranks that are new processes since the rebuild that made this communicator
    /// (empty for communicators not made by a rebuild).
    pub fn replaced(&self) -> &[usize] {
        &self.rebuild.replaced
    }

    /// REBUILD recovery (see the module doc); every survivor calls it, like a shrink.
    pub(crate) fn rebuild_with_replacements(&self) -> Result<Communicator> {
        let me = self.world_rank();
        let Some(service) = self.rebuild.service.clone() else {
            return Err(refusal(me));
        };
        let failed: Vec<usize> = {
            let mut eng = self.eng.borrow_mut();
            self.check_current("rebuild", &eng)?;
            if self.generation >= MAX_GENERATIONS {
                return Err(Error::new(ErrorKind::ResourceExhausted, "rebuild")
                    .on_rank(me)
                    .with_detail("too many generations"));
            }
            let d = eng.agree(self.id, u64::MAX)?;
            if d.failed.contains(&(me as u32)) {
                return Err(Error::new(ErrorKind::PeerFailed, "rebuild")
                    .on_rank(me)
                    .with_peer(me)
                    .with_detail("the survivors declared this rank failed"));
            }
            self.members
                .iter()
                .copied()
                .filter(|r| d.failed.contains(&(*r as u32)))
                .collect()
        };
        if failed.is_empty() {
            // A revoke without a failure: a new generation over the same processes.
            return self.rebuild_as(false);
        }
        let mut rs = service.borrow_mut();
        let record = EpochRecord {
            epoch: rs.epoch + 1,
            generation: self.generation + 1,
            replaced: failed,
        };
        tracing::debug!("rank {me}: rebuild epoch {}: {:?}", record.epoch, record);
        rs.store
            .set(&epoch_key(record.epoch), &record.encode())
            .map_err(|e| e.or_rank(me).context("rebuild"))?;
        rs.await_replacements(&record, me)?;
        // Every survivor ends its old transport at the same point, as at the end of a job.
        if let Err(e) = self.eng.borrow_mut().finish() {
            tracing::warn!("rank {me}: rebuild: ending the old transport: {e}");
        }
        let t = (rs.build)(&record).map_err(|e| e.or_rank(me).context("rebuild"))?;
        rs.advance(&record);
        drop(rs);
        Communicator::over_epoch(t, self.opts, &record, service, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::store::MemStore;

    #[test]
    fn a_replacement_finds_the_epoch_of_its_incarnation() {
        let store = MemStore::new();
        let rec = |epoch, generation, replaced: Vec<usize>| EpochRecord {
            epoch,
            generation,
            replaced,
        };
        store
            .set(&epoch_key(1), &rec(1, 2, vec![3]).encode())
            .unwrap();
        store
            .set(&epoch_key(2), &rec(2, 4, vec![1, 3]).encode())
            .unwrap();
        let wait = Duration::from_secs(5);
        let j = find_epoch(&store, 3, 1, wait).unwrap();
        assert_eq!(j.record.epoch, 1);
        let j = find_epoch(&store, 3, 2, wait).unwrap();
        assert_eq!((j.record.epoch, j.record.generation), (2, 4));
        assert_eq!(j.counts.get(&3), Some(&2));
        assert_eq!(j.counts.get(&1), Some(&1));
        let j = find_epoch(&store, 1, 1, wait).unwrap();
        assert_eq!(j.record.epoch, 2);
        // Nobody else runs: a replacement without survivors gives up instead of waiting.
        store
            .set(
                LAUNCHER_STATUS_KEY,
                b"L0:h:1 rank 0 exited with code 70\nL1:h:2 rank 1 running\n",
            )
            .unwrap();
        let t0 = Instant::now();
        let e = find_epoch(&store, 1, 2, Duration::from_secs(30)).unwrap_err();
        assert!(e.to_string().contains("no other rank"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        // Somebody else runs: it waits until the deadline.
        store
            .set(
                LAUNCHER_STATUS_KEY,
                b"L0:h:1 rank 0 running\nL1:h:2 rank 1 running\n",
            )
            .unwrap();
        let e = find_epoch(&store, 1, 2, Duration::from_millis(500)).unwrap_err();
        assert!(e.to_string().contains("within"), "{e}");
    }

    #[test]
    fn without_the_launcher_rebuild_is_refused_naming_respawn() {
        let e = refusal(2);
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let text = e.to_string();
        assert!(
            text.contains("--respawn") && text.contains("rank 2"),
            "{text}"
        );
    }
}

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
//! the cost of one start-up per rebuild. A rank that dies while the others start the new
//! epoch makes the launcher call that epoch off and record the next one, which replaces it
//! too; every live member, replacements included, moves on to it
//! ([`ferry_core::respawn::boot`]). When the launcher does not restart the rank (the
//! `--respawn` budget is spent), every member's rebuild fails naming it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_coll::Group;
use ferry_core::respawn::boot::{joined_epoch, Booted, EpochWatch, Join, MemberBoot, Step};
use ferry_core::respawn::{epoch_key, EpochRecord, LAUNCHER_STATUS_KEY};
use ferry_core::{Error, ErrorKind, Result, Store, Transport};

use crate::comm::message_generation;
use crate::engine::{Engine, FT_GENERATION_BASE, MAX_GENERATIONS};
use crate::{Communicator, FailureMode, Options};

/// Builds this process's transport of an epoch (the facade's bootstrap, given the record);
/// its waits for other members give up when the watch says the epoch was called off.
pub type TransportBuilder = Box<BuildEpoch<'static>>;

/// What a [`TransportBuilder`] is (borrowed by [`start_epoch`]).
pub type BuildEpoch<'a> =
    dyn FnMut(&EpochRecord, Arc<EpochWatch>) -> Result<Box<dyn Transport>> + 'a;

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

/// Where a replacement process joined the job ([`find_epoch`], then [`start_epoch`]).
#[derive(Debug, Clone)]
pub struct Joined {
    /// The epoch it started in, with the replacement counts and the ranks new there.
    pub booted: Booted,
}

/// The launcher's respawn service as a communicator uses it (see the module doc).
pub struct Respawn {
    store: Arc<dyn Store>,
    build: TransportBuilder,
    /// How long members wait for the launcher's answers and for each other in an epoch's
    /// start-up, and a replacement for its epoch (the start-up timeout).
    wait: Duration,
    /// Epoch of the transport in use.
    epoch: u64,
    /// Replacements of each rank up to and including that epoch.
    counts: BTreeMap<usize, u32>,
    joined: Option<Joined>,
}

impl Respawn {
    /// The service over the launcher's `store`, building epoch transports with `build`;
    /// `joined` is `Some` in a replacement process ([`find_epoch`], [`start_epoch`]).
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
}

/// Runs the start-up of rebuild epochs as `boot` says until one completes at every member
/// (see [`ferry_core::respawn::boot`]): builds this process's transport with `build`, drops
/// those of epochs the launcher called off, and waits up to `wait` for each thing the
/// start-up needs. Returns the transport of the epoch that started and what it was.
pub fn start_epoch(
    store: &Arc<dyn Store>,
    mut boot: MemberBoot,
    me: usize,
    wait: Duration,
    build: &mut BuildEpoch<'_>,
) -> Result<(Box<dyn Transport>, Booted)> {
    let mut transport: Option<Box<dyn Transport>> = None;
    loop {
        match boot.poll(&**store) {
            Step::WaitFor(key) => match store.get(&key, wait) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Timeout => {
                    return Err(boot.timed_out(&key, wait));
                }
                Err(e) => return Err(e.or_rank(me).context("rebuild")),
            },
            Step::Build(record) => {
                let watch = Arc::new(EpochWatch::new(
                    store.clone(),
                    record.epoch,
                    me,
                    boot.size(),
                ));
                let built = build(&record, watch).map(|t| transport = Some(t));
                boot.built(built);
            }
            Step::Discard => {
                // Its peers are dead or leaving too: no orderly end.
                if let Some(mut t) = transport.take() {
                    t.tolerate_failures();
                }
            }
            Step::Committed(booted) => {
                let t = transport.take().ok_or_else(|| {
                    Error::new(ErrorKind::Protocol, "rebuild")
                        .on_rank(me)
                        .with_detail("an epoch started without this rank's transport")
                })?;
                return Ok((t, booted));
            }
            Step::Failed(e) => return Err(e),
        }
    }
}

/// A replacement's start-up: the epoch whose rebuild it joins, being the `incarnation`-th
/// replacement of `rank`. Waits up to `wait` for it to be recorded, and gives up at once
/// when the launcher's table shows no other rank running that could still record it.
pub fn find_epoch(
    store: &dyn Store,
    rank: usize,
    incarnation: u32,
    wait: Duration,
) -> Result<Booted> {
    let deadline = Instant::now() + wait;
    loop {
        let (next, counts) = match joined_epoch(store, rank, incarnation)
            .map_err(|e| e.or_rank(rank).context("rebuild"))?
        {
            Join::Found(b) => return Ok(b),
            Join::Waiting { next, counts } => (next, counts),
        };
        match store.get(&epoch_key(next), POLL) {
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(e) => return Err(e.or_rank(rank).context("rebuild")),
        }
        let why = if Instant::now() >= deadline {
            Some(format!("no rebuild took it in within {wait:?}"))
        } else if nobody_else_runs(store, rank, &counts) {
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
}

/// Whether the launcher's process table (`ferry ctl NAME status`) shows no rank but `me`
/// running that could still record an epoch: a replacement that no record took in yet
/// (`counts`: how often the records so far name each rank) waits itself. Unknown counts as
/// "somebody runs".
fn nobody_else_runs(store: &dyn Store, me: usize, counts: &BTreeMap<usize, u32>) -> bool {
    let Ok(table) = store.get(LAUNCHER_STATUS_KEY, Duration::ZERO) else {
        return false;
    };
    let table = String::from_utf8_lossy(&table);
    let mut any = false;
    for line in table.lines() {
        let mut words = line.splitn(4, ' ');
        let (_, _, rank, state) = (words.next(), words.next(), words.next(), words.next());
        let Some(rank) = rank.and_then(|r| r.parse::<usize>().ok()) else {
            return false;
        };
        any = true;
        if rank == me {
            continue;
        }
        let Some(state) = state else { continue };
        if state == "running" {
            return false;
        }
        if let Some(i) = state
            .strip_prefix("running (replacement ")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|i| i.parse::<u32>().ok())
        {
            if counts.get(&rank).copied().unwrap_or(0) >= i {
                return false;
            }
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
        let booted = match &joined {
            Some(j) => {
                respawn.epoch = j.booted.record.epoch;
                respawn.counts = j.booted.counts.clone();
                j.booted.clone()
            }
            None => Booted {
                record: EpochRecord {
                    epoch: 0,
                    generation: 0,
                    replaced: Vec::new(),
                },
                counts: BTreeMap::new(),
                fresh: Vec::new(),
            },
        };
        Communicator::over_epoch(
            transport,
            opts,
            &booted,
            Rc::new(RefCell::new(respawn)),
            joined.is_some(),
        )
    }

    fn over_epoch(
        mut transport: Box<dyn Transport>,
        opts: Options,
        booted: &Booted,
        service: Rc<RefCell<Respawn>>,
        replacement: bool,
    ) -> Result<Communicator> {
        let record = &booted.record;
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
                replaced: booted.fresh.clone(),
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
        let mut counts = rs.counts.clone();
        for &k in &record.replaced {
            *counts.entry(k).or_default() += 1;
        }
        let fresh = record.replaced.clone();
        let boot = MemberBoot::new(me, self.members.len(), record, counts, fresh);
        let (store, wait) = (rs.store.clone(), rs.wait);
        let mut old = Some(&self.eng);
        let builder = &mut rs.build;
        let mut build = |record: &EpochRecord, watch: Arc<EpochWatch>| {
            // Every survivor ends its old transport at the same point, as at the end of a
            // job, once the launcher restarted the ranks the epoch replaces.
            if let Some(eng) = old.take() {
                if let Err(e) = eng.borrow_mut().finish() {
                    tracing::warn!("rank {me}: rebuild: ending the old transport: {e}");
                }
            }
            builder(record, watch)
        };
        let (t, booted) = start_epoch(&store, boot, me, wait, &mut build)?;
        rs.epoch = booted.record.epoch;
        rs.counts = booted.counts.clone();
        drop(rs);
        Communicator::over_epoch(t, self.opts, &booted, service, false)
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
        // A replacement no record took in yet cannot record anything either: only its
        // table line left, the wait ends at once; one the records named is a member.
        let only = |state: &str| format!("L0:h:1 rank 0 done\nL3:h:4 rank 3 {state}\n");
        store
            .set(
                LAUNCHER_STATUS_KEY,
                only("running (replacement 3)").as_bytes(),
            )
            .unwrap();
        let t0 = Instant::now();
        let e = find_epoch(&store, 1, 2, Duration::from_secs(30)).unwrap_err();
        assert!(e.to_string().contains("no other rank"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        store
            .set(
                LAUNCHER_STATUS_KEY,
                only("running (replacement 2)").as_bytes(),
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

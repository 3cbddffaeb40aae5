//! The start-up of a rebuild epoch when a member dies during it (acceptance 6 of
//! fault-tolerance.md for REBUILD): who notices, who decides, and how the members move on.
//!
//! While an epoch's transports start there is no working transport to agree over, so the
//! launcher's store is the meeting point and the launcher, the one process that sees every
//! death at once and never dies itself without ending the job, is the only one that calls an
//! epoch off. Per epoch `E` there are two keys besides its record:
//!
//! - [`ready_key`]: a counter. A member that built its transport of `E` adds 1; the launcher,
//!   when it sees a member of `E` dead before the epoch is decided, adds [`POISON`]. Whichever
//!   of "the last member's 1" and "the poison" comes first decides, and the one that added it
//!   learns so from the value before its addition;
//! - [`outcome_key`]: `committed` or `aborted`, written by the member whose 1 completed the
//!   count, or by the launcher after its poison (also `committed` when the count was complete
//!   already: the last member may have died before writing it).
//!
//! An aborted epoch is followed at once by the launcher's record of `E + 1`, written after the
//! outcome: its generation is one more, it replaces the members of `E` found dead, and the
//! launcher has restarted them already (or refused to, which every member then reports). The
//! live members of `E`, survivors and replacements alike, drop what they built and start
//! `E + 1`; the replacements of `E` are still new processes there ([`Booted::fresh`]).
//!
//! [`MemberBoot`] is a member's side and [`EpochTracker`] the launcher's, both without I/O of
//! their own but for the store they are handed; the caller blocks where they say
//! ([`Step::WaitFor`]) and builds transports when asked ([`Step::Build`]). The seeded
//! simulation in this module's tests runs them against each other with deaths at every step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{epoch_key, respawn_key, respawn_started, EpochRecord};
use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;

/// What the launcher adds to an epoch's [`ready_key`] counter to call it off; far above any
/// number of members, so the two parts of the counter never mix.
pub const POISON: i64 = 1 << 32;

/// Value of [`outcome_key`] of an epoch whose start-up completed at every member.
pub const COMMITTED: &[u8] = b"committed";
/// Value of [`outcome_key`] of an epoch the launcher called off.
pub const ABORTED: &[u8] = b"aborted";

/// Key of the counter of members whose transport of `epoch` is built.
pub fn ready_key(epoch: u64) -> String {
    format!("rebuild/{epoch}/ready")
}

/// Key of the outcome of the start-up of `epoch`.
pub fn outcome_key(epoch: u64) -> String {
    format!("rebuild/{epoch}/outcome")
}

/// A read that does not wait: `Ok(None)` if the key is not set.
fn peek(store: &dyn Store, key: &str) -> Result<Option<Vec<u8>>> {
    match store.get(key, Duration::ZERO) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == ErrorKind::Timeout => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a member whose epoch started ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Booted {
    /// The epoch whose start-up completed.
    pub record: EpochRecord,
    /// How often each rank was replaced up to and including it.
    pub counts: BTreeMap<usize, u32>,
    /// World ranks that are new processes since the last epoch that started (its own
    /// replacements and those of the epochs called off before it), sorted.
    pub fresh: Vec<usize>,
}

/// What a member does next, as [`MemberBoot::poll`] says.
#[derive(Debug)]
pub enum Step {
    /// Wait until `key` is set (up to the start-up timeout), then poll again; on the timeout
    /// the error is [`MemberBoot::timed_out`]'s.
    WaitFor(String),
    /// Build this process's transport of the epoch, report with [`MemberBoot::built`], poll.
    Build(EpochRecord),
    /// The epoch whose transport this process built was called off: drop the transport (no
    /// orderly end: peers of it are dead), then poll again.
    Discard,
    /// Every member built its transport of the epoch: it is the job's from now on.
    Committed(Booted),
    /// The rebuild cannot complete (a rank was not restarted, a store failure, a malformed
    /// record); every member ends the same way.
    Failed(Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the launcher's answer about the `i`-th replaced rank.
    Answers(usize),
    /// About to build (or building) the transport.
    Build,
    /// Transport built: count it.
    Count,
    /// This member completed the count: record the outcome.
    Commit,
    /// Waiting for the outcome.
    Outcome,
    /// Waiting for the record of the next epoch.
    Next,
    Done,
}

/// One member's side of the start-up of rebuild epochs (see the module doc).
#[derive(Debug)]
pub struct MemberBoot {
    me: usize,
    size: usize,
    record: EpochRecord,
    /// Replacements of each rank up to and including `record`.
    counts: BTreeMap<usize, u32>,
    fresh: BTreeSet<usize>,
    phase: Phase,
    /// This process holds a transport of `record`.
    holds: bool,
    /// Why this process's build of `record` failed.
    build_error: Option<Error>,
}

impl MemberBoot {
    /// Member `me` of a job of `size` ranks starting epoch `record`; `counts` are the
    /// replacements of each rank up to and including it, `fresh` the ranks that are new
    /// processes there (its own replacements, for a survivor).
    pub fn new(
        me: usize,
        size: usize,
        record: EpochRecord,
        counts: BTreeMap<usize, u32>,
        fresh: impl IntoIterator<Item = usize>,
    ) -> MemberBoot {
        MemberBoot {
            me,
            size,
            record,
            counts,
            fresh: fresh.into_iter().collect(),
            phase: Phase::Answers(0),
            holds: false,
            build_error: None,
        }
    }

    /// The epoch this member is starting.
    pub fn epoch(&self) -> u64 {
        self.record.epoch
    }

    /// The number of ranks of the job.
    pub fn size(&self) -> usize {
        self.size
    }

    fn fail(&mut self, e: Error) -> Step {
        self.phase = Phase::Done;
        Step::Failed(e.or_rank(self.me).context("rebuild"))
    }

    /// The next thing to do; reads and writes `store` without waiting.
    pub fn poll(&mut self, store: &dyn Store) -> Step {
        match self.advance(store) {
            Ok(step) => step,
            Err(e) => self.fail(e),
        }
    }

    fn advance(&mut self, store: &dyn Store) -> Result<Step> {
        loop {
            // Read anew on every pass: moving to the next epoch changes it.
            let epoch = self.record.epoch;
            match self.phase {
                Phase::Answers(i) => {
                    let Some(&k) = self.record.replaced.get(i) else {
                        self.phase = Phase::Build;
                        continue;
                    };
                    let incarnation = self.counts.get(&k).copied().unwrap_or(0);
                    let key = respawn_key(k, incarnation);
                    let Some(value) = peek(store, &key)? else {
                        return Ok(Step::WaitFor(key));
                    };
                    if !respawn_started(&value) {
                        return Ok(self.fail(
                            Error::new(ErrorKind::Unsupported, "rebuild")
                                .with_peer(k)
                                .with_detail(format!(
                                    "rank {k} cannot be replaced: the launcher says `{}`",
                                    String::from_utf8_lossy(&value)
                                )),
                        ));
                    }
                    self.phase = Phase::Answers(i + 1);
                }
                Phase::Build => {
                    // Called off already (a member died while the answers came): skip the build.
                    if peek(store, &outcome_key(epoch))?.is_some() {
                        self.phase = Phase::Outcome;
                        continue;
                    }
                    return Ok(Step::Build(self.record.clone()));
                }
                Phase::Count => {
                    let before = store.fetch_add(&ready_key(epoch), 1)?;
                    self.phase = if before >= POISON {
                        Phase::Outcome
                    } else if before + 1 >= self.size as i64 {
                        Phase::Commit
                    } else {
                        Phase::Outcome
                    };
                }
                Phase::Commit => {
                    store.set(&outcome_key(epoch), COMMITTED)?;
                    return Ok(self.committed());
                }
                Phase::Outcome => {
                    let key = outcome_key(epoch);
                    let Some(value) = peek(store, &key)? else {
                        return Ok(Step::WaitFor(key));
                    };
                    if value == COMMITTED {
                        if !self.holds {
                            // Only a member whose count is in can see its epoch committed.
                            let e = self.build_error.take().unwrap_or_else(|| {
                                Error::new(ErrorKind::Protocol, "rebuild").with_detail(format!(
                                    "epoch {epoch} started without this rank's transport"
                                ))
                            });
                            return Ok(self.fail(e));
                        }
                        return Ok(self.committed());
                    }
                    if value != ABORTED {
                        return Err(Error::new(ErrorKind::Protocol, "rebuild").with_detail(
                            format!(
                                "the outcome of rebuild epoch {epoch} is `{}`",
                                String::from_utf8_lossy(&value)
                            ),
                        ));
                    }
                    self.phase = Phase::Next;
                    self.build_error = None;
                    if self.holds {
                        self.holds = false;
                        return Ok(Step::Discard);
                    }
                }
                Phase::Next => {
                    let key = epoch_key(epoch + 1);
                    let Some(value) = peek(store, &key)? else {
                        return Ok(Step::WaitFor(key));
                    };
                    let next = EpochRecord::decode(epoch + 1, &value)?;
                    tracing::info!(
                        "rank {}: rebuild epoch {epoch} was called off; starting epoch {} \
                         (replacing {:?})",
                        self.me,
                        next.epoch,
                        next.replaced
                    );
                    for &k in &next.replaced {
                        *self.counts.entry(k).or_default() += 1;
                    }
                    self.fresh.extend(next.replaced.iter().copied());
                    self.record = next;
                    self.phase = Phase::Answers(0);
                }
                Phase::Done => {
                    return Err(Error::new(ErrorKind::Protocol, "rebuild")
                        .with_detail("polled after the start-up ended"));
                }
            }
        }
    }

    fn committed(&mut self) -> Step {
        self.phase = Phase::Done;
        Step::Committed(Booted {
            record: self.record.clone(),
            counts: self.counts.clone(),
            fresh: self.fresh.iter().copied().collect(),
        })
    }

    /// The build [`Step::Build`] asked for is done: `Ok` if this process holds the transport.
    pub fn built(&mut self, result: Result<()>) {
        if self.phase != Phase::Build {
            return;
        }
        match result {
            Ok(()) => {
                self.holds = true;
                self.phase = Phase::Count;
            }
            Err(e) => {
                // Usually a peer that died: the launcher calls the epoch off and this member
                // moves on; if nobody does, the error is what it ends with.
                tracing::info!("rank {}: building epoch {}: {e}", self.me, self.epoch());
                self.build_error = Some(e);
                self.phase = Phase::Outcome;
            }
        }
    }

    /// The error of a [`Step::WaitFor`] whose key did not come within `waited`.
    pub fn timed_out(&mut self, key: &str, waited: Duration) -> Error {
        self.phase = Phase::Done;
        if let Some(e) = self.build_error.take() {
            return e.or_rank(self.me).context("rebuild");
        }
        let epoch = self.record.epoch;
        let what = match key {
            k if k == outcome_key(epoch) => {
                format!("the start-up of rebuild epoch {epoch} did not complete at every member")
            }
            k if k == epoch_key(epoch + 1) => {
                format!("rebuild epoch {epoch} was called off but no next epoch was recorded")
            }
            k => format!("the launcher did not answer `{k}`"),
        };
        let mut e = Error::new(ErrorKind::Timeout, "rebuild")
            .on_rank(self.me)
            .with_detail(format!("{what} within {waited:?}"));
        if let Some(k) = key
            .strip_prefix("respawn/")
            .and_then(|r| r.split('/').next())
            .and_then(|r| r.parse().ok())
        {
            e = e.with_peer(k);
        }
        e
    }
}

/// What [`joined_epoch`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Join {
    /// The epoch the replacement starts in, with the counts and the ranks that are new there
    /// (those of the epochs called off just before it too).
    Found(Booted),
    /// Its record is not written yet: `next` is the first epoch without a record, `counts`
    /// the replacements the records so far name.
    Waiting {
        /// The first epoch not recorded yet.
        next: u64,
        /// Times each rank was named by the records so far.
        counts: BTreeMap<usize, u32>,
    },
}

/// Where the `incarnation`-th replacement of `rank` joins: the epoch whose record names the
/// rank for the `incarnation`-th time.
pub fn joined_epoch(store: &dyn Store, rank: usize, incarnation: u32) -> Result<Join> {
    let mut counts: BTreeMap<usize, u32> = BTreeMap::new();
    let mut fresh: BTreeSet<usize> = BTreeSet::new();
    let mut epoch = 1u64;
    loop {
        let Some(value) = peek(store, &epoch_key(epoch))? else {
            return Ok(Join::Waiting {
                next: epoch,
                counts,
            });
        };
        let record = EpochRecord::decode(epoch, &value)?;
        // A record follows an aborted epoch only once that outcome is written.
        let after_abort =
            epoch > 1 && peek(store, &outcome_key(epoch - 1))?.as_deref() == Some(ABORTED);
        if !after_abort {
            fresh.clear();
        }
        fresh.extend(record.replaced.iter().copied());
        for &r in &record.replaced {
            *counts.entry(r).or_default() += 1;
        }
        if record.replaced.contains(&rank) && counts.get(&rank) == Some(&incarnation) {
            return Ok(Join::Found(Booted {
                record,
                counts,
                fresh: fresh.into_iter().collect(),
            }));
        }
        epoch += 1;
    }
}

/// Asked while a transport of an epoch starts: whether the launcher called the epoch off
/// (then the start-up gives up at once instead of waiting for a dead member). Reads the
/// store at most once per [`EpochWatch::every`].
pub struct EpochWatch {
    store: Arc<dyn Store>,
    epoch: u64,
    rank: usize,
    every: Duration,
    last: Mutex<Option<Instant>>,
}

impl EpochWatch {
    /// The watch of rank `rank` of a job of `size` ranks over the start-up of `epoch`. It
    /// asks less often in larger jobs, so that the waiting ranks do not crowd the launcher's
    /// store.
    pub fn new(store: Arc<dyn Store>, epoch: u64, rank: usize, size: usize) -> EpochWatch {
        let every = Duration::from_millis((size as u64).saturating_mul(5).clamp(50, 1000));
        EpochWatch {
            store,
            epoch,
            rank,
            every,
            last: Mutex::new(None),
        }
    }

    /// How often it reads the store at most.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The error the start-up ends with if the epoch was called off; `None` otherwise, when
    /// asked less than [`EpochWatch::every`] ago, or when the store cannot say.
    pub fn called_off(&self) -> Option<Error> {
        {
            let mut last = self.last.lock().ok()?;
            if last.is_some_and(|t| t.elapsed() < self.every) {
                return None;
            }
            *last = Some(Instant::now());
        }
        let value = peek(&*self.store, &outcome_key(self.epoch)).ok()??;
        (value == ABORTED).then(|| {
            Error::new(ErrorKind::PeerFailed, "rebuild")
                .on_rank(self.rank)
                .with_detail(format!(
                    "a member died during the start-up of rebuild epoch {}: the launcher \
                     called it off",
                    self.epoch
                ))
        })
    }
}

/// What the launcher knows of a rank's current process for [`EpochTracker::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    /// Its incarnation (0: the job's own process).
    pub incarnation: u32,
    /// Whether it still runs.
    pub alive: bool,
}

/// What [`EpochTracker::check`] decided about the open epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Its count was complete before a member died: it stands (the survivors recover from
    /// that death as from any other).
    Committed(u64),
    /// Called off; `next` is the epoch recorded in its place, replacing `dead`.
    Aborted {
        /// The epoch called off.
        epoch: u64,
        /// Its successor (already in the store).
        next: EpochRecord,
    },
}

/// The launcher's side (see the module doc): reads the survivors' records, and calls off an
/// epoch whose start-up lost a member.
#[derive(Debug)]
pub struct EpochTracker {
    size: usize,
    /// Times each rank was named by the records read so far.
    named: BTreeMap<usize, u32>,
    /// Records read so far.
    epochs: u64,
    /// The last record read, while its outcome is open.
    open: Option<EpochRecord>,
    /// No further epoch is opened (an epoch needed a rank the launcher did not restart).
    closed: bool,
}

impl EpochTracker {
    /// The tracker of a job of `size` ranks.
    pub fn new(size: usize) -> EpochTracker {
        EpochTracker {
            size,
            named: BTreeMap::new(),
            epochs: 0,
            open: None,
            closed: false,
        }
    }

    /// Records read so far (the last epoch).
    pub fn epochs(&self) -> u64 {
        self.epochs
    }

    /// Times the records read so far named rank `r`: the incarnation its process in the last
    /// epoch has.
    pub fn named(&self, r: usize) -> u32 {
        self.named.get(&r).copied().unwrap_or(0)
    }

    /// Opens no further epoch: the last one needs a rank that was not restarted, so its
    /// members fail (each names that rank) instead of retrying.
    pub fn close(&mut self) {
        self.closed = true;
        self.open = None;
    }

    fn ingest(&mut self, record: &EpochRecord) {
        self.epochs = record.epoch;
        for &k in &record.replaced {
            *self.named.entry(k).or_default() += 1;
        }
        self.open = (!self.closed).then(|| record.clone());
    }

    /// Reads the records written since the last call, in order.
    pub fn read_records(&mut self, store: &dyn Store) -> Vec<EpochRecord> {
        let mut read = Vec::new();
        while let Ok(Some(v)) = peek(store, &epoch_key(self.epochs + 1)) {
            match EpochRecord::decode(self.epochs + 1, &v) {
                Ok(record) => {
                    self.ingest(&record);
                    read.push(record);
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    self.epochs += 1;
                    self.open = None;
                }
            }
        }
        read
    }

    /// Decides the open epoch if a member of it is dead: `procs[r]` is rank `r`'s current
    /// process. A member is dead when the process the epoch expects for its rank (the one
    /// with as many replacements as the records named it) ended, or was replaced already.
    pub fn check(&mut self, store: &dyn Store, procs: &[Proc]) -> Result<Option<Decision>> {
        let Some(record) = self.open.clone() else {
            return Ok(None);
        };
        let epoch = record.epoch;
        if peek(store, &outcome_key(epoch))?.is_some() {
            self.open = None;
            return Ok(None);
        }
        let dead: Vec<usize> = procs
            .iter()
            .enumerate()
            .take(self.size)
            .filter(|&(r, p)| !p.alive || p.incarnation > self.named(r))
            .map(|(r, _)| r)
            .collect();
        if dead.is_empty() {
            return Ok(None);
        }
        if dead.len() >= self.size.min(procs.len()) {
            // Nobody of the epoch is left to start another one.
            self.close();
            return Ok(None);
        }
        let before = store.fetch_add(&ready_key(epoch), POISON)?;
        if before >= POISON {
            return Err(Error::new(ErrorKind::Protocol, "rebuild")
                .with_detail(format!("rebuild epoch {epoch} was called off twice")));
        }
        if before >= self.size as i64 {
            // Every member had counted: the last one may have died before saying so.
            store.set(&outcome_key(epoch), COMMITTED)?;
            self.open = None;
            return Ok(Some(Decision::Committed(epoch)));
        }
        let next = EpochRecord {
            epoch: epoch + 1,
            generation: record.generation.saturating_add(1),
            replaced: dead,
        };
        // The outcome first: whoever reads the next record finds this one decided.
        store.set(&outcome_key(epoch), ABORTED)?;
        store.set(&epoch_key(next.epoch), &next.encode())?;
        self.ingest(&next);
        Ok(Some(Decision::Aborted { epoch, next }))
    }
}

#[cfg(test)]
mod tests;

//! The data layer (`ferry_data` containers, partitionings, transitions) on a fault-tolerant
//! communicator: switches that fail like the communicator's other operations, containers
//! carried over a shrink ([`salvage`]: the survivors' values move, the failed ranks' part is
//! reported lost) and containers made recoverable by buddy checkpoints ([`Checkpoints`]: the
//! failed ranks' part is restored too, over the survivors after a shrink or into the
//! replacements after a REBUILD).
//!
//! Partitionings of a communicator are made over [`Communicator::group`] (its live members,
//! with the communicator generation's message generation), so the switches of a new
//! generation never match messages of an old one. A switch runs through
//! [`Communicator::with_transport`]: a member's failure or a revoke interrupts it at every
//! member, with the communicator's error naming the failed rank.
//!
//! After a failure, every survivor recovers the communicator (`shrink`) and then, for each
//! container and in the same order, calls either [`salvage`] or [`Checkpoints::restore`] with
//! the partitioning it wants over the new communicator. Both are collective on the new
//! communicator and work out who holds which values from information every survivor has (the
//! agreed members, the containers' switch counts, the last committed checkpoint), so every
//! survivor plans the same transition, even when the failure interrupted a switch on some
//! ranks after others completed it.
//!
//! Checkpoints follow the rules of [`crate::recover`]: a checkpoint is committed by an
//! agreement (every survivor keeps it, or every survivor keeps the previous one), and a
//! program whose operation fails outside an agreement calls [`crate::recover::abandon`]
//! before shrinking.

use ferry_coll::ReduceOp;
use ferry_core::{Element, Error, ErrorKind, Result};
use ferry_data::recovery::held_by_survivors;
use ferry_data::{Container, DataFlow, Partitioner, Partitioning, Range, Space, TaskRange};

use crate::{buddy, Communicator, FailureMode};

mod rebuild;

/// Tag of the buddy copy of a container checkpoint (the communicator's user tags; apart from
/// [`crate::Recoverable`]'s).
const TAG_BUDDY: u32 = 0x7e20_0000;

/// A partitioning of `space` by `partitioner` over the live members of `comm`.
pub fn partitioning(
    comm: &Communicator,
    space: &Space,
    partitioner: &Partitioner,
) -> Result<Partitioning> {
    Partitioning::new(space, comm.group(), partitioner).map_err(|e| e.or_rank(comm.world_rank()))
}

/// Switches `c` to `to` (a partitioning over `comm`'s members) like
/// [`Container::switch_to`], under the failure rules of `comm`: a member's failure or a
/// revoke interrupts it with the communicator's error. A switch interrupted on this rank
/// leaves the container in its previous partitioning, unchanged.
pub fn switch<T: Element>(
    comm: &Communicator,
    c: &mut Container<T>,
    to: &Partitioning,
    flow: DataFlow,
    op: Option<&ReduceOp<T>>,
) -> Result<()> {
    check_members(comm, to, "switch")?;
    comm.with_transport("switch", |t| c.switch_to(t, to, flow, op))
}

fn check_members(comm: &Communicator, p: &Partitioning, op: &'static str) -> Result<()> {
    let live = comm.group();
    if let Some(&w) = p
        .group()
        .members()
        .iter()
        .find(|&&w| live.index_of(w).is_none())
    {
        return Err(Error::invalid(
            op,
            format!(
                "partitioning `{}` has world rank {w}, which is not a live member of \
                 communicator generation {} {:?}: make partitionings over the recovered \
                 communicator's group",
                p.name(),
                comm.generation(),
                live.members()
            ),
        )
        .on_rank(comm.world_rank())
        .with_peer(w));
    }
    Ok(())
}

/// What [`salvage`] could not carry over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// Indexes of the space no survivor held (disjoint boxes): their values were lost with the
    /// failed ranks and are unspecified in the container now; the program recomputes them,
    /// rolls back to a checkpoint ([`Checkpoints`]) or gives up.
    pub lost: Vec<Range>,
    /// World ranks that held part of the container and are not members any more.
    pub failed: Vec<usize>,
    /// How many switches of the container the survivors were apart when they stopped
    /// (largest minus smallest [`Container::switch_count`]): 0 means every survivor
    /// contributed values of the same point of the program. A failure that interrupts a
    /// switch leaves them apart, by more than one when ranks that exchanged nothing with the
    /// failed one ran ahead; values that switches between those points changed (a
    /// reduction, `DataFlow::None`, or the program's own writes) then differ in version.
    pub switches_apart: u64,
}

/// Numbers per range in [`salvage`]'s exchange: dims, from, to.
const RANGE_WORDS: usize = 7;

/// Collective on `comm` after a shrink: carries `c` over to partitioning `to` of `comm`. Every
/// survivor contributes the values of the ranges it holds now (whatever partitioning its
/// container is in: a failure may have interrupted a switch on some ranks and not on others),
/// they move to their owners in `to`, and the part only failed ranks held is lost
/// ([`Salvaged::lost`] names it; nothing brings it back without a copy, which is what
/// [`Checkpoints`] keeps). The survivors learn who holds what from each other (two
/// allreduces over `comm`), so they all plan the same switch.
pub fn salvage<T: Element>(
    comm: &Communicator,
    c: &mut Container<T>,
    to: &Partitioning,
) -> Result<Salvaged> {
    let me = comm.world_rank();
    check_members(comm, to, "salvage")?;
    let group = comm.group().clone();
    let (Some(current), Some(my_index)) = (c.partitioning().cloned(), group.index_of(me)) else {
        return Err(Error::invalid(
            "salvage",
            format!(
                "`{}` has no partitioning to carry over, or this rank is no live member",
                c.name()
            ),
        )
        .on_rank(me));
    };
    let mine: Vec<Range> = current.rank_ranges(me).iter().map(|t| t.range).collect();
    let n = group.size();
    // Per survivor: how many ranges it holds, and its switch count.
    let mut counts = vec![0i64; 2 * n];
    counts[my_index] = mine.len() as i64;
    counts[n + my_index] = c.switch_count() as i64;
    comm.allreduce(&mut counts, &ReduceOp::Sum)?;
    let per: Vec<usize> = counts[..n].iter().map(|&k| k.max(0) as usize).collect();
    let switches = &counts[n..];
    let apart = switches.iter().max().unwrap_or(&0) - switches.iter().min().unwrap_or(&0);
    let at: usize = per[..my_index].iter().sum();
    let total: usize = per.iter().sum();
    // Every survivor's ranges, each in its slot (the others add zeros).
    let mut words = vec![0i64; total * RANGE_WORDS];
    for (k, r) in mine.iter().enumerate() {
        let w = &mut words[(at + k) * RANGE_WORDS..(at + k + 1) * RANGE_WORDS];
        w[0] = r.dims() as i64;
        w[1..4].copy_from_slice(&r.from());
        w[4..7].copy_from_slice(&r.to());
    }
    comm.allreduce(&mut words, &ReduceOp::Sum)?;
    let mut held = Vec::with_capacity(n);
    let mut next = 0;
    for (t, &k) in per.iter().enumerate() {
        let mut rs = Vec::with_capacity(k);
        for w in words[next * RANGE_WORDS..(next + k) * RANGE_WORDS].chunks_exact(RANGE_WORDS) {
            let from = [w[1], w[2], w[3]];
            let to = [w[4], w[5], w[6]];
            rs.push(Range::from_corners(w[0] as usize, from, to).map_err(|e| {
                e.context("salvage: a survivor's range")
                    .on_rank(me)
                    .with_peer(group.member(t))
            })?);
        }
        next += k;
        held.push((group.member(t), rs));
    }
    let (kept, lost) = held_by_survivors(c.space(), &group, &held)
        .map_err(|e| e.context("salvage").or_rank(me))?;
    let mut failed: Vec<usize> = current
        .group()
        .members()
        .iter()
        .copied()
        .filter(|&w| group.index_of(w).is_none())
        .collect();
    failed.sort_unstable();
    c.assume(&kept, None)?;
    switch(comm, c, to, DataFlow::Preserve, None)?;
    Ok(Salvaged {
        lost,
        failed,
        switches_apart: apart.max(0) as u64,
    })
}

/// A recovery point of a container.
struct Saved<T> {
    epoch: u64,
    /// World ranks of the communicator when it was taken, in communicator order (the ring).
    members: Vec<usize>,
    /// The container's partitioning when it was taken.
    part: Partitioning,
    /// This rank's values ([`Container::owned_values`]).
    own: Vec<T>,
    /// The previous member's values (empty with one member).
    buddy: Vec<T>,
}

/// Makes a `ferry_data` container recoverable (F6, issue 08): at a checkpoint every member
/// keeps a copy of its part of the container and sends one to its buddy (the next member of
/// the communicator); after a failure and a shrink, [`Checkpoints::restore`] brings every
/// part of the last checkpoint back from whoever holds it (the owner, or else its buddy) and
/// switches the container to the partitioning the program asks for over the survivors. After
/// a REBUILD (every member calls `restore`, the replacements with a fresh `Checkpoints`), each
/// replacement gets its part and its buddy copy back from its neighbours in the ring, so the
/// job holds two copies of every part again, and the container switches to the partitioning
/// asked for over the rebuilt communicator.
///
/// A part is lost only if a rank and its buddy both fail before a checkpoint re-established
/// the copies; then `restore` fails on every survivor naming them. Memory: two copies of this
/// rank's part (own and buddy), plus one transient copy during a checkpoint.
pub struct Checkpoints<T: Element> {
    name: String,
    saved: Option<Saved<T>>,
}

impl<T: Element> Checkpoints<T> {
    /// No checkpoint yet; `name` appears in errors.
    pub fn new(name: impl Into<String>) -> Checkpoints<T> {
        Checkpoints {
            name: name.into(),
            saved: None,
        }
    }

    /// Epoch of the checkpoint in force, if any.
    pub fn epoch(&self) -> Option<u64> {
        self.saved.as_ref().map(|s| s.epoch)
    }

    /// Bytes this rank holds for recovery (its own copy and its buddy's).
    pub fn held_bytes(&self) -> usize {
        self.saved.as_ref().map_or(0, |s| {
            (s.own.len() + s.buddy.len()) * std::mem::size_of::<T>()
        })
    }

    fn refuse(&self, comm: &Communicator, op: &'static str) -> Result<()> {
        buddy::refuse(comm, op, &format!("checkpoints of `{}`", self.name))
    }

    /// Collective on `comm`: makes the values `c` holds now (in its current partitioning, over
    /// `comm`'s members) the recovery point `epoch`. On success every surviving member holds
    /// the new checkpoint; on a failure (the error names it) every surviving member keeps the
    /// previous one, and the program recovers as after any failure (shrink, no
    /// [`crate::recover::abandon`]: the checkpoint's agreement took place).
    pub fn checkpoint(&mut self, comm: &Communicator, epoch: u64, c: &Container<T>) -> Result<()> {
        self.refuse(comm, "checkpoint")?;
        let me = comm.world_rank();
        let part = c.partitioning().cloned().ok_or_else(|| {
            Error::invalid(
                "checkpoint",
                format!("`{}` has no partitioning to checkpoint", c.name()),
            )
            .on_rank(me)
        })?;
        check_members(comm, &part, "checkpoint")?;
        let own = c.owned_values()?;
        let prev_len = |prev: usize| part.rank_count(comm.members()[prev]) as usize;
        let what = format!("checkpoints of `{}`", self.name);
        let buddy = buddy::exchange_and_commit(comm, TAG_BUDDY, &own, prev_len, epoch, &what)?;
        self.saved = Some(Saved {
            epoch,
            members: comm.members().to_vec(),
            part,
            own,
            buddy,
        });
        Ok(())
    }

    /// Collective on `comm` after a shrink or a rebuild: puts the values of the last
    /// checkpoint into `c` and switches it to `to` (a partitioning over `comm`'s members);
    /// returns the checkpoint's epoch, to which the program rolls back. `None`: no checkpoint
    /// was ever committed; `c` is in `to` with unspecified values and the program starts over.
    /// Fails on every member, naming them, if parts were lost (a rank and its buddy both
    /// failed). On a REBUILD communicator the replacements call it too (see the type's doc).
    pub fn restore(
        &mut self,
        comm: &Communicator,
        c: &mut Container<T>,
        to: &Partitioning,
    ) -> Result<Option<u64>> {
        self.refuse(comm, "restore")?;
        check_members(comm, to, "restore")?;
        if comm.options().failure == FailureMode::Rebuild {
            return self.restore_rebuilt(comm, c, to);
        }
        let me = comm.world_rank();
        let Some(s) = &self.saved else {
            c.assume(to, None)?;
            return Ok(None);
        };
        let group = comm.group();
        let n = s.members.len();
        let mut ranges = Vec::new();
        let mut values: Vec<T> = Vec::new();
        let mut lost = Vec::new();
        for (j, &w) in s.members.iter().enumerate() {
            let buddy = s.members[(j + 1) % n];
            let (holder, src) = if group.index_of(w).is_some() {
                (w, &s.own)
            } else if n > 1 && group.index_of(buddy).is_some() {
                (buddy, &s.buddy)
            } else {
                lost.push(w);
                continue;
            };
            let Some(task) = group.index_of(holder) else {
                continue;
            };
            for tr in s.part.rank_ranges(w) {
                ranges.push(TaskRange {
                    task,
                    range: tr.range,
                    group: 0,
                });
            }
            if holder == me {
                if src.len() as u64 != s.part.rank_count(w) {
                    return Err(Error::new(ErrorKind::Protocol, "restore")
                        .on_rank(me)
                        .with_detail(format!(
                            "checkpoints of `{}`: holds {} values of world rank {w}'s part, \
                             expected {}",
                            self.name,
                            src.len(),
                            s.part.rank_count(w)
                        )));
                }
                values.extend_from_slice(src);
            }
        }
        if !lost.is_empty() {
            let what = format!("checkpoints of `{}`", self.name);
            return Err(buddy::lost_parts(me, &lost, "failed", &what));
        }
        let held = Partitioning::from_ranges(c.space(), group, "restored", ranges)
            .map_err(|e| e.context("restore").or_rank(me))?;
        c.assume(&held, Some(&values))?;
        switch(comm, c, to, DataFlow::Preserve, None)?;
        Ok(Some(s.epoch))
    }
}

//! The buddy-checkpoint protocol steps that [`crate::Recoverable`] (a block-distributed array)
//! and [`crate::data::Checkpoints`] (a container) share: the ring copy of a checkpoint and
//! its commit, finding out after a REBUILD who still holds the checkpoint, and refilling the
//! members that lost their copies. Each caller names its data in errors with `what` (e.g.
//! "recoverable `x`"), so an error reads the same whichever type raised it.

use ferry_coll::ReduceOp;
use ferry_core::element::{as_bytes, copy_from_bytes};
use ferry_core::{Element, Error, ErrorKind, Result};

use crate::{Communicator, FailureMode};

/// Refuses `op` on a communicator whose failure mode leaves nobody to recover with.
pub(crate) fn refuse(comm: &Communicator, op: &'static str, what: &str) -> Result<()> {
    if !matches!(
        comm.options().failure,
        FailureMode::Shrink | FailureMode::Rebuild
    ) {
        return Err(Error::new(ErrorKind::Unsupported, op)
            .on_rank(comm.world_rank())
            .with_detail(format!(
                "{what}: buddy recovery needs a SHRINK or REBUILD communicator, this one is {:?}",
                comm.options().failure
            )));
    }
    Ok(())
}

/// Collective: sends `own` to the next member (its buddy) on `tag`, receives the previous
/// member's part (`prev_len(previous member's communicator rank)` elements), then commits
/// checkpoint `epoch` with an agreement so that every survivor keeps the new checkpoint or
/// every survivor keeps the previous one. Returns the buddy copy received (empty on a
/// communicator of one).
pub(crate) fn exchange_and_commit<T: Element>(
    comm: &Communicator,
    tag: u32,
    own: &[T],
    prev_len: impl FnOnce(usize) -> usize,
    epoch: u64,
    what: &str,
) -> Result<Vec<T>> {
    let me = comm.world_rank();
    let (n, i) = (comm.size(), comm.rank());
    let mut buddy = Vec::new();
    let sent = if n > 1 {
        let prev = (i + n - 1) % n;
        let mut buf = Vec::new();
        let r = comm.sendrecv(
            &[((i + 1) % n, tag, as_bytes(own))],
            &mut [(prev, tag, &mut buf)],
        );
        r.and_then(|()| {
            let from = comm.members()[prev];
            let len = prev_len(prev);
            buddy = vec![T::default(); len];
            if copy_from_bytes(&mut buddy, &buf) {
                Ok(())
            } else {
                Err(Error::new(ErrorKind::Protocol, "checkpoint")
                    .on_rank(me)
                    .with_peer(from)
                    .with_detail(format!(
                        "{what}: buddy copy of {} bytes, expected {}",
                        buf.len(),
                        len * std::mem::size_of::<T>()
                    )))
            }
        })
    } else {
        Ok(())
    };
    if sent.is_err() {
        // Members still waiting for this rank's copy must not wait for ever.
        comm.revoke()?;
    }
    // The commit: every survivor decides the same, so all keep the new checkpoint or all
    // keep the previous one.
    let (all, failed) = comm.agree(u64::from(sent.is_ok()))?;
    if all & 1 == 0 {
        sent?;
        let detail = format!(
            "{what}: checkpoint {epoch} failed on another member (failed ranks {failed:?}); \
             the previous checkpoint stays"
        );
        return Err(match failed.first() {
            Some(&f) => Error::new(ErrorKind::PeerFailed, "checkpoint").with_peer(f),
            None => Error::new(ErrorKind::Revoked, "checkpoint"),
        }
        .on_rank(me)
        .with_detail(detail));
    }
    Ok(buddy)
}

/// The error of a restore that finds parts of world ranks `lost` (not empty) held by nobody:
/// each of them and its buddy `how` ("failed", "were replaced") before a checkpoint
/// re-established the copies.
pub(crate) fn lost_parts(me: usize, lost: &[usize], how: &str, what: &str) -> Error {
    Error::new(ErrorKind::Unsupported, "restore")
        .on_rank(me)
        .with_peer(lost[0])
        .with_detail(format!(
            "{what}: the checkpointed parts of world ranks {lost:?} are lost: each rank and its \
             buddy (the next member) {how} before a checkpoint re-established the copies"
        ))
}

/// Who holds the last checkpoint on a REBUILD communicator, as [`holders`] found out.
pub(crate) struct Holders {
    /// Per communicator rank: 1 + the epoch of its checkpoint, 0 without one.
    held: Vec<u64>,
    /// The first member that holds the checkpoint.
    pub(crate) root: usize,
    /// The checkpoint's epoch.
    pub(crate) epoch: u64,
}

impl Holders {
    /// Whether communicator rank `j` holds no checkpoint (a replacement, or one whose restore
    /// a later failure interrupted).
    pub(crate) fn fresh(&self, j: usize) -> bool {
        self.held[j] == 0
    }
}

/// Collective on a REBUILD communicator: finds out (one allreduce) which members hold a
/// checkpoint, rather than taking it from [`Communicator::replaced`], so that a member that
/// lost its copies in any way is served like a replacement. `mine` is this member's
/// checkpoint epoch. `None`: nobody holds one. Fails if members hold different epochs, or if
/// a part and its buddy copy are both gone.
pub(crate) fn holders(
    comm: &Communicator,
    mine: Option<u64>,
    what: &str,
) -> Result<Option<Holders>> {
    let me = comm.world_rank();
    let members = comm.members();
    let (n, i) = (comm.size(), comm.rank());
    let mut held = vec![0u64; n];
    held[i] = mine.map_or(0, |e| e.saturating_add(1));
    comm.allreduce(&mut held, &ReduceOp::Max)?;
    let Some(root) = held.iter().position(|&h| h != 0) else {
        return Ok(None);
    };
    let epoch = held[root] - 1;
    if let Some(j) = held.iter().position(|&h| h != 0 && h != held[root]) {
        return Err(Error::new(ErrorKind::Protocol, "restore")
            .on_rank(me)
            .with_peer(members[j])
            .with_detail(format!(
                "{what}: members hold different checkpoints (epoch {epoch} at world rank {}, \
                 {} at world rank {})",
                members[root],
                held[j] - 1,
                members[j]
            )));
    }
    let h = Holders { held, root, epoch };
    let lost: Vec<usize> = (0..n)
        .filter(|&j| h.fresh(j) && (n == 1 || h.fresh((j + 1) % n)))
        .map(|j| members[j])
        .collect();
    if !lost.is_empty() {
        return Err(lost_parts(me, &lost, "were replaced", what));
    }
    Ok(Some(h))
}

/// What a member brings to [`refill`]: the checkpoint's copies it holds (its own part, its
/// predecessor's part), or the lengths of those it wants back.
pub(crate) enum Copies<'a, T> {
    Held(&'a [T], &'a [T]),
    Wanted((usize, usize)),
}

/// After a REBUILD, gives every member that holds no checkpoint copies (`fresh`, by
/// communicator rank) its own part from its buddy (the next member) and, from its predecessor,
/// the predecessor's part that it held as buddy; a holder sends what its fresh neighbours
/// need. Tags: `tags.0` plus the receiver's rank for the own part, `tags.1` plus the
/// sender's rank for the buddy copy. Returns the received (own, buddy) copies in a fresh
/// member, `None` in a holder. `what` names the data in errors. The caller has checked that
/// no two neighbours are both fresh (their parts would be lost).
pub(crate) fn refill<T: Element>(
    comm: &Communicator,
    fresh: &dyn Fn(usize) -> bool,
    mine: Copies<'_, T>,
    tags: (u32, u32),
    what: &str,
) -> Result<Option<(Vec<T>, Vec<T>)>> {
    let (n, i) = (comm.size(), comm.rank());
    let (next, prev) = ((i + 1) % n, (i + n - 1) % n);
    let (own_len, buddy_len) = match mine {
        Copies::Held(own, buddy) => {
            let mut sends: Vec<(usize, u32, &[u8])> = Vec::new();
            if fresh(prev) {
                sends.push((prev, tags.0 + prev as u32, as_bytes(buddy)));
            }
            if fresh(next) {
                sends.push((next, tags.1 + i as u32, as_bytes(own)));
            }
            if !sends.is_empty() {
                comm.sendrecv(&sends, &mut [])?;
            }
            return Ok(None);
        }
        Copies::Wanted(lens) => lens,
    };
    let (mut own_buf, mut buddy_buf) = (Vec::new(), Vec::new());
    comm.sendrecv(
        &[],
        &mut [
            (next, tags.0 + i as u32, &mut own_buf),
            (prev, tags.1 + prev as u32, &mut buddy_buf),
        ],
    )?;
    let mut own = vec![T::default(); own_len];
    let mut buddy = vec![T::default(); buddy_len];
    for (dst, buf, from) in [(&mut own, &own_buf, next), (&mut buddy, &buddy_buf, prev)] {
        if !copy_from_bytes(dst, buf) {
            return Err(Error::new(ErrorKind::Protocol, "restore")
                .on_rank(comm.world_rank())
                .with_peer(comm.members()[from])
                .with_detail(format!(
                    "{what}: {} bytes of a checkpoint copy, expected {}",
                    buf.len(),
                    std::mem::size_of_val(dst.as_slice())
                )));
        }
    }
    Ok(Some((own, buddy)))
}

#[cfg(test)]
mod tests {
    use ferry_core::mem::MemTransport;

    use super::holders;
    use crate::recover::rebuild::tests::rebuild_comm;

    /// `holders` on 4 members holding the given epochs: its result, or its error's text.
    fn holders_of(epochs: [Option<u64>; 4]) -> Vec<Result<Option<(usize, u64)>, String>> {
        MemTransport::run(4, move |t| {
            let comm = rebuild_comm(t);
            holders(&comm, epochs[comm.rank()], "t")
                .map(|h| h.map(|h| (h.root, h.epoch)))
                .map_err(|e| e.to_string())
        })
    }

    #[test]
    fn the_first_holder_and_its_epoch_are_found_by_every_member() {
        for r in holders_of([None, Some(7), None, Some(7)]) {
            assert_eq!(r, Ok(Some((1, 7))));
        }
        for r in holders_of([None; 4]) {
            assert_eq!(r, Ok(None));
        }
    }

    #[test]
    fn differing_epochs_and_lost_parts_fail_on_every_member() {
        for r in holders_of([Some(3), Some(4), Some(3), Some(3)]) {
            let e = r.unwrap_err();
            assert!(
                e.contains("t: members hold different checkpoints (epoch 3 at world rank 0, 4 at world rank 1)"),
                "{e}"
            );
        }
        // Rank 1 and its buddy (rank 2) hold nothing: rank 1's part is gone.
        for r in holders_of([Some(3), None, None, Some(3)]) {
            let e = r.unwrap_err();
            assert!(
                e.contains("t: the checkpointed parts of world ranks [1] are lost")
                    && e.contains("were replaced before"),
                "{e}"
            );
        }
    }
}

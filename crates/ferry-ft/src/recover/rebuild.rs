//! Restoring a [`Recoverable`] after a REBUILD: the communicator kept its size and layout, so
//! the survivors keep their parts, and each replacement gets its own part from its buddy (the
//! next member, which holds the checkpoint's copy of it) and the copy of its predecessor's
//! part that it held as buddy, so that every part has two holders again at once. A member
//! holds no checkpoint if it is a replacement, or a replacement whose restore a later failure
//! interrupted: the members find out who holds one (an allreduce) and serve every member
//! without one alike.

use ferry_coll::ReduceOp;
use ferry_core::element::{as_bytes, copy_from_bytes};
use ferry_core::{Element, Error, ErrorKind, Result};

use super::{block_range, Checkpoint, Recoverable, Restored, TAG_RESTORE};
use crate::Communicator;

/// Tags of the buddy copies a replacement gets back: this base plus its predecessor's rank.
const TAG_BUDDY_BACK: u32 = 0x7e20_0000;

impl<T: Element> Recoverable<T> {
    /// [`Recoverable::restore`] on a communicator made by a rebuild (see the module doc).
    pub(super) fn restore_rebuilt(&mut self, comm: &Communicator) -> Result<Restored<T>> {
        let me = comm.world_rank();
        let (n, i) = (comm.size(), comm.rank());
        let members = comm.members();
        let range = self.range(comm);
        let u = self.unit_len;
        let part_len = |j: usize| block_range(self.units, n, j).len() * u;
        if let Some(ck) = &self.ckpt {
            if ck.members != members || ck.own.len() != range.len() * u {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_detail(format!(
                        "recoverable `{}`: the checkpoint was taken on members {:?}, the \
                         rebuilt communicator has {members:?}",
                        self.name, ck.members
                    )));
            }
        }
        // Who holds the checkpoint is found out rather than taken from `replaced()`: a
        // replacement whose own restore a later failure interrupted holds none either.
        // Per member: 1 + the epoch of its checkpoint, 0 without one.
        let mut held = vec![0u64; n];
        held[i] = self.ckpt.as_ref().map_or(0, |c| c.epoch.saturating_add(1));
        comm.allreduce(&mut held, &ReduceOp::Max)?;
        let Some(root) = held.iter().position(|&h| h != 0) else {
            // No checkpoint was ever completed (or nobody kept one): everybody starts again.
            self.ckpt = None;
            return Ok(Restored {
                epoch: None,
                range: range.clone(),
                data: vec![T::default(); range.len() * u],
            });
        };
        let epoch = held[root] - 1;
        if let Some(j) = held.iter().position(|&h| h != 0 && h != held[root]) {
            return Err(Error::new(ErrorKind::Protocol, "restore")
                .on_rank(me)
                .with_peer(members[j])
                .with_detail(format!(
                    "recoverable `{}`: members hold different checkpoints (epoch {epoch} at \
                     world rank {}, {} at world rank {})",
                    self.name,
                    members[root],
                    held[j] - 1,
                    members[j]
                )));
        }
        let fresh = |j: usize| held[j] == 0;
        let lost: Vec<usize> = (0..n)
            .filter(|&j| fresh(j) && (n == 1 || fresh((j + 1) % n)))
            .map(|j| members[j])
            .collect();
        if !lost.is_empty() {
            return Err(Error::new(ErrorKind::Unsupported, "restore")
                .on_rank(me)
                .with_peer(lost[0])
                .with_detail(format!(
                    "recoverable `{}`: the checkpointed parts of world ranks {lost:?} are lost: \
                     each rank and its buddy (the next member) were replaced before a \
                     checkpoint re-established the copies",
                    self.name
                )));
        }
        let prev = (i + n - 1) % n;
        if !fresh(i) {
            let Some(ck) = &self.ckpt else {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_detail(format!(
                        "recoverable `{}`: this survivor holds no checkpoint, member {root} \
                         holds epoch {epoch}",
                        self.name
                    )));
            };
            let tags = (TAG_RESTORE, TAG_BUDDY_BACK);
            let what = format!("recoverable `{}`", self.name);
            refill(comm, &fresh, Copies::Held(&ck.own, &ck.buddy), tags, &what)?;
            return Ok(Restored {
                epoch: Some(epoch),
                range,
                data: ck.own.clone(),
            });
        }
        let tags = (TAG_RESTORE, TAG_BUDDY_BACK);
        let what = format!("recoverable `{}`", self.name);
        let lens = (part_len(i), part_len(prev));
        let Some((own, buddy)) = refill(comm, &fresh, Copies::Wanted(lens), tags, &what)? else {
            return Err(Error::new(ErrorKind::Protocol, "restore").on_rank(me));
        };
        self.ckpt = Some(Checkpoint {
            epoch,
            members: members.to_vec(),
            own: own.clone(),
            buddy,
        });
        Ok(Restored {
            epoch: Some(epoch),
            range,
            data: own,
        })
    }
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
pub(crate) mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use ferry_core::mem::MemTransport;
    use ferry_core::store::MemStore;

    use crate::rebuild::Respawn;
    use crate::{Communicator, FailureMode, MessageMode, Options, Recoverable};

    /// A REBUILD communicator over an in-process transport (its respawn service is never
    /// asked: these tests do not rebuild, they restore).
    pub(crate) fn rebuild_comm(t: MemTransport) -> Communicator {
        let opts = Options::new(FailureMode::Rebuild, MessageMode::Cont);
        let never = Box::new(
            |_: &ferry_core::respawn::EpochRecord,
             _: Arc<ferry_core::respawn::boot::EpochWatch>| {
                Err(ferry_core::Error::invalid("build", "not in this test"))
            },
        );
        let service = Respawn::new(
            Arc::new(MemStore::new()),
            never,
            Duration::from_secs(1),
            None,
        );
        Communicator::with_respawn(Box::new(t), opts, service).unwrap()
    }

    #[test]
    fn members_without_a_checkpoint_get_theirs_back_whoever_the_rebuild_replaced() {
        // Ranks 0 and 2 lost their copies (a new process, and one whose own restore a later
        // failure interrupted), although the communicator names no replaced rank: the others
        // still serve them, and all four hold their part and their buddy's again.
        let out = MemTransport::run(4, |t| {
            let comm = rebuild_comm(t);
            let me = comm.rank();
            let mut r = Recoverable::<u64>::new("t", 8, 3);
            let part: Vec<u64> = r.range(&comm).flat_map(|u| [u as u64; 3]).collect();
            r.checkpoint(&comm, 10, &part).unwrap();
            if me == 0 || me == 2 {
                r = Recoverable::new("t", 8, 3);
            }
            let got = r.restore(&comm).unwrap();
            (got.epoch, got.data == part, r.held_bytes())
        });
        for (rank, (epoch, same, held)) in out.into_iter().enumerate() {
            assert_eq!(epoch, Some(10), "rank {rank}");
            assert!(same, "rank {rank}");
            assert_eq!(held, 2 * 2 * 3 * 8, "rank {rank}: its part and its buddy's");
        }
    }
}

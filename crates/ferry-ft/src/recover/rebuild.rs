//! Restoring a [`Recoverable`] after a REBUILD: the communicator kept its size and layout, so
//! the survivors keep their parts, and each replacement gets its own part from its buddy (the
//! next member, which holds the checkpoint's copy of it) and the copy of its predecessor's
//! part that it held as buddy, so that every part has two holders again at once. A member
//! holds no checkpoint if it is a replacement, or a replacement whose restore a later failure
//! interrupted: the members find out who holds one (an allreduce) and serve every member
//! without one alike.

use ferry_core::{Element, Error, ErrorKind, Result};

use super::{block_range, Checkpoint, Recoverable, Restored, TAG_RESTORE};
use crate::buddy::{self, refill, Copies};
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
        let what = format!("recoverable `{}`", self.name);
        let mine = self.ckpt.as_ref().map(|c| c.epoch);
        let Some(h) = buddy::holders(comm, mine, &what)? else {
            // No checkpoint was ever completed (or nobody kept one): everybody starts again.
            self.ckpt = None;
            return Ok(Restored {
                epoch: None,
                range: range.clone(),
                data: vec![T::default(); range.len() * u],
            });
        };
        let (root, epoch) = (h.root, h.epoch);
        let fresh = |j: usize| h.fresh(j);
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
            refill(comm, &fresh, Copies::Held(&ck.own, &ck.buddy), tags, &what)?;
            return Ok(Restored {
                epoch: Some(epoch),
                range,
                data: ck.own.clone(),
            });
        }
        let tags = (TAG_RESTORE, TAG_BUDDY_BACK);
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

//! Data-level recovery (F6, issue 08): a block-distributed array whose parts survive the loss
//! of ranks, by buddy checkpoints in memory.
//!
//! The array has `units` units (rows, for a 2d grid) of `unit_len` elements, distributed in
//! contiguous blocks over the members of a SHRINK communicator in their order
//! ([`block_range`]). At a checkpoint every member keeps a copy of its own part and sends one to
//! its *buddy*, the next member in the ring; the checkpoint becomes the new recovery point only
//! if every surviving member took it (an agreement), so a failure during a checkpoint leaves the
//! previous one in force everywhere. After a failure and a shrink, [`Recoverable::restore`]
//! moves every part of the last checkpoint from whoever still holds it (its owner, or the
//! owner's buddy) to the survivors, repartitioned in blocks over the new communicator, and says
//! which checkpoint that was; the program rolls back to it, and should take a checkpoint at
//! once so that every part has a buddy copy again before the next failure.
//!
//! Agreements are matched by their order on a communicator, so every survivor must call the
//! same sequence of them. A checkpoint ends in one (its commit): a failure error returned by
//! [`Recoverable::checkpoint`] comes after it. A program whose operation fails anywhere else
//! calls [`abandon`] (revoke, then join the agreement the other members are in, or will be in,
//! with "failed"), and then, like after a failed checkpoint, shrinks; so a survivor waiting in
//! a checkpoint's commit and one that failed in the computation meet in the same agreement.
//! Other program-level agreements follow the same rule (decide with every member, and on a
//! failure outside them call [`abandon`]).
//!
//! A part is lost only if its owner and the owner's buddy both fail between two checkpoints
//! (two neighbours in the ring); then `restore` fails on every survivor with an error naming
//! both. Memory: two copies of the local part (own and buddy), plus one transient copy during a
//! checkpoint.

use std::ops::Range;

use ferry_core::element::{as_bytes, copy_from_bytes};
use ferry_core::{Element, Error, ErrorKind, Result};

use crate::{buddy, Communicator, FailureMode};

pub(crate) mod rebuild;

/// Tag of the buddy copy sent at a checkpoint (the communicator's user tags).
const TAG_BUDDY: u32 = 0x7e00_0000;
/// Tags of the restore messages: this base plus the old rank whose part travels.
const TAG_RESTORE: u32 = 0x7e10_0000;

/// Units `[from, to)` of member `index` of `parts` when `units` are split in contiguous blocks
/// (the first `units % parts` members get one more).
pub fn block_range(units: usize, parts: usize, index: usize) -> Range<usize> {
    if parts == 0 {
        return 0..0;
    }
    let base = units / parts;
    let extra = units % parts;
    let from = index * base + index.min(extra);
    let len = base + usize::from(index < extra);
    from..from + len
}

/// The way out of a failure outside an agreement point (see the module doc): revokes `comm`
/// so that every member's pending operations fail, then joins the members' next agreement
/// with "failed". Afterwards the program shrinks `comm` and restores.
pub fn abandon(comm: &Communicator) -> Result<()> {
    comm.revoke()?;
    comm.agree(0)?;
    Ok(())
}

/// A recovery point: the layout it was taken in and the two copies this rank holds.
struct Checkpoint<T> {
    /// What the program said it is (e.g. the iteration number).
    epoch: u64,
    /// World ranks of the communicator members when it was taken, in communicator order.
    members: Vec<usize>,
    /// This rank's part.
    own: Vec<T>,
    /// The part of the previous member in the ring (`me - 1`), empty with one member.
    buddy: Vec<T>,
}

/// The result of [`Recoverable::restore`].
#[derive(Debug)]
pub struct Restored<T> {
    /// Epoch of the checkpoint rolled back to; `None` if no checkpoint was ever completed
    /// (the program starts again from its initial state).
    pub epoch: Option<u64>,
    /// Units this rank owns now ([`block_range`] over the new communicator).
    pub range: Range<usize>,
    /// Their data (`range.len() * unit_len` elements; default values if `epoch` is `None`).
    pub data: Vec<T>,
}

/// A block-distributed array made recoverable by buddy checkpoints (see the module doc).
pub struct Recoverable<T: Element> {
    name: String,
    units: usize,
    unit_len: usize,
    ckpt: Option<Checkpoint<T>>,
}

impl<T: Element> Recoverable<T> {
    /// Declares an array of `units` units of `unit_len` elements recoverable; `name` appears in
    /// errors. Nothing is held until the first checkpoint.
    pub fn new(name: impl Into<String>, units: usize, unit_len: usize) -> Recoverable<T> {
        Recoverable {
            name: name.into(),
            units,
            unit_len,
            ckpt: None,
        }
    }

    /// Units this rank owns on `comm`.
    pub fn range(&self, comm: &Communicator) -> Range<usize> {
        block_range(self.units, comm.size(), comm.rank())
    }

    /// Epoch of the checkpoint in force, if any.
    pub fn epoch(&self) -> Option<u64> {
        self.ckpt.as_ref().map(|c| c.epoch)
    }

    /// Bytes this rank holds for recovery (its own copy and its buddy's).
    pub fn held_bytes(&self) -> usize {
        self.ckpt.as_ref().map_or(0, |c| {
            (c.own.len() + c.buddy.len()) * std::mem::size_of::<T>()
        })
    }

    fn refuse(&self, comm: &Communicator, op: &'static str) -> Result<()> {
        buddy::refuse(comm, op, &format!("recoverable `{}`", self.name))
    }

    /// Collective: makes `mine` (this rank's part in the layout of `comm`, see
    /// [`Recoverable::range`]) the recovery point `epoch`. On success every surviving member
    /// holds the new checkpoint; on a failure (the error names it) every surviving member
    /// keeps the previous one and the program recovers as after any failure.
    pub fn checkpoint(&mut self, comm: &Communicator, epoch: u64, mine: &[T]) -> Result<()> {
        self.refuse(comm, "checkpoint")?;
        let me = comm.world_rank();
        let want = self.range(comm).len() * self.unit_len;
        if mine.len() != want {
            return Err(Error::invalid(
                "checkpoint",
                format!(
                    "recoverable `{}`: {} elements given, this rank's part has {want}",
                    self.name,
                    mine.len()
                ),
            )
            .on_rank(me));
        }
        let n = comm.size();
        let prev_len = |prev: usize| block_range(self.units, n, prev).len() * self.unit_len;
        let what = format!("recoverable `{}`", self.name);
        let buddy = buddy::exchange_and_commit(comm, TAG_BUDDY, mine, prev_len, epoch, &what)?;
        self.ckpt = Some(Checkpoint {
            epoch,
            members: comm.members().to_vec(),
            own: mine.to_vec(),
            buddy,
        });
        Ok(())
    }

    /// Collective on the communicator after a shrink: brings the parts of the last checkpoint
    /// to the survivors in the block layout of `comm` (see the module doc). After a REBUILD
    /// (every member calls it, replacements included) each replacement gets its part from its
    /// buddy, the survivors keep theirs.
    pub fn restore(&mut self, comm: &Communicator) -> Result<Restored<T>> {
        self.refuse(comm, "restore")?;
        if comm.options().failure == FailureMode::Rebuild {
            return self.restore_rebuilt(comm);
        }
        let me = comm.world_rank();
        let range = self.range(comm);
        let mut data = vec![T::default(); range.len() * self.unit_len];
        let Some(ck) = &self.ckpt else {
            return Ok(Restored {
                epoch: None,
                range,
                data,
            });
        };
        let old_n = ck.members.len();
        let live = |w: usize| comm.members().iter().position(|&m| m == w);
        // Who holds each old part (communicator rank on `comm`), and whether as buddy copy.
        let mut holders = Vec::with_capacity(old_n);
        let mut lost = Vec::new();
        for j in 0..old_n {
            let owner = ck.members[j];
            let buddy = ck.members[(j + 1) % old_n];
            match (live(owner), live(buddy)) {
                (Some(k), _) => holders.push((k, false)),
                (None, Some(k)) if old_n > 1 => holders.push((k, true)),
                _ => {
                    lost.push(owner);
                    holders.push((usize::MAX, false));
                }
            }
        }
        if !lost.is_empty() {
            let what = format!("recoverable `{}`", self.name);
            return Err(buddy::lost_parts(me, &lost, "failed", &what));
        }
        let (n, i) = (comm.size(), comm.rank());
        let u = self.unit_len;
        let overlap = |a: &Range<usize>, b: &Range<usize>| a.start.max(b.start)..a.end.min(b.end);
        let mut sends: Vec<(usize, u32, &[u8])> = Vec::new();
        let mut recvs: Vec<(usize, u32, Range<usize>, Vec<u8>)> = Vec::new();
        for (j, &(holder, as_buddy)) in holders.iter().enumerate() {
            let part = block_range(self.units, old_n, j);
            let tag = TAG_RESTORE + j as u32;
            if holder != i {
                let o = overlap(&part, &range);
                if !o.is_empty() {
                    recvs.push((holder, tag, o, Vec::new()));
                }
                continue;
            }
            let src = if as_buddy { &ck.buddy } else { &ck.own };
            if src.len() != part.len() * u {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_detail(format!(
                        "recoverable `{}`: holds {} elements of old part {j}, expected {}",
                        self.name,
                        src.len(),
                        part.len() * u
                    )));
            }
            for k in 0..n {
                let o = overlap(&part, &block_range(self.units, n, k));
                if o.is_empty() {
                    continue;
                }
                let s = &src[(o.start - part.start) * u..(o.end - part.start) * u];
                if k == i {
                    data[(o.start - range.start) * u..(o.end - range.start) * u].copy_from_slice(s);
                } else {
                    sends.push((k, tag, as_bytes(s)));
                }
            }
        }
        let mut rv: Vec<(usize, u32, &mut Vec<u8>)> = recvs
            .iter_mut()
            .map(|(holder, tag, _, buf)| (*holder, *tag, buf))
            .collect();
        comm.sendrecv(&sends, &mut rv)?;
        drop(rv);
        for (holder, _, o, buf) in &recvs {
            let dst = &mut data[(o.start - range.start) * u..(o.end - range.start) * u];
            if !copy_from_bytes(dst, buf) {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_peer(comm.members()[*holder])
                    .with_detail(format!(
                        "recoverable `{}`: {} bytes for units {o:?}, expected {}",
                        self.name,
                        buf.len(),
                        std::mem::size_of_val(dst)
                    )));
            }
        }
        Ok(Restored {
            epoch: Some(ck.epoch),
            range,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::block_range;

    #[test]
    fn blocks_cover_every_unit_once_in_order() {
        for units in 0..40 {
            for parts in 1..9 {
                let mut next = 0;
                for i in 0..parts {
                    let r = block_range(units, parts, i);
                    assert_eq!(r.start, next);
                    assert!(r.len() + 1 >= units / parts && r.len() <= units / parts + 1);
                    next = r.end;
                }
                assert_eq!(next, units);
            }
        }
    }
}

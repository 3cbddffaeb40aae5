//! Restoring a [`Recoverable`] after a REBUILD: the communicator kept its size and layout, so
//! the survivors keep their parts, and each replacement gets its own part from its buddy (the
//! next member, which holds the checkpoint's copy of it) and the copy of its predecessor's
//! part that it held as buddy, so that every part has two holders again at once.

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
        let fresh = |j: usize| comm.replaced().contains(&members[j]);
        let range = self.range(comm);
        let u = self.unit_len;
        let part_len = |j: usize| block_range(self.units, n, j).len() * u;
        // The epoch comes from the first survivor: a replacement knows none.
        let Some(root) = (0..n).find(|&j| !fresh(j)) else {
            return Err(Error::new(ErrorKind::Unsupported, "restore")
                .on_rank(me)
                .with_detail(format!(
                    "recoverable `{}`: every member is a new process, nobody holds a checkpoint",
                    self.name
                )));
        };
        if !fresh(i) {
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
        }
        let mut head = vec![0u8; 9];
        if let Some(ck) = self.ckpt.as_ref().filter(|_| !fresh(i)) {
            head[0] = 1;
            head[1..].copy_from_slice(&ck.epoch.to_le_bytes());
        }
        comm.broadcast(root, &mut head)?;
        let epoch = match head.as_slice() {
            [0, ..] => None,
            [1, rest @ ..] if rest.len() == 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(rest);
                Some(u64::from_le_bytes(b))
            }
            _ => {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_peer(members[root])
                    .with_detail(format!("a checkpoint header of {} bytes", head.len())))
            }
        };
        let Some(epoch) = epoch else {
            // No checkpoint was ever completed: everybody starts again.
            self.ckpt = None;
            return Ok(Restored {
                epoch: None,
                range: range.clone(),
                data: vec![T::default(); range.len() * u],
            });
        };
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

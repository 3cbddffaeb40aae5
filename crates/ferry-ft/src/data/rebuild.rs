//! Restoring a [`Checkpoints`] container after a REBUILD: the communicator kept its members
//! (the replacements took the failed ranks' numbers), so every part of the last checkpoint
//! goes back to its old owner. A survivor keeps its own copy; a member without a checkpoint (a
//! replacement, or a replacement whose own restore a later failure interrupted) gets its part
//! from its buddy (the next member, which holds the checkpoint's copy of it) and, from the
//! previous member, the copy of that member's part it held as buddy, so that every part has
//! two holders again before the program goes on. Then the container switches to the
//! partitioning the program asks for, as after a shrink.
//!
//! Who holds a checkpoint is not taken from [`Communicator::replaced`] but found out (one
//! allreduce), so a member that lost its copies in any way is served like a replacement. The
//! checkpoint's partitioning travels from the first holder to the others (one broadcast): a
//! new process cannot know how the container was partitioned when the checkpoint was taken.

use ferry_coll::Group;
use ferry_core::{Element, Error, ErrorKind, Result};
use ferry_data::{Container, DataFlow, Partitioning, Range, Space, TaskRange};

use super::{switch, Checkpoints, Saved};
use crate::buddy::{self, refill, Copies};
use crate::Communicator;

/// Tags of a member's own part coming back from its buddy: this base plus its rank.
const TAG_OWN_BACK: u32 = 0x7e30_0000;
/// Tags of the buddy copy coming back from the previous member: this base plus its rank.
const TAG_BUDDY_BACK: u32 = 0x7e40_0000;

/// Words per range of the checkpoint's partitioning: world rank, mapping group, dims, from
/// (3), to (3).
const WORDS: usize = 9;

impl<T: Element> Checkpoints<T> {
    /// [`Checkpoints::restore`] on a REBUILD communicator (see the module doc).
    pub(super) fn restore_rebuilt(
        &mut self,
        comm: &Communicator,
        c: &mut Container<T>,
        to: &Partitioning,
    ) -> Result<Option<u64>> {
        let me = comm.world_rank();
        let members = comm.members();
        let (n, i) = (comm.size(), comm.rank());
        if let Some(s) = &self.saved {
            if s.members != members {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_detail(format!(
                        "checkpoints of `{}`: the checkpoint was taken on members {:?}, the \
                         rebuilt communicator has {members:?}",
                        self.name, s.members
                    )));
            }
        }
        let what = format!("checkpoints of `{}`", self.name);
        let mine = self.saved.as_ref().map(|s| s.epoch);
        let Some(h) = buddy::holders(comm, mine, &what)? else {
            // No checkpoint was ever committed (or nobody kept one): the program starts over.
            self.saved = None;
            c.assume(to, None)?;
            return Ok(None);
        };
        let (root, epoch) = (h.root, h.epoch);
        let fresh = |j: usize| h.fresh(j);
        let mut head = match (&self.saved, i == root) {
            (Some(s), true) => encode_ranges(&s.part),
            _ => Vec::new(),
        };
        comm.broadcast(root, &mut head)?;
        let tags = (TAG_OWN_BACK, TAG_BUDDY_BACK);
        if !fresh(i) {
            let Some(s) = &self.saved else {
                return Err(Error::new(ErrorKind::Protocol, "restore")
                    .on_rank(me)
                    .with_detail("a holder without a checkpoint"));
            };
            refill(comm, &fresh, Copies::Held(&s.own, &s.buddy), tags, &what)?;
        } else {
            let part = decode_ranges(&head, c.space(), comm.group(), &self.name)
                .map_err(|e| e.or_rank(me).with_peer(members[root]))?;
            let prev = members[(i + n - 1) % n];
            let lens = (part.rank_count(me) as usize, part.rank_count(prev) as usize);
            let Some((own, buddy)) = refill(comm, &fresh, Copies::Wanted(lens), tags, &what)?
            else {
                return Err(Error::new(ErrorKind::Protocol, "restore").on_rank(me));
            };
            self.saved = Some(Saved {
                epoch,
                members: members.to_vec(),
                part,
                own,
                buddy,
            });
        }
        let Some(s) = &self.saved else {
            return Err(Error::new(ErrorKind::Protocol, "restore").on_rank(me));
        };
        // Every member holds its own part of the checkpoint now, in the checkpoint's layout.
        let held = s
            .part
            .migrate(comm.group())
            .map_err(|e| e.context("restore").or_rank(me))?;
        c.assume(&held, Some(&s.own))?;
        switch(comm, c, to, DataFlow::Preserve, None)?;
        Ok(Some(epoch))
    }
}

/// The ranges of `p`, as words (see [`WORDS`]) in little-endian bytes.
fn encode_ranges(p: &Partitioning) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.ranges().len() * WORDS * 8);
    for tr in p.ranges() {
        let (f, t) = (tr.range.from(), tr.range.to());
        let words = [
            p.group().member(tr.task) as i64,
            i64::from(tr.group),
            tr.range.dims() as i64,
            f[0],
            f[1],
            f[2],
            t[0],
            t[1],
            t[2],
        ];
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// The partitioning [`encode_ranges`] describes, over `group`.
fn decode_ranges(raw: &[u8], space: &Space, group: &Group, name: &str) -> Result<Partitioning> {
    let bad = |why: String| {
        Error::new(ErrorKind::Protocol, "restore")
            .with_detail(format!("checkpoints of `{name}`: {why}"))
    };
    if !raw.len().is_multiple_of(WORDS * 8) {
        return Err(bad(format!(
            "a partitioning description of {} bytes",
            raw.len()
        )));
    }
    let mut ranges = Vec::with_capacity(raw.len() / (WORDS * 8));
    for rec in raw.chunks_exact(WORDS * 8) {
        let mut w = [0i64; WORDS];
        for (k, b) in rec.chunks_exact(8).enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            w[k] = i64::from_le_bytes(a);
        }
        let task = usize::try_from(w[0])
            .ok()
            .and_then(|r| group.index_of(r))
            .ok_or_else(|| bad(format!("world rank {} is no member", w[0])))?;
        let mgroup = u32::try_from(w[1]).map_err(|_| bad(format!("mapping group {}", w[1])))?;
        let dims = usize::try_from(w[2]).map_err(|_| bad(format!("{} dimensions", w[2])))?;
        let range = Range::from_corners(dims, [w[3], w[4], w[5]], [w[6], w[7], w[8]])?;
        ranges.push(TaskRange {
            task,
            range,
            group: mgroup,
        });
    }
    Partitioning::from_ranges(space, group, "checkpoint", ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_data::{Block, Partitioner};

    #[test]
    fn a_checkpoint_partitioning_travels_to_a_new_group_unchanged() {
        let old = Group::new(vec![0, 1, 2], 3).unwrap();
        let new = Group::new(vec![0, 1, 2], 5).unwrap();
        let cyclic = Partitioner::Block(Block {
            cycles: 2,
            ..Block::default()
        });
        let rows = Partitioner::Grid { blocks: [1, 3, 1] };
        let line = Space::new1(23).unwrap();
        let plane = Space::new2(7, 5).unwrap();
        for (space, how) in [(line, &cyclic), (plane, &rows)] {
            let p = Partitioning::new(&space, &old, how).unwrap();
            let q = decode_ranges(&encode_ranges(&p), &space, &new, "t").unwrap();
            assert_eq!(q.group().members(), new.members());
            for w in 0..3 {
                let a: Vec<_> = p
                    .rank_ranges(w)
                    .iter()
                    .map(|t| (t.range, t.group))
                    .collect();
                let b: Vec<_> = q
                    .rank_ranges(w)
                    .iter()
                    .map(|t| (t.range, t.group))
                    .collect();
                assert!(!a.is_empty());
                assert_eq!(a, b, "world rank {w}");
            }
        }
        let space = plane;
        let p = Partitioning::new(&space, &old, &rows).unwrap();
        // A rank that is no member of the new group, and a torn description, are errors.
        let small = Group::new(vec![0, 1], 5).unwrap();
        let e = decode_ranges(&encode_ranges(&p), &space, &small, "t").unwrap_err();
        assert!(e.to_string().contains("world rank 2 is no member"), "{e}");
        let raw = encode_ranges(&p);
        assert!(decode_ranges(&raw[..raw.len() - 1], &space, &new, "t").is_err());
    }

    #[test]
    fn a_container_is_restored_into_members_that_lost_their_copies() {
        // Ranks 1 and 3 start over with a new container and no checkpoint (as a replacement
        // does); every member ends with the checkpointed values in the partitioning asked
        // for (another one than the checkpoint's) and two copies per part again.
        let out = ferry_core::mem::MemTransport::run(4, |t| {
            let comm = crate::recover::rebuild::tests::rebuild_comm(t);
            let me = comm.world_rank();
            let space = Space::new1(40).unwrap();
            let mut inst = ferry_data::Instance::new(me, 4).unwrap();
            let mut c = Container::<i64>::new(&mut inst, "c", &space);
            let block = crate::data::partitioning(&comm, &space, &Partitioner::block()).unwrap();
            crate::data::switch(&comm, &mut c, &block, DataFlow::None, None).unwrap();
            for r in c.my_ranges().to_vec() {
                for x in r.from()[0]..r.to()[0] {
                    c.set(&[x, 0, 0], 7 * x + 1).unwrap();
                }
            }
            let mut saved = Checkpoints::<i64>::new("c");
            saved.checkpoint(&comm, 30, &c).unwrap();
            if me == 1 || me == 3 {
                inst = ferry_data::Instance::new(me, 4).unwrap();
                c = Container::<i64>::new(&mut inst, "c", &space);
                saved = Checkpoints::new("c");
            }
            let cyclic = Partitioner::Block(Block {
                cycles: 3,
                ..Block::default()
            });
            let to = crate::data::partitioning(&comm, &space, &cyclic).unwrap();
            let epoch = saved.restore(&comm, &mut c, &to).unwrap();
            let mut wrong = 0;
            for r in c.my_ranges().to_vec() {
                for x in r.from()[0]..r.to()[0] {
                    wrong += usize::from(c.get(&[x, 0, 0]).unwrap() != 7 * x + 1);
                }
            }
            (epoch, wrong, saved.held_bytes())
        });
        for (rank, (epoch, wrong, held)) in out.into_iter().enumerate() {
            assert_eq!((epoch, wrong), (Some(30), 0), "rank {rank}");
            assert_eq!(held, 2 * 10 * 8, "rank {rank}: its part and its buddy's");
        }
    }
}

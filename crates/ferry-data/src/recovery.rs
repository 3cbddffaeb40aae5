//! What the data layer offers to recovery after ranks failed (issues 07 and 08): containers
//! remember their last switch, hand out their owned values, and take on a partitioning of a
//! new group without communication; ownership after a loss is planned here.
//!
//! The data layer never learns about failures itself (it has no I/O): a fault-tolerant
//! runtime (`ferry_ft::data`) decides who survived and which copies exist, and uses these
//! pieces so that every survivor plans the same transition afterwards:
//!
//! - [`Container::switch_count`] and [`Container::last_switch`]: a failure can interrupt a
//!   switch on some ranks after others completed it (or several: a rank that exchanges
//!   nothing with the failed one may run ahead); comparing the counts tells the survivors
//!   whether they hold values of the same point of the program ([`SwitchRecord`]).
//! - [`Container::owned_values`] and [`Container::assume`]: the values of this rank's ranges,
//!   packed densely, and the inverse (a partitioning taken on with given or kept values, no
//!   message sent). A checkpoint stores the former; recovery installs the partitioning of
//!   what the survivors hold with the latter, then switches normally to the target.
//! - [`held_by_survivors`]: the partitioning of the ranges survivors still hold (each
//!   survivor's own ranges, gathered), over the new group, and the indexes nobody holds any
//!   more (lost).

use std::sync::Arc;

use ferry_coll::Group;
use ferry_core::{Element, Error, Result};

use crate::action::{copy_box, dense, ext_of, place_in};
use crate::container::Container;
use crate::partitioner::TaskRange;
use crate::partitioning::Partitioning;
use crate::space::{Range, Space};
use crate::storage::Which;

/// The last switch a container started (recovery after a failure interrupted it).
#[derive(Clone, Debug)]
pub struct SwitchRecord {
    /// The partitioning it switched from (`None` for the first switch).
    pub from: Option<Partitioning>,
    /// The partitioning it switched to.
    pub to: Partitioning,
    /// Whether values of several holders were combined by a reduction.
    pub reduced: bool,
    /// Whether it completed on this rank.
    pub done: bool,
}

impl<T: Element> Container<T> {
    pub(crate) fn begin_switch(&mut self, to: &Partitioning, reduced: bool) {
        self.last_switch = Some(SwitchRecord {
            from: self.part.clone(),
            to: to.clone(),
            reduced,
            done: false,
        });
    }

    pub(crate) fn end_switch(&mut self, res: &Result<()>) {
        if res.is_ok() {
            self.switches += 1;
            if let Some(r) = self.last_switch.as_mut() {
                r.done = true;
            }
        }
    }

    /// Number of switches that completed on this rank (every rank of an SPMD program counts
    /// the same, unless a failure interrupted the last switch on some of them).
    pub fn switch_count(&self) -> u64 {
        self.switches
    }

    /// The last switch started on this rank, and whether it completed.
    pub fn last_switch(&self) -> Option<&SwitchRecord> {
        self.last_switch.as_ref()
    }

    /// The values of this rank's ranges in the current partitioning, range after range (range
    /// number order), each range's indexes in x-fastest order. Empty without a partitioning.
    pub fn owned_values(&self) -> Result<Vec<T>> {
        let n: usize = self.layout.ranges.iter().map(|r| r.size() as usize).sum();
        let mut out = Vec::new();
        out.try_reserve_exact(n).map_err(|e| {
            Error::new(ferry_core::ErrorKind::ResourceExhausted, "owned values")
                .on_rank(self.rank)
                .with_detail(format!("{n} elements of {} of `{}`", T::NAME, self.name))
                .with_source(e)
        })?;
        out.resize(n, T::default());
        let mut at = 0;
        for (no, r) in self.layout.ranges.iter().enumerate() {
            if r.is_empty() {
                continue;
            }
            let src = place_in(&self.layout, no, r)?;
            let ext = ext_of(r);
            copy_box(
                &self.storage,
                src,
                &mut out,
                dense(at, ext),
                ext,
                self.generic,
            );
            at += r.size() as usize;
        }
        Ok(out)
    }

    /// Takes on partitioning `p` without any communication (recovery: the group changed under
    /// the data). With `values`, this rank's ranges in `p` get them (packed as
    /// [`Container::owned_values`] packs); without, every index this rank held before and
    /// holds in `p` keeps its value. Other indexes get `T::default()`. Bound action sequences
    /// of this container become invalid; the switch count starts again from 0.
    pub fn assume(&mut self, p: &Partitioning, values: Option<&[T]>) -> Result<()> {
        if *p.space() != self.space {
            return Err(Error::invalid(
                "assume",
                format!(
                    "`{}` is over {:?}, the partitioning over {:?}",
                    self.name,
                    self.space.range(),
                    p.space().range()
                ),
            )
            .on_rank(self.rank));
        }
        let new = Arc::new(self.layout_for(p)?);
        let want: usize = new.ranges.iter().map(|r| r.size() as usize).sum();
        if let Some(v) = values {
            if v.len() != want {
                return Err(Error::invalid(
                    "assume",
                    format!(
                        "`{}`: {} values given, this rank's ranges hold {want}",
                        self.name,
                        v.len()
                    ),
                )
                .on_rank(self.rank));
            }
        }
        // Every element of the spare buffer starts as the default, as in a fresh vector.
        self.storage
            .resize(Which::Spare, 0)
            .and_then(|()| self.storage.resize(Which::Spare, new.total))
            .map_err(|e| e.context("assume").or_rank(self.rank))?;
        let (cur, spare) = self.storage.split();
        let mut at = 0;
        for (no, r) in new.ranges.iter().enumerate() {
            if r.is_empty() {
                continue;
            }
            let dst = place_in(&new, no, r)?;
            match values {
                Some(v) => {
                    let ext = ext_of(r);
                    copy_box(v, dense(at, ext), spare, dst, ext, self.generic);
                    at += r.size() as usize;
                }
                None => {
                    for (old_no, old) in self.layout.ranges.iter().enumerate() {
                        let Some(o) = old.intersect(r) else { continue };
                        if o.is_empty() {
                            continue;
                        }
                        let src = place_in(&self.layout, old_no, &o)?;
                        let dst = place_in(&new, no, &o)?;
                        copy_box(cur, src, spare, dst, ext_of(&o), self.generic);
                    }
                }
            }
        }
        self.storage.swap();
        self.layout = new;
        self.part = Some(p.clone());
        self.cache.clear();
        self.epoch += 1;
        // A new starting point, reached by every survivor at the same step of recovery.
        self.last_switch = None;
        self.switches = 0;
        Ok(())
    }
}

/// Ownership after a loss: `held` lists, per surviving world rank, the ranges it holds (in
/// its container's order); the result is a partitioning over `group` (which must contain
/// every rank of `held`) in which each survivor owns exactly those ranges, in that order, and
/// the indexes of the space that no survivor holds (lost with the failed ranks), as disjoint
/// boxes.
pub fn held_by_survivors(
    space: &Space,
    group: &Group,
    held: &[(usize, Vec<Range>)],
) -> Result<(Partitioning, Vec<Range>)> {
    let mut ranges = Vec::new();
    for (w, rs) in held {
        let task = group.index_of(*w).ok_or_else(|| {
            Error::invalid(
                "recovery",
                format!("world rank {w} is not in the group {:?}", group.members()),
            )
        })?;
        ranges.extend(rs.iter().map(|&range| TaskRange {
            task,
            range,
            group: 0,
        }));
    }
    let mut lost = vec![space.range()];
    for tr in &ranges {
        let mut next = Vec::with_capacity(lost.len());
        for l in &lost {
            l.subtract_into(&tr.range, &mut next);
        }
        lost = next;
    }
    let p = Partitioning::from_ranges(space, group, "survivors", ranges)?;
    Ok((p, lost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partitioner::Partitioner;
    use crate::Instance;

    #[test]
    fn owned_values_and_assume_round_trip_over_another_group() {
        let space = Space::new2(6, 5).unwrap();
        let world = Group::world(3);
        let p = Partitioning::new(&space, &world, &Partitioner::Bisection).unwrap();
        let mut inst = Instance::new(1, 3).unwrap();
        let mut c = Container::<f64>::new(&mut inst, "c", &space);
        c.assume(&p, None).unwrap();
        for r in c.my_ranges().to_vec() {
            for y in r.from()[1]..r.to()[1] {
                for x in r.from()[0]..r.to()[0] {
                    c.set(&[x, y, 0], (x * 10 + y) as f64).unwrap();
                }
            }
        }
        let vals = c.owned_values().unwrap();
        assert_eq!(vals.len() as u64, c.local_count());
        // Rank 1 keeps its ranges in a group without rank 0, and also takes rank 2's.
        let survivors = Group::new(vec![1, 2], 99).unwrap();
        let mine = |w: usize| p.rank_ranges(w).iter().map(|t| t.range).collect::<Vec<_>>();
        let (kept, lost) =
            held_by_survivors(&space, &survivors, &[(1, mine(1)), (2, mine(2))]).unwrap();
        assert_eq!(kept.rank_ranges(1).len(), p.rank_ranges(1).len());
        let lost_cells: u64 = lost.iter().map(|r| r.size()).sum();
        assert_eq!(lost_cells, p.rank_count(0));
        c.assume(&kept, None).unwrap();
        assert_eq!(c.owned_values().unwrap(), vals);
        // Given values land where owned_values took them from.
        let doubled: Vec<f64> = vals.iter().map(|v| v * 2.0).collect();
        c.assume(&kept, Some(&doubled)).unwrap();
        let r = c.my_ranges()[0];
        let at = [r.from()[0], r.from()[1], 0];
        assert_eq!(c.get(&at).unwrap(), 2.0 * (at[0] * 10 + at[1]) as f64);
        assert!(c.assume(&kept, Some(&doubled[1..])).is_err());
    }

    #[test]
    fn nothing_is_lost_when_every_holder_survives() {
        let space = Space::new1(100).unwrap();
        let world = Group::world(4);
        let p = Partitioning::new(&space, &world, &Partitioner::block()).unwrap();
        let all = Partitioning::new(&space, &world, &Partitioner::All).unwrap();
        let g = Group::new(vec![0, 2, 3], 7).unwrap();
        let of = |p: &Partitioning, w: usize| -> Vec<Range> {
            p.rank_ranges(w).iter().map(|t| t.range).collect()
        };
        let held: Vec<(usize, Vec<Range>)> = [0, 2, 3].iter().map(|&w| (w, of(&p, w))).collect();
        let (_, lost) = held_by_survivors(&space, &g, &held).unwrap();
        assert_eq!(lost, vec![p.rank_ranges(1)[0].range]);
        let held = vec![(0, of(&all, 0)), (2, of(&all, 2))];
        let (_, lost) = held_by_survivors(&space, &g, &held).unwrap();
        assert!(lost.is_empty());
        assert!(held_by_survivors(&space, &g, &[(1, of(&p, 1))]).is_err());
    }
}

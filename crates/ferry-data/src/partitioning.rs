//! Partitionings: the result of running a partitioner for a group (D2), and the memory layout
//! of one task's part (D3).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_coll::Group;
use ferry_core::{Error, Result};

use crate::partitioner::{Partitioner, TaskRange};
use crate::space::{Index, Range, Space, MAX_DIMS};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Which task of which group owns which ranges of a space (D2). Cheap to clone (shared).
///
/// Task `t` is the group member at index `t` (world rank `group.member(t)`). Ranges of a task
/// are kept in the order the partitioner produced them (the built-in partitioners produce them
/// in increasing index order: range number 0, 1, ...).
#[derive(Clone)]
pub struct Partitioning(Arc<Inner>);

struct Inner {
    id: u64,
    name: String,
    space: Space,
    group: Group,
    ranges: Vec<TaskRange>,
    /// `starts[t]..starts[t+1]` are the ranges of task t.
    starts: Vec<usize>,
    /// Id of the base partitioning if this one is its (corner) halo.
    halo_of: Option<u64>,
    /// Every task owns exactly the whole space in one range (the All partitioning).
    replicated: bool,
}

impl fmt::Debug for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partitioning")
            .field("name", &self.0.name)
            .field("group", &self.0.group.members())
            .field("ranges", &self.0.ranges)
            .finish()
    }
}

impl Partitioning {
    /// Runs `partitioner` over `space` for the tasks of `group`.
    pub fn new(space: &Space, group: &Group, partitioner: &Partitioner) -> Result<Partitioning> {
        let ranges = partitioner.run(space, group.size(), None)?;
        Partitioning::from_ranges(space, group, partitioner.name(), ranges)
    }

    /// Runs a derived partitioner (halo, corner halo, copy, or a custom one that reads its
    /// base) on top of `base`, for the same group.
    pub fn derived(
        space: &Space,
        partitioner: &Partitioner,
        base: &Partitioning,
    ) -> Result<Partitioning> {
        let group = base.group();
        let ranges = partitioner.run(space, group.size(), Some((&base.0.space, &base.0.ranges)))?;
        let mut p = Partitioning::from_ranges(space, group, partitioner.name(), ranges)?;
        if matches!(
            partitioner,
            Partitioner::Halo { .. } | Partitioner::CornerHalo { .. }
        ) && space == base.space()
        {
            if let Some(inner) = Arc::get_mut(&mut p.0) {
                inner.halo_of = Some(base.id());
            }
        }
        Ok(p)
    }

    /// Whether every task owns the whole space in one range (the All partitioning).
    pub fn is_replicated(&self) -> bool {
        self.0.replicated
    }

    /// Whether `self` and `other` are a partitioning and its own (corner) halo, in either
    /// order. Containers switching between such a pair lay both out in one shared box so the
    /// switch moves only halo cells (see [`crate::Container`]).
    pub fn is_halo_pair(&self, other: &Partitioning) -> bool {
        self.0.halo_of == Some(other.id()) || other.0.halo_of == Some(self.id())
    }

    /// A partitioning from explicit ranges (checked: tasks in range, ranges inside the space).
    pub fn from_ranges(
        space: &Space,
        group: &Group,
        name: &str,
        mut ranges: Vec<TaskRange>,
    ) -> Result<Partitioning> {
        let n = group.size();
        for tr in &ranges {
            if tr.task >= n || tr.range.dims() != space.dims() {
                return Err(Error::invalid(
                    "partition",
                    format!("{name}: range {:?} for task {} does not fit a {n}-task group over a {}d space", tr.range, tr.task, space.dims()),
                ));
            }
            if !space.range().contains_range(&tr.range) {
                return Err(Error::invalid(
                    "partition",
                    format!(
                        "{name}: range {:?} outside space {:?}",
                        tr.range,
                        space.range()
                    ),
                ));
            }
        }
        ranges.retain(|tr| !tr.range.is_empty());
        ranges.sort_by_key(|tr| tr.task);
        let mut starts = vec![0usize; n + 1];
        for tr in &ranges {
            starts[tr.task + 1] += 1;
        }
        for t in 0..n {
            starts[t + 1] += starts[t];
        }
        let replicated = (0..n)
            .all(|t| starts[t + 1] - starts[t] == 1 && ranges[starts[t]].range == space.range());
        Ok(Partitioning(Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            space: *space,
            group: group.clone(),
            ranges,
            starts,
            halo_of: None,
            replicated,
        })))
    }

    /// Process-local identity (used to cache transitions).
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Name of the partitioner that made it.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The partitioned space.
    pub fn space(&self) -> &Space {
        &self.0.space
    }

    /// The group whose tasks own the ranges.
    pub fn group(&self) -> &Group {
        &self.0.group
    }

    /// All ranges, tasks ascending.
    pub fn ranges(&self) -> &[TaskRange] {
        &self.0.ranges
    }

    /// Ranges of task `task` (empty if out of range).
    pub fn task_ranges(&self, task: usize) -> &[TaskRange] {
        if task + 1 >= self.0.starts.len() {
            return &[];
        }
        &self.0.ranges[self.0.starts[task]..self.0.starts[task + 1]]
    }

    /// Ranges of world rank `rank` (empty if it is not in the group).
    pub fn rank_ranges(&self, rank: usize) -> &[TaskRange] {
        match self.0.group.index_of(rank) {
            Some(t) => self.task_ranges(t),
            None => &[],
        }
    }

    /// Number of indexes world rank `rank` owns (counted once per range).
    pub fn rank_count(&self, rank: usize) -> u64 {
        self.rank_ranges(rank).iter().map(|t| t.range.size()).sum()
    }

    /// The same ownership expressed for `group` (D7 migration): task `t` of this partitioning
    /// becomes the task of the same world rank in `group`. Fails if a rank that owns indexes
    /// is not in `group`.
    pub fn migrate(&self, group: &Group) -> Result<Partitioning> {
        let old = &self.0.group;
        let mut out = Vec::with_capacity(self.0.ranges.len());
        for tr in &self.0.ranges {
            let w = old.member(tr.task);
            let t = group.index_of(w).ok_or_else(|| {
                Error::invalid(
                    "migrate",
                    format!(
                        "world rank {w} owns {:?} but is not in the new group {:?}",
                        tr.range,
                        group.members()
                    ),
                )
            })?;
            out.push(TaskRange { task: t, ..*tr });
        }
        Partitioning::from_ranges(&self.0.space, group, &self.0.name, out)
    }
}

/// Strides (x, y, z) for a mapping's bounding box (application-supplied layouts).
pub type StrideFn = Arc<dyn Fn(&Range) -> [usize; MAX_DIMS] + Send + Sync>;

/// How a container lays out the bounding box of a mapping in memory (D3).
#[derive(Clone, Default)]
pub enum LayoutOrder {
    /// Lexicographic with x fastest: `off = (z*ysize + y)*xsize + x`.
    #[default]
    Lexicographic,
    /// Application-supplied strides per bounding box (e.g. jac3d `-l`). The strides must map
    /// the box one-to-one into `[0, len)`; `len` is derived as the largest offset + 1.
    Custom(StrideFn),
}

impl fmt::Debug for LayoutOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutOrder::Lexicographic => f.write_str("Lexicographic"),
            LayoutOrder::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// The lexicographic x-fastest strides of a box.
pub fn lex_strides(r: &Range) -> [usize; MAX_DIMS] {
    let (ex, ey) = (r.extent(0) as usize, r.extent(1) as usize);
    [1, ex, ex * ey]
}

/// One allocation of a task's part: the bounding box of its ranges in one mapping group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Bounding box (the mapped global indexes).
    pub range: Range,
    /// Offset of the box origin within the container's storage.
    pub offset: usize,
    /// Element strides of x, y, z.
    pub strides: [usize; MAX_DIMS],
    /// Number of elements the mapping occupies.
    pub len: usize,
}

impl Mapping {
    /// Offset of global index `idx` relative to the mapping start; `None` outside the box.
    #[inline]
    pub fn local_offset(&self, idx: &Index) -> Option<usize> {
        if !self.range.contains(idx) {
            return None;
        }
        let f = self.range.from();
        Some(
            (idx[0] - f[0]) as usize * self.strides[0]
                + (idx[1] - f[1]) as usize * self.strides[1]
                + (idx[2] - f[2]) as usize * self.strides[2],
        )
    }
}

/// Memory layout of one rank's part of a partitioning: its mappings and, for each of its
/// ranges, the mapping that stores it (D3).
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Mappings in order of their first range.
    pub mappings: Vec<Mapping>,
    /// For each of the rank's ranges (in partitioning order), its mapping index.
    pub range_mapping: Vec<usize>,
    /// The rank's ranges, in partitioning order.
    pub ranges: Vec<Range>,
    /// Total elements of all mappings.
    pub total: usize,
}

impl Layout {
    /// The layout of world rank `rank`'s part of `p` in `order`.
    pub fn new(p: &Partitioning, rank: usize, order: &LayoutOrder) -> Result<Layout> {
        Layout::with_envelope(p, rank, order, None)
    }

    /// Like [`Layout::new`], but if the part has exactly `envelope.len()` mappings and each
    /// mapping's box lies inside the corresponding envelope box, the mappings are allocated
    /// over the envelope boxes instead: several partitionings then share one placement.
    pub fn with_envelope(
        p: &Partitioning,
        rank: usize,
        order: &LayoutOrder,
        envelope: Option<&[Range]>,
    ) -> Result<Layout> {
        let own = p.rank_ranges(rank);
        let mut mappings: Vec<Mapping> = Vec::new();
        let mut groups: Vec<(u32, usize)> = Vec::new();
        let mut range_mapping = Vec::with_capacity(own.len());
        for tr in own {
            let existing = if tr.group == 0 {
                None
            } else {
                groups.iter().find(|(g, _)| *g == tr.group).map(|&(_, m)| m)
            };
            match existing {
                Some(m) => {
                    mappings[m].range = mappings[m].range.union_box(&tr.range);
                    range_mapping.push(m);
                }
                None => {
                    if tr.group != 0 {
                        groups.push((tr.group, mappings.len()));
                    }
                    range_mapping.push(mappings.len());
                    mappings.push(Mapping {
                        range: tr.range,
                        offset: 0,
                        strides: [0; MAX_DIMS],
                        len: 0,
                    });
                }
            }
        }
        if let Some(env) = envelope {
            if env.len() == mappings.len()
                && mappings
                    .iter()
                    .zip(env)
                    .all(|(m, e)| e.contains_range(&m.range))
            {
                for (m, e) in mappings.iter_mut().zip(env) {
                    m.range = *e;
                }
            }
        }
        let mut total = 0usize;
        for m in &mut mappings {
            m.strides = match order {
                LayoutOrder::Lexicographic => lex_strides(&m.range),
                LayoutOrder::Custom(f) => f(&m.range),
            };
            let ext = m.range.extents();
            let mut len = 1usize;
            for (e, st) in ext.iter().zip(m.strides) {
                len += (*e as usize).saturating_sub(1) * st;
            }
            let size = m.range.size() as usize;
            if len < size {
                return Err(Error::invalid(
                    "layout",
                    format!(
                        "strides {:?} cannot hold box {:?} one-to-one",
                        m.strides, m.range
                    ),
                ));
            }
            m.len = len;
            m.offset = total;
            total = total.checked_add(len).ok_or_else(|| {
                Error::invalid("layout", "local part does not fit the address space")
            })?;
        }
        Ok(Layout {
            mappings,
            range_mapping,
            ranges: own.iter().map(|t| t.range).collect(),
            total,
        })
    }

    /// Mapping index and storage offset of global index `idx`, if this part maps it.
    pub fn locate(&self, idx: &Index) -> Option<(usize, usize)> {
        self.mappings
            .iter()
            .enumerate()
            .find_map(|(i, m)| m.local_offset(idx).map(|o| (i, m.offset + o)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_groups_halo_pieces() {
        let s = Space::new2(10, 10).unwrap();
        let g = Group::world(4);
        let base = Partitioning::new(&s, &g, &Partitioner::Bisection).unwrap();
        let halo = Partitioning::derived(&s, &Partitioner::Halo { depth: 1 }, &base).unwrap();
        let l = Layout::new(&halo, 0, &LayoutOrder::Lexicographic).unwrap();
        assert_eq!(l.mappings.len(), 1);
        assert_eq!(l.mappings[0].range, Range::new2(0, 6, 0, 6));
        assert_eq!(l.mappings[0].strides, [1, 6, 36]);
        assert_eq!(l.ranges.len(), 3);
        assert_eq!(l.locate(&[2, 3, 0]), Some((0, 3 * 6 + 2)));
        assert_eq!(l.locate(&[7, 3, 0]), None);
        let cyc = Partitioning::new(
            &Space::new1(100).unwrap(),
            &g,
            &Partitioner::Block(crate::partitioner::Block {
                cycles: 2,
                ..Default::default()
            }),
        )
        .unwrap();
        let l = Layout::new(&cyc, 1, &LayoutOrder::Lexicographic).unwrap();
        assert_eq!(l.mappings.len(), 2);
        assert_eq!(l.mappings[1].offset, l.mappings[0].len);
    }

    #[test]
    fn migrate_to_shrinked_group() {
        let s = Space::new1(100).unwrap();
        let g = Group::world(4);
        let p = Partitioning::new(
            &s,
            &g,
            &Partitioner::Block(crate::partitioner::Block {
                task_weight: Some(Arc::new(|t| if t == 0 { 0.0 } else { 1.0 })),
                ..Default::default()
            }),
        )
        .unwrap();
        let small = Group::new(vec![1, 2, 3], 7).unwrap();
        let m = p.migrate(&small).unwrap();
        assert_eq!(
            m.rank_ranges(1),
            p.rank_ranges(1)
                .iter()
                .map(|t| TaskRange { task: 0, ..*t })
                .collect::<Vec<_>>()
                .as_slice()
        );
        assert!(m.rank_ranges(0).is_empty());
        let full = Partitioning::new(&s, &g, &Partitioner::block()).unwrap();
        assert!(full.migrate(&small).is_err());
    }
}

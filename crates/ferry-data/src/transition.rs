//! Transitions: the communication a switch between two partitionings needs, derived from old
//! and new ownership (D4, D5). Computed once, executed many times through an
//! [`crate::ActionSeq`].
//!
//! # Semantics
//! For every range a rank owns in the new partitioning, the indexes are split into regions of
//! constant *holder set*: the world ranks that owned the index in the old partitioning, in
//! increasing rank order.
//! - `Preserve` without reduction (or with a single holder): the rank keeps its own old value
//!   if it was a holder (no communication); otherwise the lowest-ranked holder sends it.
//! - `Preserve` with a reduction and several holders: every holder contributes, and the
//!   receiver folds the contributions strictly left to right in rank order,
//!   `((x_h0 op x_h1) op x_h2) ...` — the same bits on every rank, backend and run (examples.md
//!   §0.2; this order reproduces LAIK's printed digits).
//! - Indexes nobody held keep unspecified contents; `None` moves nothing; `Init` fills the new
//!   part with the reduction's neutral element and moves nothing.
//!
//! Every rank computes the same decisions from the same two partitionings, so the segments
//! one rank packs for a peer are exactly those the peer unpacks, in the same order: one
//! message per peer per switch, no headers.

use std::collections::BTreeMap;

use ferry_core::{Error, Result};

use crate::partitioning::Partitioning;
use crate::space::Range;

/// What happens to a container's values in a switch (D4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataFlow {
    /// Values are not needed: nothing is communicated, new contents are unspecified.
    None,
    /// Values are kept (copied or sent to the new owners; reduced if a reduction is given).
    Preserve,
    /// The new part is filled with the reduction's neutral element; nothing is communicated.
    Init,
}

/// A region taken from (send) or put into (receive) one of a rank's ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Global indexes.
    pub region: Range,
    /// For sends: number of the sender's range in the old partitioning; for receives: number
    /// of the receiver's range in the new partitioning, or `None` if the values only feed a
    /// fold.
    pub range_no: Option<usize>,
}

/// Everything exchanged with one peer in one switch: one message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerPlan {
    /// World rank of the peer.
    pub peer: usize,
    /// Segments in message order.
    pub segments: Vec<Segment>,
    /// Message length in elements.
    pub elems: usize,
}

impl PeerPlan {
    fn push(&mut self, region: Range, range_no: Option<usize>) -> usize {
        let at = self.elems;
        self.segments.push(Segment { region, range_no });
        self.elems += region.size() as usize;
        at
    }
}

/// Where a fold operand comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoldSource {
    /// This rank's own old value, in its old range `range_no`.
    Local {
        /// Old range number.
        range_no: usize,
    },
    /// Received: `recv` indexes [`Transition::recvs`], `offset` is in elements.
    Remote {
        /// Index into the receive plans.
        recv: usize,
        /// Element offset in that message.
        offset: usize,
    },
}

/// A reduction of several holders' values into one region of a new range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fold {
    /// Global indexes.
    pub region: Range,
    /// New range number receiving the result.
    pub dst_range: usize,
    /// Operands in rank order (left fold).
    pub sources: Vec<FoldSource>,
}

/// A local copy from an old range to a new range of this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalCopy {
    /// Global indexes.
    pub region: Range,
    /// Old range number.
    pub src_range: usize,
    /// New range number.
    pub dst_range: usize,
}

/// One rank's part of a switch between two partitionings (D5): local copies, one message per
/// peer to send and to receive, and folds for reductions. Independent of element type and
/// memory layout; bind it to a container with [`crate::Container::prepare`].
#[derive(Debug, Clone)]
pub struct Transition {
    pub(crate) from: Partitioning,
    pub(crate) to: Partitioning,
    pub(crate) rank: usize,
    pub(crate) flow: DataFlow,
    pub(crate) reduce: bool,
    /// Local copies.
    pub local: Vec<LocalCopy>,
    /// Messages to send, by peer ascending.
    pub sends: Vec<PeerPlan>,
    /// Messages to receive, by peer ascending.
    pub recvs: Vec<PeerPlan>,
    /// Reductions.
    pub folds: Vec<Fold>,
}

type Holder = (usize, usize); // (world rank, old range number)

impl Transition {
    /// Plans the switch of world rank `rank` from `from` to `to` with data flow `flow`;
    /// `reduce` says whether a reduction combines several holders' values.
    pub fn new(
        from: &Partitioning,
        to: &Partitioning,
        rank: usize,
        flow: DataFlow,
        reduce: bool,
    ) -> Result<Transition> {
        if from.space() != to.space() {
            return Err(Error::invalid(
                "transition",
                format!(
                    "partitionings over different spaces ({:?} vs {:?})",
                    from.space().range(),
                    to.space().range()
                ),
            )
            .on_rank(rank));
        }
        let mut t = Transition {
            from: from.clone(),
            to: to.clone(),
            rank,
            flow,
            reduce,
            local: Vec::new(),
            sends: Vec::new(),
            recvs: Vec::new(),
            folds: Vec::new(),
        };
        if flow != DataFlow::Preserve {
            return Ok(t);
        }
        // Every old range of every rank, in rank order (the fold order).
        let mut old: Vec<(usize, usize, Range)> = Vec::new();
        let mut old_ranks: Vec<usize> = from.group().members().to_vec();
        old_ranks.sort_unstable();
        for &w in &old_ranks {
            for (j, tr) in from.rank_ranges(w).iter().enumerate() {
                old.push((w, j, tr.range));
            }
        }
        let all_old = RangeIndex::new(old.iter().map(|o| o.2).collect());
        let mine: Vec<Range> = from.rank_ranges(rank).iter().map(|t| t.range).collect();
        let my_old = RangeIndex::new(mine);

        let mut sends: BTreeMap<usize, PeerPlan> = BTreeMap::new();
        let mut recvs: BTreeMap<usize, PeerPlan> = BTreeMap::new();
        // (region, new range, operands as (rank, old range, offset if received))
        type PendingFold = (Range, usize, Vec<(usize, usize, Option<usize>)>);
        let mut folds_tmp: Vec<PendingFold> = Vec::new();
        let mut new_ranks: Vec<usize> = to.group().members().to_vec();
        new_ranks.sort_unstable();
        let mut cands: Vec<usize> = Vec::new();
        for &r in &new_ranks {
            for (j, tr) in to.rank_ranges(r).iter().enumerate() {
                let n = tr.range;
                if r != rank && !my_old.any_intersect(&n) {
                    continue;
                }
                cands.clear();
                all_old.intersecting(&n, &mut cands);
                cands.sort_unstable();
                let holders: Vec<(usize, usize, Range)> = cands.iter().map(|&k| old[k]).collect();
                for (region, hs) in arrange(n, &holders) {
                    if hs.is_empty() {
                        continue;
                    }
                    let fold = reduce && hs.len() > 1;
                    if r == rank {
                        if fold {
                            let mut srcs = Vec::with_capacity(hs.len());
                            for &(w, oj) in &hs {
                                if w == rank {
                                    srcs.push((w, oj, None));
                                } else {
                                    let p = recvs.entry(w).or_insert_with(|| PeerPlan {
                                        peer: w,
                                        ..PeerPlan::default()
                                    });
                                    let off = p.push(region, None);
                                    srcs.push((w, oj, Some(off)));
                                }
                            }
                            folds_tmp.push((region, j, srcs));
                        } else {
                            let (w, oj) = *hs.iter().find(|h| h.0 == rank).unwrap_or(&hs[0]);
                            if w == rank {
                                t.local.push(LocalCopy {
                                    region,
                                    src_range: oj,
                                    dst_range: j,
                                });
                            } else {
                                recvs
                                    .entry(w)
                                    .or_insert_with(|| PeerPlan {
                                        peer: w,
                                        ..PeerPlan::default()
                                    })
                                    .push(region, Some(j));
                            }
                        }
                    } else if let Some(&(_, my_j)) = hs.iter().find(|h| h.0 == rank) {
                        let source = *hs.iter().find(|h| h.0 == r).unwrap_or(&hs[0]);
                        if fold || source.0 == rank {
                            sends
                                .entry(r)
                                .or_insert_with(|| PeerPlan {
                                    peer: r,
                                    ..PeerPlan::default()
                                })
                                .push(region, Some(my_j));
                        }
                    }
                }
            }
        }
        t.sends = sends.into_values().collect();
        t.recvs = recvs.into_values().collect();
        for (region, dst_range, srcs) in folds_tmp {
            let sources = srcs
                .into_iter()
                .map(|(w, oj, off)| match off {
                    None => FoldSource::Local { range_no: oj },
                    Some(offset) => FoldSource::Remote {
                        recv: t.recvs.iter().position(|p| p.peer == w).unwrap_or(0),
                        offset,
                    },
                })
                .collect();
            t.folds.push(Fold {
                region,
                dst_range,
                sources,
            });
        }
        Ok(t)
    }

    /// The partitioning switched from.
    pub fn from(&self) -> &Partitioning {
        &self.from
    }

    /// The partitioning switched to.
    pub fn to(&self) -> &Partitioning {
        &self.to
    }

    /// The world rank this plan is for.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The data flow.
    pub fn flow(&self) -> DataFlow {
        self.flow
    }

    /// Whether a reduction is part of the plan.
    pub fn reduces(&self) -> bool {
        self.reduce
    }

    /// Elements this rank sends in one execution.
    pub fn sent_elems(&self) -> usize {
        self.sends.iter().map(|p| p.elems).sum()
    }

    /// Elements this rank receives in one execution.
    pub fn received_elems(&self) -> usize {
        self.recvs.iter().map(|p| p.elems).sum()
    }

    /// Elements copied locally in one execution.
    pub fn local_elems(&self) -> usize {
        self.local.iter().map(|c| c.region.size() as usize).sum()
    }
}

/// Splits `n` into regions of constant holder set. `holders` are sorted by (rank, range);
/// each rank counts once per index (its first range covering it).
fn arrange(n: Range, holders: &[(usize, usize, Range)]) -> Vec<(Range, Vec<Holder>)> {
    let mut regions: Vec<(Range, Vec<Holder>)> = vec![(n, Vec::new())];
    let mut next = Vec::new();
    let mut rest = Vec::new();
    for &(w, j, o) in holders {
        next.clear();
        for (r, hs) in regions.drain(..) {
            if hs.last().map(|h| h.0) == Some(w) {
                next.push((r, hs));
                continue;
            }
            match r.intersect(&o) {
                None => next.push((r, hs)),
                Some(i) => {
                    rest.clear();
                    r.subtract_into(&o, &mut rest);
                    for x in &rest {
                        next.push((*x, hs.clone()));
                    }
                    let mut with = hs;
                    with.push((w, j));
                    next.push((i, with));
                }
            }
        }
        std::mem::swap(&mut regions, &mut next);
    }
    // Order regions by position so both sides (and humans) see a stable order.
    regions.sort_by_key(|(r, _)| {
        let f = r.from();
        (f[2], f[1], f[0])
    });
    regions
}

/// Finds ranges intersecting a box quickly: sorted by lower x bound with a running maximum of
/// the upper x bound, so only a window of candidates is tested.
struct RangeIndex {
    ranges: Vec<Range>,
    order: Vec<usize>,
    max_to: Vec<i64>,
}

impl RangeIndex {
    fn new(ranges: Vec<Range>) -> RangeIndex {
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges[i].from()[0]);
        let mut max_to = Vec::with_capacity(order.len());
        let mut m = i64::MIN;
        for &i in &order {
            m = m.max(ranges[i].to()[0]);
            max_to.push(m);
        }
        RangeIndex {
            ranges,
            order,
            max_to,
        }
    }

    fn window(&self, n: &Range) -> std::ops::Range<usize> {
        let lo = self.max_to.partition_point(|&m| m <= n.from()[0]);
        let hi = self
            .order
            .partition_point(|&i| self.ranges[i].from()[0] < n.to()[0]);
        lo..hi.max(lo)
    }

    fn intersecting(&self, n: &Range, out: &mut Vec<usize>) {
        for k in self.window(n) {
            let i = self.order[k];
            if self.ranges[i].intersect(n).is_some() {
                out.push(i);
            }
        }
    }

    fn any_intersect(&self, n: &Range) -> bool {
        self.window(n)
            .any(|k| self.ranges[self.order[k]].intersect(n).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partitioner::{Block, Partitioner};
    use crate::space::Space;
    use ferry_coll::Group;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn owner_1d(p: &Partitioning, i: i64) -> Vec<usize> {
        let mut v: Vec<usize> = p
            .ranges()
            .iter()
            .filter(|t| t.range.contains(&[i, 0, 0]))
            .map(|t| p.group().member(t.task))
            .collect();
        v.dedup();
        v
    }

    #[test]
    fn all_to_master_sum_folds_in_rank_order() {
        let s = Space::new1(4).unwrap();
        let g = Group::world(3);
        let all = Partitioning::new(&s, &g, &Partitioner::All).unwrap();
        let master = Partitioning::new(&s, &g, &Partitioner::Master).unwrap();
        let t0 = Transition::new(&all, &master, 0, DataFlow::Preserve, true).unwrap();
        assert_eq!(t0.folds.len(), 1);
        assert_eq!(
            t0.folds[0].sources,
            vec![
                FoldSource::Local { range_no: 0 },
                FoldSource::Remote { recv: 0, offset: 0 },
                FoldSource::Remote { recv: 1, offset: 0 }
            ]
        );
        let t2 = Transition::new(&all, &master, 2, DataFlow::Preserve, true).unwrap();
        assert_eq!(t2.sends.len(), 1);
        assert_eq!(t2.sends[0].peer, 0);
        assert_eq!(t2.sent_elems(), 4);
        // Without reduction master keeps its own copy: no traffic at all.
        let t2 = Transition::new(&all, &master, 2, DataFlow::Preserve, false).unwrap();
        assert!(t2.sends.is_empty());
    }

    proptest! {
        /// Block -> block moves exactly the elements whose owner changes, each once.
        #[test]
        fn moves_exactly_changed_owners(
            n in 1u64..300, p in 1usize..7, c1 in 1usize..3, c2 in 1usize..3, w in any::<bool>()
        ) {
            let s = Space::new1(n).unwrap();
            let g = Group::world(p);
            let a = Partitioning::new(&s, &g, &Partitioner::Block(Block { cycles: c1, ..Block::default() })).unwrap();
            let b = Partitioning::new(&s, &g, &Partitioner::Block(Block {
                cycles: c2,
                index_weight: if w { Some(Arc::new(|i| (i % 5) as f64)) } else { None },
                ..Block::default()
            })).unwrap();
            let changed = (0..n as i64).filter(|&i| owner_1d(&a, i) != owner_1d(&b, i)).count();
            let mut sent = 0;
            let mut recvd = 0;
            let mut local = 0;
            for r in 0..p {
                let t = Transition::new(&a, &b, r, DataFlow::Preserve, false).unwrap();
                sent += t.sent_elems();
                recvd += t.received_elems();
                local += t.local_elems();
                // one message per peer
                let mut peers: Vec<_> = t.sends.iter().map(|s| s.peer).collect();
                peers.dedup();
                prop_assert_eq!(peers.len(), t.sends.len());
                prop_assert!(t.sends.iter().all(|s| s.peer != r));
            }
            prop_assert_eq!(sent, changed);
            prop_assert_eq!(recvd, changed);
            prop_assert_eq!(local, n as usize - changed);
        }

        /// Sender and receiver agree on every message, for halo and all partitionings too.
        #[test]
        fn senders_and_receivers_agree(nx in 2u64..12, ny in 2u64..12, p in 1usize..6, red in any::<bool>()) {
            let s = Space::new2(nx, ny).unwrap();
            let g = Group::world(p);
            let base = Partitioning::new(&s, &g, &Partitioner::Bisection).unwrap();
            let halo = Partitioning::derived(&s, &Partitioner::CornerHalo { depth: 1 }, &base).unwrap();
            let all = Partitioning::new(&s, &g, &Partitioner::All).unwrap();
            for (a, b) in [(&base, &halo), (&halo, &base), (&all, &base), (&halo, &all)] {
                let plans: Vec<_> = (0..p).map(|r| Transition::new(a, b, r, DataFlow::Preserve, red).unwrap()).collect();
                for (r, t) in plans.iter().enumerate() {
                    for snd in &t.sends {
                        let other = plans[snd.peer].recvs.iter().find(|x| x.peer == r).unwrap();
                        prop_assert_eq!(snd.elems, other.elems);
                        let ra: Vec<_> = snd.segments.iter().map(|s| s.region).collect();
                        let rb: Vec<_> = other.segments.iter().map(|s| s.region).collect();
                        prop_assert_eq!(ra, rb);
                    }
                    // everything received is sent by someone
                    for rcv in &t.recvs {
                        prop_assert!(plans[rcv.peer].sends.iter().any(|x| x.peer == r));
                    }
                }
            }
        }
    }
}

//! Typed data containers (D3) and switching them between partitionings (D4, D5, D6).

use std::sync::Arc;

use ferry_coll::ReduceOp;
use ferry_core::{Element, Error, Result, Transport};

use crate::action::{copy_box, place_in, ActionSeq, Bufs, PeerMaps, ShareCtx};
use crate::partitioning::{Layout, LayoutOrder, Mapping, Partitioning};
use crate::reduce;
use crate::retire::RetireOnDrop;
use crate::space::{Index, Range, Space, MAX_DIMS};
use crate::storage::{Storage, Which};
use crate::transition::{DataFlow, Transition};
use crate::Instance;

/// How many bound transitions a container keeps for plain [`Container::switch_to`] calls.
/// Programs alternate between few partitionings (jac: 2 per container); a small cache makes
/// their switches allocation-free without holding memory for every partitioning ever used.
const CACHE_SLOTS: usize = 8;

/// A read-only view of one mapping: the global box it covers, its strides and its elements.
/// Element of global index `(x, y, z)` is `data[(x-x0)*strides[0] + (y-y0)*strides[1] +
/// (z-z0)*strides[2]]` with `(x0, y0, z0) = range.from()`.
#[derive(Debug)]
pub struct MapView<'a, T> {
    /// Global indexes allocated: the bounding box of the ranges stored here, or a larger box
    /// shared with another partitioning ([`Container::share_layout`]). The owned indexes are
    /// [`Container::my_ranges`].
    pub range: Range,
    /// Element strides of x, y, z.
    pub strides: [usize; MAX_DIMS],
    /// The elements.
    pub data: &'a [T],
}

/// A mutable view of one mapping; see [`MapView`].
#[derive(Debug)]
pub struct MapViewMut<'a, T> {
    /// Global indexes allocated (see [`MapView::range`]).
    pub range: Range,
    /// Element strides of x, y, z.
    pub strides: [usize; MAX_DIMS],
    /// The elements.
    pub data: &'a mut [T],
}

/// A distributed array of `T` over an index space (D3). Each rank stores the part the
/// current partitioning gives it, in one allocation per mapping (see [`Layout`]).
///
/// Switching to another partitioning ([`Container::switch_to`]) moves the values that change
/// owner (D4). Storage is double-buffered: the new layout is filled while the old one is still
/// readable, then the two swap; with [`Container::reserve`] both buffers are sized once for a
/// set of partitionings, so switching among them never allocates (D6).
pub struct Container<T: Element> {
    pub(crate) name: String,
    id: u32,
    pub(crate) space: Space,
    pub(crate) rank: usize,
    order: LayoutOrder,
    pub(crate) generic: bool,
    pub(crate) part: Option<Partitioning>,
    pub(crate) layout: Arc<Layout>,
    /// The current buffer (what the views show) and the spare one a switch fills, on the heap
    /// or in node-shared memory (S3, [`Instance::set_shared_memory`]).
    pub(crate) storage: Storage<T>,
    /// Peers' shared regions this container has read from.
    maps: PeerMaps,
    /// Pairs of a switch moving fewer bytes keep the message path.
    share_min: usize,
    pub(crate) cache: Vec<(u64, u64, ActionSeq<T>)>,
    /// Two partitionings laid out over shared boxes (ids and boxes), see
    /// [`Container::share_layout`].
    envelope: Option<(u64, u64, Vec<Range>)>,
    /// Layout generation: bumped whenever placements change, so stale action sequences are
    /// refused instead of writing to wrong offsets.
    pub(crate) epoch: u64,
    /// Retires this container's flows when it is dropped; its queue is applied at switches.
    retire: RetireOnDrop,
    /// Retires the flows of the sharing protocol's control messages (shared containers only).
    _retire_share: Option<RetireOnDrop>,
    /// Switches completed, and the last one started: after a failure interrupted a switch,
    /// the survivors work out from these who holds what (see [`crate::recovery`]).
    pub(crate) switches: u64,
    pub(crate) last_switch: Option<crate::recovery::SwitchRecord>,
}

impl<T: Element> Container<T> {
    /// A new container over `space`, without a partitioning yet (holds nothing). Must be
    /// created by every rank in the same order (its id tags its messages).
    pub fn new(inst: &mut Instance, name: &str, space: &Space) -> Container<T> {
        let (id, retire) = inst.next_data_id();
        let shared = inst.shared_memory();
        let retire_share = shared.as_ref().map(|_| inst.share_ticket(id));
        Container {
            name: name.to_string(),
            id,
            space: *space,
            rank: inst.rank(),
            order: LayoutOrder::Lexicographic,
            generic: inst.generic_layout(),
            part: None,
            layout: Arc::new(Layout::default()),
            storage: Storage::new(shared, inst.rank()),
            maps: PeerMaps::default(),
            share_min: inst.share_min_bytes(),
            cache: Vec::new(),
            envelope: None,
            epoch: 0,
            retire,
            _retire_share: retire_share,
            switches: 0,
            last_switch: None,
        }
    }

    /// Uses `order` for the memory layout of future partitionings (set before the first
    /// switch; jac3d `-l`).
    pub fn set_layout_order(&mut self, order: LayoutOrder) -> Result<()> {
        if self.part.is_some() {
            return Err(Error::invalid(
                "layout",
                format!("container `{}` already has a partitioning", self.name),
            )
            .on_rank(self.rank));
        }
        self.order = order;
        Ok(())
    }

    /// Name given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The space the container is defined over.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The current partitioning, if any.
    pub fn partitioning(&self) -> Option<&Partitioning> {
        self.part.as_ref()
    }

    /// The layout of this rank's part.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// This rank's ranges in the current partitioning (range number order).
    pub fn my_ranges(&self) -> &[Range] {
        &self.layout.ranges
    }

    /// Number of indexes this rank owns (each range counted).
    pub fn local_count(&self) -> u64 {
        self.layout.ranges.iter().map(|r| r.size()).sum()
    }

    /// Whether this rank's storage lives in node-shared memory (S3): the container was made
    /// by an instance with shared memory and the allocation succeeded (otherwise it is on the
    /// heap, and peers get its values as messages).
    pub fn in_shared_memory(&self) -> bool {
        self.storage.is_shared()
    }

    /// Number of mappings (allocations) of this rank's part.
    pub fn num_mappings(&self) -> usize {
        self.layout.mappings.len()
    }

    /// Mapping `i` for reading.
    pub fn mapping(&self, i: usize) -> Result<MapView<'_, T>> {
        let m = self.map(i)?;
        Ok(MapView {
            range: m.range,
            strides: m.strides,
            data: &self.storage[m.offset..m.offset + m.len],
        })
    }

    /// Mapping `i` for writing.
    pub fn mapping_mut(&mut self, i: usize) -> Result<MapViewMut<'_, T>> {
        let m = self.map(i)?.clone();
        Ok(MapViewMut {
            range: m.range,
            strides: m.strides,
            data: &mut self.storage[m.offset..m.offset + m.len],
        })
    }

    /// The mapping that stores range number `range_no` of this rank, with the range.
    pub fn range_mapping(&self, range_no: usize) -> Result<(Range, MapView<'_, T>)> {
        let m = *self.layout.range_mapping.get(range_no).ok_or_else(|| {
            Error::invalid(
                "mapping",
                format!("`{}` has no range number {range_no}", self.name),
            )
            .on_rank(self.rank)
        })?;
        Ok((self.layout.ranges[range_no], self.mapping(m)?))
    }

    fn map(&self, i: usize) -> Result<&Mapping> {
        self.layout.mappings.get(i).ok_or_else(|| {
            Error::invalid(
                "mapping",
                format!(
                    "`{}` has {} mappings on this rank, not {}",
                    self.name,
                    self.layout.mappings.len(),
                    i + 1
                ),
            )
            .on_rank(self.rank)
        })
    }

    /// The local storage position of global index `idx`: (mapping number, offset within that
    /// mapping's data). An error if this rank does not map the index (D3 address query).
    pub fn local_index(&self, idx: &Index) -> Result<(usize, usize)> {
        self.layout
            .locate(idx)
            .map(|(m, off)| (m, off - self.layout.mappings[m].offset))
            .ok_or_else(|| self.not_local(idx))
    }

    fn not_local(&self, idx: &Index) -> Error {
        Error::invalid(
            "local index",
            format!(
                "index {:?} of `{}` is not in this rank's part",
                &idx[..self.space.dims()],
                self.name
            ),
        )
        .on_rank(self.rank)
    }

    /// Value at global index `idx` (must be mapped locally).
    pub fn get(&self, idx: &Index) -> Result<T> {
        let (_, off) = self.layout.locate(idx).ok_or_else(|| self.not_local(idx))?;
        Ok(self.storage[off])
    }

    /// Sets the value at global index `idx` (must be mapped locally).
    pub fn set(&mut self, idx: &Index, v: T) -> Result<()> {
        let (_, off) = self.layout.locate(idx).ok_or_else(|| self.not_local(idx))?;
        self.storage[off] = v;
        Ok(())
    }

    /// Every local element (all mappings, including unowned halo corners).
    pub fn local_data_mut(&mut self) -> &mut [T] {
        &mut self.storage[..self.layout.total]
    }

    /// Every local element for reading.
    pub fn local_data(&self) -> &[T] {
        &self.storage[..self.layout.total]
    }

    /// Sets every local element to `v`.
    pub fn fill(&mut self, v: T) {
        self.local_data_mut().fill(v);
    }

    /// The layout this container uses for `p` on this rank.
    pub(crate) fn layout_for(&self, p: &Partitioning) -> Result<Layout> {
        let env = match &self.envelope {
            Some((a, b, boxes)) if *a == p.id() || *b == p.id() => Some(&boxes[..]),
            _ => None,
        };
        Layout::with_envelope(p, self.rank, &self.order, env)
    }

    /// Lays out `a` and `b` over shared boxes (per mapping, the union of both placements), so
    /// that switching between them keeps every retained value in place: the switch only
    /// writes received cells and needs no second buffer (D6). Used automatically for a
    /// partitioning and its own halo; call it explicitly for other pairs. Returns whether the
    /// shared layout applies (both must give this rank the same number of mappings). Current
    /// values are kept (moved once if their placement changes); previously bound action
    /// sequences of this container become invalid.
    pub fn share_layout(&mut self, a: &Partitioning, b: &Partitioning) -> Result<bool> {
        let la = Layout::new(a, self.rank, &self.order)?;
        let lb = Layout::new(b, self.rank, &self.order)?;
        if la.mappings.len() != lb.mappings.len() || la.mappings.is_empty() {
            return Ok(false);
        }
        let boxes: Vec<Range> = la
            .mappings
            .iter()
            .zip(&lb.mappings)
            .map(|(x, y)| x.range.union_box(&y.range))
            .collect();
        self.envelope = Some((a.id(), b.id(), boxes));
        self.epoch += 1;
        self.cache.clear();
        if let Some(cur) = self.part.clone() {
            let new = Arc::new(self.layout_for(&cur)?);
            if new.mappings != self.layout.mappings {
                self.storage.resize(Which::Spare, new.total)?;
                let (cur, spare) = self.storage.split();
                for (no, r) in self.layout.ranges.iter().enumerate() {
                    let src = place_in(&self.layout, no, r)?;
                    let dst = place_in(&new, no, r)?;
                    let e = r.extents();
                    let ext = [e[0] as usize, e[1] as usize, e[2] as usize];
                    copy_box(cur, src, spare, dst, ext, self.generic);
                }
                self.storage.swap();
                self.layout = new;
            }
        }
        Ok(true)
    }

    /// Sizes both storage buffers for the largest of `parts` (D6): afterwards, switching
    /// among them allocates no element memory. Also binds nothing; transitions between them
    /// are bound on first use (or with [`Container::prepare`]).
    pub fn reserve(&mut self, parts: &[&Partitioning]) -> Result<()> {
        let mut max = self.layout.total;
        for p in parts {
            max = max.max(self.layout_for(p)?.total);
        }
        self.storage
            .reserve(max)
            .map_err(|e| e.context("reserve").or_rank(self.rank))
    }

    /// Plans and binds the switch from the current partitioning to `to` (D5): run it with
    /// [`Container::run`] as often as wanted. Without a current partitioning there is nothing
    /// to move; use [`Container::switch_to`] for the first switch.
    pub fn prepare(&self, to: &Partitioning, flow: DataFlow, reduce: bool) -> Result<ActionSeq<T>> {
        let from = self.part.as_ref().ok_or_else(|| {
            Error::invalid(
                "prepare",
                format!("`{}` has no partitioning to switch from", self.name),
            )
            .on_rank(self.rank)
        })?;
        let t = Arc::new(Transition::new(from, to, self.rank, flow, reduce)?);
        tracing::debug!(
            "rank {}: `{}` {} -> {}: send {} elems to {} peers, receive {} from {}, copy {} locally, {} folds",
            self.rank,
            self.name,
            from.name(),
            to.name(),
            t.sent_elems(),
            t.sends.len(),
            t.received_elems(),
            t.recvs.len(),
            t.local_elems(),
            t.folds.len()
        );
        self.bind(t)
    }

    /// Binds a precomputed transition (D5) to this container.
    pub fn bind(&self, t: Arc<Transition>) -> Result<ActionSeq<T>> {
        if t.rank() != self.rank || *t.from().space() != self.space {
            return Err(Error::invalid(
                "prepare",
                format!("transition does not belong to `{}` on this rank", self.name),
            )
            .on_rank(self.rank));
        }
        let old = if self.part.as_ref().map(|p| p.id()) == Some(t.from().id()) {
            self.layout.clone()
        } else {
            Arc::new(self.layout_for(t.from())?)
        };
        let new = Arc::new(self.layout_for(t.to())?);
        let mut seq = ActionSeq::bind(t, old, new, self.id, self.generic)?;
        seq.epoch = self.epoch;
        Ok(seq)
    }

    /// Runs a bound switch (D5). The container must currently be in the transition's source
    /// partitioning.
    pub fn run(
        &mut self,
        t: &mut dyn Transport,
        seq: &mut ActionSeq<T>,
        op: Option<&ReduceOp<T>>,
    ) -> Result<()> {
        if seq.data_id != self.id || seq.epoch != self.epoch {
            return Err(Error::invalid(
                "switch",
                format!(
                    "action sequence bound to another container than `{}`",
                    self.name
                ),
            )
            .on_rank(self.rank));
        }
        let from_id = seq.transition().from().id();
        if self.part.as_ref().map(|p| p.id()) != Some(from_id) {
            return Err(Error::invalid(
                "switch",
                format!(
                    "`{}` is not in the source partitioning of this action sequence",
                    self.name
                ),
            )
            .on_rank(self.rank));
        }
        if let Some(op) = op {
            reduce::check(op, false)?;
        }
        self.retire.queue().apply(t);
        let to = seq.transition().to().clone();
        self.begin_switch(&to, op.is_some());
        let res = self.run_bound(t, seq, op);
        self.end_switch(&res);
        res
    }

    fn run_bound(
        &mut self,
        t: &mut dyn Transport,
        seq: &mut ActionSeq<T>,
        op: Option<&ReduceOp<T>>,
    ) -> Result<()> {
        let total = seq.new_layout.total;
        let old_total = self.layout.total;
        let mem = match self.storage.sharing() {
            Some(mem) if seq.shares_with_node(&*t, self.share_min) => Some(mem.clone()),
            _ => None,
        };
        if seq.inplace {
            self.storage.resize(Which::Cur, total)?;
        } else {
            self.storage.resize(Which::Spare, total)?;
        }
        if let Some(mem) = mem {
            // This rank's current buffer is offered to its readers until the switch ends, on
            // every path out of it (an error withdraws the offer before it is returned).
            let offer = self.storage.publish();
            let bufs = if seq.inplace {
                // Raw access only: readers copy from this buffer while received cells land.
                Bufs::in_place(&mut self.storage, total)
            } else {
                let (cur, spare) = self.storage.split();
                Bufs::two(&cur[..old_total], &mut spare[..total])
            };
            let ctx = ShareCtx {
                mem: &*mem,
                offer,
                maps: &mut self.maps,
                min_bytes: self.share_min,
            };
            let res = seq.execute_shared(t, bufs, ctx);
            self.storage.withdraw();
            res.map_err(|e| e.or_rank(self.rank))?;
        } else if seq.inplace {
            seq.execute_inplace(t, &mut self.storage[..total])
                .map_err(|e| e.or_rank(self.rank))?;
        } else {
            let (cur, spare) = self.storage.split();
            seq.execute(t, &cur[..old_total], &mut spare[..total], op)
                .map_err(|e| e.or_rank(self.rank))?;
        }
        if !seq.inplace {
            self.storage.swap();
        }
        self.layout = seq.new_layout.clone();
        self.part = Some(seq.transition().to().clone());
        Ok(())
    }

    /// Whether switching from `from` to `to` with a reduction is an all-reduce of the whole
    /// local array: both replicated over the same group, members in rank order (so the
    /// collective's group order is the transitions' rank order), one plain mapping.
    fn replicated_reduce(&self, from: &Partitioning, to: &Partitioning) -> bool {
        from.is_replicated()
            && to.is_replicated()
            && from.group() == to.group()
            && from.group().members().windows(2).all(|w| w[0] < w[1])
            && self.layout.mappings.len() == 1
            && self.layout.total as u64 == self.space.size()
            && self.layout.mappings[0].strides
                == crate::partitioning::lex_strides(&self.space.range())
    }

    /// All -> All with a reduction through `ferry-coll`'s all-reduce with the strict
    /// rank-ordered left fold (M4): the same bits as the transition's fold, in about log P
    /// rounds instead of every holder sending to every other.
    fn allreduce_in_place(
        &mut self,
        t: &mut dyn Transport,
        to: &Partitioning,
        op: Option<&ReduceOp<T>>,
    ) -> Result<()> {
        let Some(op) = op else {
            return Err(
                Error::invalid("switch", "all-reduce without an operator").on_rank(self.rank)
            );
        };
        let n = self.layout.total;
        ferry_coll::allreduce_with(
            t,
            to.group(),
            &mut self.storage[..n],
            op,
            &ferry_coll::CollOptions::rank_ordered(),
        )
        .map_err(|e| {
            e.context(format!("switch of `{}`", self.name))
                .or_rank(self.rank)
        })?;
        if self.part.as_ref().map(|p| p.id()) != Some(to.id()) {
            self.layout = Arc::new(self.layout_for(to)?);
            self.part = Some(to.clone());
        }
        Ok(())
    }

    /// Switches to partitioning `to` with data flow `flow` and optional reduction `op` (D4).
    ///
    /// The first switch of a container only allocates (`Init` fills with the neutral
    /// element). Later switches derive the communication from old and new ownership (see
    /// [`crate::transition`]) and run it as one batched exchange; the bound plan is cached,
    /// so repeating a switch between the same partitionings does no planning and no
    /// allocation.
    pub fn switch_to(
        &mut self,
        t: &mut dyn Transport,
        to: &Partitioning,
        flow: DataFlow,
        op: Option<&ReduceOp<T>>,
    ) -> Result<()> {
        self.begin_switch(to, op.is_some());
        let res = self.switch_inner(t, to, flow, op);
        self.end_switch(&res);
        res
    }

    fn switch_inner(
        &mut self,
        t: &mut dyn Transport,
        to: &Partitioning,
        flow: DataFlow,
        op: Option<&ReduceOp<T>>,
    ) -> Result<()> {
        if *to.space() != self.space {
            return Err(Error::invalid(
                "switch",
                format!(
                    "`{}` is over {:?}, the partitioning over {:?}",
                    self.name,
                    self.space.range(),
                    to.space().range()
                ),
            )
            .on_rank(self.rank));
        }
        if let Some(op) = op {
            reduce::check(op, flow == DataFlow::Init)?;
        }
        self.retire.queue().apply(t);
        let same = self.part.as_ref().map(|p| p.id()) == Some(to.id());
        match (&self.part, flow) {
            (Some(_), DataFlow::Preserve) if same && op.is_none() => Ok(()),
            (Some(from), DataFlow::Preserve)
                if op.is_some() && self.replicated_reduce(from, to) =>
            {
                self.allreduce_in_place(t, to, op)
            }
            (Some(_), DataFlow::Preserve) => {
                let from_id = self.part.as_ref().map_or(0, |p| p.id());
                let slot = match self.cache.iter().position(|(f, n, s)| {
                    *f == from_id && *n == to.id() && (op.is_some() == s.transition().reduces())
                }) {
                    Some(i) => i,
                    None => {
                        let covered = self.envelope.as_ref().is_some_and(|(a, b, _)| {
                            [*a, *b].contains(&from_id) && [*a, *b].contains(&to.id())
                        });
                        if !covered {
                            if let Some(from) = self.part.clone() {
                                if from.is_halo_pair(to) {
                                    self.share_layout(&from, to)?;
                                }
                            }
                        }
                        let seq = self.prepare(to, DataFlow::Preserve, op.is_some())?;
                        if self.cache.len() >= CACHE_SLOTS {
                            self.cache.remove(0);
                        }
                        self.cache.push((from_id, to.id(), seq));
                        self.cache.len() - 1
                    }
                };
                // Take the sequence out while it runs (it borrows the storage).
                let (f, n, mut seq) = self.cache.swap_remove(slot);
                let res = self.run_bound(t, &mut seq, op);
                self.cache.push((f, n, seq));
                res
            }
            _ => {
                // No data moves: only the layout changes.
                let layout = if same {
                    self.layout.clone()
                } else {
                    Arc::new(self.layout_for(to)?)
                };
                self.storage.resize(Which::Cur, layout.total)?;
                if flow == DataFlow::Init {
                    let op = op.ok_or_else(|| {
                        Error::invalid("switch", "the Init data flow needs a reduction")
                            .on_rank(self.rank)
                    })?;
                    let v = reduce::identity(op)?;
                    self.storage[..layout.total].fill(v);
                }
                self.layout = layout;
                self.part = Some(to.clone());
                Ok(())
            }
        }
    }
}

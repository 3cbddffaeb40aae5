//! Action sequences: a [`Transition`] bound to a container's memory layouts and element type,
//! with its pack and receive buffers allocated once (D5).
//!
//! Running one executes the whole switch as ONE batched [`Exchange`] with at most one message
//! per peer. Every offset is computed and bounds-checked at binding time, so execution does no
//! planning, no bounds surprises and — after the first run — no heap allocation: the pack
//! buffers are reused and the exchange's operation vectors are recycled with
//! [`Exchange::from_parts`] / [`Exchange::into_parts`].
//!
//! Containers in node-shared memory (S3) run their switches with the protocol of `share.rs`
//! instead, for the pairs of ranks that share a node.

use std::sync::Arc;

use ferry_coll::ReduceOp;
use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Error, Exchange, MsgKey, MsgKind, RecvOp, Result, SendOp, Transport};

use crate::partitioning::{Layout, Mapping};
use crate::reduce;
use crate::space::{Range, MAX_DIMS};
use crate::transition::{FoldSource, Transition};

mod share;
pub use share::SHARE_MIN_BYTES;
pub(crate) use share::{Bufs, PeerMaps, ShareCtx, SHARE_KIND};

/// Position of a box in some buffer: element offset of its origin and its strides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    off: usize,
    st: [usize; MAX_DIMS],
}

impl Place {
    /// Highest offset touched by a box of extents `ext` (ext all > 0).
    fn last(&self, ext: [usize; MAX_DIMS]) -> usize {
        self.off
            + (0..MAX_DIMS)
                .map(|d| (ext[d] - 1) * self.st[d])
                .sum::<usize>()
    }
}

#[derive(Clone, Copy, Debug)]
struct BoxCopy {
    src: Place,
    dst: Place,
    ext: [usize; MAX_DIMS],
}

#[derive(Clone, Copy, Debug)]
enum Operand {
    Old(Place),
    Buf(usize, Place),
}

#[derive(Clone, Debug)]
struct FoldOp {
    dst: Place,
    ext: [usize; MAX_DIMS],
    srcs: Vec<Operand>,
}

type Parts = (Vec<SendOp<'static>>, Vec<RecvOp<'static>>);

/// A transition bound to a container (element type `T`, its layouts and its message tag),
/// ready to run many times (D5).
pub struct ActionSeq<T: Element> {
    transition: Arc<Transition>,
    pub(crate) old_layout: Arc<Layout>,
    pub(crate) new_layout: Arc<Layout>,
    pub(crate) data_id: u32,
    key: MsgKey,
    generic: bool,
    local: Vec<BoxCopy>,
    send_peers: Vec<usize>,
    send_bufs: Vec<Vec<T>>,
    pack: Vec<(usize, BoxCopy)>,
    recv_peers: Vec<usize>,
    recv_bufs: Vec<Vec<T>>,
    unpack: Vec<(usize, BoxCopy)>,
    folds: Vec<FoldOp>,
    row_a: Vec<T>,
    row_b: Vec<T>,
    parts: Option<Parts>,
    runs: u64,
    /// Old and new placement coincide for everything this rank keeps: the switch runs in
    /// place (only received cells are written), without the second buffer.
    pub(crate) inplace: bool,
    /// Layout generation of the container it was bound to.
    pub(crate) epoch: u64,
    /// The sharing protocol's state, built at the first run on a shared container.
    share: Option<share::SharePlan>,
}

pub(crate) fn ext_of(r: &Range) -> [usize; MAX_DIMS] {
    let e = r.extents();
    [e[0] as usize, e[1] as usize, e[2] as usize]
}

pub(crate) fn dense(off: usize, ext: [usize; MAX_DIMS]) -> Place {
    Place {
        off,
        st: [1, ext[0], ext[0] * ext[1]],
    }
}

pub(crate) fn place_in(layout: &Layout, range_no: usize, region: &Range) -> Result<Place> {
    let m: &Mapping = layout
        .range_mapping
        .get(range_no)
        .and_then(|&m| layout.mappings.get(m))
        .ok_or_else(|| Error::invalid("prepare", format!("range {range_no} has no mapping")))?;
    if !m.range.contains_range(region) {
        return Err(Error::invalid(
            "prepare",
            format!("region {region:?} outside mapping {:?}", m.range),
        ));
    }
    let off = m.offset + m.local_offset(&region.from()).unwrap_or(0);
    Ok(Place { off, st: m.strides })
}

/// A message buffer of `n` elements; running out of memory is an error, not an abort.
fn buffer<T: Element>(n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| {
        Error::new(ferry_core::ErrorKind::ResourceExhausted, "prepare")
            .with_detail(format!("message buffer of {n} elements of {}", T::NAME))
            .with_source(e)
    })?;
    v.resize(n, T::default());
    Ok(v)
}

fn check_fits(p: &Place, ext: [usize; MAX_DIMS], len: usize) -> Result<()> {
    if p.last(ext) >= len {
        return Err(Error::invalid(
            "prepare",
            format!("plan reaches element {} of a buffer of {len}", p.last(ext)),
        ));
    }
    Ok(())
}

impl<T: Element> ActionSeq<T> {
    /// Binds `t` to the given layouts (of the transition's source and target partitionings
    /// for its rank) and message tag.
    pub(crate) fn bind(
        t: Arc<Transition>,
        old_layout: Arc<Layout>,
        new_layout: Arc<Layout>,
        data_id: u32,
        generic: bool,
    ) -> Result<ActionSeq<T>> {
        let key = MsgKey::new(t.to().group().generation(), MsgKind::DATA, data_id);
        let mut local = Vec::with_capacity(t.local.len());
        for c in &t.local {
            let ext = ext_of(&c.region);
            let src = place_in(&old_layout, c.src_range, &c.region)?;
            let dst = place_in(&new_layout, c.dst_range, &c.region)?;
            check_fits(&src, ext, old_layout.total)?;
            check_fits(&dst, ext, new_layout.total)?;
            local.push(BoxCopy { src, dst, ext });
        }
        let mut pack = Vec::new();
        let mut send_bufs = Vec::with_capacity(t.sends.len());
        for (i, p) in t.sends.iter().enumerate() {
            let mut at = 0usize;
            for s in &p.segments {
                let ext = ext_of(&s.region);
                let no = s
                    .range_no
                    .ok_or_else(|| Error::invalid("prepare", "send segment without a range"))?;
                let src = place_in(&old_layout, no, &s.region)?;
                check_fits(&src, ext, old_layout.total)?;
                pack.push((
                    i,
                    BoxCopy {
                        src,
                        dst: dense(at, ext),
                        ext,
                    },
                ));
                at += s.region.size() as usize;
            }
            send_bufs.push(buffer(p.elems)?);
        }
        let mut unpack = Vec::new();
        let mut recv_bufs = Vec::with_capacity(t.recvs.len());
        for (i, p) in t.recvs.iter().enumerate() {
            let mut at = 0usize;
            for s in &p.segments {
                let ext = ext_of(&s.region);
                if let Some(no) = s.range_no {
                    let dst = place_in(&new_layout, no, &s.region)?;
                    check_fits(&dst, ext, new_layout.total)?;
                    unpack.push((
                        i,
                        BoxCopy {
                            src: dense(at, ext),
                            dst,
                            ext,
                        },
                    ));
                }
                at += s.region.size() as usize;
            }
            recv_bufs.push(buffer(p.elems)?);
        }
        let mut folds = Vec::with_capacity(t.folds.len());
        let mut max_row = 0usize;
        for f in &t.folds {
            let ext = ext_of(&f.region);
            max_row = max_row.max(ext[0]);
            let dst = place_in(&new_layout, f.dst_range, &f.region)?;
            check_fits(&dst, ext, new_layout.total)?;
            let mut srcs = Vec::with_capacity(f.sources.len());
            for s in &f.sources {
                srcs.push(match *s {
                    FoldSource::Local { range_no } => {
                        let p = place_in(&old_layout, range_no, &f.region)?;
                        check_fits(&p, ext, old_layout.total)?;
                        Operand::Old(p)
                    }
                    FoldSource::Remote { recv, offset } => {
                        let p = dense(offset, ext);
                        let len = t.recvs.get(recv).map_or(0, |r| r.elems);
                        check_fits(&p, ext, len)?;
                        Operand::Buf(recv, p)
                    }
                });
            }
            folds.push(FoldOp { dst, ext, srcs });
        }
        let inplace = folds.is_empty()
            && old_layout.mappings == new_layout.mappings
            && local
                .iter()
                .all(|c| c.src.off == c.dst.off && c.src.st == c.dst.st);
        Ok(ActionSeq {
            inplace,
            epoch: 0,
            send_peers: t.sends.iter().map(|p| p.peer).collect(),
            recv_peers: t.recvs.iter().map(|p| p.peer).collect(),
            transition: t,
            old_layout,
            new_layout,
            data_id,
            key,
            generic,
            local,
            send_bufs,
            pack,
            recv_bufs,
            unpack,
            folds,
            row_a: Vec::with_capacity(max_row),
            row_b: Vec::with_capacity(max_row),
            parts: None,
            runs: 0,
            share: None,
        })
    }

    /// The transition this sequence executes.
    pub fn transition(&self) -> &Arc<Transition> {
        &self.transition
    }

    /// Whether it runs in place (retained values do not move; see
    /// [`crate::Container::share_layout`]).
    pub fn in_place(&self) -> bool {
        self.inplace
    }

    /// How often it ran.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// Executes the switch: packs, exchanges one message per peer, copies locally, unpacks
    /// and folds. `old` holds the data in the source layout, `new` receives the target
    /// layout's data (`new.len()` must be the target layout's total).
    pub(crate) fn execute(
        &mut self,
        t: &mut dyn Transport,
        old: &[T],
        new: &mut [T],
        op: Option<&ReduceOp<T>>,
    ) -> Result<()> {
        let rank = t.rank();
        if old.len() < self.old_layout.total || new.len() < self.new_layout.total {
            return Err(Error::invalid(
                "switch",
                "container storage does not match the action sequence's layouts",
            )
            .on_rank(rank));
        }
        if !self.folds.is_empty() && op.is_none() {
            return Err(Error::invalid(
                "switch",
                "this action sequence reduces, but no reduction operator was given",
            )
            .on_rank(rank));
        }
        let generic = self.generic;
        self.pack_from(old);
        let local = std::mem::take(&mut self.local);
        let res = self.communicate(t, || {
            for c in &local {
                copy_box(old, c.src, new, c.dst, c.ext, generic);
            }
        });
        self.local = local;
        res?;
        self.unpack_into(new);
        if let Some(op) = op {
            for f in &self.folds {
                fold_box(
                    f,
                    old,
                    &self.recv_bufs,
                    new,
                    op,
                    &mut self.row_a,
                    &mut self.row_b,
                );
            }
        }
        self.runs += 1;
        Ok(())
    }

    /// Executes an in-place switch (`self.inplace`): kept cells stay where they are, so only
    /// the packing of outgoing and the unpacking of incoming cells touch `data`.
    pub(crate) fn execute_inplace(&mut self, t: &mut dyn Transport, data: &mut [T]) -> Result<()> {
        if !self.inplace || data.len() < self.new_layout.total {
            return Err(Error::invalid(
                "switch",
                "action sequence cannot run in place on this storage",
            )
            .on_rank(t.rank()));
        }
        self.pack_from(data);
        self.communicate(t, || {})?;
        self.unpack_into(data);
        self.runs += 1;
        Ok(())
    }

    fn pack_from(&mut self, old: &[T]) {
        for (i, c) in &self.pack {
            copy_box(
                old,
                c.src,
                &mut self.send_bufs[*i],
                c.dst,
                c.ext,
                self.generic,
            );
        }
    }

    fn unpack_into(&mut self, new: &mut [T]) {
        for (i, c) in &self.unpack {
            copy_box(&self.recv_bufs[*i], c.src, new, c.dst, c.ext, self.generic);
        }
    }

    /// One batched exchange: one message per peer each way. `overlap` runs after the sends
    /// were started and before waiting for the receives (local copies hide latency there).
    fn communicate(&mut self, t: &mut dyn Transport, overlap: impl FnOnce()) -> Result<()> {
        if self.send_peers.is_empty() && self.recv_peers.is_empty() {
            overlap();
            return Ok(());
        }
        let (s, r) = self.parts.take().unwrap_or_default();
        let mut ex = Exchange::from_parts(s, r);
        for (peer, buf) in self.send_peers.iter().zip(&self.send_bufs) {
            ex.send(*peer, self.key, as_bytes(buf));
        }
        for (peer, buf) in self.recv_peers.iter().zip(self.recv_bufs.iter_mut()) {
            ex.recv_into(*peer, self.key, as_bytes_mut(buf));
        }
        let done = match t.progress_exchange(&mut ex) {
            Ok(done) => done,
            Err(e) => {
                // A backend may still hold this exchange's buffers (single-copy descriptors,
                // sends written from them): nothing of it may outlive the failed switch.
                t.abandon_exchange(&mut ex, &e);
                return Err(e.context("switch"));
            }
        };
        overlap();
        if !done {
            t.exchange(&mut ex).map_err(|e| e.context("switch"))?;
        }
        self.parts = Some(ex.into_parts());
        Ok(())
    }
}

/// Copies a box between two buffers. Rows contiguous in both (x stride 1) are copied as
/// slices unless `generic` forces the element-wise path (`FERRY_LAYOUT_GENERIC`).
pub(crate) fn copy_box<T: Element>(
    src: &[T],
    s: Place,
    dst: &mut [T],
    d: Place,
    ext: [usize; MAX_DIMS],
    generic: bool,
) {
    let [ex, ey, ez] = ext;
    if !generic && s.st[0] == 1 && d.st[0] == 1 {
        if ey * ez == 1 || (s.st[1] == ex && d.st[1] == ex && ez == 1) {
            // one contiguous run
            let n = ex * ey;
            dst[d.off..d.off + n].copy_from_slice(&src[s.off..s.off + n]);
            return;
        }
        for z in 0..ez {
            for y in 0..ey {
                let so = s.off + y * s.st[1] + z * s.st[2];
                let dof = d.off + y * d.st[1] + z * d.st[2];
                dst[dof..dof + ex].copy_from_slice(&src[so..so + ex]);
            }
        }
        return;
    }
    for z in 0..ez {
        for y in 0..ey {
            for x in 0..ex {
                dst[d.off + x * d.st[0] + y * d.st[1] + z * d.st[2]] =
                    src[s.off + x * s.st[0] + y * s.st[1] + z * s.st[2]];
            }
        }
    }
}

/// Folds the operands of `f` row by row into the target: row = first operand, then
/// `row = row op operand_k` for k = 1, 2, ... (rank order).
fn fold_box<T: Element>(
    f: &FoldOp,
    old: &[T],
    bufs: &[Vec<T>],
    new: &mut [T],
    op: &ReduceOp<T>,
    acc: &mut Vec<T>,
    tmp: &mut Vec<T>,
) {
    let [ex, ey, ez] = f.ext;
    for z in 0..ez {
        for y in 0..ey {
            acc.clear();
            for (k, src) in f.srcs.iter().enumerate() {
                let (buf, p): (&[T], Place) = match *src {
                    Operand::Old(p) => (old, p),
                    Operand::Buf(i, p) => (&bufs[i], p),
                };
                let base = p.off + y * p.st[1] + z * p.st[2];
                let row: &[T] = if p.st[0] == 1 {
                    &buf[base..base + ex]
                } else {
                    tmp.clear();
                    tmp.extend((0..ex).map(|x| buf[base + x * p.st[0]]));
                    &tmp[..]
                };
                if k == 0 {
                    acc.extend_from_slice(row);
                } else {
                    reduce::combine(op, acc, row);
                }
            }
            let base = f.dst.off + y * f.dst.st[1] + z * f.dst.st[2];
            if f.dst.st[0] == 1 {
                new[base..base + ex].copy_from_slice(acc);
            } else {
                for (x, v) in acc.iter().enumerate() {
                    new[base + x * f.dst.st[0]] = *v;
                }
            }
        }
    }
}

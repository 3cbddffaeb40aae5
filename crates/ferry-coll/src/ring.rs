//! Ring and pipelined-chain algorithms: bandwidth-optimal for large messages (M4).
//!
//! - Ring allreduce: reduce-scatter then allgather around the ring, `2(p-1)` steps each
//!   moving `n/p` bytes per link. The partial of chunk `c` starts at member `c` and travels the
//!   ring, so its operands are combined in rotated order: deterministic (it depends only on `p`
//!   and `n`) but not group order, hence only for commutative operators (the built-ins).
//! - Ring allgather: `p-1` steps, each member forwards the block it received last.
//! - Pipelined chain: the message is cut into segments that flow `0 -> 1 -> ... -> p-1`;
//!   member `i` receives segment `k` while it forwards segment `k-1`. As a reduction each
//!   member computes `prefix op x_i` per segment, which is exactly the rank-ordered left fold
//!   `((x0 op x1) op x2) ...`, at close to link bandwidth for large messages; the result then
//!   flows back down the chain (`p-1 -> p-2 -> ...`) as a pipelined broadcast.

use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Exchange, Result, Transport};

use crate::comm::{chunk, split_pair, Buf, Ctx};
use crate::op::ReduceOp;
use crate::tree;

/// Default pipelining segment (bytes): large enough to amortise a message's fixed cost, small
/// enough to keep every link of a short chain busy.
pub(crate) const DEFAULT_SEGMENT: usize = 64 * 1024;

/// Ring allreduce (reduce-scatter + allgather). Commutative operators only (checked by the
/// caller).
pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    let me = c.me;
    let n = data.len();
    let sz = std::mem::size_of::<T>();
    let next = (me + 1) % p;
    let prev = (me + p - 1) % p;
    let mut scratch = vec![T::default(); chunk(n, p, 0).len()];
    for s in 0..p - 1 {
        let sc = chunk(n, p, (me + p - s) % p);
        let rc = chunk(n, p, (me + 2 * p - s - 1) % p);
        let rlen = rc.len();
        c.sendrecv_into(
            t,
            next,
            as_bytes(&data[sc]),
            prev,
            as_bytes_mut(&mut scratch[..rlen]),
        )?;
        op.apply(&mut data[rc], &scratch[..rlen]);
    }
    let g = c.phase(1);
    let bytes = as_bytes_mut(data);
    for s in 0..p - 1 {
        let sc = chunk(n, p, (me + 1 + p - s) % p);
        let rc = chunk(n, p, (me + p - s) % p);
        let (out, inc) = split_pair(
            bytes,
            sc.start * sz..sc.end * sz,
            rc.start * sz..rc.end * sz,
        );
        g.sendrecv_into(t, next, out, prev, inc)?;
    }
    Ok(())
}

/// Ring allgather: in step `s` send block `me - s` to the next member and receive block
/// `me - s - 1` from the previous one.
pub(crate) fn allgather(t: &mut dyn Transport, c: &Ctx<'_>, send: &[u8]) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let me = c.me;
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); p];
    out[me] = send.to_vec();
    let next = (me + 1) % p;
    let prev = (me + p - 1) % p;
    let mut inc = Vec::new();
    for s in 0..p.saturating_sub(1) {
        let sb = (me + p - s) % p;
        let rb = (me + 2 * p - s - 1) % p;
        c.sendrecv(t, next, &out[sb], prev, &mut inc)?;
        out[rb] = std::mem::take(&mut inc);
    }
    Ok(out)
}

fn segments(len: usize, seg: usize) -> usize {
    len.div_ceil(seg.max(1)).max(1)
}

/// Pipelined chain broadcast; a vector buffer first learns the root's length (binomial, one
/// small message).
pub(crate) fn broadcast(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut Buf<'_>,
    seg: usize,
) -> Result<()> {
    if let Buf::Vec(v) = buf {
        let mut len = (v.len() as u64).to_le_bytes();
        tree::broadcast(t, &c.phase(3), root, &mut Buf::Slice(&mut len))?;
        let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| {
            ferry_core::Error::invalid("broadcast", "root's length does not fit in memory")
        })?;
        v.resize(len, 0);
    }
    crate::chain::broadcast_bytes(t, c, root, buf.bytes_mut(), seg)
}

/// Whole elements of `T` per pipeline segment of about `seg_bytes` (at least one).
pub(crate) fn segment_elems<T>(seg_bytes: usize) -> usize {
    (seg_bytes / std::mem::size_of::<T>().max(1)).max(1)
}

/// Pipelined chain reduction `0 -> 1 -> ... -> p-1`: on return member `p-1` holds the strict
/// left fold; member `i` holds the fold of members `0..=i`.
pub(crate) fn chain_fold_in_place<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
    seg_bytes: usize,
) -> Result<()> {
    let p = c.size();
    let me = c.me;
    let n = data.len();
    let seg = segment_elems::<T>(seg_bytes);
    let nseg = segments(n, seg);
    let range = |k: usize| (k * seg).min(n)..((k + 1) * seg).min(n);
    if me == 0 {
        for k in 0..nseg {
            c.send(t, 1, as_bytes(&data[range(k)]))?;
        }
        return Ok(());
    }
    let forward = me + 1 < p;
    let mut scratch = vec![T::default(); seg.min(n)];
    let mut tmp = Vec::new();
    for k in 0..=nseg {
        let rlen = if k < nseg { range(k).len() } else { 0 };
        {
            let mut ex = Exchange::new();
            if k > 0 && forward {
                let (w, key) = c.addr(me + 1);
                ex.send(w, key, as_bytes(&data[range(k - 1)]));
            }
            if k < nseg {
                let (w, key) = c.addr(me - 1);
                ex.recv_into(w, key, as_bytes_mut(&mut scratch[..rlen]));
            }
            if !ex.sends.is_empty() || !ex.recvs.is_empty() {
                t.exchange(&mut ex)?;
            }
        }
        if k < nseg {
            // prefix (members 0..me) op x_me.
            op.apply_left(&scratch[..rlen], &mut data[range(k)], &mut tmp);
        }
    }
    Ok(())
}

/// Rank-ordered pipelined allreduce: chain fold to `p-1`, then pipelined broadcast from it.
/// Both phases only talk to neighbours in group order, so this is also the chain allreduce
/// (X7) that the automatic choice keeps to on a Cartesian group.
pub(crate) fn allreduce_pipeline<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
    seg_bytes: usize,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    chain_fold_in_place(t, c, data, op, seg_bytes)?;
    let seg = segment_elems::<T>(seg_bytes) * std::mem::size_of::<T>();
    crate::chain::broadcast_bytes(t, &c.phase(1), p - 1, as_bytes_mut(data), seg)
}

/// Rank-ordered pipelined reduce to `root`; other members' `data` is left unchanged.
pub(crate) fn reduce_pipeline<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
    seg_bytes: usize,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    let last = p - 1;
    if c.me == root && root == last {
        return chain_fold_in_place(t, c, data, op, seg_bytes);
    }
    let mut mine = data.to_vec();
    chain_fold_in_place(t, c, &mut mine, op, seg_bytes)?;
    let fin = c.phase(1);
    if c.me == last {
        fin.send(t, root, as_bytes(&mine))?;
    } else if c.me == root {
        fin.recv_into(t, last, as_bytes_mut(data))?;
    }
    Ok(())
}

//! Chain algorithms: every member talks only to group indices `me - 1` and `me + 1` (X7; seed
//! 004's "ring" algorithms, which it built for a transport with connections to the rank
//! neighbours only).
//!
//! On a group with a Cartesian topology these are the automatic choice (`select.rs`): a 1-D
//! halo program then opens no connection beyond its two neighbours, collectives included. The
//! price is latency: `p - 1` hops instead of `log2 p` rounds (measured in
//! docs/PERFORMANCE.md). Large slices travel in pipelined segments, so bandwidth stays close
//! to one link's.
//!
//! Reductions are the chain fold `((x0 op x1) op x2) ...` (the rank-ordered left fold, the
//! same bits as Linear, Master and Pipeline), followed by a broadcast back down the chain.
//! The chain allreduce is exactly the pipelined one (`ring::allreduce_pipeline`), which only
//! talks to neighbours: `select.rs` runs that one for both.

use ferry_core::element::as_bytes_mut;
use ferry_core::{Element, Error, ErrorKind, Exchange, Result, Transport};

use crate::comm::{pack, pack_append, split_pair, unpack_into, Buf, Ctx};
use crate::op::ReduceOp;
use crate::ring;

fn segments(len: usize, seg: usize) -> usize {
    len.div_ceil(seg.max(1)).max(1)
}

/// My upstream member (towards `root`) and my downstream members (away from it) on the line.
fn links(me: usize, root: usize, p: usize) -> (Option<usize>, [Option<usize>; 2]) {
    use std::cmp::Ordering::*;
    match me.cmp(&root) {
        Equal => (
            None,
            [root.checked_sub(1), (root + 1 < p).then_some(root + 1)],
        ),
        Less => (Some(me + 1), [me.checked_sub(1), None]),
        Greater => (Some(me - 1), [(me + 1 < p).then_some(me + 1), None]),
    }
}

/// Pipelined line broadcast of a buffer of equal length on every member: the root sends both
/// ways, every other member receives segment `k` from its upstream neighbour while it forwards
/// segment `k - 1` downstream.
pub(crate) fn broadcast_bytes(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut [u8],
    seg: usize,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    let (up, downs) = links(c.me, root, p);
    let len = buf.len();
    let nseg = segments(len, seg);
    let range = |k: usize| (k * seg).min(len)..((k + 1) * seg).min(len);
    let Some(up) = up else {
        for k in 0..nseg {
            let mut ex = Exchange::new();
            for d in downs.iter().flatten() {
                let (w, key) = c.addr(*d);
                ex.send(w, key, &buf[range(k)]);
            }
            t.exchange(&mut ex)?;
        }
        return Ok(());
    };
    let down = downs[0];
    for k in 0..=nseg {
        let mut ex = Exchange::new();
        match (k < nseg, k > 0 && down.is_some()) {
            (true, true) => {
                let (out, inc) = split_pair(buf, range(k - 1), range(k));
                let (w, key) = c.addr(down.unwrap_or(up));
                ex.send(w, key, out);
                let (w, key) = c.addr(up);
                ex.recv_into(w, key, inc);
            }
            (true, false) => {
                let (w, key) = c.addr(up);
                ex.recv_into(w, key, &mut buf[range(k)]);
            }
            (false, true) => {
                let (w, key) = c.addr(down.unwrap_or(up));
                ex.send(w, key, &buf[range(k - 1)]);
            }
            (false, false) => {}
        }
        if !ex.sends.is_empty() || !ex.recvs.is_empty() {
            t.exchange(&mut ex)?;
        }
    }
    Ok(())
}

/// Line broadcast; a vector takes the root's length (whole messages, not segments: a member
/// learns the length from the message itself).
pub(crate) fn broadcast(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut Buf<'_>,
    seg: usize,
) -> Result<()> {
    match buf {
        Buf::Slice(s) => broadcast_bytes(t, c, root, s, seg),
        Buf::Vec(v) => {
            let (up, downs) = links(c.me, root, c.size());
            if let Some(up) = up {
                c.recv(t, up, v)?;
            }
            let mut ex = Exchange::new();
            for d in downs.iter().flatten() {
                let (w, key) = c.addr(*d);
                ex.send(w, key, v);
            }
            if !ex.sends.is_empty() {
                t.exchange(&mut ex)?;
            }
            Ok(())
        }
    }
}

/// Up the chain and back: nobody leaves before the last member heard that everyone arrived.
pub(crate) fn barrier(t: &mut dyn Transport, c: &Ctx<'_>) -> Result<()> {
    let (p, me) = (c.size(), c.me);
    let (arrive, leave) = (c.phase(0), c.phase(1));
    if me > 0 {
        arrive.recv_into(t, me - 1, &mut [])?;
    }
    if me + 1 < p {
        arrive.send(t, me + 1, &[])?;
        leave.recv_into(t, me + 1, &mut [])?;
    }
    if me > 0 {
        leave.send(t, me - 1, &[])?;
    }
    Ok(())
}

/// Chain fold to the last member, then down the chain to `root` only; other members' `data`
/// is left unchanged.
pub(crate) fn reduce<T: Element>(
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
        return ring::chain_fold_in_place(t, c, data, op, seg_bytes);
    }
    let mut mine = data.to_vec();
    ring::chain_fold_in_place(t, c, &mut mine, op, seg_bytes)?;
    if c.me < root {
        return Ok(());
    }
    // The members from the root to the end relay the result down to the root.
    let tail = &c.ranks[root..];
    let back = c.sub(tail, c.me - root, 1);
    let seg = ring::segment_elems::<T>(seg_bytes) * std::mem::size_of::<T>();
    if c.me == root {
        broadcast_bytes(t, &back, tail.len() - 1, as_bytes_mut(data), seg)
    } else {
        broadcast_bytes(t, &back, tail.len() - 1, as_bytes_mut(&mut mine), seg)
    }
}

fn protocol(op: &'static str, peer: usize, why: String) -> Error {
    Error::new(ErrorKind::Protocol, op)
        .with_peer(peer)
        .with_detail(why)
}

/// Blocks flow along the line towards the root, each member adding its own.
pub(crate) fn gather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    send: &[u8],
) -> Result<Option<Vec<Vec<u8>>>> {
    let p = c.size();
    let me = c.me;
    let (up, downs) = links(me, root, p);
    if let Some(up) = up {
        let mut msg = Vec::new();
        if let Some(d) = downs[0] {
            c.recv(t, d, &mut msg)?;
            if msg.len() < 4 {
                return Err(protocol("gather", c.ranks[d], "empty block list".into()));
            }
        }
        pack_append(&mut msg, me, send, "gather", c.ranks[me])?;
        c.send(t, up, &msg)?;
        return Ok(None);
    }
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; p];
    let mut msgs = [Vec::new(), Vec::new()];
    {
        let mut ex = Exchange::new();
        for (d, m) in downs.iter().zip(msgs.iter_mut()) {
            if let Some(d) = d {
                let (w, key) = c.addr(*d);
                ex.recv(w, key, m);
            }
        }
        if !ex.recvs.is_empty() {
            t.exchange(&mut ex)?;
        }
    }
    for (d, m) in downs.iter().zip(&msgs) {
        if let Some(d) = d {
            unpack_into(m, &mut slots, "gather", c.ranks[*d])?;
        }
    }
    slots[me] = Some(send.to_vec());
    let mut out = Vec::with_capacity(p);
    for (i, s) in slots.into_iter().enumerate() {
        out.push(s.ok_or_else(|| {
            protocol(
                "gather",
                c.ranks[i],
                format!("the block of member {i} never arrived"),
            )
        })?);
    }
    Ok(Some(out))
}

/// Chain gather to the last member, then the packed blocks back down the chain.
pub(crate) fn allgather(t: &mut dyn Transport, c: &Ctx<'_>, send: &[u8]) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let last = p - 1;
    let gathered = gather(t, c, last, send)?;
    let mut msg = Vec::new();
    if let Some(blocks) = &gathered {
        pack(blocks.iter().map(|b| &b[..]).enumerate(), &mut msg);
    }
    broadcast(t, &c.phase(1), last, &mut Buf::Vec(&mut msg), 0)?;
    match gathered {
        Some(blocks) => Ok(blocks),
        None => {
            let mut slots = vec![None; p];
            unpack_into(&msg, &mut slots, "allgather", c.ranks[last])?;
            let mut out = Vec::with_capacity(p);
            for (i, s) in slots.into_iter().enumerate() {
                out.push(s.ok_or_else(|| {
                    protocol(
                        "allgather",
                        c.ranks[last],
                        format!("no block of member {i}"),
                    )
                })?);
            }
            Ok(out)
        }
    }
}

/// The root sends each side the parts of that side; every member keeps its own and passes the
/// rest on.
pub(crate) fn scatter(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    parts: Option<&[Vec<u8>]>,
) -> Result<Vec<u8>> {
    let p = c.size();
    let me = c.me;
    let (up, downs) = links(me, root, p);
    let mut msgs = [Vec::new(), Vec::new()];
    let mine;
    if let Some(up) = up {
        let mut msg = Vec::new();
        c.recv(t, up, &mut msg)?;
        let mut slots: Vec<Option<Vec<u8>>> = vec![None; p];
        unpack_into(&msg, &mut slots, "scatter", c.ranks[up])?;
        mine = slots[me]
            .take()
            .ok_or_else(|| protocol("scatter", c.ranks[up], format!("no part for member {me}")))?;
        if downs[0].is_some() {
            let rest = slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_deref().map(|s| (i, s)));
            pack(rest, &mut msgs[0]);
        }
    } else {
        // The caller checked that the root passed `size()` parts.
        let parts = parts.unwrap_or(&[]);
        let blocks = |r: std::ops::Range<usize>| {
            parts[r.clone()]
                .iter()
                .enumerate()
                .map(move |(k, b)| (r.start + k, &b[..]))
        };
        pack(blocks(0..root), &mut msgs[0]);
        pack(blocks(root + 1..p), &mut msgs[1]);
        mine = parts.get(root).cloned().unwrap_or_default();
    }
    let mut ex = Exchange::new();
    for (d, m) in downs.iter().zip(&msgs) {
        if let Some(d) = d {
            let (w, key) = c.addr(*d);
            ex.send(w, key, m);
        }
    }
    if !ex.sends.is_empty() {
        t.exchange(&mut ex)?;
    }
    Ok(mine)
}

#[cfg(test)]
mod tests {
    use super::links;

    #[test]
    fn links_stay_on_the_line() {
        for p in 1..9 {
            for root in 0..p {
                for me in 0..p {
                    let (up, downs) = links(me, root, p);
                    for n in up.iter().chain(downs.iter().flatten()) {
                        assert!(*n < p && n.abs_diff(me) == 1, "p={p} root={root} me={me}");
                    }
                    assert_eq!(up.is_none(), me == root);
                }
            }
        }
    }
}

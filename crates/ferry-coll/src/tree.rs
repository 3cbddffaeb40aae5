//! Binomial-tree algorithms: `ceil(log2 p)` rounds, each member sends or receives at most once
//! per round; best for small and medium messages on larger groups (M4).
//!
//! Positions are relative to the root (`v = (me - root) mod p`); in round `k` the member at
//! `v` with bit `k` set talks to `v - 2^k`. Reductions always run the tree rooted at group
//! index 0 over absolute indices, so member `v` holds the fold of the contiguous block
//! `[v, v + 2^k)` and combines it with the next block on its right: the order stays group
//! order, the parenthesisation is `((x0 x1)(x2 x3))((x4 x5)(x6 x7))` for 8 members. A reduce to
//! another root adds one message from index 0 to the root.

use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Exchange, Result, Transport};

use crate::comm::{pack, unpack_into, Buf, Ctx};
use crate::op::ReduceOp;

fn rel(me: usize, root: usize, p: usize) -> usize {
    (me + p - root) % p
}

fn abs(v: usize, root: usize, p: usize) -> usize {
    (v + root) % p
}

/// Lowest set bit of `v` (the round in which `v` receives from its parent), or the first power
/// of two >= `p` for the root.
fn parent_mask(v: usize, p: usize) -> usize {
    if v == 0 {
        p.next_power_of_two()
    } else {
        1 << v.trailing_zeros()
    }
}

/// Binomial broadcast from `root`.
pub(crate) fn broadcast(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut Buf<'_>,
) -> Result<()> {
    let p = c.size();
    let v = rel(c.me, root, p);
    let mask = parent_mask(v, p);
    if v != 0 {
        buf.recv(c, t, abs(v - mask, root, p))?;
    }
    let data = buf.bytes();
    let mut ex = Exchange::new();
    // Largest subtree first: it has the longest way to go.
    let mut m = mask >> 1;
    while m > 0 {
        if v + m < p {
            let (w, k) = c.addr(abs(v + m, root, p));
            ex.send(w, k, data);
        }
        m >>= 1;
    }
    if ex.sends.is_empty() {
        return Ok(());
    }
    t.exchange(&mut ex)
}

/// Binomial reduction to index 0, in place: on return index 0's `data` holds the result;
/// other members' `data` holds partial results.
pub(crate) fn reduce_to_zero_in_place<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    let p = c.size();
    let me = c.me;
    let mut scratch = vec![T::default(); data.len()];
    let mut mask = 1;
    while mask < p {
        if me & mask != 0 {
            return c.send(t, me - mask, as_bytes(data));
        }
        if me + mask < p {
            c.recv_into(t, me + mask, as_bytes_mut(&mut scratch))?;
            op.apply(data, &scratch);
        }
        mask <<= 1;
    }
    Ok(())
}

/// Binomial reduce to `root`; non-roots' `data` is left unchanged.
pub(crate) fn reduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    if c.me == 0 && root == 0 {
        return reduce_to_zero_in_place(t, c, data, op);
    }
    if c.me == root {
        // The root (not 0) contributes through a copy, then receives the result from 0.
        let mut mine = data.to_vec();
        reduce_to_zero_in_place(t, c, &mut mine, op)?;
        return c.phase(1).recv_into(t, 0, as_bytes_mut(data));
    }
    let mut mine = data.to_vec();
    reduce_to_zero_in_place(t, c, &mut mine, op)?;
    if c.me == 0 {
        c.phase(1).send(t, root, as_bytes(&mine))?;
    }
    Ok(())
}

/// Binomial reduce to 0 followed by a binomial broadcast from 0.
pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    reduce_to_zero_in_place(t, c, data, op)?;
    broadcast(t, &c.phase(1), 0, &mut Buf::Slice(as_bytes_mut(data)))
}

/// Fan-in to 0 and fan-out from 0 with empty messages.
pub(crate) fn barrier(t: &mut dyn Transport, c: &Ctx<'_>) -> Result<()> {
    let mut nothing: [u8; 0] = [];
    reduce_to_zero_in_place(t, c, &mut nothing, &ReduceOp::Sum)?;
    broadcast(t, &c.phase(1), 0, &mut Buf::Slice(&mut nothing))
}

/// Binomial gather: each member forwards the packed blocks of its subtree to its parent.
pub(crate) fn gather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    send: &[u8],
) -> Result<Option<Vec<Vec<u8>>>> {
    let p = c.size();
    let v = rel(c.me, root, p);
    // Slots indexed by relative position.
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; p];
    slots[v] = Some(send.to_vec());
    let mut msg = Vec::new();
    let mut mask = 1;
    while mask < p {
        if v & mask != 0 {
            let end = (v + mask).min(p);
            pack(
                (v..end).filter_map(|i| slots[i].as_deref().map(|b| (i, b))),
                &mut msg,
            );
            return c.send(t, abs(v - mask, root, p), &msg).map(|_| None);
        }
        if v + mask < p {
            let child = abs(v + mask, root, p);
            c.recv(t, child, &mut msg)?;
            unpack_into(&msg, &mut slots, "gather", c.ranks[child])?;
        }
        mask <<= 1;
    }
    let mut out = vec![Vec::new(); p];
    for (i, s) in slots.into_iter().enumerate() {
        out[abs(i, root, p)] = s.unwrap_or_default();
    }
    Ok(Some(out))
}

/// Binomial scatter: each member receives the packed parts of its subtree from its parent and
/// hands the children their shares.
pub(crate) fn scatter(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    parts: Option<&[Vec<u8>]>,
) -> Result<Vec<u8>> {
    let p = c.size();
    let v = rel(c.me, root, p);
    let mask = parent_mask(v, p);
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; p];
    if v == 0 {
        for (i, part) in parts.unwrap_or(&[]).iter().enumerate() {
            slots[rel(i, root, p)] = Some(part.clone());
        }
    } else {
        let mut msg = Vec::new();
        let parent = abs(v - mask, root, p);
        c.recv(t, parent, &mut msg)?;
        unpack_into(&msg, &mut slots, "scatter", c.ranks[parent])?;
    }
    let mut msgs = Vec::new();
    let mut m = mask >> 1;
    while m > 0 {
        if v + m < p {
            let end = (v + 2 * m).min(p);
            let mut msg = Vec::new();
            pack(
                (v + m..end).filter_map(|i| slots[i].as_deref().map(|b| (i, b))),
                &mut msg,
            );
            msgs.push((abs(v + m, root, p), msg));
        }
        m >>= 1;
    }
    if !msgs.is_empty() {
        let mut ex = Exchange::new();
        for (to, msg) in &msgs {
            let (w, k) = c.addr(*to);
            ex.send(w, k, msg);
        }
        t.exchange(&mut ex)?;
    }
    Ok(slots[v].take().unwrap_or_default())
}

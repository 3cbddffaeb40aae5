//! Linear algorithms and seed 000's two reduction strategies (000 §6.4.3, M4).
//!
//! - *Linear*: the root talks to every other participant directly, all messages of one side in
//!   one batched exchange (M3: nothing waits for an unrelated message).
//! - *Master* ("one master reduces and sends back", 000 §6.4.3 TCP-M): N + M messages, two
//!   latencies; the master folds the inputs in group order.
//! - *Direct* ("all inputs to all outputs", 000 §6.4.3 default TCP): every participant sends its
//!   input to every other and folds locally; N * M messages but a single latency, which the
//!   thesis found better for very small reductions (000 §6.6.8, §7.2.2).
//!
//! All reductions here are the strict rank-ordered left fold `((x0 op x1) op x2) op ...`.

use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Exchange, Result, Transport};

use crate::comm::{pack, unpack_into, Buf, Ctx};
use crate::op::ReduceOp;

/// Everyone reports to participant 0, which then releases everyone.
pub(crate) fn barrier(t: &mut dyn Transport, c: &Ctx<'_>) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    if c.me == 0 {
        let mut bufs: Vec<[u8; 0]> = vec![[]; p];
        let mut ex = Exchange::new();
        for (i, b) in bufs.iter_mut().enumerate().skip(1) {
            let (w, k) = c.addr(i);
            ex.recv_into(w, k, b);
        }
        t.exchange(&mut ex)?;
        let mut ex = Exchange::new();
        for i in 1..p {
            let (w, k) = c.addr(i);
            ex.send(w, k, &[]);
        }
        t.exchange(&mut ex)
    } else {
        c.send(t, 0, &[])?;
        c.recv_into(t, 0, &mut [])
    }
}

/// The root sends the whole buffer to every other participant.
pub(crate) fn broadcast(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut Buf<'_>,
) -> Result<()> {
    let p = c.size();
    if c.me == root {
        let data = buf.bytes();
        let mut ex = Exchange::new();
        for i in (0..p).filter(|&i| i != root) {
            let (w, k) = c.addr(i);
            ex.send(w, k, data);
        }
        t.exchange(&mut ex)
    } else {
        buf.recv(c, t, root)
    }
}

/// Receives every participant's input at once (one exchange) and folds them in group order.
/// Returns the result only on `root`; others just send.
fn fold_at<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    data: &[T],
    op: &ReduceOp<T>,
) -> Result<Option<Vec<T>>> {
    let p = c.size();
    let n = data.len();
    if c.me != root {
        c.send(t, root, as_bytes(data))?;
        return Ok(None);
    }
    let mut inputs: Vec<Vec<T>> = (0..p)
        .map(|i| {
            if i == root {
                Vec::new()
            } else {
                vec![T::default(); n]
            }
        })
        .collect();
    {
        let mut ex = Exchange::new();
        for (i, b) in inputs.iter_mut().enumerate() {
            if i != root {
                let (w, k) = c.addr(i);
                ex.recv_into(w, k, as_bytes_mut(b));
            }
        }
        t.exchange(&mut ex)?;
    }
    Ok(Some(left_fold(&inputs, root, data, op)))
}

/// `((x0 op x1) op x2) ...` where `x_me` is `mine` and the others are `inputs[i]`.
fn left_fold<T: Element>(inputs: &[Vec<T>], me: usize, mine: &[T], op: &ReduceOp<T>) -> Vec<T> {
    let get = |i: usize| -> &[T] {
        if i == me {
            mine
        } else {
            &inputs[i]
        }
    };
    let mut acc = get(0).to_vec();
    for i in 1..inputs.len() {
        op.apply(&mut acc, get(i));
    }
    acc
}

/// Linear reduce: the root receives every input and folds them in group order.
pub(crate) fn reduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    if let Some(acc) = fold_at(t, c, root, data, op)? {
        data.copy_from_slice(&acc);
    }
    Ok(())
}

/// Master strategy (000 §6.4.3 TCP-M): participant `master` folds all inputs in group order
/// and sends the result back to everyone.
pub(crate) fn allreduce_master<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    master: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    let c1 = c.phase(1);
    match fold_at(t, c, master, data, op)? {
        Some(acc) => {
            data.copy_from_slice(&acc);
            let mut ex = Exchange::new();
            for i in (0..p).filter(|&i| i != master) {
                let (w, k) = c1.addr(i);
                ex.send(w, k, as_bytes(data));
            }
            t.exchange(&mut ex)
        }
        None => c1.recv_into(t, master, as_bytes_mut(data)),
    }
}

/// How the direct strategy folds the inputs it gathered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fold {
    /// `((x0 op x1) op x2) op ...`: the rank-ordered class.
    Left,
    /// The binomial tree's parenthesisation (`((x0 x1)(x2 x3))...`): the tree class, so the
    /// one-round direct exchange can stand in for the binomial tree without changing a bit.
    Tree,
}

/// Direct strategy (000 §6.4.3 default TCP, "all inputs to all outputs"): every participant
/// sends its input to every other one in a single exchange, then folds all inputs in group
/// order, as a left fold or in the binomial tree's parenthesisation. Every rank computes the
/// same fold, so the bits agree everywhere. One allocation for all incoming inputs; the fold
/// runs in place.
pub(crate) fn allreduce_direct<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
    fold: Fold,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    let n = data.len();
    if n == 0 {
        // Every member passes the same length: nothing to combine, nothing to send.
        return Ok(());
    }
    let me = c.me;
    // Slot j holds the input of participant j (j < me) or j + 1 (j >= me).
    let mut inputs = vec![T::default(); (p - 1) * n];
    {
        let mut ex = Exchange::new();
        for (j, b) in inputs.chunks_exact_mut(n).enumerate() {
            let i = if j < me { j } else { j + 1 };
            let (w, k) = c.addr(i);
            ex.send(w, k, as_bytes(data));
            ex.recv_into(w, k, as_bytes_mut(b));
        }
        t.exchange(&mut ex)?;
    }
    match fold {
        Fold::Left => left_fold_slots(&mut inputs, data, me, p, op),
        Fold::Tree => tree_fold_slots(&mut inputs, data, me, p, op),
    }
    Ok(())
}

/// Left fold over the inputs of participants `0..p`, mine (`data`) at `me`; result in `data`.
fn left_fold_slots<T: Element>(
    inputs: &mut [T],
    data: &mut [T],
    me: usize,
    p: usize,
    op: &ReduceOp<T>,
) {
    let n = data.len();
    if me == 0 {
        // x0 is mine: fold the others into it directly.
        for x in inputs.chunks_exact(n) {
            op.apply(data, x);
        }
        return;
    }
    // x0 sits in slot 0: fold x1.. (mine at position `me`) into it, then copy out.
    let (acc, rest) = inputs.split_at_mut(n);
    for i in 1..p {
        if i == me {
            op.apply(acc, data);
        } else {
            let j = if i < me { i } else { i - 1 };
            op.apply(acc, &rest[(j - 1) * n..j * n]);
        }
    }
    data.copy_from_slice(acc);
}

/// The binomial tree's fold, simulated locally: in round `mask`, the block starting at `v`
/// (a multiple of `2 mask`) absorbs the block starting at `v + mask`. Result in `data`.
fn tree_fold_slots<T: Element>(
    inputs: &mut [T],
    data: &mut [T],
    me: usize,
    p: usize,
    op: &ReduceOp<T>,
) {
    let n = data.len();
    let slot = |i: usize| if i < me { i } else { i - 1 };
    let mut mask = 1;
    while mask < p {
        let mut v = 0;
        while v + mask < p {
            let w = v + mask;
            if v == me {
                let j = slot(w);
                op.apply(data, &inputs[j * n..(j + 1) * n]);
            } else if w == me {
                let j = slot(v);
                op.apply(&mut inputs[j * n..(j + 1) * n], data);
            } else {
                let (jv, jw) = (slot(v), slot(w));
                // jv < jw: v < w and the slot map is monotonic.
                let (lo, hi) = inputs.split_at_mut(jw * n);
                op.apply(&mut lo[jv * n..(jv + 1) * n], &hi[..n]);
            }
            v += 2 * mask;
        }
        mask <<= 1;
    }
    if me != 0 {
        data.copy_from_slice(&inputs[..n]);
    }
}

/// The root receives every participant's block in one exchange.
pub(crate) fn gather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    send: &[u8],
) -> Result<Option<Vec<Vec<u8>>>> {
    let p = c.size();
    if c.me != root {
        c.send(t, root, send)?;
        return Ok(None);
    }
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); p];
    {
        let mut ex = Exchange::new();
        for (i, b) in out.iter_mut().enumerate() {
            if i != root {
                let (w, k) = c.addr(i);
                ex.recv(w, k, b);
            }
        }
        t.exchange(&mut ex)?;
    }
    out[root] = send.to_vec();
    Ok(Some(out))
}

/// The root sends every participant its part in one exchange.
pub(crate) fn scatter(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    parts: Option<&[Vec<u8>]>,
) -> Result<Vec<u8>> {
    if c.me != root {
        let mut buf = Vec::new();
        c.recv(t, root, &mut buf)?;
        return Ok(buf);
    }
    // The caller checked that the root passed `size()` parts.
    let parts = parts.unwrap_or(&[]);
    let mut ex = Exchange::new();
    for (i, part) in parts.iter().enumerate() {
        if i != root {
            let (w, k) = c.addr(i);
            ex.send(w, k, part);
        }
    }
    t.exchange(&mut ex)?;
    Ok(parts.get(root).cloned().unwrap_or_default())
}

/// Every participant sends its block to every other one in a single exchange (the "all inputs
/// to all outputs" pattern applied to allgather).
pub(crate) fn allgather_direct(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    send: &[u8],
) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let me = c.me;
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); p];
    {
        let mut ex = Exchange::new();
        for (i, b) in out.iter_mut().enumerate() {
            if i != me {
                let (w, k) = c.addr(i);
                ex.send(w, k, send);
                ex.recv(w, k, b);
            }
        }
        t.exchange(&mut ex)?;
    }
    out[me] = send.to_vec();
    Ok(out)
}

/// Gather to participant 0, then 0 sends the packed blocks to everyone (master pattern).
pub(crate) fn allgather_master(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    send: &[u8],
) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let gathered = gather(t, c, 0, send)?;
    let mut msg = Vec::new();
    if let Some(blocks) = &gathered {
        pack(blocks.iter().map(|b| &b[..]).enumerate(), &mut msg);
    }
    broadcast(t, &c.phase(1), 0, &mut Buf::Vec(&mut msg))?;
    match gathered {
        Some(blocks) => Ok(blocks),
        None => {
            let mut slots = vec![None; p];
            unpack_into(&msg, &mut slots, "allgather", c.ranks[0])?;
            Ok(slots.into_iter().map(Option::unwrap_or_default).collect())
        }
    }
}

/// All-to-all in one exchange: every send and receive progressed together (M3).
pub(crate) fn alltoall_direct(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    parts: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let me = c.me;
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); p];
    {
        let mut ex = Exchange::new();
        for (i, b) in out.iter_mut().enumerate() {
            if i != me {
                let (w, k) = c.addr(i);
                ex.send(w, k, &parts[i]);
                ex.recv(w, k, b);
            }
        }
        t.exchange(&mut ex)?;
    }
    out[me] = parts[me].clone();
    Ok(out)
}

/// All-to-all in `p-1` rounds: in round `s` send to `me+s` and receive from `me-s`, so at
/// most one message per direction is in flight (bounded memory for large blocks).
pub(crate) fn alltoall_pairwise(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    parts: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let me = c.me;
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); p];
    for s in 1..p {
        let to = (me + s) % p;
        let from = (me + p - s) % p;
        c.sendrecv(t, to, &parts[to], from, &mut out[from])?;
    }
    out[me] = parts[me].clone();
    Ok(out)
}

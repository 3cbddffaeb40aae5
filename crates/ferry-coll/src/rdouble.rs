//! Recursive doubling: `log2 p` rounds of pairwise exchanges, every member ends with the full
//! result; the latency-optimal choice for small allreduce/allgather (M4).
//!
//! Groups whose size is not a power of two are folded first: with `p' = 2^floor(log2 p)` and
//! `r = p - p'`, members `2i` and `2i+1` for `i < r` combine into one virtual member (held by
//! `2i+1`), the `p'` virtual members run the doubling, and `2i+1` hands the result back to
//! `2i`. Every virtual member covers a contiguous block of group indices, and each round
//! combines the lower block on the left, so the order stays group order on every member and
//! the bits agree everywhere. Parenthesisation for 5 members: `((x0 x1) x2)(x3 x4)`.
//!
//! The barrier is the dissemination variant (any p, `ceil(log2 p)` rounds, no fold-up).

use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Result, Transport};

use crate::comm::{pack, split_pair, unpack_into, Ctx};
use crate::op::ReduceOp;

/// The non-power-of-two fold: who is virtual, and the map back to real indices.
struct Fold {
    /// Number of pairs folded into one virtual member.
    rem: usize,
    /// Number of virtual members (a power of two).
    pow: usize,
}

impl Fold {
    fn new(p: usize) -> Fold {
        let pow = if p.is_power_of_two() {
            p
        } else {
            p.next_power_of_two() / 2
        };
        Fold { rem: p - pow, pow }
    }

    /// Virtual index of real member `i`, or `None` for the even members of folded pairs.
    fn virt(&self, i: usize) -> Option<usize> {
        if i < 2 * self.rem {
            (i % 2 == 1).then_some(i / 2)
        } else {
            Some(i - self.rem)
        }
    }

    /// Real member holding virtual member `v`.
    fn real(&self, v: usize) -> usize {
        if v < self.rem {
            2 * v + 1
        } else {
            v + self.rem
        }
    }
}

/// Recursive-doubling allreduce with the non-power-of-two fold.
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
    let f = Fold::new(p);
    let me = c.me;
    let pre = c.phase(1);
    let post = c.phase(2);
    let Some(vme) = f.virt(me) else {
        // Even member of a folded pair: hand over the input, get the result back.
        pre.send(t, me + 1, as_bytes(data))?;
        return post.recv_into(t, me + 1, as_bytes_mut(data));
    };
    let mut scratch = vec![T::default(); data.len()];
    let mut tmp = Vec::new();
    if me < 2 * f.rem {
        pre.recv_into(t, me - 1, as_bytes_mut(&mut scratch))?;
        // x_{me-1} op x_me.
        op.apply_left(&scratch, data, &mut tmp);
    }
    let mut mask = 1;
    while mask < f.pow {
        let vpartner = vme ^ mask;
        let partner = f.real(vpartner);
        c.sendrecv_into(
            t,
            partner,
            as_bytes(data),
            partner,
            as_bytes_mut(&mut scratch),
        )?;
        if vpartner < vme {
            op.apply_left(&scratch, data, &mut tmp);
        } else {
            op.apply(data, &scratch);
        }
        mask <<= 1;
    }
    if me < 2 * f.rem {
        post.send(t, me - 1, as_bytes(data))?;
    }
    Ok(())
}

/// Reduce-scatter by recursive halving, then allgather by recursive doubling (Rabenseifner's
/// scheme), with the same non-power-of-two fold: `2 log2 p` steps like the binomial tree, but
/// each member moves and combines only `(p-1)/p` of the data in each phase instead of the root
/// handling all of it. The halving runs with *increasing* distance, so every partial still
/// covers a contiguous block of group indices: the bits equal those of [`allreduce`].
pub(crate) fn allreduce_halving<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    let p = c.size();
    if p == 1 {
        return Ok(());
    }
    let f = Fold::new(p);
    let n = data.len();
    let me = c.me;
    let pre = c.phase(1);
    let post = c.phase(2);
    let gather = c.phase(3);
    let Some(vme) = f.virt(me) else {
        pre.send(t, me + 1, as_bytes(data))?;
        return post.recv_into(t, me + 1, as_bytes_mut(data));
    };
    let mut scratch = vec![T::default(); n.div_ceil(2)];
    let mut tmp = Vec::new();
    if me < 2 * f.rem {
        let mut full = vec![T::default(); n];
        pre.recv_into(t, me - 1, as_bytes_mut(&mut full))?;
        op.apply_left(&full, data, &mut tmp);
    }
    let sz = std::mem::size_of::<T>();
    // (parent range, kept range) per step, for the allgather in reverse.
    let mut steps: Vec<(usize, std::ops::Range<usize>, std::ops::Range<usize>)> = Vec::new();
    let (mut lo, mut hi) = (0, n);
    let mut mask = 1;
    while mask < f.pow {
        let vpartner = vme ^ mask;
        let partner = f.real(vpartner);
        let mid = lo + (hi - lo) / 2;
        let (keep, give) = if vme & mask == 0 {
            (lo..mid, mid..hi)
        } else {
            (mid..hi, lo..mid)
        };
        let k = keep.len();
        c.sendrecv_into(
            t,
            partner,
            as_bytes(&data[give.clone()]),
            partner,
            as_bytes_mut(&mut scratch[..k]),
        )?;
        if vpartner < vme {
            op.apply_left(&scratch[..k], &mut data[keep.clone()], &mut tmp);
        } else {
            op.apply(&mut data[keep.clone()], &scratch[..k]);
        }
        steps.push((partner, keep.clone(), give));
        lo = keep.start;
        hi = keep.end;
        mask <<= 1;
    }
    let bytes = as_bytes_mut(data);
    for (partner, keep, give) in steps.into_iter().rev() {
        let (out, inc) = split_pair(
            bytes,
            keep.start * sz..keep.end * sz,
            give.start * sz..give.end * sz,
        );
        gather.sendrecv_into(t, partner, out, partner, inc)?;
    }
    if me < 2 * f.rem {
        post.send(t, me - 1, as_bytes(data))?;
    }
    Ok(())
}

/// Recursive-doubling allgather with the same fold; blocks travel packed with their indices,
/// so they may differ in length.
pub(crate) fn allgather(t: &mut dyn Transport, c: &Ctx<'_>, send: &[u8]) -> Result<Vec<Vec<u8>>> {
    let p = c.size();
    let me = c.me;
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; p];
    slots[me] = Some(send.to_vec());
    if p > 1 {
        let f = Fold::new(p);
        let pre = c.phase(1);
        let post = c.phase(2);
        let mut out = Vec::new();
        let mut inc = Vec::new();
        match f.virt(me) {
            None => {
                pre.send(t, me + 1, send)?;
                post.recv(t, me + 1, &mut inc)?;
                unpack_into(&inc, &mut slots, "allgather", c.ranks[me + 1])?;
            }
            Some(vme) => {
                if me < 2 * f.rem {
                    pre.recv(t, me - 1, &mut inc)?;
                    slots[me - 1] = Some(std::mem::take(&mut inc));
                }
                let mut mask = 1;
                while mask < f.pow {
                    let partner = f.real(vme ^ mask);
                    pack(
                        slots
                            .iter()
                            .enumerate()
                            .filter_map(|(i, s)| s.as_deref().map(|b| (i, b))),
                        &mut out,
                    );
                    c.sendrecv(t, partner, &out, partner, &mut inc)?;
                    unpack_into(&inc, &mut slots, "allgather", c.ranks[partner])?;
                    mask <<= 1;
                }
                if me < 2 * f.rem {
                    pack(
                        slots
                            .iter()
                            .enumerate()
                            .filter_map(|(i, s)| s.as_deref().map(|b| (i, b))),
                        &mut out,
                    );
                    post.send(t, me - 1, &out)?;
                }
            }
        }
    }
    Ok(slots.into_iter().map(Option::unwrap_or_default).collect())
}

/// Dissemination barrier: in round `k` signal `me + 2^k` and wait for `me - 2^k`.
pub(crate) fn barrier(t: &mut dyn Transport, c: &Ctx<'_>) -> Result<()> {
    let p = c.size();
    let mut dist = 1;
    while dist < p {
        c.sendrecv_into(t, (c.me + dist) % p, &[], (c.me + p - dist) % p, &mut [])?;
        dist <<= 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_maps_are_inverse_and_cover() {
        for p in 1..20 {
            let f = Fold::new(p);
            assert!(f.pow.is_power_of_two() && f.pow <= p && p < 2 * f.pow);
            let mut seen = vec![false; f.pow];
            for i in 0..p {
                if let Some(v) = f.virt(i) {
                    assert_eq!(f.real(v), i);
                    seen[v] = true;
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
    }
}

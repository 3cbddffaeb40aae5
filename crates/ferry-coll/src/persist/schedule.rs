//! The per-rank schedules of the persistent collectives: which messages this rank receives and
//! sends in which step, as byte ranges of its own buffers. Built once at init; every start
//! replays them.
//!
//! Peers are group indices here; the caller maps them to world ranks. Within one step no
//! receive range overlaps any other range of the same step (the buffers are exposed to the
//! backend while the step runs); `tests::ranges_of_a_step_never_overlap` checks every shape.

use std::ops::Range;

use crate::Algorithm;

/// Which buffer of the persistent collective a range lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Region {
    /// The caller's data: the broadcast buffer, the gather block, the allreduce vector.
    Data,
    /// Staging: gathered blocks (indexed by [`Shape::pos`]) or a received partial reduction.
    Stage,
}

/// One message of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Xfer {
    /// Group index of the peer.
    pub peer: usize,
    pub region: Region,
    /// Byte range within the region.
    pub bytes: Range<usize>,
}

/// What to do with a received partial reduction (in [`Region::Stage`]) after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Combine {
    /// `data = data op stage`: the received block lies to the right (higher indices).
    Right,
    /// `data = stage op data`: the received block lies to the left (lower indices).
    Left,
}

/// One batched exchange: its receives and sends progress together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    pub recvs: Vec<Xfer>,
    pub sends: Vec<Xfer>,
    pub combine: Option<Combine>,
}

impl Step {
    fn recv(peer: usize, region: Region, bytes: Range<usize>) -> Step {
        Step {
            recvs: vec![Xfer {
                peer,
                region,
                bytes,
            }],
            ..Step::default()
        }
    }

    fn send(peer: usize, region: Region, bytes: Range<usize>) -> Step {
        Step {
            sends: vec![Xfer {
                peer,
                region,
                bytes,
            }],
            ..Step::default()
        }
    }
}

/// A rank's schedule and the layout of its staging buffer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shape {
    pub steps: Vec<Step>,
    /// Staging buffer length in elements (0: none).
    pub stage_elems: usize,
    /// Gather: where this rank's own block goes in the staging buffer (element offset), if it
    /// stages at all.
    pub own_at: Option<usize>,
    /// Gather on the root: the staging buffer holds block `i` at position `(i - rot) mod p`
    /// (binomial trees index relative to the root); 0 means group order already.
    pub rot: usize,
}

fn rel(me: usize, root: usize, p: usize) -> usize {
    (me + p - root) % p
}

fn abs(v: usize, root: usize, p: usize) -> usize {
    (v + root) % p
}

/// The round in which relative position `v` hears from its parent (lowest set bit), or the
/// first power of two >= `p` for the root: the same tree as `tree.rs`.
fn parent_mask(v: usize, p: usize) -> usize {
    if v == 0 {
        p.next_power_of_two()
    } else {
        1 << v.trailing_zeros()
    }
}

/// Byte ranges of `len` bytes cut into segments of `seg` (at least one, possibly empty).
fn segments(len: usize, seg: usize) -> Vec<Range<usize>> {
    let seg = seg.max(1);
    if len == 0 {
        // One empty segment: an empty message still travels (the round's signal).
        return std::iter::once(0..0).collect();
    }
    (0..len.div_ceil(seg))
        .map(|i| i * seg..((i + 1) * seg).min(len))
        .collect()
}

/// Forwarding along a path: receive every segment from `prev` (none on the path's first
/// member) and pass it on to each of `next` one step later, so that segments pipeline.
fn forward(prev: Option<usize>, next: &[usize], len: usize, seg: usize) -> Vec<Step> {
    let segs = segments(len, seg);
    let Some(prev) = prev else {
        // The source sends everything in one step; the transports keep per-flow order.
        let sends = segs
            .iter()
            .flat_map(|s| {
                next.iter().map(move |&n| Xfer {
                    peer: n,
                    region: Region::Data,
                    bytes: s.clone(),
                })
            })
            .collect::<Vec<_>>();
        return if sends.is_empty() {
            Vec::new()
        } else {
            vec![Step {
                sends,
                ..Step::default()
            }]
        };
    };
    let mut steps = Vec::with_capacity(segs.len() + 1);
    for j in 0..=segs.len() {
        let mut st = Step::default();
        if let Some(s) = segs.get(j) {
            st.recvs.push(Xfer {
                peer: prev,
                region: Region::Data,
                bytes: s.clone(),
            });
        }
        if j > 0 {
            for &n in next {
                st.sends.push(Xfer {
                    peer: n,
                    region: Region::Data,
                    bytes: segs[j - 1].clone(),
                });
            }
        }
        if !st.recvs.is_empty() || !st.sends.is_empty() {
            steps.push(st);
        }
    }
    steps
}

/// Broadcast of `len` bytes from `root` by `alg` (Linear, BinomialTree, Chain or Pipeline).
pub(crate) fn broadcast(
    alg: Algorithm,
    p: usize,
    me: usize,
    root: usize,
    len: usize,
    seg: usize,
) -> Shape {
    let all = 0..len;
    let steps = match alg {
        Algorithm::Linear if me == root => {
            let sends: Vec<Xfer> = (0..p)
                .filter(|&i| i != root)
                .map(|i| Xfer {
                    peer: i,
                    region: Region::Data,
                    bytes: all.clone(),
                })
                .collect();
            if sends.is_empty() {
                Vec::new()
            } else {
                vec![Step {
                    sends,
                    ..Step::default()
                }]
            }
        }
        Algorithm::Linear => vec![Step::recv(root, Region::Data, all)],
        Algorithm::BinomialTree => binomial_bcast(p, me, root, len),
        Algorithm::Pipeline => {
            let v = rel(me, root, p);
            let prev = (v > 0).then(|| abs(v - 1, root, p));
            let next: Vec<usize> = (v + 1 < p)
                .then(|| abs(v + 1, root, p))
                .into_iter()
                .collect();
            forward(prev, &next, len, seg)
        }
        // Chain: outwards from the root in both directions, neighbours only.
        _ => {
            let (prev, next): (Option<usize>, Vec<usize>) = if me == root {
                let mut n = Vec::new();
                if root > 0 {
                    n.push(root - 1);
                }
                if root + 1 < p {
                    n.push(root + 1);
                }
                (None, n)
            } else if me > root {
                (
                    Some(me - 1),
                    (me + 1 < p).then_some(me + 1).into_iter().collect(),
                )
            } else {
                (Some(me + 1), me.checked_sub(1).into_iter().collect())
            };
            forward(prev, &next, len, seg)
        }
    };
    Shape {
        steps,
        ..Shape::default()
    }
}

fn binomial_bcast(p: usize, me: usize, root: usize, len: usize) -> Vec<Step> {
    let v = rel(me, root, p);
    let mask = parent_mask(v, p);
    let mut steps = Vec::new();
    if v != 0 {
        steps.push(Step::recv(abs(v - mask, root, p), Region::Data, 0..len));
    }
    // Largest subtree first: it has the longest way to go.
    let mut sends = Vec::new();
    let mut m = mask >> 1;
    while m > 0 {
        if v + m < p {
            sends.push(Xfer {
                peer: abs(v + m, root, p),
                region: Region::Data,
                bytes: 0..len,
            });
        }
        m >>= 1;
    }
    if !sends.is_empty() {
        steps.push(Step {
            sends,
            ..Step::default()
        });
    }
    steps
}

/// Gather of blocks of `n` elements of `elem` bytes to `root` by `alg` (Linear, BinomialTree
/// or Chain). Blocks travel as contiguous runs of the staging buffer, never repacked.
pub(crate) fn gather(
    alg: Algorithm,
    p: usize,
    me: usize,
    root: usize,
    n: usize,
    elem: usize,
) -> Shape {
    let k = n * elem;
    let stage = |from: usize, to: usize| from * k..to * k;
    match alg {
        Algorithm::Linear => {
            if me != root {
                return Shape {
                    steps: vec![Step::send(root, Region::Data, 0..k)],
                    ..Shape::default()
                };
            }
            let recvs: Vec<Xfer> = (0..p)
                .filter(|&i| i != root)
                .map(|i| Xfer {
                    peer: i,
                    region: Region::Stage,
                    bytes: stage(i, i + 1),
                })
                .collect();
            Shape {
                steps: if recvs.is_empty() {
                    Vec::new()
                } else {
                    vec![Step {
                        recvs,
                        ..Step::default()
                    }]
                },
                stage_elems: p * n,
                own_at: Some(root * n),
                rot: 0,
            }
        }
        Algorithm::BinomialTree => {
            // Staging in positions relative to the root: a subtree is one contiguous run.
            let v = rel(me, root, p);
            let mask = parent_mask(v, p);
            let mut recvs = Vec::new();
            let mut m = 1;
            while m < mask && v + m < p {
                recvs.push(Xfer {
                    peer: abs(v + m, root, p),
                    region: Region::Stage,
                    bytes: stage(v + m, (v + 2 * m).min(p)),
                });
                m <<= 1;
            }
            let mut steps = Vec::new();
            if recvs.is_empty() {
                // A leaf sends its own block straight from the caller's data.
                if v != 0 {
                    steps.push(Step::send(abs(v - mask, root, p), Region::Data, 0..k));
                }
                let own = (v == 0).then_some(0);
                return Shape {
                    steps,
                    stage_elems: if v == 0 { p * n } else { 0 },
                    own_at: own,
                    rot: root,
                };
            }
            steps.push(Step {
                recvs,
                ..Step::default()
            });
            if v != 0 {
                steps.push(Step::send(
                    abs(v - mask, root, p),
                    Region::Stage,
                    stage(v, (v + mask).min(p)),
                ));
            }
            Shape {
                steps,
                stage_elems: p * n,
                own_at: Some(v * n),
                rot: if v == 0 { root } else { 0 },
            }
        }
        // Chain: blocks flow towards the root from both ends, neighbours only.
        _ => {
            let mut steps = Vec::new();
            if me == root {
                let mut recvs = Vec::new();
                if root > 0 {
                    recvs.push(Xfer {
                        peer: root - 1,
                        region: Region::Stage,
                        bytes: stage(0, root),
                    });
                }
                if root + 1 < p {
                    recvs.push(Xfer {
                        peer: root + 1,
                        region: Region::Stage,
                        bytes: stage(root + 1, p),
                    });
                }
                if !recvs.is_empty() {
                    steps.push(Step {
                        recvs,
                        ..Step::default()
                    });
                }
                return Shape {
                    steps,
                    stage_elems: p * n,
                    own_at: Some(root * n),
                    rot: 0,
                };
            }
            let (from, run, to) = if me > root {
                ((me + 1 < p).then_some(me + 1), (me + 1, p), me - 1)
            } else {
                (me.checked_sub(1), (0, me), me + 1)
            };
            match from {
                None => {
                    steps.push(Step::send(to, Region::Data, 0..k));
                    Shape {
                        steps,
                        ..Shape::default()
                    }
                }
                Some(from) => {
                    steps.push(Step::recv(from, Region::Stage, stage(run.0, run.1)));
                    let whole = if me > root {
                        stage(me, p)
                    } else {
                        stage(0, me + 1)
                    };
                    steps.push(Step::send(to, Region::Stage, whole));
                    Shape {
                        steps,
                        stage_elems: p * n,
                        own_at: Some(me * n),
                        rot: 0,
                    }
                }
            }
        }
    }
}

/// Allreduce of `len` bytes by `alg` (BinomialTree: the binomial reduce to index 0 and
/// broadcast from it, the parenthesisation of `tree.rs`; Chain: the rank-ordered left fold
/// along the chain to the last member, then back).
pub(crate) fn allreduce(alg: Algorithm, p: usize, me: usize, n: usize, elem: usize) -> Shape {
    let len = n * elem;
    let mut steps = Vec::new();
    if alg == Algorithm::Chain {
        if me > 0 {
            let mut st = Step::recv(me - 1, Region::Stage, 0..len);
            st.combine = Some(Combine::Left);
            steps.push(st);
        }
        if me + 1 < p {
            steps.push(Step::send(me + 1, Region::Data, 0..len));
            steps.push(Step::recv(me + 1, Region::Data, 0..len));
        }
        if me > 0 {
            steps.push(Step::send(me - 1, Region::Data, 0..len));
        }
    } else {
        let mut mask = 1;
        while mask < p {
            if me & mask != 0 {
                steps.push(Step::send(me - mask, Region::Data, 0..len));
                break;
            }
            if me + mask < p {
                let mut st = Step::recv(me + mask, Region::Stage, 0..len);
                st.combine = Some(Combine::Right);
                steps.push(st);
            }
            mask <<= 1;
        }
        steps.extend(binomial_bcast(p, me, 0, len));
    }
    Shape {
        steps,
        stage_elems: if p > 1 { n } else { 0 },
        own_at: None,
        rot: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(a: &Xfer, b: &Xfer) -> bool {
        a.region == b.region
            && !a.bytes.is_empty()
            && !b.bytes.is_empty()
            && a.bytes.start < b.bytes.end
            && b.bytes.start < a.bytes.end
    }

    fn all_shapes() -> Vec<(String, Shape)> {
        let mut out = Vec::new();
        for p in 1..=9 {
            for me in 0..p {
                for root in 0..p {
                    for alg in [
                        Algorithm::Linear,
                        Algorithm::BinomialTree,
                        Algorithm::Chain,
                        Algorithm::Pipeline,
                    ] {
                        out.push((
                            format!("bcast {alg:?} p{p} me{me} root{root}"),
                            broadcast(alg, p, me, root, 10, 4),
                        ));
                    }
                    for alg in [Algorithm::Linear, Algorithm::BinomialTree, Algorithm::Chain] {
                        out.push((
                            format!("gather {alg:?} p{p} me{me} root{root}"),
                            gather(alg, p, me, root, 3, 4),
                        ));
                    }
                }
                for alg in [Algorithm::BinomialTree, Algorithm::Chain] {
                    out.push((
                        format!("allreduce {alg:?} p{p} me{me}"),
                        allreduce(alg, p, me, 3, 4),
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn ranges_of_a_step_never_overlap() {
        for (name, shape) in all_shapes() {
            for (i, st) in shape.steps.iter().enumerate() {
                for (a, r) in st.recvs.iter().enumerate() {
                    for (b, o) in st.recvs.iter().chain(&st.sends).enumerate() {
                        assert!(
                            a == b || !overlaps(r, o),
                            "{name} step {i}: receive {r:?} overlaps {o:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn segments_cover_the_buffer() {
        let empty = segments(0, 4);
        assert!(empty.len() == 1 && empty[0].is_empty());
        assert_eq!(segments(10, 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(segments(8, 4), vec![0..4, 4..8]);
    }

    #[test]
    fn chain_broadcast_talks_to_neighbours_only() {
        for p in 1..=7 {
            for root in 0..p {
                for me in 0..p {
                    for st in broadcast(Algorithm::Chain, p, me, root, 9, 4).steps {
                        for x in st.recvs.iter().chain(&st.sends) {
                            assert_eq!(x.peer.abs_diff(me), 1, "p{p} root{root} me{me}");
                        }
                    }
                }
            }
        }
    }
}

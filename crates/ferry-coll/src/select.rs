//! Algorithm choice by message size and group size (M4, 000 §7.2.2), and the checks on forced
//! algorithms.
//!
//! # Determinism
//! Every member must pick the same algorithm, and the result bits must not depend on the
//! backend. The choice therefore depends on what every member knows alike: group size, the
//! length of the reduced slice, the operator's commutativity, the requested order and the node
//! layout. Algorithms fall into *order classes* that produce the same bits for a given group
//! size: the left fold (Linear, Master, Pipeline, Chain, and Direct with
//! [`ReduceOrder::RankOrderedFold`]), the tree (BinomialTree and Direct otherwise, always
//! equal; RecursiveDoubling and Rabenseifner, always equal to each other and to the binomial
//! tree when `p` is 3, 6, 7 or a power of two), the ring, and the hierarchy.
//! The class never depends on the backend; the backend may only pick *within* a class — which
//! happens for 2 members only, where every algorithm computes the single combination
//! `x0 op x1` (built-in operators are commutative bit for bit, NaN payloads and the sign of
//! a zero in Min/Max aside). The node-aware path is the documented exception: it applies only
//! when the transport reports several nodes.
//!
//! # Topologies (X7)
//! On a group with a Cartesian topology ([`crate::Group::with_topology`]) and more than two
//! members, every automatic choice but all-to-all is the neighbour-only chain
//! ([`Algorithm::Chain`]): the program declared which links it wants, and the collectives keep
//! to them (a 1-D grid then connects each rank to its two neighbours only). Reductions there
//! are in the left-fold class for every operator. The cost against the flat choice is in
//! docs/PERFORMANCE.md (`chain_vs_flat`).
//!
//! # Crossovers
//! From `bench/crossovers.sh` (osu_allreduce with every forced algorithm, best of 3, tcp, shm
//! and hybrid, 2 and 4 ranks, on the 2-vCPU target machine; tables in docs/PERFORMANCE.md and
//! bench/results/). Beyond 2 members recursive doubling won or tied below 64 KiB on every
//! backend, and its halving variant (Rabenseifner, same bits) won every run from 128 KiB up;
//! the ring and the direct strategy lost there because each of their extra messages costs CPU
//! time that another rank of this oversubscribed machine is waiting for. The exception is shm
//! with 3 or 4 members and at most [`SHM_DIRECT_MAX_BYTES`]: there the direct strategy (same bits,
//! tree class) waits once instead of once per round, and each wait of an oversubscribed rank
//! is a hand-over of its core. For 2 members the
//! single exchange wins up to 32 KiB, then the ring on shm (it splits the reduction work over
//! both cores) while tcp stays with the single exchange.
//!
//! Collectives whose block sizes may differ between members (gather, scatter, allgather,
//! alltoall, broadcast into a vector) choose by group size only: the members could not agree
//! on a size-based choice without an extra round.

use ferry_core::{Element, Error, Result, Transport};

use crate::comm::{Buf, Ctx};
use crate::hier::Layout;
use crate::op::ReduceOp;
use crate::{chain, linear, rdouble, ring, tree, Algorithm, CollOptions, ReduceOrder};

/// Rank-ordered allreduce up to this many bytes on up to [`DIRECT_MAX_P`] members: "all inputs
/// to all outputs" (one round of messages beats the master's two while messages are tiny).
pub const DIRECT_MAX_BYTES: usize = 1024;
/// Allreduce on shm (tree class) up to this many bytes on 3 to [`DIRECT_MAX_P`] members: the
/// direct strategy replaces recursive doubling's two dependent rounds with one. Every member
/// writes its input into the others' rings once and waits once, so with 4 ranks on 2 cores a
/// rank gives its core away once per call instead of once per round. At 1 KiB and beyond the
/// extra copies cost more than the saved round (docs/PERFORMANCE.md, "Oversubscribed small
/// allreduce on shm").
pub const SHM_DIRECT_MAX_BYTES: usize = 256;
/// Largest group for the direct strategy (its message count grows with `p^2`).
pub const DIRECT_MAX_P: usize = 4;
/// 2 members on shm: from this many bytes up the ring (which halves each side's reduction
/// work) replaces the single exchange.
pub const LARGE_2_BYTES: usize = 32 * 1024;
/// 3 or more members: from this many bytes up recursive halving + doubling (Rabenseifner)
/// replaces recursive doubling.
pub const HALVING_MIN_BYTES: usize = 128 * 1024;
/// Rank-ordered allreduce/reduce from this many bytes up: pipelined chain instead of master.
pub const PIPELINE_MIN_BYTES: usize = 64 * 1024;
/// Broadcast of a slice from this many bytes up (and more than 2 members): pipelined chain.
pub const BCAST_PIPELINE_MIN_BYTES: usize = 256 * 1024;
/// Barrier: dissemination up to this many members, the binomial tree beyond. Dissemination
/// has half the depth (`log2 p` rounds against `2 log2 p`) but `p log2 p` messages, and every
/// round needs every member scheduled: with more ranks than cores (this 2-core machine at 8
/// ranks and up) it lost by 5-15x (tcp 8 ranks: 2.0-2.5 ms against 0.33-0.37 ms; shm 32:
/// 5.7-11.7 ms against 0.6-0.8 ms; shm 256: 113-130 ms against 6-21 ms;
/// `bcast_gather barrier`, docs/PERFORMANCE.md), and tied at 4.
pub const BARRIER_DISSEMINATION_MAX_P: usize = 4;
/// Gather/scatter/allgather: linear/direct up to this many members, trees beyond.
pub const LINEAR_MAX_P: usize = 4;

fn unsupported(coll: &'static str, alg: Algorithm) -> Error {
    Error::invalid(
        coll,
        format!("algorithm {alg:?} is not available for {coll}"),
    )
}

fn order_conflict(coll: &'static str, alg: Algorithm) -> Error {
    Error::invalid(
        coll,
        format!(
            "algorithm {alg:?} does not combine in the strict rank order; \
             ReduceOrder::RankOrderedFold needs Linear, Master, Direct, Pipeline or Chain"
        ),
    )
}

/// The automatic choice on a group whose topology follows group order (X7): the chain, so
/// that collectives use only the topology's links. Two members are neighbours whatever runs.
fn on_chain(c: &Ctx<'_>, opts: &CollOptions) -> bool {
    opts.algorithm == Algorithm::Auto && c.chain && c.size() > 2
}

fn segment(opts: &CollOptions) -> usize {
    if opts.segment_bytes == 0 {
        ring::DEFAULT_SEGMENT
    } else {
        opts.segment_bytes
    }
}

/// What the node layout asks of an automatic choice.
enum NodePlan {
    /// One node (or no useful grouping): the plain size-based choice.
    Flat,
    /// Equal contiguous blocks of a power-of-two size: recursive doubling (and halving) pairs
    /// members at distance 1, 2, 4, ... so its first rounds stay inside the nodes and only the
    /// last ones cross: the plain choice is already node-aware (and was faster than the
    /// explicit hierarchy on 2 x 2 hybrid, docs/PERFORMANCE.md).
    Aligned,
    /// Any other multi-node layout: reduce inside nodes first.
    Hierarchical(Layout),
}

/// Classifies the node layout of the participants (node-aware choice, S2/X7).
fn node_plan<T: Element>(
    t: &dyn Transport,
    c: &Ctx<'_>,
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> NodePlan {
    if opts.order == ReduceOrder::RankOrderedFold || c.size() <= 2 {
        return NodePlan::Flat;
    }
    // The common single-node case without allocating (this runs on every small allreduce).
    let first = t.node_of(c.ranks[0]);
    if c.ranks.iter().all(|&r| t.node_of(r) == first) {
        return NodePlan::Flat;
    }
    let lay = Layout::of(t, c);
    if lay.nodes() >= c.size() {
        return NodePlan::Flat;
    }
    // Decided from the whole layout, which every member computes alike.
    let block = lay.counts[0];
    let equal = lay.counts.iter().all(|&n| n == block);
    if lay.contiguous && equal && block.is_power_of_two() && lay.nodes().is_power_of_two() {
        return NodePlan::Aligned;
    }
    if lay.contiguous || op.is_commutative() {
        NodePlan::Hierarchical(lay)
    } else {
        NodePlan::Flat
    }
}

/// Barrier: dissemination up to [`BARRIER_DISSEMINATION_MAX_P`] members, binomial tree
/// (gather to member 0, release) beyond.
pub(crate) fn barrier(t: &mut dyn Transport, c: &Ctx<'_>, opts: &CollOptions) -> Result<()> {
    if on_chain(c, opts) {
        return chain::barrier(t, c);
    }
    match opts.algorithm {
        Algorithm::Chain => chain::barrier(t, c),
        Algorithm::Auto if c.size() > BARRIER_DISSEMINATION_MAX_P => tree::barrier(t, c),
        Algorithm::Auto | Algorithm::RecursiveDoubling => rdouble::barrier(t, c),
        Algorithm::Linear => linear::barrier(t, c),
        Algorithm::BinomialTree => tree::barrier(t, c),
        a => Err(unsupported("barrier", a)),
    }
}

/// Broadcast: linear for 2 members, binomial tree, pipelined chain for large slices.
pub(crate) fn broadcast(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    buf: &mut Buf<'_>,
    opts: &CollOptions,
) -> Result<()> {
    let alg = match opts.algorithm {
        Algorithm::Auto if on_chain(c, opts) => Algorithm::Chain,
        Algorithm::Auto => match buf {
            _ if c.size() <= 2 => Algorithm::Linear,
            Buf::Slice(s) if s.len() >= BCAST_PIPELINE_MIN_BYTES => Algorithm::Pipeline,
            _ => Algorithm::BinomialTree,
        },
        a => a,
    };
    match alg {
        Algorithm::Linear => linear::broadcast(t, c, root, buf),
        Algorithm::BinomialTree => tree::broadcast(t, c, root, buf),
        Algorithm::Pipeline => ring::broadcast(t, c, root, buf, segment(opts)),
        Algorithm::Chain => chain::broadcast(t, c, root, buf, segment(opts)),
        a => Err(unsupported("broadcast", a)),
    }
}

/// Reduce: binomial tree (or the node-aware variant) by default; rank-ordered: linear, then
/// the pipelined chain for large data.
pub(crate) fn reduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> Result<()> {
    let bytes = std::mem::size_of_val(data);
    let ordered = opts.order == ReduceOrder::RankOrderedFold;
    let alg = match opts.algorithm {
        Algorithm::Auto if on_chain(c, opts) => Algorithm::Chain,
        Algorithm::Auto if ordered || c.size() <= 2 => {
            if bytes >= PIPELINE_MIN_BYTES && c.size() > 2 {
                Algorithm::Pipeline
            } else {
                Algorithm::Linear
            }
        }
        Algorithm::Auto => {
            if let NodePlan::Hierarchical(lay) = node_plan(t, c, op, opts) {
                return crate::hier::reduce(t, c, &lay, root, data, op);
            }
            Algorithm::BinomialTree
        }
        a => a,
    };
    if ordered
        && !matches!(
            alg,
            Algorithm::Linear
                | Algorithm::Master
                | Algorithm::Direct
                | Algorithm::Pipeline
                | Algorithm::Chain
        )
    {
        return Err(order_conflict("reduce", alg));
    }
    match alg {
        // With a single output, "all inputs to all outputs" is the linear reduce.
        Algorithm::Linear | Algorithm::Master | Algorithm::Direct => {
            linear::reduce(t, c, root, data, op)
        }
        Algorithm::BinomialTree => tree::reduce(t, c, root, data, op),
        Algorithm::Pipeline => ring::reduce_pipeline(t, c, root, data, op, segment(opts)),
        Algorithm::Chain => chain::reduce(t, c, root, data, op, segment(opts)),
        Algorithm::Hierarchical => {
            let lay = Layout::of(t, c);
            if !lay.contiguous && !op.is_commutative() {
                return Err(Error::invalid(
                    "reduce",
                    "nodes hold non-contiguous members; the node-aware order needs a commutative operator",
                ));
            }
            crate::hier::reduce(t, c, &lay, root, data, op)
        }
        a => Err(unsupported("reduce", a)),
    }
}

/// The algorithm Auto picks for an allreduce of `bytes` on `p` members over the backend named
/// `backend` (single-node layout; see the module documentation for the rules and why the
/// backend may only matter for 2 members).
pub fn allreduce_choice(
    p: usize,
    bytes: usize,
    commutative: bool,
    order: ReduceOrder,
    backend: &str,
) -> Algorithm {
    if p <= 1 {
        return Algorithm::Linear;
    }
    if order == ReduceOrder::RankOrderedFold {
        return if bytes >= PIPELINE_MIN_BYTES && p > 2 {
            Algorithm::Pipeline
        } else if p <= DIRECT_MAX_P && bytes <= DIRECT_MAX_BYTES {
            Algorithm::Direct
        } else {
            Algorithm::Master
        };
    }
    if p == 2 {
        return if bytes >= LARGE_2_BYTES && commutative && backend == "shm" {
            Algorithm::Ring
        } else {
            Algorithm::RecursiveDoubling
        };
    }
    if bytes >= HALVING_MIN_BYTES {
        Algorithm::Rabenseifner
    } else if backend == "shm" && p <= DIRECT_MAX_P && bytes <= SHM_DIRECT_MAX_BYTES {
        // Same bits as recursive doubling for 3 and 4 members (both are the tree class).
        Algorithm::Direct
    } else {
        Algorithm::RecursiveDoubling
    }
}

/// Allreduce: see [`allreduce_choice`]; node-aware when the transport reports several nodes.
pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    data: &mut [T],
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> Result<()> {
    let p = c.size();
    let bytes = std::mem::size_of_val(data);
    let ordered = opts.order == ReduceOrder::RankOrderedFold;
    let alg = match opts.algorithm {
        Algorithm::Auto if on_chain(c, opts) => Algorithm::Chain,
        Algorithm::Auto => match node_plan(t, c, op, opts) {
            NodePlan::Hierarchical(lay) => return crate::hier::allreduce(t, c, &lay, data, op),
            NodePlan::Flat | NodePlan::Aligned => {
                allreduce_choice(p, bytes, op.is_commutative(), opts.order, t.name())
            }
        },
        a => a,
    };
    if ordered
        && !matches!(
            alg,
            Algorithm::Linear
                | Algorithm::Master
                | Algorithm::Direct
                | Algorithm::Pipeline
                | Algorithm::Chain
        )
    {
        return Err(order_conflict("allreduce", alg));
    }
    if p == 1 {
        return Ok(());
    }
    match alg {
        Algorithm::Linear | Algorithm::Master => linear::allreduce_master(t, c, 0, data, op),
        // Direct folds in the order class asked for: left fold when rank-ordered, else the
        // binomial tree's parenthesisation (same bits as BinomialTree).
        Algorithm::Direct if ordered => {
            linear::allreduce_direct(t, c, data, op, linear::Fold::Left)
        }
        Algorithm::Direct => linear::allreduce_direct(t, c, data, op, linear::Fold::Tree),
        Algorithm::BinomialTree => tree::allreduce(t, c, data, op),
        Algorithm::RecursiveDoubling => rdouble::allreduce(t, c, data, op),
        Algorithm::Rabenseifner => rdouble::allreduce_halving(t, c, data, op),
        Algorithm::Ring => {
            if !op.is_commutative() {
                return Err(Error::invalid(
                    "allreduce",
                    "the ring combines in rotated order and needs a commutative (built-in) operator",
                ));
            }
            ring::allreduce(t, c, data, op)
        }
        Algorithm::Pipeline | Algorithm::Chain => {
            ring::allreduce_pipeline(t, c, data, op, segment(opts))
        }
        Algorithm::Hierarchical => {
            let lay = Layout::of(t, c);
            if !lay.contiguous && !op.is_commutative() {
                return Err(Error::invalid(
                    "allreduce",
                    "nodes hold non-contiguous members; the node-aware order needs a commutative operator",
                ));
            }
            crate::hier::allreduce(t, c, &lay, data, op)
        }
        a => Err(unsupported("allreduce", a)),
    }
}

/// Gather: linear for small groups, binomial tree beyond.
pub(crate) fn gather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    send: &[u8],
    opts: &CollOptions,
) -> Result<Option<Vec<Vec<u8>>>> {
    if on_chain(c, opts) {
        return chain::gather(t, c, root, send);
    }
    match opts.algorithm {
        Algorithm::Chain => chain::gather(t, c, root, send),
        Algorithm::Auto if c.size() <= LINEAR_MAX_P => linear::gather(t, c, root, send),
        Algorithm::Auto | Algorithm::BinomialTree => tree::gather(t, c, root, send),
        Algorithm::Linear => linear::gather(t, c, root, send),
        a => Err(unsupported("gather", a)),
    }
}

/// Scatter: linear for small groups, binomial tree beyond.
pub(crate) fn scatter(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    root: usize,
    parts: Option<&[Vec<u8>]>,
    opts: &CollOptions,
) -> Result<Vec<u8>> {
    if on_chain(c, opts) {
        return chain::scatter(t, c, root, parts);
    }
    match opts.algorithm {
        Algorithm::Chain => chain::scatter(t, c, root, parts),
        Algorithm::Auto if c.size() <= LINEAR_MAX_P => linear::scatter(t, c, root, parts),
        Algorithm::Auto | Algorithm::BinomialTree => tree::scatter(t, c, root, parts),
        Algorithm::Linear => linear::scatter(t, c, root, parts),
        a => Err(unsupported("scatter", a)),
    }
}

/// Allgather: direct for small groups, recursive doubling beyond.
pub(crate) fn allgather(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    send: &[u8],
    opts: &CollOptions,
) -> Result<Vec<Vec<u8>>> {
    if on_chain(c, opts) {
        return chain::allgather(t, c, send);
    }
    match opts.algorithm {
        Algorithm::Chain => chain::allgather(t, c, send),
        Algorithm::Auto if c.size() <= LINEAR_MAX_P => linear::allgather_direct(t, c, send),
        Algorithm::Auto | Algorithm::RecursiveDoubling => rdouble::allgather(t, c, send),
        Algorithm::Direct => linear::allgather_direct(t, c, send),
        Algorithm::Linear | Algorithm::Master => linear::allgather_master(t, c, send),
        Algorithm::Ring => ring::allgather(t, c, send),
        a => Err(unsupported("allgather", a)),
    }
}

/// All-to-all: one batched exchange by default (M3), pairwise rounds when forced. Every member
/// talks to every other by definition, so a topology changes nothing here.
pub(crate) fn alltoall(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    parts: &[Vec<u8>],
    opts: &CollOptions,
) -> Result<Vec<Vec<u8>>> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::Direct | Algorithm::Linear => {
            linear::alltoall_direct(t, c, parts)
        }
        Algorithm::Pairwise => linear::alltoall_pairwise(t, c, parts),
        a => Err(unsupported("alltoall", a)),
    }
}

//! ferry collectives (M4): barrier, broadcast, reduce, allreduce, gather, scatter, allgather and
//! all-to-all on any [`Group`], written once over `&mut dyn Transport`.
//!
//! # Contract
//! - Every member of the group calls the same collectives, with the same root, sizes, operator
//!   and options, in the same order. Messages carry the group's generation (kind
//!   [`ferry_core::MsgKind::COLLECTIVE`]) and a per-group sequence number in the tag, so
//!   collectives of different groups, and consecutive collectives of one group, never match.
//! - Results are deterministic: every rank gets the same bits, on every run and every backend.
//!   The combination order depends only on the group size, the message size and the algorithm
//!   (see [`ReduceOrder`]), never on arrival order. Contributions are combined in group-index
//!   order (lower index on the left) by every algorithm but the ring (rotated order, so it takes
//!   only the commutative built-ins); algorithms differ only in parenthesisation. The automatic
//!   choice keeps the order class independent of the backend (details in `select.rs`); the one
//!   exception is a transport reporting several nodes ([`Transport::node_of`]), where the
//!   node-aware variants may group differently.
//! - Custom operators are applied element-wise to arbitrary sub-ranges (see [`CustomOp`]).
//! - Errors are values: a failed or silent peer makes the collective return an error naming the
//!   collective, this rank and the peer (T5, F2). Nothing here panics on peer or user input.
//! - Roots are *group indices*, not world ranks.
//!
//! # Algorithms
//! One module per family: linear (plus seed 000's two reduction strategies, 000 §6.4.3:
//! [`Algorithm::Direct`] and [`Algorithm::Master`]), binomial tree, recursive doubling (with
//! Rabenseifner's halving variant), ring and pipelined chain, node-aware hierarchy, the
//! neighbour-only chain (X7); virtual topologies and neighbour collectives in [`topo`] (X6);
//! persistent broadcast, gather and allreduce, set up once and started many times, in
//! [`Persistent`]; `select.rs`
//! picks one by message size and group size from crossovers measured on the target machine
//! (docs/PERFORMANCE.md, `bench/crossovers.sh`), and [`CollOptions`] forces one.

#![warn(missing_docs)]

mod chain;
mod comm;
mod group;
mod hier;
mod linear;
mod op;
mod persist;
mod rdouble;
mod ring;
mod select;
pub mod topo;
mod tree;

use ferry_core::element::as_bytes_mut;
use ferry_core::{Element, Error, Result, Transport};

use comm::{Buf, CollKind, Ctx};
pub use group::Group;
pub use op::{CustomOp, ReduceOp};
pub use persist::{Persistent, PersistentKind};
pub use select::allreduce_choice;
pub use topo::{neighbor_allgather, neighbor_alltoall, Cartesian, Graph, Topology};

/// Which algorithm a collective uses. Not every collective has every algorithm; forcing one
/// that does not apply is an [`ferry_core::ErrorKind::InvalidArgument`] error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Chosen by `select.rs` from message size, group size and operator.
    #[default]
    Auto,
    /// The root talks to everyone directly (all collectives). For allreduce and allgather this
    /// is the master strategy.
    Linear,
    /// Seed 000's master reduction (000 §6.4.3 TCP-M): one member folds all inputs in group
    /// order and sends the result back (allreduce, allgather).
    Master,
    /// Seed 000's default reduction, "all inputs to all outputs" (000 §6.4.3): everyone sends
    /// to everyone and folds locally (allreduce, allgather, alltoall).
    Direct,
    /// All-to-all in `p-1` pairwise rounds (alltoall).
    Pairwise,
    /// Binomial tree, `ceil(log2 p)` rounds (barrier, broadcast, reduce, allreduce, gather,
    /// scatter).
    BinomialTree,
    /// Recursive doubling with the non-power-of-two fold (allreduce, allgather); dissemination
    /// for the barrier.
    RecursiveDoubling,
    /// Recursive halving then recursive doubling (Rabenseifner): reduce-scatter and allgather
    /// in `2 log2 p` steps, for large allreduces; the same bits as `RecursiveDoubling`
    /// (allreduce).
    Rabenseifner,
    /// Ring: reduce-scatter + allgather for allreduce (commutative operators only), `p-1`
    /// forwarding steps for allgather.
    Ring,
    /// Pipelined chain: segments flow member to member (broadcast; reduce and allreduce as the
    /// rank-ordered left fold at near link bandwidth).
    Pipeline,
    /// Node-aware: reduce inside each node, combine across node leaders, broadcast inside each
    /// node (reduce, allreduce; uses [`ferry_core::Transport::node_of`]).
    Hierarchical,
    /// Neighbour-only chain: every member talks to group indices `me - 1` and `me + 1` only
    /// (seed 004's "ring" algorithms; barrier, broadcast, reduce, allreduce, gather, allgather,
    /// scatter). Reductions are the rank-ordered left fold. The automatic choice on a group
    /// with a Cartesian topology ([`Group::with_topology`], X7).
    Chain,
}

impl Algorithm {
    /// Every algorithm, for tests and command-line parsing.
    pub const ALL: [Algorithm; 12] = [
        Algorithm::Auto,
        Algorithm::Linear,
        Algorithm::Master,
        Algorithm::Direct,
        Algorithm::Pairwise,
        Algorithm::BinomialTree,
        Algorithm::RecursiveDoubling,
        Algorithm::Rabenseifner,
        Algorithm::Ring,
        Algorithm::Pipeline,
        Algorithm::Hierarchical,
        Algorithm::Chain,
    ];

    /// Short lower-case name (`auto`, `linear`, `master`, `direct`, `pairwise`, `binomial`,
    /// `rdouble`, `rabenseifner`, `ring`, `pipeline`, `hier`, `chain`), as accepted by
    /// [`str::parse`].
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::Linear => "linear",
            Algorithm::Master => "master",
            Algorithm::Direct => "direct",
            Algorithm::Pairwise => "pairwise",
            Algorithm::BinomialTree => "binomial",
            Algorithm::RecursiveDoubling => "rdouble",
            Algorithm::Rabenseifner => "rabenseifner",
            Algorithm::Ring => "ring",
            Algorithm::Pipeline => "pipeline",
            Algorithm::Hierarchical => "hier",
            Algorithm::Chain => "chain",
        }
    }
}

impl std::str::FromStr for Algorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Algorithm> {
        Algorithm::ALL
            .iter()
            .copied()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "algorithm",
                    format!(
                        "unknown algorithm `{s}`; one of auto, linear, master, direct, pairwise, \
                         binomial, rdouble, rabenseifner, ring, pipeline, hier, chain"
                    ),
                )
            })
    }
}

/// The order in which contributions are combined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceOrder {
    /// Any deterministic order the chosen algorithm has (always group-index order, with the
    /// algorithm's parenthesisation); fastest.
    #[default]
    Auto,
    /// The strict left fold `((x0 op x1) op x2) op ...` in group-index order, bit-identical
    /// across every algorithm that offers it (Linear, Master, Direct, Pipeline). The data
    /// layer uses it to reproduce LAIK's printed digits.
    RankOrderedFold,
}

/// Per-call options: forced algorithm, reduction order, pipelining segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollOptions {
    /// Algorithm to use; [`Algorithm::Auto`] lets `select.rs` choose.
    pub algorithm: Algorithm,
    /// Required combination order for reductions.
    pub order: ReduceOrder,
    /// Segment size in bytes for pipelined algorithms; 0 picks the default.
    pub segment_bytes: usize,
}

impl CollOptions {
    /// Options forcing `algorithm`.
    pub fn with_algorithm(algorithm: Algorithm) -> CollOptions {
        CollOptions {
            algorithm,
            ..CollOptions::default()
        }
    }

    /// Options asking for the strict rank-ordered left fold.
    pub fn rank_ordered() -> CollOptions {
        CollOptions {
            order: ReduceOrder::RankOrderedFold,
            ..CollOptions::default()
        }
    }
}

/// This rank's index in `g`, after checking that every member is a rank of the job.
pub(crate) fn member_index(t: &dyn Transport, g: &Group, name: &'static str) -> Result<usize> {
    let rank = t.rank();
    let me = g.my_index(rank).map_err(|e| e.context(name))?;
    if let Some(&bad) = g.members().iter().find(|&&m| m >= t.size()) {
        return Err(Error::invalid(
            name,
            format!(
                "group member {bad} is not a rank of this job of {}",
                t.size()
            ),
        )
        .on_rank(rank));
    }
    Ok(me)
}

/// Validates membership and takes the group's next sequence number.
fn setup<'g>(
    t: &dyn Transport,
    g: &'g Group,
    kind: CollKind,
    name: &'static str,
) -> Result<Ctx<'g>> {
    let me = member_index(t, g, name)?;
    let chain = g.topology().is_some_and(|t| t.follows_group_order());
    Ok(Ctx::new(g.members(), me, g.generation(), g.next_seq(), kind).on_chain(chain))
}

fn check_root(rank: usize, g: &Group, root: usize, name: &'static str) -> Result<()> {
    if root >= g.size() {
        return Err(Error::invalid(
            name,
            format!("root index {root} out of range for a group of {}", g.size()),
        )
        .on_rank(rank));
    }
    Ok(())
}

/// Names the collective in an error from below (keeping kind and peer); errors the collective
/// raised itself already carry its name.
fn wrap(rank: usize, name: &'static str) -> impl Fn(Error) -> Error {
    move |e: Error| {
        if e.op() == name {
            e.or_rank(rank)
        } else {
            e.context(name).or_rank(rank)
        }
    }
}

/// Blocks until every member of `g` has entered the barrier.
pub fn barrier(t: &mut dyn Transport, g: &Group) -> Result<()> {
    barrier_with(t, g, &CollOptions::default())
}

/// [`barrier`] with options.
pub fn barrier_with(t: &mut dyn Transport, g: &Group, opts: &CollOptions) -> Result<()> {
    const NAME: &str = "barrier";
    let rank = t.rank();
    let c = setup(t, g, CollKind::Barrier, NAME)?;
    select::barrier(t, &c, opts).map_err(wrap(rank, NAME))
}

/// Copies the root's `buf` to every member; non-roots' vectors take the root's length.
pub fn broadcast(t: &mut dyn Transport, g: &Group, root: usize, buf: &mut Vec<u8>) -> Result<()> {
    broadcast_with(t, g, root, buf, &CollOptions::default())
}

/// [`broadcast`] with options.
pub fn broadcast_with(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    buf: &mut Vec<u8>,
    opts: &CollOptions,
) -> Result<()> {
    const NAME: &str = "broadcast";
    let rank = t.rank();
    check_root(rank, g, root, NAME)?;
    let c = setup(t, g, CollKind::Broadcast, NAME)?;
    select::broadcast(t, &c, root, &mut Buf::Vec(buf), opts).map_err(wrap(rank, NAME))
}

/// Copies the root's `data` to every member; every member passes a slice of the same length
/// (a different length is an error on the receiving rank).
pub fn broadcast_slice<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    data: &mut [T],
) -> Result<()> {
    broadcast_slice_with(t, g, root, data, &CollOptions::default())
}

/// [`broadcast_slice`] with options.
pub fn broadcast_slice_with<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    data: &mut [T],
    opts: &CollOptions,
) -> Result<()> {
    const NAME: &str = "broadcast";
    let rank = t.rank();
    check_root(rank, g, root, NAME)?;
    let c = setup(t, g, CollKind::Broadcast, NAME)?;
    select::broadcast(t, &c, root, &mut Buf::Slice(as_bytes_mut(data)), opts)
        .map_err(wrap(rank, NAME))
}

/// Combines every member's `data` element-wise with `op`; the result lands in the root's
/// `data`, the other members' `data` is left as it was. All members pass the same length.
pub fn reduce<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    reduce_with(t, g, root, data, op, &CollOptions::default())
}

/// [`reduce`] with options (algorithm, order).
pub fn reduce_with<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> Result<()> {
    const NAME: &str = "reduce";
    let rank = t.rank();
    op.check(NAME).map_err(|e| e.on_rank(rank))?;
    check_root(rank, g, root, NAME)?;
    let c = setup(t, g, CollKind::Reduce, NAME)?;
    select::reduce(t, &c, root, data, op, opts).map_err(wrap(rank, NAME))
}

/// Combines every member's `data` element-wise with `op` and leaves the result, the same bits,
/// in every member's `data`. All members pass the same length.
pub fn allreduce<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    allreduce_with(t, g, data, op, &CollOptions::default())
}

/// [`allreduce`] with options (algorithm, order).
pub fn allreduce_with<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    data: &mut [T],
    op: &ReduceOp<T>,
    opts: &CollOptions,
) -> Result<()> {
    const NAME: &str = "allreduce";
    let rank = t.rank();
    op.check(NAME).map_err(|e| e.on_rank(rank))?;
    let c = setup(t, g, CollKind::Allreduce, NAME)?;
    select::allreduce(t, &c, data, op, opts).map_err(wrap(rank, NAME))
}

/// Collects every member's `send` at the root: `Some(blocks)` in group order on the root,
/// `None` elsewhere. Blocks may differ in length.
pub fn gather(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    send: &[u8],
) -> Result<Option<Vec<Vec<u8>>>> {
    gather_with(t, g, root, send, &CollOptions::default())
}

/// [`gather`] with options.
pub fn gather_with(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    send: &[u8],
    opts: &CollOptions,
) -> Result<Option<Vec<Vec<u8>>>> {
    const NAME: &str = "gather";
    let rank = t.rank();
    check_root(rank, g, root, NAME)?;
    let c = setup(t, g, CollKind::Gather, NAME)?;
    select::gather(t, &c, root, send, opts).map_err(wrap(rank, NAME))
}

/// Every member gets every member's `send`, in group order. Blocks may differ in length.
pub fn allgather(t: &mut dyn Transport, g: &Group, send: &[u8]) -> Result<Vec<Vec<u8>>> {
    allgather_with(t, g, send, &CollOptions::default())
}

/// [`allgather`] with options.
pub fn allgather_with(
    t: &mut dyn Transport,
    g: &Group,
    send: &[u8],
    opts: &CollOptions,
) -> Result<Vec<Vec<u8>>> {
    const NAME: &str = "allgather";
    let rank = t.rank();
    let c = setup(t, g, CollKind::Allgather, NAME)?;
    select::allgather(t, &c, send, opts).map_err(wrap(rank, NAME))
}

/// The root passes `Some(parts)` with one part per member (group order); every member gets
/// its part. Non-roots pass `None`.
pub fn scatter(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    parts: Option<&[Vec<u8>]>,
) -> Result<Vec<u8>> {
    scatter_with(t, g, root, parts, &CollOptions::default())
}

/// [`scatter`] with options.
pub fn scatter_with(
    t: &mut dyn Transport,
    g: &Group,
    root: usize,
    parts: Option<&[Vec<u8>]>,
    opts: &CollOptions,
) -> Result<Vec<u8>> {
    const NAME: &str = "scatter";
    let rank = t.rank();
    check_root(rank, g, root, NAME)?;
    if g.index_of(rank) == Some(root) {
        match parts {
            Some(p) if p.len() == g.size() => {}
            Some(p) => {
                return Err(Error::invalid(
                    NAME,
                    format!("root passed {} parts for a group of {}", p.len(), g.size()),
                )
                .on_rank(rank))
            }
            None => return Err(Error::invalid(NAME, "the root must pass the parts").on_rank(rank)),
        }
    }
    let c = setup(t, g, CollKind::Scatter, NAME)?;
    select::scatter(t, &c, root, parts, opts).map_err(wrap(rank, NAME))
}

/// Member `i` sends `parts[j]` to member `j` and gets back, at position `j` of the result,
/// what member `j` sent it. `parts` has one entry per member; blocks may differ in length.
pub fn alltoall(t: &mut dyn Transport, g: &Group, parts: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
    alltoall_with(t, g, parts, &CollOptions::default())
}

/// [`alltoall`] with options.
pub fn alltoall_with(
    t: &mut dyn Transport,
    g: &Group,
    parts: &[Vec<u8>],
    opts: &CollOptions,
) -> Result<Vec<Vec<u8>>> {
    const NAME: &str = "alltoall";
    let rank = t.rank();
    if parts.len() != g.size() {
        return Err(Error::invalid(
            NAME,
            format!("{} parts for a group of {}", parts.len(), g.size()),
        )
        .on_rank(rank));
    }
    let c = setup(t, g, CollKind::Alltoall, NAME)?;
    select::alltoall(t, &c, parts, opts).map_err(wrap(rank, NAME))
}

/// Typed convenience: allreduce of a single value.
pub fn allreduce_value<T: Element>(
    t: &mut dyn Transport,
    g: &Group,
    value: T,
    op: &ReduceOp<T>,
) -> Result<T> {
    let mut v = [value];
    allreduce(t, g, &mut v, op)?;
    Ok(v[0])
}

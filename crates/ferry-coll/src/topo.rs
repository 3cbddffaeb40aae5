//! Virtual topologies (X6, seed 004): Cartesian grids and (distributed) graphs over a group,
//! and the neighbour collectives that talk only along their edges.
//!
//! A topology is a pure mapping from group indices to neighbours; it holds no connections.
//! Attached to a group ([`crate::Group::with_topology`]) it also steers the automatic algorithm
//! choice: on a Cartesian group the collectives keep to the chain `i <-> i+1` of group order
//! (X7, see `select.rs`), so a 1-D grid program opens connections to its two neighbours only.
//!
//! # Message matching
//! Every neighbour message carries the collective's sequence number and the *edge* it travels
//! on, so that two edges between the same pair of members (a periodic dimension of size 2, or
//! a multigraph) never swap their data:
//! - Cartesian: the block a member sends in direction `(d, +)` arrives at the receiver's
//!   source slot `(d, -)` and vice versa, whatever the ranks involved.
//! - Graph: the `k`-th occurrence of `j` in `i`'s destinations pairs with the `k`-th
//!   occurrence of `i` in `j`'s sources (MPI's rule for multigraphs).

use ferry_core::{Error, Exchange, MsgKey, MsgKind, Result, Transport};

use crate::comm::SEQ_WINDOW;
use crate::Group;

/// Most edges a member may have in one direction: the edge number shares the tag with the
/// sequence number.
pub const MAX_EDGES: usize = 1 << 14;

/// A Cartesian grid: `dims[0] x dims[1] x ...` members, row-major (the last dimension varies
/// fastest), each dimension periodic or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cartesian {
    dims: Vec<usize>,
    periods: Vec<bool>,
}

impl Cartesian {
    /// A grid of the given extents; `periods[d]` makes dimension `d` wrap around. Fails on no
    /// dimension, an extent of 0, lengths that differ, or a size that overflows.
    pub fn new(dims: &[usize], periods: &[bool]) -> Result<Cartesian> {
        if dims.is_empty() {
            return Err(Error::invalid(
                "cartesian",
                "a grid needs at least one dimension",
            ));
        }
        if dims.len() > MAX_EDGES / 2 {
            return Err(Error::invalid(
                "cartesian",
                format!("{} dimensions; at most {}", dims.len(), MAX_EDGES / 2),
            ));
        }
        if dims.len() != periods.len() {
            return Err(Error::invalid(
                "cartesian",
                format!("{} extents but {} periods", dims.len(), periods.len()),
            ));
        }
        if let Some(d) = dims.iter().position(|&n| n == 0) {
            return Err(Error::invalid(
                "cartesian",
                format!("dimension {d} has extent 0"),
            ));
        }
        dims.iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
            .ok_or_else(|| Error::invalid("cartesian", "the grid's size overflows"))?;
        Ok(Cartesian {
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        })
    }

    /// Balanced extents for `nnodes` members in `ndims` dimensions (as `MPI_Dims_create`
    /// with no fixed extents): the prime factors are dealt out so the extents differ as little
    /// as possible, largest first. Fails on `ndims == 0` or `nnodes == 0`.
    pub fn dims_create(nnodes: usize, ndims: usize) -> Result<Vec<usize>> {
        if ndims == 0 || nnodes == 0 {
            return Err(Error::invalid(
                "dims_create",
                format!("{nnodes} members in {ndims} dimensions"),
            ));
        }
        let mut factors = Vec::new();
        let mut n = nnodes;
        let mut f = 2;
        while f * f <= n {
            while n.is_multiple_of(f) {
                factors.push(f);
                n /= f;
            }
            f += 1;
        }
        if n > 1 {
            factors.push(n);
        }
        let mut dims = vec![1usize; ndims];
        // Largest factor first onto the currently smallest extent.
        for &f in factors.iter().rev() {
            if let Some(d) = dims.iter_mut().min() {
                *d *= f;
            }
        }
        dims.sort_unstable_by(|a, b| b.cmp(a));
        Ok(dims)
    }

    /// Number of dimensions.
    pub fn ndims(&self) -> usize {
        self.dims.len()
    }

    /// Extent of every dimension.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Whether each dimension wraps around.
    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// Number of members (the product of the extents).
    pub fn size(&self) -> usize {
        self.dims.iter().product()
    }

    /// The coordinates of member `index`; an index outside the grid is an error.
    pub fn coords(&self, index: usize) -> Result<Vec<usize>> {
        if index >= self.size() {
            return Err(Error::invalid(
                "cartesian coords",
                format!("index {index} outside a grid of {}", self.size()),
            ));
        }
        let mut c = vec![0; self.dims.len()];
        let mut rest = index;
        for (slot, &n) in c.iter_mut().zip(&self.dims).rev() {
            *slot = rest % n;
            rest /= n;
        }
        Ok(c)
    }

    /// The member at `coords`: periodic dimensions wrap, a coordinate outside a non-periodic
    /// dimension gives `None` (no member there). A wrong number of coordinates is an error.
    pub fn index_of(&self, coords: &[isize]) -> Result<Option<usize>> {
        if coords.len() != self.dims.len() {
            return Err(Error::invalid(
                "cartesian rank",
                format!(
                    "{} coordinates for a grid of {} dimensions",
                    coords.len(),
                    self.dims.len()
                ),
            ));
        }
        let mut index = 0usize;
        for ((&x, &n), &periodic) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let n_i = n as isize;
            let x = if periodic {
                x.rem_euclid(n_i)
            } else if (0..n_i).contains(&x) {
                x
            } else {
                return Ok(None);
            };
            index = index * n + x as usize;
        }
        Ok(Some(index))
    }

    /// `(source, destination)` of member `index` for a shift by `disp` along dimension `dim`
    /// (as `MPI_Cart_shift`): the destination is `disp` steps ahead, the source `disp` steps
    /// behind; `None` past the edge of a non-periodic dimension.
    pub fn shift(
        &self,
        index: usize,
        dim: usize,
        disp: isize,
    ) -> Result<(Option<usize>, Option<usize>)> {
        if dim >= self.dims.len() {
            return Err(Error::invalid(
                "cartesian shift",
                format!("dimension {dim} of a grid of {}", self.dims.len()),
            ));
        }
        let c: Vec<isize> = self.coords(index)?.iter().map(|&x| x as isize).collect();
        let at = |delta: isize| -> Result<Option<usize>> {
            let mut d = c.clone();
            d[dim] += delta;
            self.index_of(&d)
        };
        Ok((at(-disp)?, at(disp)?))
    }

    /// The neighbours of member `index` in the order of the neighbour collectives: for each
    /// dimension `d` the member one step behind, then the one one step ahead (`None` past the
    /// edge of a non-periodic dimension).
    pub fn neighbours(&self, index: usize) -> Result<Vec<Option<usize>>> {
        let mut out = Vec::with_capacity(2 * self.dims.len());
        for d in 0..self.dims.len() {
            let (behind, ahead) = self.shift(index, d, 1)?;
            out.push(behind);
            out.push(ahead);
        }
        Ok(out)
    }
}

/// A distributed graph: this member's own incoming and outgoing edges, in the order the
/// neighbour collectives use (as `MPI_Dist_graph_create_adjacent`). Each member holds only its
/// own edges; the edges must be consistent across members (`j` in `i`'s destinations as often
/// as `i` in `j`'s sources).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    sources: Vec<usize>,
    destinations: Vec<usize>,
}

impl Graph {
    /// This member's edges: it receives from `sources` and sends to `destinations` (group
    /// indices, repeats allowed). Fails on more than [`MAX_EDGES`] edges in one direction.
    pub fn new(sources: Vec<usize>, destinations: Vec<usize>) -> Result<Graph> {
        for (what, list) in [("sources", &sources), ("destinations", &destinations)] {
            if list.len() > MAX_EDGES {
                return Err(Error::invalid(
                    "graph",
                    format!("{} {what}; at most {MAX_EDGES}", list.len()),
                ));
            }
        }
        Ok(Graph {
            sources,
            destinations,
        })
    }

    /// Member `index`'s edges of an undirected graph given as adjacency lists of every member
    /// (as `MPI_Graph_create`): it sends to and receives from `adjacency[index]`. Fails when
    /// the lists are not symmetric or name a member outside them.
    pub fn undirected(adjacency: &[Vec<usize>], index: usize) -> Result<Graph> {
        let n = adjacency.len();
        let mine = adjacency.get(index).ok_or_else(|| {
            Error::invalid("graph", format!("index {index} outside a graph of {n}"))
        })?;
        for (i, list) in adjacency.iter().enumerate() {
            for &j in list {
                let back = adjacency.get(j).ok_or_else(|| {
                    Error::invalid(
                        "graph",
                        format!("member {i} names {j} outside a graph of {n}"),
                    )
                })?;
                let there = back.iter().filter(|&&x| x == i).count();
                let here = list.iter().filter(|&&x| x == j).count();
                if there != here {
                    return Err(Error::invalid(
                        "graph",
                        format!("edge {i} - {j} is not symmetric ({here} vs {there})"),
                    ));
                }
            }
        }
        Graph::new(mine.clone(), mine.clone())
    }

    /// Where this member receives from, in order.
    pub fn sources(&self) -> &[usize] {
        &self.sources
    }

    /// Where this member sends to, in order.
    pub fn destinations(&self) -> &[usize] {
        &self.destinations
    }
}

/// A virtual topology over a group (X6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// A Cartesian grid in row-major group order.
    Cartesian(Cartesian),
    /// This member's edges of a distributed graph.
    Graph(Graph),
}

/// One member's edges, resolved: each with its peer (None: no member there) and the edge
/// number the message carries.
struct Edges {
    /// (peer, number the incoming message carries) per source slot.
    incoming: Vec<(Option<usize>, u32)>,
    /// (peer, number the outgoing message carries) per destination slot.
    outgoing: Vec<(Option<usize>, u32)>,
}

impl Topology {
    /// Checks that the topology fits a group of `size` members.
    pub(crate) fn check(&self, size: usize) -> Result<()> {
        match self {
            Topology::Cartesian(c) if c.size() != size => Err(Error::invalid(
                "topology",
                format!("a grid of {} members over a group of {size}", c.size()),
            )),
            Topology::Cartesian(_) => Ok(()),
            Topology::Graph(g) => match g
                .sources
                .iter()
                .chain(&g.destinations)
                .find(|&&j| j >= size)
            {
                Some(j) => Err(Error::invalid(
                    "topology",
                    format!("graph edge to {j} in a group of {size}"),
                )),
                None => Ok(()),
            },
        }
    }

    /// Whether consecutive group indices are (mostly) neighbours, so the chain algorithms keep
    /// collectives on the topology's edges: true for Cartesian grids (all of them in 1-D; in
    /// more dimensions the chain leaves the grid only from the end of one row to the start of
    /// the next).
    pub fn follows_group_order(&self) -> bool {
        matches!(self, Topology::Cartesian(_))
    }

    /// Group indices this member receives from in the neighbour collectives, in order.
    pub fn sources(&self, me: usize) -> Result<Vec<Option<usize>>> {
        match self {
            Topology::Cartesian(c) => c.neighbours(me),
            Topology::Graph(g) => Ok(g.sources.iter().map(|&j| Some(j)).collect()),
        }
    }

    /// Group indices this member sends to in the neighbour collectives, in order.
    pub fn destinations(&self, me: usize) -> Result<Vec<Option<usize>>> {
        match self {
            Topology::Cartesian(c) => c.neighbours(me),
            Topology::Graph(g) => Ok(g.destinations.iter().map(|&j| Some(j)).collect()),
        }
    }

    fn edges(&self, me: usize) -> Result<Edges> {
        match self {
            Topology::Cartesian(c) => {
                let n = c.neighbours(me)?;
                // Slot 2d is "behind", 2d+1 "ahead": what goes out ahead arrives behind.
                let outgoing = n.iter().enumerate().map(|(s, &p)| (p, s as u32)).collect();
                let incoming = n
                    .iter()
                    .enumerate()
                    .map(|(s, &p)| (p, (s ^ 1) as u32))
                    .collect();
                Ok(Edges { incoming, outgoing })
            }
            Topology::Graph(g) => {
                let number = |list: &[usize]| -> Vec<(Option<usize>, u32)> {
                    list.iter()
                        .enumerate()
                        .map(|(k, &j)| {
                            let nth = list[..k].iter().filter(|&&x| x == j).count();
                            (Some(j), nth as u32)
                        })
                        .collect()
                };
                Ok(Edges {
                    incoming: number(&g.sources),
                    outgoing: number(&g.destinations),
                })
            }
        }
    }
}

/// Neighbour kinds in the tag: bit 15 (never set by the other collectives, whose kind byte is
/// below 0x80), bit 14 tells allgather from all-to-all, the edge number below.
const NEIGHBOUR_BIT: u32 = 0x8000;
const ALLTOALL_BIT: u32 = 0x4000;

fn key(g: &Group, seq: u32, alltoall: bool, edge: u32) -> MsgKey {
    let kind = NEIGHBOUR_BIT | if alltoall { ALLTOALL_BIT } else { 0 };
    MsgKey::new(
        g.generation(),
        MsgKind::COLLECTIVE,
        ((seq % SEQ_WINDOW) << 16) | kind | edge,
    )
}

fn topology<'g>(
    t: &dyn Transport,
    g: &'g Group,
    name: &'static str,
) -> Result<(usize, &'g Topology)> {
    let rank = t.rank();
    let me = g.my_index(rank).map_err(|e| e.context(name))?;
    let topo = g.topology().ok_or_else(|| {
        Error::invalid(name, "the group has no topology (Group::with_topology)").on_rank(rank)
    })?;
    Ok((me, topo))
}

/// Every member sends `send` to each of its destinations and gets, per source slot, the block
/// that source sent along that edge (`None` where the slot has no member: past the edge of a
/// non-periodic grid). Only the topology's neighbours are contacted. Needs a group with a
/// topology.
pub fn neighbor_allgather(
    t: &mut dyn Transport,
    g: &Group,
    send: &[u8],
) -> Result<Vec<Option<Vec<u8>>>> {
    const NAME: &str = "neighbor allgather";
    let (me, topo) = topology(t, g, NAME)?;
    let edges = topo.edges(me).map_err(|e| e.on_rank(t.rank()))?;
    let parts: Vec<&[u8]> = vec![send; edges.outgoing.len()];
    exchange(t, g, me, &edges, &parts, false, NAME)
}

/// Every member sends `parts[k]` to its `k`-th destination and gets, per source slot, the
/// block that source sent along that edge (`None` where the slot has no member). `parts` has
/// one block per destination slot (blocks for empty slots are not sent). Needs a group with a
/// topology.
pub fn neighbor_alltoall(
    t: &mut dyn Transport,
    g: &Group,
    parts: &[Vec<u8>],
) -> Result<Vec<Option<Vec<u8>>>> {
    const NAME: &str = "neighbor alltoall";
    let (me, topo) = topology(t, g, NAME)?;
    let rank = t.rank();
    let edges = topo.edges(me).map_err(|e| e.on_rank(rank))?;
    if parts.len() != edges.outgoing.len() {
        return Err(Error::invalid(
            NAME,
            format!(
                "{} parts for {} destinations",
                parts.len(),
                edges.outgoing.len()
            ),
        )
        .on_rank(rank));
    }
    let parts: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    exchange(t, g, me, &edges, &parts, true, NAME)
}

/// The one exchange of a neighbour collective: sends along every outgoing edge, receives along
/// every incoming one; edges to this member itself are copied locally.
fn exchange(
    t: &mut dyn Transport,
    g: &Group,
    me: usize,
    edges: &Edges,
    parts: &[&[u8]],
    alltoall: bool,
    name: &'static str,
) -> Result<Vec<Option<Vec<u8>>>> {
    let rank = t.rank();
    let seq = g.next_seq();
    let mut out: Vec<Option<Vec<u8>>> = edges
        .incoming
        .iter()
        .map(|(p, _)| p.map(|_| Vec::new()))
        .collect();
    // Edges to myself: the block sent on edge number e lands in the incoming slot expecting e.
    let mut local: Vec<(usize, usize)> = Vec::new();
    for (slot, &(peer, edge)) in edges.incoming.iter().enumerate() {
        if peer == Some(me) {
            let from = edges
                .outgoing
                .iter()
                .position(|&(p, e)| p == Some(me) && e == edge)
                .ok_or_else(|| {
                    Error::invalid(name, format!("self edge {edge} has no outgoing side"))
                        .on_rank(rank)
                })?;
            local.push((slot, from));
        }
    }
    {
        let mut ex = Exchange::new();
        for (&(peer, edge), data) in edges.outgoing.iter().zip(parts) {
            if let Some(j) = peer.filter(|&j| j != me) {
                ex.send(g.member(j), key(g, seq, alltoall, edge), data);
            }
        }
        for (slot, &(peer, edge)) in out.iter_mut().zip(&edges.incoming) {
            if let (Some(j), Some(buf)) = (peer.filter(|&j| j != me), slot.as_mut()) {
                ex.recv(g.member(j), key(g, seq, alltoall, edge), buf);
            }
        }
        if !ex.sends.is_empty() || !ex.recvs.is_empty() {
            t.exchange(&mut ex)
                .map_err(|e| e.context(name).or_rank(rank))?;
        }
    }
    for (slot, from) in local {
        out[slot] = Some(parts[from].to_vec());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_coordinates_and_shifts_by_hand() {
        let c = Cartesian::new(&[2, 3], &[false, true]).unwrap();
        assert_eq!(c.size(), 6);
        assert_eq!(c.coords(4).unwrap(), vec![1, 1]);
        assert_eq!(c.index_of(&[1, -1]).unwrap(), Some(5));
        assert_eq!(c.index_of(&[2, 0]).unwrap(), None);
        // Member 3 = (1, 0): dim 0 behind is 0, ahead is off the grid; dim 1 wraps.
        assert_eq!(c.shift(3, 0, 1).unwrap(), (Some(0), None));
        assert_eq!(c.shift(3, 1, 1).unwrap(), (Some(5), Some(4)));
        assert_eq!(
            c.neighbours(3).unwrap(),
            vec![Some(0), None, Some(5), Some(4)]
        );
        assert!(c.coords(6).is_err());
        assert!(c.shift(0, 2, 1).is_err());
        assert!(Cartesian::new(&[2, 0], &[false, false]).is_err());
        assert!(Cartesian::new(&[2], &[false, false]).is_err());
        assert!(Cartesian::new(&[], &[]).is_err());
    }

    #[test]
    fn dims_create_balances() {
        assert_eq!(Cartesian::dims_create(12, 2).unwrap(), vec![4, 3]);
        assert_eq!(Cartesian::dims_create(64, 3).unwrap(), vec![4, 4, 4]);
        assert_eq!(Cartesian::dims_create(7, 2).unwrap(), vec![7, 1]);
        assert_eq!(Cartesian::dims_create(1, 2).unwrap(), vec![1, 1]);
        assert!(Cartesian::dims_create(4, 0).is_err());
    }

    #[test]
    fn undirected_graph_checks_symmetry() {
        let adj = vec![vec![1, 2], vec![0], vec![0]];
        let g = Graph::undirected(&adj, 0).unwrap();
        assert_eq!(g.sources(), &[1, 2]);
        assert!(Graph::undirected(&[vec![1], vec![]], 0).is_err());
        assert!(Graph::undirected(&[vec![3]], 0).is_err());
        assert!(Graph::undirected(&adj, 3).is_err());
    }
}

//! Virtual topologies of a [`Comm`] (X6, X7): a Cartesian grid or a distributed graph over the
//! communicator's members, neighbour collectives along its edges, and the gather family kept
//! on the grid's chain.
//!
//! Declaring a grid changes how the collectives run, not what they compute: on a Cartesian
//! communicator every collective but all-to-all talks to members `rank - 1` and `rank + 1`
//! only (`ferry-coll`'s chain algorithms), so a 1-D halo program connects to its two
//! neighbours and no one else. Reductions there are the rank-ordered left fold (the digits
//! [`ferry_coll::CollOptions::rank_ordered`] gives anywhere).

use ferry_coll::{Algorithm, Cartesian, CollOptions, Graph, Topology};
use ferry_core::element::{as_bytes, copy_from_bytes, from_bytes};
use ferry_core::{Element, Error, ErrorKind, Result};

use super::Comm;

impl Comm {
    /// Lays the members out on a Cartesian grid (row-major: the last dimension varies
    /// fastest; no reordering, so a member's rank stays its grid index). The extents must
    /// multiply to [`Comm::size`]. Local: no message is exchanged, but every member must
    /// declare the same grid before its next collective.
    pub fn set_cartesian(&mut self, dims: &[usize], periods: &[bool]) -> Result<()> {
        let rank = self.world.rank();
        let cart = Cartesian::new(dims, periods).map_err(|e| e.or_rank(rank))?;
        self.set_topology(Topology::Cartesian(cart))
    }

    /// Gives this member the edges of a distributed graph: it receives from `sources` and
    /// sends to `destinations` in the neighbour collectives (ranks of this communicator).
    /// Local; the members' edges must agree (see [`ferry_coll::Graph`]).
    pub fn set_graph(&mut self, sources: Vec<usize>, destinations: Vec<usize>) -> Result<()> {
        let rank = self.world.rank();
        let graph = Graph::new(sources, destinations).map_err(|e| e.or_rank(rank))?;
        self.set_topology(Topology::Graph(graph))
    }

    /// Attaches `topology` to the communicator's group (replacing any earlier one).
    pub fn set_topology(&mut self, topology: Topology) -> Result<()> {
        let rank = self.world.rank();
        self.group = self
            .group
            .clone()
            .with_topology(topology)
            .map_err(|e| e.or_rank(rank))?;
        Ok(())
    }

    /// The topology declared with [`Comm::set_cartesian`], [`Comm::set_graph`] or
    /// [`Comm::set_topology`], if any.
    pub fn topology(&self) -> Option<&Topology> {
        self.group.topology()
    }

    fn grid(&self, op: &'static str) -> Result<&Cartesian> {
        match self.group.topology() {
            Some(Topology::Cartesian(c)) => Ok(c),
            _ => Err(
                Error::invalid(op, "the communicator has no Cartesian topology")
                    .on_rank(self.world.rank()),
            ),
        }
    }

    /// This member's coordinates on the grid.
    pub fn cart_coords(&self) -> Result<Vec<usize>> {
        self.grid("cart coords")?
            .coords(self.me)
            .map_err(|e| e.on_rank(self.world.rank()))
    }

    /// `(source, destination)` ranks for a shift by `disp` along dimension `dim` (as
    /// `MPI_Cart_shift`); `None` past the edge of a non-periodic dimension.
    pub fn cart_shift(&self, dim: usize, disp: isize) -> Result<(Option<usize>, Option<usize>)> {
        self.grid("cart shift")?
            .shift(self.me, dim, disp)
            .map_err(|e| e.on_rank(self.world.rank()))
    }

    /// Sends `send` to every neighbour and returns, per source slot of the topology (grid:
    /// dimension 0 behind, dimension 0 ahead, dimension 1 behind, ...), what that neighbour
    /// sent; `None` past the edge of a non-periodic grid. Only neighbours are contacted.
    pub fn neighbor_allgather<T: Element>(&mut self, send: &[T]) -> Result<Vec<Option<Vec<T>>>> {
        let got =
            ferry_coll::neighbor_allgather(self.world.transport(), &self.group, as_bytes(send))?;
        self.typed_blocks(got, "neighbor allgather")
    }

    /// Sends `parts[k]` to the `k`-th destination of the topology and returns what each source
    /// sent this member (slots as in [`Comm::neighbor_allgather`]).
    pub fn neighbor_alltoall<T: Element>(
        &mut self,
        parts: &[Vec<T>],
    ) -> Result<Vec<Option<Vec<T>>>> {
        let bytes: Vec<Vec<u8>> = parts.iter().map(|p| as_bytes(p).to_vec()).collect();
        let got = ferry_coll::neighbor_alltoall(self.world.transport(), &self.group, &bytes)?;
        self.typed_blocks(got, "neighbor alltoall")
    }

    fn typed_blocks<T: Element>(
        &self,
        got: Vec<Option<Vec<u8>>>,
        op: &'static str,
    ) -> Result<Vec<Option<Vec<T>>>> {
        got.into_iter()
            .map(|b| match b {
                None => Ok(None),
                Some(b) => from_bytes(&b)
                    .map(Some)
                    .ok_or_else(|| self.torn(op, b.len())),
            })
            .collect()
    }

    fn torn(&self, op: &'static str, len: usize) -> Error {
        Error::new(ErrorKind::Protocol, op)
            .on_rank(self.world.rank())
            .with_detail(format!(
                "a block of {len} bytes does not fit the element type or the receive buffer"
            ))
    }

    /// Whether the gather family should keep to the chain of group order (a Cartesian grid).
    pub(super) fn on_chain(&self) -> bool {
        self.group.size() > 2
            && self
                .group
                .topology()
                .is_some_and(Topology::follows_group_order)
    }

    /// [`Comm::gather_into`] along the chain (the caller checked the sizes).
    pub(super) fn chain_gather_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        let opts = CollOptions::with_algorithm(Algorithm::Chain);
        let got = ferry_coll::gather_with(
            self.world.transport(),
            &self.group,
            root,
            as_bytes(send),
            &opts,
        )?;
        if let Some(blocks) = got {
            self.place(&blocks, recv, send.len(), "gather")?;
        }
        Ok(())
    }

    /// [`Comm::allgather_into`] along the chain (the caller checked the sizes).
    pub(super) fn chain_allgather_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let opts = CollOptions::with_algorithm(Algorithm::Chain);
        let blocks =
            ferry_coll::allgather_with(self.world.transport(), &self.group, as_bytes(send), &opts)?;
        self.place(&blocks, recv, send.len(), "allgather")
    }

    /// [`Comm::scatter_into`] along the chain (the caller checked the root's sizes).
    pub(super) fn chain_scatter_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        let k = recv.len();
        let parts: Option<Vec<Vec<u8>>> = (self.me == root).then(|| {
            send.chunks(k.max(1))
                .map(|b| as_bytes(b).to_vec())
                .chain(std::iter::repeat_with(Vec::new))
                .take(self.group.size())
                .collect()
        });
        let opts = CollOptions::with_algorithm(Algorithm::Chain);
        let mine = ferry_coll::scatter_with(
            self.world.transport(),
            &self.group,
            root,
            parts.as_deref(),
            &opts,
        )?;
        if copy_from_bytes(recv, &mine) {
            Ok(())
        } else {
            Err(self.torn("scatter", mine.len()))
        }
    }

    /// Copies member `i`'s block to `recv[i * k..]`; a block of another length is an error.
    fn place<T: Element>(
        &self,
        blocks: &[Vec<u8>],
        recv: &mut [T],
        k: usize,
        op: &'static str,
    ) -> Result<()> {
        for (i, b) in blocks.iter().enumerate() {
            let dst = recv
                .get_mut(i * k..(i + 1) * k)
                .ok_or_else(|| self.torn(op, b.len()))?;
            if !copy_from_bytes(dst, b) {
                return Err(self.torn(op, b.len()));
            }
        }
        Ok(())
    }
}

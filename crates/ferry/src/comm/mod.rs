//! [`Comm`]: the one object an SPMD program holds (I1).
//!
//! A communicator bundles what the lower layers pass around separately: the transport of this
//! rank ([`World`]), the [`Group`] it talks over (members and generation, so that a
//! communicator whose membership changes — shrink, rebuild — only swaps its group), and the
//! data layer's [`Instance`] of the job. Ranks, roots, sources and destinations are *group
//! indices*, as in MPI.
//!
//! - point-to-point on typed slices: [`Comm::send`], [`Comm::recv_into`], [`Comm::recv_vec`],
//!   [`Comm::sendrecv_into`]. Every receive names its source: the backends match a receive
//!   against one sender's flow by serial numbers (M2), and none of them has a matching step
//!   across flows that an any-source receive (`MPI_ANY_SOURCE`) would need; post the receives
//!   from every candidate in one batched [`ferry_core::Exchange`] instead;
//! - collectives as methods: [`Comm::barrier`], [`Comm::broadcast`], [`Comm::reduce`],
//!   [`Comm::allreduce`] and the typed gather family with into-buffer variants
//!   ([`Comm::gather_into`], [`Comm::allgather_into`], [`Comm::scatter_into`],
//!   [`Comm::alltoall_into`]) that reuse this communicator's scratch space instead of
//!   allocating per call;
//! - persistent collectives, set up once and started many times: [`Comm::bcast_init`],
//!   [`Comm::gather_init`], [`Comm::allreduce_init`] ([`PersistentColl`]);
//! - the data layer: [`Comm::container`], [`Comm::partitioning`], [`Comm::switch`];
//! - virtual topologies (X6, X7): [`Comm::set_cartesian`], [`Comm::set_graph`],
//!   [`Comm::cart_shift`], [`Comm::neighbor_allgather`], [`Comm::neighbor_alltoall`]; on a
//!   Cartesian communicator the collectives keep to the grid's chain.

mod coll;
mod p2p;
mod persist;
mod topo;

pub use persist::PersistentColl;

use ferry_coll::Group;
use ferry_core::mem::MemTransport;
use ferry_core::{Config, Element, Error, Exchange, RecvOp, Result, SendOp, Transport};
use ferry_data::{Container, DataFlow, Instance, Partitioner, Partitioning, ReduceOp, Space};

use crate::World;

/// A communicator: this rank's transport, the group it talks over and the data layer.
///
/// Obtain one with [`Comm::init`] (from the launcher's environment, like [`crate::init`]) or
/// [`World::into_comm`]; end it with [`Comm::finish`]. Every member calls the same collectives
/// and data-layer switches in the same order (SPMD).
pub struct Comm {
    world: World,
    group: Group,
    data: Instance,
    /// This rank's index in `group`.
    me: usize,
    /// Sequence of the typed gather-family collectives of this communicator (see `coll.rs`).
    seq: u32,
    /// Operation vectors of the last exchange, kept so that repeated collectives and
    /// point-to-point calls reuse their capacity.
    sends: Vec<SendOp<'static>>,
    recvs: Vec<RecvOp<'static>>,
}

impl Comm {
    /// Initialises ferry from the environment (see [`crate::init`]) and returns the world
    /// communicator.
    pub fn init() -> Result<Comm> {
        crate::init()?.into_comm()
    }

    /// The communicator over every rank of `world`.
    pub fn from_world(world: World) -> Result<Comm> {
        let data = world.data_instance()?;
        let group = data.world().clone();
        let me = world.rank();
        Ok(Comm {
            world,
            group,
            data,
            me,
            seq: 0,
            sends: Vec::new(),
            recvs: Vec::new(),
        })
    }

    /// This rank's index in the communicator (0 to `size()-1`).
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.group.size()
    }

    /// This rank's number in the whole job (equals [`Comm::rank`] for the world communicator).
    pub fn world_rank(&self) -> usize {
        self.world.rank()
    }

    /// Name of the backend in use (`single`, `tcp`, `shm`, `hybrid`, `mpi`, `mem`).
    pub fn backend(&self) -> &'static str {
        self.world.backend()
    }

    /// The group this communicator talks over (members in order, generation).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// The transport, for the lower-level APIs ([`crate::coll`], batched exchanges).
    pub fn transport(&mut self) -> &mut dyn Transport {
        self.world.transport()
    }

    /// Whether this process is a restart of its rank in a hand-started tcp job with retained
    /// messages (`tcp.retain`, docs/FAULT-TOLERANCE.md "Retained messages"): a peer knew an
    /// earlier process of this rank, which was killed and is replaced by this one. Found out by
    /// contacting every peer (each says, after the handshake, whether it knew an earlier
    /// process of this rank), so it waits until all peers are reachable; call it once at
    /// start-up, before [`crate::retain::resume`] and any other communication, to decide
    /// whether to resume from a saved checkpoint. `Ok(false)` without retention (and on every
    /// other backend). Fails like a send would when a peer cannot be reached.
    pub fn is_restart(&mut self) -> Result<bool> {
        let rank = self.me;
        self.world
            .transport()
            .is_restart()
            .map_err(|e| e.context("is_restart").or_rank(rank))
    }

    /// Sequence numbers of this communicator's collectives (the typed gather family's and
    /// `ferry-coll`'s), saved with a retention checkpoint.
    pub(crate) fn collective_sequences(&self) -> (u32, u32) {
        (self.seq, self.group.sequence())
    }

    /// Continues the collectives at the sequence numbers of a checkpoint.
    pub(crate) fn resume_collective_sequences(&mut self, typed: u32, group: u32) {
        self.seq = typed;
        self.group.resume_sequence(group);
    }

    /// The data layer instance (index spaces, groups derived by shrinking, containers).
    pub fn data(&mut self) -> &mut Instance {
        &mut self.data
    }

    /// The transport and the data layer at once, for code that needs both borrowed.
    pub fn parts(&mut self) -> (&mut dyn Transport, &mut Instance) {
        (self.world.transport(), &mut self.data)
    }

    /// The transport and the group at once (e.g. for a resize point, which needs both).
    pub fn transport_and_group(&mut self) -> (&mut dyn Transport, &Group) {
        (self.world.transport(), &self.group)
    }

    /// The world this communicator was built from (configuration, resize points).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Talks over `group` from now on (after a resize point admitted or removed processes,
    /// or a shrink): ranks become indices in `group`, collectives and partitionings use it,
    /// [`Comm::finish`] meets its members. This rank must be a member.
    pub fn set_group(&mut self, group: Group) -> Result<()> {
        let rank = self.world.rank();
        self.me = group
            .my_index(rank)
            .map_err(|e| e.context("set_group").or_rank(rank))?;
        self.group = group;
        Ok(())
    }

    /// Gives up the communicator and the data layer and returns the world, e.g. for a process
    /// that a resize point removed: it is no member to meet at [`Comm::finish`], and ends with
    /// [`World::finish`] (which still delivers what it owes).
    pub fn into_world(self) -> World {
        self.world
    }

    /// A new container of `T` over `space`, named `name` (for messages and logs). Every rank
    /// creates its containers in the same order.
    pub fn container<T: Element>(&mut self, name: &str, space: &Space) -> Container<T> {
        Container::new(&mut self.data, name, space)
    }

    /// Partitions `space` over this communicator's members with `partitioner`.
    pub fn partitioning(&self, space: &Space, partitioner: &Partitioner) -> Result<Partitioning> {
        Partitioning::new(space, &self.group, partitioner).map_err(|e| e.or_rank(self.world.rank()))
    }

    /// Switches `c` to partitioning `to` with data flow `flow` (D4), no reduction.
    pub fn switch<T: Element>(
        &mut self,
        c: &mut Container<T>,
        to: &Partitioning,
        flow: DataFlow,
    ) -> Result<()> {
        c.switch_to(self.world.transport(), to, flow, None)
    }

    /// Switches `c` to `to`, combining the values that several ranks hold for one index with
    /// `op` (D4; e.g. from `All` to `Master` with a sum).
    pub fn switch_reduce<T: Element>(
        &mut self,
        c: &mut Container<T>,
        to: &Partitioning,
        flow: DataFlow,
        op: ReduceOp<T>,
    ) -> Result<()> {
        c.switch_to(self.world.transport(), to, flow, Some(&op))
    }

    /// Orderly end: every member meets once more (so no peer still pulls data this rank sent
    /// in its last switches), then the transport shuts down (see [`World::finish`]).
    pub fn finish(mut self) -> Result<()> {
        self.data
            .finalize_in(self.world.transport(), &self.group)
            .and_then(|()| self.world.finish())
    }

    /// Runs one exchange built by `build`, reusing the communicator's operation vectors.
    fn run_exchange<'a>(
        t: &mut dyn Transport,
        sends: &mut Vec<SendOp<'static>>,
        recvs: &mut Vec<RecvOp<'static>>,
        build: impl FnOnce(&mut Exchange<'a>),
    ) -> Result<()> {
        let mut ex = Exchange::from_parts(std::mem::take(sends), std::mem::take(recvs));
        build(&mut ex);
        let r = t.exchange(&mut ex);
        let (s, v) = ex.into_parts();
        *sends = s;
        *recvs = v;
        r
    }

    /// The world rank of member `index`, or an error naming `op` on a bad index.
    fn member(&self, index: usize, op: &'static str) -> Result<usize> {
        if index < self.group.size() {
            Ok(self.group.member(index))
        } else {
            Err(Error::invalid(
                op,
                format!(
                    "rank {index} out of range for a communicator of {}",
                    self.group.size()
                ),
            )
            .on_rank(self.world.rank()))
        }
    }
}

impl World {
    /// The world communicator over this world (see [`Comm`]).
    pub fn into_comm(self) -> Result<Comm> {
        Comm::from_world(self)
    }
}

/// Runs `f` as an in-process job of `size` ranks, one thread each, over the in-memory backend,
/// and returns the ranks' results in rank order (the first error if any rank failed). For
/// examples, doc tests and unit tests of SPMD code; programs run under `ferry run` use
/// [`Comm::init`].
pub fn run_threads<R, F>(size: usize, f: F) -> Result<Vec<R>>
where
    R: Send,
    F: Fn(Comm) -> Result<R> + Sync,
{
    if size == 0 {
        return Err(Error::invalid(
            "run_threads",
            "a job needs at least one rank",
        ));
    }
    MemTransport::run(size, |t| {
        let world = World::from_transport(Box::new(t), Config::default());
        f(Comm::from_world(world)?)
    })
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests;

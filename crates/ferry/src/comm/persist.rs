//! Persistent collectives of a [`Comm`]: broadcast, gather and allreduce set up once and
//! started many times (`ferry_coll::Persistent`, seed 004's persistent calls, MPI 4's
//! `MPI_Bcast_init`).
//!
//! Each gets a group of its own: this communicator's members under a fresh generation from the
//! data layer (the same numbers on every rank that makes the same calls), so its messages
//! never match any other operation's, and when it is freed its flows are retired.

use ferry_coll::{CollOptions, Persistent, PersistentKind, ReduceOp};
use ferry_core::{Element, Result};

use super::Comm;

/// A persistent collective of a [`Comm`] (see [`Comm::bcast_init`]): the algorithm, the peers,
/// the message flows and the buffers are fixed at init; [`PersistentColl::start`] and
/// [`PersistentColl::wait`] only move the data. The buffers belong to it: read and write them
/// with [`PersistentColl::data`], [`PersistentColl::data_mut`] and [`PersistentColl::output`]
/// between rounds. End it with [`PersistentColl::free`], which retires its flows at once
/// (dropping it retires them at the communicator's next data-layer step or at its end).
#[derive(Debug)]
pub struct PersistentColl<T: Element> {
    inner: Persistent<T>,
}

impl<T: Element> PersistentColl<T> {
    /// Starts one round without waiting for the peers (every member starts its persistent
    /// collectives in the same order).
    pub fn start(&mut self, comm: &mut Comm) -> Result<()> {
        self.inner.start(comm.world.transport())
    }

    /// Completes the round started last; a failed peer is an error naming it.
    pub fn wait(&mut self, comm: &mut Comm) -> Result<()> {
        self.inner.wait(comm.world.transport())
    }

    /// [`PersistentColl::start`] then [`PersistentColl::wait`].
    pub fn run(&mut self, comm: &mut Comm) -> Result<()> {
        self.inner.run(comm.world.transport())
    }

    /// The data buffer (broadcast buffer, gather block, allreduce vector or result); an error
    /// while a round is under way.
    pub fn data(&self) -> Result<&[T]> {
        self.inner.data()
    }

    /// The data buffer, writable; an error while a round is under way.
    pub fn data_mut(&mut self) -> Result<&mut [T]> {
        self.inner.data_mut()
    }

    /// Gather: every member's block in rank order on the root, `None` elsewhere.
    pub fn output(&self) -> Result<Option<&[T]>> {
        self.inner.output()
    }

    /// Which collective this is.
    pub fn kind(&self) -> PersistentKind {
        self.inner.kind()
    }

    /// The algorithm fixed at init.
    pub fn algorithm(&self) -> ferry_coll::Algorithm {
        self.inner.algorithm()
    }

    /// World ranks this rank exchanges messages with in every round.
    pub fn peers(&self) -> Vec<usize> {
        self.inner.peers()
    }

    /// Number of completed rounds.
    pub fn completed(&self) -> u64 {
        self.inner.completed()
    }

    /// Frees the collective and retires its message flows in the transport now. A round
    /// still under way is waited for first; its error, if any, is returned after freeing.
    pub fn free(mut self, comm: &mut Comm) -> Result<()> {
        let r = self.inner.wait(comm.world.transport());
        drop(self);
        comm.data.retire_pending(comm.world.transport());
        r
    }
}

impl Comm {
    /// A group of this communicator's members under a generation nothing else uses, with the
    /// communicator's topology (so the automatic choice keeps to a Cartesian grid's chain).
    fn persistent_group(&mut self) -> Result<ferry_coll::Group> {
        let g = self.data.shrink(&self.group, &[])?;
        match self.group.topology() {
            Some(topo) => g.with_topology(topo.clone()),
            None => Ok(g),
        }
    }

    /// A persistent broadcast of `data` from member `root` (every member passes the same
    /// length, checked once here). Collective: every member calls it, in the same order as
    /// its other persistent-collective inits.
    pub fn bcast_init<T: Element>(
        &mut self,
        data: Vec<T>,
        root: usize,
    ) -> Result<PersistentColl<T>> {
        self.bcast_init_with(data, root, &CollOptions::default())
    }

    /// [`Comm::bcast_init`] with options (algorithm: auto, linear, binomial, chain, pipeline).
    pub fn bcast_init_with<T: Element>(
        &mut self,
        data: Vec<T>,
        root: usize,
        opts: &CollOptions,
    ) -> Result<PersistentColl<T>> {
        let g = self.persistent_group()?;
        let inner = Persistent::broadcast(self.world.transport(), g, root, data, opts)?;
        Ok(PersistentColl { inner })
    }

    /// A persistent gather of every member's `block` (same length everywhere) at member
    /// `root`, whose [`PersistentColl::output`] then holds the blocks in rank order.
    pub fn gather_init<T: Element>(
        &mut self,
        block: Vec<T>,
        root: usize,
    ) -> Result<PersistentColl<T>> {
        self.gather_init_with(block, root, &CollOptions::default())
    }

    /// [`Comm::gather_init`] with options (algorithm: auto, linear, binomial, chain).
    pub fn gather_init_with<T: Element>(
        &mut self,
        block: Vec<T>,
        root: usize,
        opts: &CollOptions,
    ) -> Result<PersistentColl<T>> {
        let g = self.persistent_group()?;
        let inner = Persistent::gather(self.world.transport(), g, root, block, opts)?;
        Ok(PersistentColl { inner })
    }

    /// A persistent allreduce of `data` with `op`: after each round every member's
    /// [`PersistentColl::data`] holds the result, the same bits everywhere.
    pub fn allreduce_init<T: Element>(
        &mut self,
        data: Vec<T>,
        op: ReduceOp<T>,
    ) -> Result<PersistentColl<T>> {
        self.allreduce_init_with(data, op, &CollOptions::default())
    }

    /// [`Comm::allreduce_init`] with options (algorithm: auto, binomial, chain; the
    /// rank-ordered fold runs the chain).
    pub fn allreduce_init_with<T: Element>(
        &mut self,
        data: Vec<T>,
        op: ReduceOp<T>,
        opts: &CollOptions,
    ) -> Result<PersistentColl<T>> {
        let g = self.persistent_group()?;
        let inner = Persistent::allreduce(self.world.transport(), g, data, op, opts)?;
        Ok(PersistentColl { inner })
    }
}

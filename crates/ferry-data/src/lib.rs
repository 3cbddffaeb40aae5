//! ferry's data layer: the LAIK programming model (D1-D6).
//!
//! A program declares an index [`Space`] (D1), hands its indexes to the tasks of a
//! [`Group`] with a [`Partitioner`] (D2), stores values in a typed [`Container`] whose
//! local part is laid out per [`Mapping`] (D3), and switches the container between
//! partitionings with a [`DataFlow`] and an optional reduction (D4). The communication of a
//! switch is derived from old and new ownership as a [`Transition`], bound to a container as an
//! [`ActionSeq`] and executed as one batched exchange with one message per peer (D5);
//! [`Container::reserve`] sizes memory for several partitionings at once (D6).
//!
//! Contract: the data layer never talks to a backend directly — it builds
//! [`ferry_core::Exchange`]s and hands them to whatever [`ferry_core::Transport`] the caller
//! passes. Every rank must create containers and perform switches in the same order (SPMD);
//! messages are tagged with the container's creation number and the target group's
//! generation, so a divergent program fails with a timeout naming the rank, never with
//! silently mixed-up data. Library code returns errors; it does not panic on bad input.
//!
//! Shared containers (S3): given the transport's node-shared memory
//! ([`Instance::set_shared_memory`]), containers keep their storage there, and a switch between
//! ranks of one node copies straight from the old owner's memory (one copy instead of pack,
//! transfer and unpack; see `action/share.rs`). The results are byte-identical to the message
//! path; ranks on other nodes and backends without shared memory keep the message path.
//!
//! No I/O of its own: no environment, no store, no process-global state. What comes from
//! outside (the elastic job's control channel, `FERRY_LAYOUT_GENERIC`) is handed in by the
//! facade (`ferry::resize`, `World::data_instance`).

#![warn(missing_docs)]

pub mod action;
pub mod container;
pub mod kvs;
pub mod partitioner;
pub mod partitioning;
pub mod recovery;
pub mod reduce;
pub mod resize;
mod retire;
pub mod space;
pub mod space_store;
mod storage;
pub mod transition;

pub use action::ActionSeq;
pub use container::{Container, MapView, MapViewMut};
pub use ferry_coll::{Group, ReduceOp};
pub use partitioner::{Block, Partitioner, PartitionerCtx, TaskRange};
pub use partitioning::{Layout, LayoutOrder, Mapping, Partitioning, StrideFn};
pub use recovery::SwitchRecord;
pub use resize::{Elastic, ResizeSource};
pub use space::{Index, Range, Space, MAX_DIMS};
pub use transition::{DataFlow, Transition};

use std::sync::Arc;

use ferry_core::{Error, MsgKind, Result, RetiredFlows, SharedMemory};

use crate::retire::{RetireOnDrop, Retirements};

/// First generation number the data layer hands to groups it creates. Generations below are
/// left to the world (0) and to membership changes of the runtime (resize, recovery), so the
/// two never hand out the same number.
pub const DATA_GENERATION_BASE: u32 = 1 << 20;

/// One rank's data-layer state: its world rank, the world group, and the counters that give
/// containers and derived groups SPMD-consistent identities (every rank creates them in the
/// same order, so every rank assigns the same numbers).
#[derive(Debug)]
pub struct Instance {
    rank: usize,
    world: Group,
    next_data: u32,
    next_generation: u32,
    generic_layout: bool,
    /// Flows of dropped groups and containers, retired at the next switch.
    retired: Arc<Retirements>,
    /// Node-shared memory for containers created afterwards (S3).
    shared: SharedOpt,
    /// Pairs moving fewer bytes in a switch keep the message path.
    share_min: usize,
}

/// The optional shared memory of an instance (printed as whether it is set).
#[derive(Clone, Default)]
struct SharedOpt(Option<Arc<dyn SharedMemory>>);

impl std::fmt::Debug for SharedOpt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "shared" } else { "heap" })
    }
}

impl Instance {
    /// The data layer of world rank `rank` in a job of `size` ranks, with the contiguous
    /// pack/unpack paths ([`Instance::set_generic_layout`] forces the element-wise ones; the
    /// facade does so for `FERRY_LAYOUT_GENERIC`).
    pub fn new(rank: usize, size: usize) -> Result<Instance> {
        if rank >= size {
            return Err(Error::invalid(
                "data init",
                format!("rank {rank} outside a job of {size}"),
            ));
        }
        Ok(Instance {
            rank,
            world: Group::world(size),
            next_data: 0,
            next_generation: DATA_GENERATION_BASE,
            generic_layout: false,
            retired: Arc::default(),
            shared: SharedOpt::default(),
            share_min: action::SHARE_MIN_BYTES,
        })
    }

    /// The data layer for the rank and size of a transport.
    pub fn for_transport(t: &dyn ferry_core::Transport) -> Result<Instance> {
        Instance::new(t.rank(), t.size())
    }

    /// This rank's world rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The world group.
    pub fn world(&self) -> &Group {
        &self.world
    }

    /// Whether the generic (element-wise) layout paths are forced.
    pub fn generic_layout(&self) -> bool {
        self.generic_layout
    }

    /// Forces (or not) the generic layout paths for containers created afterwards.
    pub fn set_generic_layout(&mut self, on: bool) {
        self.generic_layout = on;
    }

    /// Keeps containers created afterwards in `mem`, node-shared memory of the transport
    /// ([`ferry_core::Transport::shared_memory`]; the facade passes it when
    /// `data.shared_containers` is on), or on the heap with `None`. Every rank of the job must
    /// make the same choice: a switch between two ranks of one node follows the sharing
    /// protocol exactly when their containers were created with shared memory.
    pub fn set_shared_memory(&mut self, mem: Option<Arc<dyn SharedMemory>>) {
        self.shared = SharedOpt(mem);
    }

    /// Pairs of ranks that move fewer than `bytes` in a switch of a container created
    /// afterwards keep the message path even when the container is shared (default
    /// [`action::SHARE_MIN_BYTES`]; 0 shares every pair). Every rank must set the same value.
    pub fn set_share_min_bytes(&mut self, bytes: usize) {
        self.share_min = bytes;
    }

    /// See [`Instance::set_share_min_bytes`].
    pub fn share_min_bytes(&self) -> usize {
        self.share_min
    }

    /// Whether containers created now use node-shared memory.
    pub fn shares_memory(&self) -> bool {
        self.shared.0.is_some()
    }

    pub(crate) fn shared_memory(&self) -> Option<Arc<dyn SharedMemory>> {
        self.shared.0.clone()
    }

    /// The ticket retiring the sharing protocol's flows of container `id`.
    pub(crate) fn share_ticket(&self, id: u32) -> RetireOnDrop {
        RetireOnDrop::new(
            &self.retired,
            RetiredFlows::Tag {
                kind: action::SHARE_KIND,
                tag: id,
            },
        )
    }

    /// The creation number of a new container and the ticket that retires its flows when
    /// the container is dropped.
    pub(crate) fn next_data_id(&mut self) -> (u32, RetireOnDrop) {
        let id = self.next_data;
        self.next_data = self.next_data.wrapping_add(1);
        let flows = RetiredFlows::Tag {
            kind: MsgKind::DATA,
            tag: id,
        };
        (id, RetireOnDrop::new(&self.retired, flows))
    }

    /// Tells `t` to forget the flows of groups and containers dropped so far (switches and
    /// [`Instance::finalize`] do it too; see the `retire` module).
    pub fn retire_pending(&self, t: &mut dyn ferry_core::Transport) {
        self.retired.apply(t);
    }

    /// Ends this rank's data-layer work: waits until every rank of the world got here, so no
    /// peer can still be pulling data this rank sent in its last switches when it shuts down
    /// (with bounded inboxes a receiver may fetch a large message from the sender's outbox
    /// late, 000 §4.4). Call it once, by every rank, before `World::finish`.
    pub fn finalize(&self, t: &mut dyn ferry_core::Transport) -> Result<()> {
        self.retire_pending(t);
        ferry_coll::barrier(t, &self.world)
            .map_err(|e| e.context("data finalize").or_rank(self.rank))
    }

    /// [`Instance::finalize`] over `group` instead of the initial world: after a resize point
    /// (D7) only the current members meet; removed processes skip it (their transport's
    /// `finish` still delivers what they owe).
    pub fn finalize_in(&self, t: &mut dyn ferry_core::Transport, group: &Group) -> Result<()> {
        self.retire_pending(t);
        ferry_coll::barrier(t, group).map_err(|e| e.context("data finalize").or_rank(self.rank))
    }

    /// Takes `group`, which the program built itself (`Group::new` with a generation of its
    /// own choosing), into the instance's bookkeeping: when its last copy is dropped, the
    /// flows of its generation (its collectives and every point-to-point message keyed with
    /// it) are retired at the next switch, [`Instance::retire_pending`] or
    /// [`Instance::finalize`], like those of the groups [`Instance::shrink`] hands out. The
    /// caller promises what `Transport::retire_flows` asks: once the group is gone, this rank
    /// sends and receives nothing more with its generation.
    pub fn adopt(&self, group: Group) -> Group {
        let ticket = RetireOnDrop::new(&self.retired, RetiredFlows::Generation(group.generation()));
        group.with_token(Arc::new(ticket))
    }

    /// A group of `parent` without the members at group indexes `removed` (D2, examples.md
    /// §0.3): the others keep their order and are renumbered densely. Each call hands out a
    /// fresh generation, identical on every rank that makes the same calls. When the last copy
    /// of the group is dropped, its generation's flows are retired in the transport.
    pub fn shrink(&mut self, parent: &Group, removed: &[usize]) -> Result<Group> {
        if let Some(&bad) = removed.iter().find(|&&i| i >= parent.size()) {
            return Err(Error::invalid(
                "shrink",
                format!("group index {bad} outside a group of {}", parent.size()),
            )
            .on_rank(self.rank));
        }
        let members: Vec<usize> = (0..parent.size())
            .filter(|i| !removed.contains(i))
            .map(|i| parent.member(i))
            .collect();
        let g = self.next_generation;
        self.next_generation = self
            .next_generation
            .wrapping_add(1)
            .max(DATA_GENERATION_BASE);
        let ticket = RetireOnDrop::new(&self.retired, RetiredFlows::Generation(g));
        Group::new(members, g)
            .map(|group| group.with_token(Arc::new(ticket)))
            .map_err(|e| e.context("shrink").or_rank(self.rank))
    }
}

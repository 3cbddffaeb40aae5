//! The table of a process's fault-tolerant communicators.
//!
//! Each communicator has an id (`0..COMM_IDS`, the world communicator 0) that every member
//! uses for it, chosen when it is made (see `crate::create`), and a range of
//! `GENERATIONS_PER_COMM` message generations of its own: generation `g` of communicator `id`
//! sends its program messages with message generation [`message_generation`]`(id, g)`, so two
//! communicators never match each other's messages. An id is free again once every handle of
//! its communicator is dropped; the next communicator with that id starts at a generation no
//! member has used with the id (`Engine::next_gen`), so it never matches a message of the
//! earlier one either. The table is bounded by `COMM_IDS`, plus `KEPT_RETIRED` freed
//! communicators that keep answering their peers for a while.

use std::collections::{BTreeSet, VecDeque};

use ferry_core::RetiredFlows;
use ferry_proto::ft::{Agreement, Flood};

use super::{Engine, FT_GENERATION_BASE, KEPT_FLOODS};

/// Identifier of a communicator in the table, the same at every member.
pub(crate) type CommId = u32;

/// Communicator ids a process can have in use at once.
pub(crate) const COMM_IDS: u32 = 128;
/// Message generations reserved for each communicator id: the fault-tolerance range
/// (2^19 generations from [`FT_GENERATION_BASE`]) shared out among the ids.
const GENERATIONS_PER_COMM: u32 = (1 << 19) / COMM_IDS;
/// Highest generation a communicator id can reach over the life of the process (recoveries,
/// and communicators that reuse the id, each take one); the last message generation of the
/// last id stays below the data layer's range.
pub(crate) const MAX_GENERATIONS: u32 = GENERATIONS_PER_COMM - 2;

/// Freed communicators kept answering their peers.
const KEPT_RETIRED: usize = 4;

/// Message generation of generation `g` of communicator `id` (the control traffic of every
/// communicator uses [`FT_GENERATION_BASE`] itself).
pub(crate) fn message_generation(id: CommId, g: u32) -> u32 {
    FT_GENERATION_BASE + 1 + id * GENERATIONS_PER_COMM + g
}

/// One communicator's fault-tolerance state.
pub(crate) struct CommState {
    pub id: CommId,
    /// Generation it was made with (ids are reused: see the module doc).
    pub base: u32,
    /// Current generation, and its live members (sorted world ranks).
    pub generation: u32,
    /// Lowest generation whose message flows may still be in the transport: the ones below
    /// were retired when the communicator left them.
    pub unretired: u32,
    pub live: Vec<usize>,
    /// Revoked generations (the current one and later ones a peer revoked first).
    pub revoked: BTreeSet<u32>,
    pub floods: VecDeque<(u32, Flood)>,
    pub agreements: VecDeque<Agreement>,
    /// Next agreement number within the current generation.
    pub agree_seq: u64,
    /// Failed ranks whose notice was flooded on, or delivered by, this communicator.
    pub notified: BTreeSet<usize>,
    /// Communicator handles of the program that refer to it (generations included).
    pub handles: usize,
}

impl CommState {
    /// The flood of generation `g`, if still kept.
    pub fn flood(&mut self, g: u32) -> Option<&mut Flood> {
        self.floods
            .iter_mut()
            .find(|(fg, _)| *fg == g)
            .map(|(_, f)| f)
    }

    /// Whether `rank` is a live member of the current generation.
    pub fn has(&self, rank: usize) -> bool {
        self.live.binary_search(&rank).is_ok()
    }

    /// Instance number of the next agreement.
    pub fn next_instance(&self) -> u64 {
        ((self.generation as u64) << 32) | self.agree_seq
    }
}

impl Engine {
    /// Enters communicator `id` into the table at generation `g0` with members `live`
    /// (sorted world ranks), with one handle.
    pub fn register(&mut self, id: CommId, g0: u32, live: Vec<usize>) {
        self.comms.insert(
            id,
            CommState {
                id,
                base: g0,
                generation: g0,
                unretired: g0,
                live: Vec::new(),
                revoked: BTreeSet::new(),
                floods: VecDeque::new(),
                agreements: VecDeque::new(),
                agree_seq: 0,
                notified: BTreeSet::new(),
                handles: 1,
            },
        );
        // A freed predecessor with this id answers no more: its generations are over.
        self.retired.retain(|c| c.id != id);
        self.enter_generation(id, g0, live);
    }

    /// Moves communicator `id` to `generation` with live members `live` (sorted world
    /// ranks): a new flood, standing receives from its members, and the early messages for
    /// it replayed.
    pub fn enter_generation(&mut self, id: CommId, generation: u32, live: Vec<usize>) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        // Every member left the earlier generations together (an agreement or a rebuild
        // record moved them here) and no handle of them operates any more (`check_current`):
        // their flows are unreachable, and a program that recovers again and again would
        // otherwise keep the flows of every generation it went through.
        let left = c.unretired..generation;
        c.unretired = c.unretired.max(generation);
        c.generation = generation;
        c.agree_seq = 0;
        c.revoked.retain(|&g| g >= generation);
        let members: Vec<u32> = live.iter().map(|&r| r as u32).collect();
        let mut flood = Flood::new(self.me as u32, &members);
        for &f in &self.failed {
            flood.on_failure(f as u32);
        }
        c.floods.push_back((generation, flood));
        while c.floods.len() > KEPT_FLOODS {
            c.floods.pop_front();
        }
        c.live = live;
        if !self.finished {
            for g in left {
                self.t
                    .retire_flows(RetiredFlows::Generation(message_generation(id, g)));
            }
        }
        if let Some(n) = self.next_gen.get_mut(id as usize) {
            *n = (*n).max(generation + 1);
        }
        if !self.plain {
            let c = &self.comms[&id];
            for &p in &c.live {
                if p != self.me && !self.failed.contains(&p) && !self.left.contains(&p) {
                    self.watch.entry(p).or_default();
                }
            }
        }
        self.replay_early();
        self.pump();
    }

    /// The state of communicator `id`, if in use.
    pub fn comm(&self, id: CommId) -> Option<&CommState> {
        self.comms.get(&id)
    }

    /// Whether generation `g` of communicator `id` is revoked.
    pub fn is_revoked(&self, id: CommId, g: u32) -> bool {
        self.comms.get(&id).is_some_and(|c| c.revoked.contains(&g))
    }

    /// One more program handle refers to communicator `id`.
    pub fn retain(&mut self, id: CommId) {
        if let Some(c) = self.comms.get_mut(&id) {
            c.handles += 1;
        }
    }

    /// A program handle of communicator `id` is gone; with the last one the id is free and
    /// the flows of its message generations are retired in the transport.
    pub fn release(&mut self, id: CommId) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        c.handles = c.handles.saturating_sub(1);
        if c.handles > 0 {
            return;
        }
        let Some(c) = self.comms.remove(&id) else {
            return;
        };
        tracing::debug!(
            "rank {}: communicator {id} freed at generation {}",
            self.me,
            c.generation
        );
        if let Some(n) = self.next_gen.get_mut(id as usize) {
            *n = (*n).max(c.generation + 1);
        }
        self.delegated.retain(|d| d.1 != id);
        if !self.finished {
            for g in c.unretired..=c.generation {
                self.t
                    .retire_flows(RetiredFlows::Generation(message_generation(id, g)));
            }
        }
        self.retired.push_back(c);
        while self.retired.len() > KEPT_RETIRED {
            self.retired.pop_front();
        }
    }

    /// This rank's contribution to choosing the id of a new communicator: per id, the first
    /// generation it could start at here, or `u32::MAX` when the id is in use.
    pub fn id_entries(&self) -> Vec<u32> {
        (0..COMM_IDS)
            .map(|id| {
                if self.comms.contains_key(&id) {
                    u32::MAX
                } else {
                    self.next_gen.get(id as usize).copied().unwrap_or(u32::MAX)
                }
            })
            .collect()
    }

    /// Number of communicators in use, and freed ones still answering.
    pub fn table_size(&self) -> (usize, usize) {
        (self.comms.len(), self.retired.len())
    }

    /// Where a control message for generation `g` of communicator `id` goes: the communicator
    /// in use, a freed one still answering, later (`None`, keep it), or nowhere (stale).
    pub(super) fn route(&self, id: CommId, g: u32) -> Route {
        if let Some(c) = self.comms.get(&id) {
            return if g < c.base {
                self.retired_route(id, g)
            } else if g > c.generation {
                Route::Early
            } else {
                Route::Active
            };
        }
        match self.next_gen.get(id as usize) {
            // Not made here yet (a faster member already uses it).
            Some(&n) if g >= n => Route::Early,
            Some(_) => self.retired_route(id, g),
            None => Route::Stale,
        }
    }

    fn retired_route(&self, id: CommId, g: u32) -> Route {
        match self
            .retired
            .iter()
            .position(|c| c.id == id && c.base <= g && g <= c.generation)
        {
            Some(i) => Route::Retired(i),
            None => Route::Stale,
        }
    }

    /// Hands every kept early message to its protocol again (after a communicator, a
    /// generation or an agreement started).
    pub(super) fn replay_early(&mut self) {
        let early = std::mem::take(&mut self.early);
        for (from, msg) in early {
            self.on_control(from, msg);
        }
    }
}

/// See [`Engine::route`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    Active,
    Retired(usize),
    Early,
    Stale,
}

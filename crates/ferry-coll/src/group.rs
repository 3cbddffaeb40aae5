//! Groups: the ordered set of world ranks a collective runs on (M4, X3).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ferry_core::{Error, Result};

use crate::topo::Topology;

/// An ordered list of world ranks plus a generation number.
///
/// Collectives address members by *group index* (0 to `size()-1`); the member at index `i` is
/// world rank `member(i)`. The generation goes into [`ferry_core::MsgKey::generation`] of every
/// message (with [`ferry_core::MsgKind::COLLECTIVE`]), so collectives of two groups never match
/// each other; a per-group sequence number goes into the tag, so consecutive collectives of one
/// group never match each other either (M2, 000 §4.5.4).
///
/// Every member must call the same collectives on its own copy of the group in the same order:
/// the sequence number advances locally, one step per collective call.
#[derive(Debug)]
pub struct Group {
    members: Vec<usize>,
    generation: u32,
    seq: AtomicU32,
    token: Option<Token>,
    topology: Option<Arc<Topology>>,
}

/// Something kept alive as long as any copy of a group (see [`Group::with_token`]).
#[derive(Clone)]
struct Token {
    /// Never read: holding it is the point.
    _alive: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token")
    }
}

impl Clone for Group {
    /// A copy continues from the same sequence number; use either copy, not both, for the
    /// following collectives (both would reuse sequence numbers).
    fn clone(&self) -> Group {
        Group {
            members: self.members.clone(),
            generation: self.generation,
            seq: AtomicU32::new(self.seq.load(Ordering::Relaxed)),
            token: self.token.clone(),
            topology: self.topology.clone(),
        }
    }
}

impl PartialEq for Group {
    /// Two groups are equal when they have the same members in the same order and the same
    /// generation (the sequence position is not compared).
    fn eq(&self, other: &Group) -> bool {
        self.members == other.members && self.generation == other.generation
    }
}

impl Eq for Group {}

impl Group {
    /// The whole job: ranks 0 to `size-1` in order, generation 0.
    pub fn world(size: usize) -> Group {
        Group {
            members: (0..size).collect(),
            generation: 0,
            seq: AtomicU32::new(0),
            token: None,
            topology: None,
        }
    }

    /// A group of the given world ranks, in the given order (group index `i` is
    /// `members[i]`). Fails on an empty list or a rank listed twice. The generation must differ
    /// from that of every other group used at the same time (the caller's contract; the data
    /// layer and resize logic hand out fresh generations).
    pub fn new(members: Vec<usize>, generation: u32) -> Result<Group> {
        if members.is_empty() {
            return Err(Error::invalid("group", "a group needs at least one member"));
        }
        let mut sorted = members.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid(
                "group",
                format!("world rank {} is listed twice", w[0]),
            ));
        }
        Ok(Group {
            members,
            generation,
            seq: AtomicU32::new(0),
            token: None,
            topology: None,
        })
    }

    /// Keeps `token` alive until this group and every copy of it are dropped: the data layer
    /// attaches one whose drop retires the group's generation in the transport (bounded flow
    /// tables).
    pub fn with_token(mut self, token: Arc<dyn Send + Sync>) -> Group {
        self.token = Some(Token { _alive: token });
        self
    }

    /// Attaches a virtual topology (X6): the neighbour collectives ([`crate::neighbor_allgather`],
    /// [`crate::neighbor_alltoall`]) follow its edges, and on a Cartesian grid the automatic
    /// algorithm choice keeps every collective on the chain of group order (X7, see
    /// [`crate::Algorithm::Chain`]). Fails when the topology does not fit the group (a grid of
    /// another size, a graph edge to a non-member).
    pub fn with_topology(mut self, topology: Topology) -> Result<Group> {
        topology.check(self.members.len())?;
        self.topology = Some(Arc::new(topology));
        Ok(self)
    }

    /// The topology attached with [`Group::with_topology`], if any.
    pub fn topology(&self) -> Option<&Topology> {
        self.topology.as_deref()
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// World rank of the member at group index `i`. Panics if `i >= size()`, like slice
    /// indexing; use [`Group::members`] to iterate.
    pub fn member(&self, i: usize) -> usize {
        self.members[i]
    }

    /// All members' world ranks in group order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// Group index of `world_rank`, if it is a member.
    pub fn index_of(&self, world_rank: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == world_rank)
    }

    /// Group index of this process (world rank `rank`), or an error naming the rank if it is not
    /// a member (calling a collective of a group one does not belong to is a program error).
    pub fn my_index(&self, rank: usize) -> Result<usize> {
        self.index_of(rank).ok_or_else(|| {
            Error::invalid(
                "group",
                format!("rank {rank} is not a member of group {:?}", self.members),
            )
            .on_rank(rank)
        })
    }

    /// The generation number carried by every message of this group's collectives.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Number of collectives started on this copy of the group so far.
    pub fn sequence(&self) -> u32 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Continues the collectives of this copy of the group at `seq` (a process restarted
    /// from a checkpoint taken after `seq` collectives, see `ferry::retain`).
    pub fn resume_sequence(&self, seq: u32) {
        self.seq.store(seq, Ordering::Relaxed);
    }

    /// Takes the sequence number of the next collective.
    pub(crate) fn next_seq(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_indices() {
        let g = Group::new(vec![5, 2, 7], 3).unwrap();
        assert_eq!(g.size(), 3);
        assert_eq!(g.member(1), 2);
        assert_eq!(g.index_of(7), Some(2));
        assert_eq!(g.index_of(4), None);
        assert_eq!(g.my_index(5).unwrap(), 0);
        assert!(g.my_index(4).is_err());
        assert_eq!(g.generation(), 3);
        assert_eq!(Group::world(4).members(), &[0, 1, 2, 3]);
    }

    #[test]
    fn rejects_empty_and_duplicates() {
        assert!(Group::new(vec![], 1).is_err());
        let e = Group::new(vec![1, 2, 1], 1).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
    }

    #[test]
    fn the_token_lives_as_long_as_the_last_copy() {
        let token: Arc<dyn Send + Sync> = Arc::new(());
        let weak = Arc::downgrade(&token);
        let g = Group::new(vec![0, 1], 9).unwrap().with_token(token);
        let h = g.clone();
        drop(g);
        assert!(weak.upgrade().is_some());
        drop(h);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn sequence_advances_and_clones_continue() {
        let g = Group::world(2);
        assert_eq!(g.next_seq(), 0);
        assert_eq!(g.next_seq(), 1);
        let h = g.clone();
        assert_eq!(h.next_seq(), 2);
        assert_eq!(g, h);
    }
}

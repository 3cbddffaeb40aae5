//! The protocol core of fault tolerance (F4): agreement and reliable broadcast among the members
//! of a communicator, as state machines without sockets, clocks or threads.
//!
//! A runtime drives each object with what it observes (a message arrived from a rank, a rank is
//! known dead) and sends what [`Agreement::poll_transmit`] / [`Flood::poll_transmit`] return.
//! Ranks are world ranks (`u32`); member lists are sorted ascending (the constructors sort and
//! deduplicate what they are given).
//!
//! # Failure model
//! Ranks crash and stay dead. Messages between live ranks arrive, in any order, after any delay;
//! messages to a dead rank are lost; messages a rank sent before it died may or may not arrive.
//! Failure notices ([`Agreement::on_failure`], [`Flood::on_failure`]) are accurate (a live rank is
//! never reported dead) and eventually complete (every survivor is eventually told of every death
//! among the members). Nothing here waits on time: termination follows from those notices.
//!
//! # Agreement
//! [`Agreement`] is one instance of a fault-tolerant consensus: every surviving member decides the
//! same [`Decision`] (a value, the bitwise AND of the contributions of the ranks that took part,
//! and the agreed set of failed members), even when members die during it, the root and rank 0
//! included, as long as one member survives.
//!
//! The design follows the idea of ULFM's early-returning agreement (a tree over the live members,
//! rebuilt around failures) with its own, simpler consistency rule:
//! - Each rank has a *view*: the set of members it knows dead. Views only grow. Every message
//!   carries its sender's view; a receiver first merges it (deaths are facts), then acts on the
//!   message only if its own view is now exactly the message's view. Older messages are dropped:
//!   their sender redoes its part when it learns the newer view.
//! - A view defines a binomial tree over the live members in member order, rooted at the smallest
//!   live member (so the root moves when it dies). A rank reports the AND of its own and its
//!   subtree's contributions to its parent once all its children have reported in that view. The
//!   root decides `(AND of all, failed = view)` once its children have reported: every live member
//!   of the view then took part. The decision travels down the same tree.
//! - A rank that already decided answers in every later view with its decision instead of a
//!   contribution (up to its parent and down to its children), so a new root adopts a decision
//!   some survivor holds instead of making a new one. It keeps answering until the runtime drops
//!   the instance.
//! - Why two survivors cannot decide differently: a root creates a decision in view W only after
//!   every member outside W reported in W without a decision. A survivor that holds an older
//!   decision would have reported it there, unless it accepted it after reporting in W; but a rank
//!   accepts a decision only from a message of its current view, and the decision's holders in
//!   views that contain W all trace back, through messages of their views, to a rank that held it
//!   before reporting in W. So a decision created in a smaller view is held only by ranks that are
//!   dead in the larger one.
//! - Cost: without failures 2(N-1) messages and 2⌈log2 N⌉ message delays (up and down the tree);
//!   each view change redoes at most one report, one query per child and one decision per edge at
//!   each rank, so f failures cost O((f+1)N) messages. No rank talks to more than its tree
//!   neighbours in any view: no all-to-all, no fixed coordinator.
//!
//! Like `MPIX_Comm_agree`, the guarantee is for the survivors: a rank that decided and then died
//! before its decision reached anyone else may have held a decision the survivors did not adopt.
//! A rank should therefore send what [`Agreement::poll_transmit`] returns after deciding before it
//! exits.
//!
//! The decision's `failed` set contains every rank any survivor was told was dead when it created
//! its instance, and only dead ranks; every member outside it contributed to `value`.
//!
//! # What the runtime must do
//! - Give every agreement call on a communicator an instance number that all members use for
//!   that call (a per-communicator counter), and create the instance with the members, this
//!   rank's contribution and the members it knows dead.
//! - Never drop a message between live ranks. A message for an instance this rank has not
//!   created yet ([`peek_instance`] tells which) is kept and handed to it once created: peers do
//!   not send twice, so a dropped report can stall the agreement.
//! - Tell every instance it keeps (and the [`Flood`]) of every member's death.
//! - Keep a decided instance running (feeding it messages and deaths, sending what it returns)
//!   until the next agreement among the survivors has decided: a survivor that contributed to
//!   that one had decided this one, so nobody can still need an answer. Dropping it earlier may
//!   leave a survivor waiting for a rank that no longer answers.
//! - Use one [`Flood`] per communicator generation: serial numbers restart with each object, so
//!   a replacement process must not reuse its predecessor's.
//!
//! # Shrink
//! A shrink needs nothing but the [`Decision`]: every survivor builds the new communicator from
//! the old members minus `failed`, in the old order, with generation + 1. A member that died after
//! contributing is still in that list; the new communicator detects it like any later failure.
//!
//! # Flood
//! [`Flood`] is a reliable broadcast (revoke, failure notices) over a log-degree overlay: each rank
//! forwards a broadcast the first time it sees it to the live members at distances 1, 2, 4, ... after
//! it in member order, and re-forwards to the replacement of a neighbour that dies. Every live
//! member delivers each broadcast exactly once if any live member has it; N⌈log2 N⌉ messages.
//!
//! # Wire format
//! Little endian. Agreement: `0xFA, version 1, kind (1 query, 2 report, 3 decide), instance u64,
//! view (count u32, ranks u32 ascending)`, then for a report `value u64`, for a decision
//! `value u64, failed (count u32, ranks u32 ascending)`. Flood: `0xFB, version 1, kind 1,
//! origin u32, serial u64, length u32, payload`. The decoders reject anything else with an error
//! (fuzzed by `fuzz/fuzz_targets/ft_decode.rs`).

mod agree;
mod flood;
mod tree;
mod wire;

use std::collections::BTreeSet;

pub use agree::{AgreeMutations, Agreement};
pub use flood::{Flood, FloodMutations};
pub use wire::{peek_instance, FtDecodeError};

/// The outcome of an agreement, the same at every survivor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Bitwise AND of the contributions of every member not in `failed`.
    pub value: u64,
    /// The agreed set of failed members: a superset of what any survivor knew dead when it
    /// created its instance; only ranks that really died.
    pub failed: BTreeSet<u32>,
}

impl Decision {
    /// The members of the communicator a shrink builds from this decision: `members` without
    /// `failed`, sorted ascending (the old order), without repeats.
    pub fn survivors(&self, members: &[u32]) -> Vec<u32> {
        let mut out: Vec<u32> = members
            .iter()
            .copied()
            .filter(|r| !self.failed.contains(r))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survivors_keep_the_old_order_without_the_failed() {
        let d = Decision {
            value: 1,
            failed: [0, 7].into(),
        };
        assert_eq!(d.survivors(&[9, 0, 3, 7, 5]), vec![3, 5, 9]);
    }
}

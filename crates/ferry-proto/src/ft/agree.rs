//! One agreement instance: views, the tree of the current view, reports up, the decision down.
//! The protocol and why it is safe are in the module documentation of [`super`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use super::tree::Live;
use super::wire::{decode_agree, encode_agree, AgreeBody, FtDecodeError};
use super::Decision;

/// Test-only protocol faults, to show that the simulation catches a broken agreement.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgreeMutations {
    /// Report to the parent at once, without waiting for the children.
    pub report_before_children: bool,
    /// Accept a decision from a message of any view, not only of the current one.
    pub accept_stale_decisions: bool,
    /// Once decided, stay silent in later views instead of answering with the decision.
    pub decided_silent: bool,
}

/// One instance of a fault-tolerant consensus among `members` (see the module documentation).
pub struct Agreement {
    me: u32,
    /// Sorted, distinct; shared so that many instances (or a simulation of many ranks) do not
    /// each hold a copy.
    members: Arc<[u32]>,
    instance: u64,
    value: u64,
    /// Members known dead (never `me`). Only grows.
    view: BTreeSet<u32>,
    /// Whether `me` is a member; an instance created by a non-member never sends or decides.
    member: bool,
    /// Tree of the current view.
    parent: Option<u32>,
    children: Vec<u32>,
    /// Reports of children in the current view.
    reports: BTreeMap<u32, u64>,
    /// Sent this view's report (or, as root, created the decision).
    reported: bool,
    decision: Option<Decision>,
    out: VecDeque<(u32, Vec<u8>)>,
    /// Test-only faults.
    #[doc(hidden)]
    pub mutations: AgreeMutations,
}

impl Agreement {
    /// Starts instance `instance` at `me` with contribution `value`. `members` need not be
    /// sorted; `known_failed` may name non-members (ignored). If `me` is not a member the
    /// instance stays silent and never decides.
    pub fn new(
        me: u32,
        members: &[u32],
        instance: u64,
        value: u64,
        known_failed: &BTreeSet<u32>,
    ) -> Agreement {
        Self::with_mutations(
            me,
            sorted(members),
            instance,
            value,
            known_failed,
            AgreeMutations::default(),
        )
    }

    /// [`Agreement::new`] with the member list shared (it is sorted and deduplicated first if
    /// it is not already).
    pub fn new_shared(
        me: u32,
        members: Arc<[u32]>,
        instance: u64,
        value: u64,
        known_failed: &BTreeSet<u32>,
    ) -> Agreement {
        Self::with_mutations(
            me,
            members,
            instance,
            value,
            known_failed,
            AgreeMutations::default(),
        )
    }

    /// [`Agreement::new`] with test-only faults switched on.
    #[doc(hidden)]
    pub fn with_mutations(
        me: u32,
        members: Arc<[u32]>,
        instance: u64,
        value: u64,
        known_failed: &BTreeSet<u32>,
        mutations: AgreeMutations,
    ) -> Agreement {
        let members = if members.windows(2).all(|w| w[0] < w[1]) {
            members
        } else {
            sorted(&members)
        };
        let member = members.binary_search(&me).is_ok();
        let view = known_failed
            .iter()
            .copied()
            .filter(|r| *r != me && members.binary_search(r).is_ok())
            .collect();
        let mut a = Agreement {
            me,
            members,
            instance,
            value,
            view,
            member,
            parent: None,
            children: Vec::new(),
            reports: BTreeMap::new(),
            reported: false,
            decision: None,
            out: VecDeque::new(),
            mutations,
        };
        if a.member {
            a.enter_view(false, None);
        }
        a
    }

    /// This instance's number.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The decision, once this rank has decided; it never changes afterwards.
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// Members this rank knows dead (its current view).
    pub fn known_failed(&self) -> &BTreeSet<u32> {
        &self.view
    }

    /// The next message to send: (destination world rank, bytes).
    pub fn poll_transmit(&mut self) -> Option<(u32, Vec<u8>)> {
        self.out.pop_front()
    }

    /// The runtime learned that `rank` is dead. Non-members and repeats are ignored.
    pub fn on_failure(&mut self, rank: u32) {
        if self.member
            && rank != self.me
            && self.members.binary_search(&rank).is_ok()
            && self.view.insert(rank)
        {
            self.enter_view(true, None);
        }
    }

    /// Handles a message `from` a peer. Errors leave the state unchanged, except that deaths the
    /// message reports are still learned when only its body is at fault.
    pub fn on_message(&mut self, from: u32, bytes: &[u8]) -> Result<(), FtDecodeError> {
        let msg = decode_agree(bytes)?;
        if msg.instance != self.instance {
            return Err(FtDecodeError::WrongInstance {
                expected: self.instance,
                got: msg.instance,
            });
        }
        if !self.member {
            return Err(FtDecodeError::NotAMember {
                from,
                rank: self.me,
            });
        }
        if from == self.me {
            return Err(FtDecodeError::Unexpected {
                from,
                why: "a message from this rank to itself",
            });
        }
        for &r in msg.view.iter().chain([from].iter()) {
            if self.members.binary_search(&r).is_err() {
                return Err(FtDecodeError::NotAMember { from, rank: r });
            }
        }
        if msg.view.contains(&from) {
            return Err(FtDecodeError::Unexpected {
                from,
                why: "the sender counts itself dead",
            });
        }
        if msg.view.contains(&self.me) {
            // Only a corrupt peer can believe this live rank dead (notices are accurate).
            return Err(FtDecodeError::Unexpected {
                from,
                why: "the sender counts the receiver dead",
            });
        }
        if let AgreeBody::Decide(d) = &msg.body {
            if !d.failed.iter().all(|r| msg.view.binary_search(r).is_ok()) {
                return Err(FtDecodeError::Unexpected {
                    from,
                    why: "a decision naming failures its sender does not know",
                });
            }
        }
        let mut grew = false;
        for &r in &msg.view {
            grew |= self.view.insert(r);
        }
        if grew {
            self.enter_view(true, Some(from));
        }
        let current = msg.view.len() == self.view.len();
        if !current {
            // Sent in an older view: the sender redoes its part once it learns this one.
            if self.mutations.accept_stale_decisions {
                if let AgreeBody::Decide(d) = msg.body {
                    if self.decision.is_none() {
                        self.accept(d, Some(from));
                    }
                }
            }
            return Ok(());
        }
        let from_parent = self.parent == Some(from);
        let from_child = self.children.contains(&from);
        match msg.body {
            AgreeBody::Query if from_parent => Ok(()),
            AgreeBody::Query => Err(FtDecodeError::Unexpected {
                from,
                why: "a query from a rank that is not this rank's parent",
            }),
            AgreeBody::Report(v) if from_child => {
                if self.decision.is_none() && !self.reports.contains_key(&from) {
                    self.reports.insert(from, v);
                    self.progress();
                }
                Ok(())
            }
            AgreeBody::Report(_) => Err(FtDecodeError::Unexpected {
                from,
                why: "a report from a rank that is not this rank's child",
            }),
            AgreeBody::Decide(d) if from_parent || from_child => {
                if self.decision.is_none() {
                    self.accept(d, Some(from));
                }
                Ok(())
            }
            AgreeBody::Decide(_) => Err(FtDecodeError::Unexpected {
                from,
                why: "a decision from a rank that is not a tree neighbour",
            }),
        }
    }

    /// Rebuilds the tree for the (new) view and restarts this rank's part in it. `announce`
    /// sends queries to the new children (not on the first view: every member starts on its
    /// own), except to `skip`, which is already in this view.
    fn enter_view(&mut self, announce: bool, skip: Option<u32>) {
        let live = Live::new(&self.members, &self.view);
        let Some(pos) = live.position(self.me) else {
            return;
        };
        self.parent = live.parent(pos);
        self.children = live.children(pos);
        self.reports.clear();
        self.reported = false;
        if let Some(d) = self.decision.clone() {
            if self.mutations.decided_silent {
                return;
            }
            // A decided rank answers in every view with its decision, so that a new root adopts
            // it rather than creating another. `skip` is in this view but may not have decided.
            self.send_decision(&d, None);
            return;
        }
        if announce {
            for c in self.children.clone() {
                if Some(c) != skip {
                    self.send(c, &AgreeBody::Query);
                }
            }
        }
        self.progress();
    }

    /// Reports (or, at the root, decides) once every child has reported in this view.
    fn progress(&mut self) {
        if self.reported || self.decision.is_some() {
            return;
        }
        if !self.mutations.report_before_children && self.reports.len() < self.children.len() {
            return;
        }
        let value = self.reports.values().fold(self.value, |acc, v| acc & v);
        self.reported = true;
        match self.parent {
            Some(p) => self.send(p, &AgreeBody::Report(value)),
            None => {
                let d = Decision {
                    value,
                    failed: self.view.clone(),
                };
                self.accept(d, None);
            }
        }
    }

    fn accept(&mut self, d: Decision, from: Option<u32>) {
        self.send_decision(&d, from);
        self.decision = Some(d);
    }

    /// Sends `d` to the parent and the children of the current view, except `skip`.
    fn send_decision(&mut self, d: &Decision, skip: Option<u32>) {
        let body = AgreeBody::Decide(d.clone());
        let targets: Vec<u32> = self.parent.iter().chain(&self.children).copied().collect();
        for t in targets {
            if Some(t) != skip {
                self.send(t, &body);
            }
        }
    }

    fn send(&mut self, to: u32, body: &AgreeBody) {
        self.out
            .push_back((to, encode_agree(self.instance, &self.view, body)));
    }
}

/// `members` sorted and deduplicated, shared.
pub(crate) fn sorted(members: &[u32]) -> Arc<[u32]> {
    let mut m = members.to_vec();
    m.sort_unstable();
    m.dedup();
    m.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> BTreeSet<u32> {
        BTreeSet::new()
    }

    /// Delivers every message in order of sending (a fixed schedule) until nothing moves.
    fn run(ags: &mut [Agreement], dead: &BTreeSet<u32>) -> usize {
        let mut sent = 0;
        loop {
            let mut moved = false;
            for i in 0..ags.len() {
                let from = ags[i].me;
                if dead.contains(&from) {
                    continue;
                }
                while let Some((to, bytes)) = ags[i].poll_transmit() {
                    moved = true;
                    sent += 1;
                    if let Some(dst) = ags.iter_mut().find(|a| a.me == to) {
                        if !dead.contains(&to) {
                            dst.on_message(from, &bytes).unwrap();
                        }
                    }
                }
            }
            if !moved {
                return sent;
            }
        }
    }

    #[test]
    fn failure_free_agreement_ands_every_contribution_in_2n_minus_2_messages() {
        let members: Vec<u32> = (0..13).map(|r| r * 2).collect();
        let mut ags: Vec<Agreement> = members
            .iter()
            .map(|&r| Agreement::new(r, &members, 9, !(1u64 << r), &none()))
            .collect();
        let sent = run(&mut ags, &none());
        assert_eq!(sent, 2 * (members.len() - 1));
        let want: u64 = members.iter().fold(!0, |acc, r| acc & !(1u64 << r));
        for a in &ags {
            let d = a.decision().expect("decided");
            assert_eq!(d.value, want);
            assert!(d.failed.is_empty());
        }
    }

    #[test]
    fn the_root_dying_before_deciding_moves_the_root() {
        let members: Vec<u32> = (0..8).collect();
        let mut ags: Vec<Agreement> = members
            .iter()
            .map(|&r| Agreement::new(r, &members, 1, !(1u64 << r), &none()))
            .collect();
        let dead: BTreeSet<u32> = [0].into();
        run(&mut ags, &dead);
        assert!(ags.iter().all(|a| a.decision().is_none()));
        for a in ags.iter_mut().skip(1) {
            a.on_failure(0);
        }
        run(&mut ags, &dead);
        let want: u64 = (1..8).fold(!0, |acc, r| acc & !(1u64 << r));
        for a in ags.iter().skip(1) {
            let d = a.decision().expect("decided");
            assert_eq!((d.value, d.failed.clone()), (want, dead.clone()));
        }
    }

    /// A decided rank that learns of a death from a child's report answers that child with the
    /// decision: it ignores the report itself, so skipping the child would leave it waiting.
    #[test]
    fn a_decided_rank_answers_the_child_that_brought_a_new_view() {
        let members = [0, 1, 2, 3];
        let mut ags: Vec<Agreement> = members
            .iter()
            .map(|&r| Agreement::new(r, &members, 3, 1 << r, &none()))
            .collect();
        // Tree of view {}: 0 -> 1, 2 and 1 -> 3. Everything arrives except the decision 1 sends
        // to 3, then 2 dies and 3 hears of it first.
        let mut held = false;
        loop {
            let mut moved = false;
            for i in 0..4 {
                while let Some((to, bytes)) = ags[i].poll_transmit() {
                    moved = true;
                    if to == 3 && i == 1 {
                        held = true;
                        continue;
                    }
                    ags[to as usize].on_message(i as u32, &bytes).unwrap();
                }
            }
            if !moved {
                break;
            }
        }
        assert!(held && ags[3].decision().is_none());
        let decided = ags[0].decision().cloned().expect("decided");
        // In view {2} (live 0, 1, 3) rank 3 is a leaf under 0.
        ags[3].on_failure(2);
        let (to, report) = ags[3].poll_transmit().expect("a report");
        assert_eq!(to, 0);
        ags[0].on_message(3, &report).unwrap();
        let mut answered = false;
        while let Some((to, bytes)) = ags[0].poll_transmit() {
            if to == 3 {
                ags[3].on_message(0, &bytes).unwrap();
                answered = true;
            }
        }
        assert!(answered, "rank 0 did not answer rank 3");
        assert_eq!(ags[3].decision(), Some(&decided));
    }

    #[test]
    fn a_lone_member_decides_at_once_and_a_stranger_never() {
        let a = Agreement::new(4, &[4], 0, 5, &none());
        assert_eq!(a.decision().map(|d| d.value), Some(5));
        let b = Agreement::new(4, &[1, 2, 3], 0, 5, &none());
        assert!(b.decision().is_none());
        let c = Agreement::new(2, &[1, 2, 3], 0, 5, &[1, 3].into());
        assert_eq!(c.decision().map(|d| d.failed.len()), Some(2));
    }

    #[test]
    fn foreign_and_corrupt_messages_are_errors() {
        let members = [0, 1, 2, 3];
        let mut a = Agreement::new(0, &members, 7, 1, &none());
        let other = encode_agree(8, &none(), &AgreeBody::Report(1));
        assert_eq!(
            a.on_message(1, &other),
            Err(FtDecodeError::WrongInstance {
                expected: 7,
                got: 8
            })
        );
        let stranger = encode_agree(7, &none(), &AgreeBody::Report(1));
        assert!(matches!(
            a.on_message(9, &stranger),
            Err(FtDecodeError::NotAMember { rank: 9, .. })
        ));
        // Rank 3 is the child of 1 in the binomial tree, not of 0.
        assert!(matches!(
            a.on_message(3, &stranger),
            Err(FtDecodeError::Unexpected { from: 3, .. })
        ));
        let me_dead = encode_agree(7, &[0].into(), &AgreeBody::Query);
        assert!(a.on_message(1, &me_dead).is_err());
        assert!(a.decision().is_none());
    }
}

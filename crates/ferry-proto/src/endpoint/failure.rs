//! Failures (T5): the errors operations fail with (naming this rank, the operation, the peer
//! and the rank whose failure started it), marking a peer failed, and failing what waits for
//! a peer that is gone.

use super::{
    inbox, Action, ConnId, Endpoint, EndpointError, ErrorKind, OpRef, PeerStatus, RecvId, SendId,
};
use crate::matching::Arrival;

impl Endpoint {
    pub(crate) fn error(
        &self,
        kind: ErrorKind,
        op: &'static str,
        peer: usize,
        cause: String,
    ) -> EndpointError {
        EndpointError {
            kind,
            rank: self.cfg.rank,
            op,
            peer,
            origin: peer,
            cause,
            key: None,
        }
    }

    /// The error for an operation `op` with a peer that is gone, or `None` if it is alive.
    pub(crate) fn peer_gone(&self, op: &'static str, peer: usize) -> Option<EndpointError> {
        let (origin, cause) = match &self.peers.get(peer)?.status {
            PeerStatus::Alive => return None,
            PeerStatus::Finished {
                after_failure_of: Some(x),
            } => (*x, format!("rank {peer} ended after rank {x} failed")),
            PeerStatus::Finished {
                after_failure_of: None,
            } => (
                peer,
                format!("rank {peer} already finished (orderly shutdown)"),
            ),
            PeerStatus::Dead { cause } => (peer, format!("rank {peer} failed: {cause}")),
        };
        Some(EndpointError {
            origin,
            ..self.error(ErrorKind::PeerFailed, op, peer, cause)
        })
    }

    pub(crate) fn check_peer(&self, peer: usize, op: &'static str) -> Result<(), EndpointError> {
        if peer >= self.cfg.size {
            return Err(self.error(
                ErrorKind::Invalid,
                op,
                peer,
                format!("rank {peer} does not exist ({} ranks)", self.cfg.size),
            ));
        }
        Ok(())
    }

    /// Marks `peer` failed and fails every operation that waits for it.
    pub(crate) fn mark_dead(&mut self, peer: usize, cause: String) {
        if self.peers[peer].status == PeerStatus::Alive {
            self.peers[peer].status = PeerStatus::Dead { cause };
            self.first_failed.get_or_insert(peer);
            self.retain_peer_dead(peer);
            // Whatever else it still has in flight on other connections is not taken.
            let mut ids: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.peer == Some(peer))
                .map(|(&id, _)| id)
                .collect();
            ids.sort_unstable();
            for id in ids {
                self.forget(id);
                self.actions.push_back(Action::Drop(id));
            }
            self.fail_ops_with(peer);
        }
    }

    /// Fails the operations that wait for `peer`, which is gone (dead, or finished with
    /// nothing more to deliver).
    pub(crate) fn fail_ops_with(&mut self, peer: usize) {
        let Some(e) = self.peer_gone("send", peer) else {
            return;
        };
        // Sends: waiting for room or for a GET from the gone peer.
        let mut failed = Vec::new();
        self.waiting_sends.retain(|w| {
            let keep = w.peer != peer;
            if !keep {
                failed.push(w.op);
            }
            keep
        });
        // Held for an answer about their flow that will not come.
        failed.extend(self.drop_retiring_with(peer));
        let announced: Vec<SendId> = self
            .announced
            .iter()
            .filter(|(_, id)| id.0 == peer)
            .map(|(op, _)| *op)
            .collect();
        for op in announced {
            if let Some(id) = self.announced.remove(&op) {
                self.outbox.remove(&id);
            }
            failed.push(op);
        }
        // Messages the gone peer can no longer take leave the outbox (they would block its
        // room for live peers); finish reports them lost. A peer that said goodbye on one
        // connection may still answer on another, so its entries wait for that to close.
        let mut lost = 0;
        let still = self.may_still_deliver(peer);
        // TRYs written from the program's buffer and not yet answered: unless the peer may
        // still answer them, it never took them, and their sends fail like the announced ones.
        let eager: Vec<SendId> = self
            .eager_out
            .iter()
            .filter(|(_, id)| id.0 == peer && !still)
            .map(|(op, _)| *op)
            .collect();
        for op in eager {
            if let Some(id) = self.eager_out.remove(&op) {
                self.outbox.remove(&id);
                lost += 1;
            }
            failed.push(op);
        }
        let mut freed = 0;
        self.outbox.retain(|id, m| {
            let keep = id.0 != peer || still;
            if !keep {
                lost += 1;
                if m.data.is_some() {
                    freed += m.len;
                }
            }
            keep
        });
        self.outbox_bytes -= freed;
        if lost > 0 {
            *self.lost.entry(peer).or_insert(0) += lost;
        }
        failed.sort_unstable();
        for op in failed {
            self.actions
                .push_back(Action::Failed(OpRef::Send(op), e.clone()));
        }
        if still {
            return;
        }
        let e = EndpointError { op: "recv", ..e };
        let mut recvs: Vec<(Arrival, RecvId)> = self
            .posted
            .iter()
            .filter(|(a, p)| a.source == peer && p.state != inbox::RecvState::Receiving)
            .map(|(a, p)| (*a, p.op))
            .collect();
        recvs.sort_unstable_by_key(|r| r.1);
        for (a, op) in recvs {
            // A message of the gone peer that already arrived is still delivered.
            if self.inbox.contains(&a) || self.overflow.contains_key(&a) {
                continue;
            }
            let abandoned = self.posted.remove(&a).is_some_and(|p| p.abandoned);
            self.remote.remove(&a);
            if !abandoned {
                self.recv_ids.remove(&op);
                self.actions
                    .push_back(Action::Failed(OpRef::Recv(op), e.clone()));
            }
        }
    }
}

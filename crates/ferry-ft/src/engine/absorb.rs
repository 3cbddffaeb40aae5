//! What a transport error met during a combined exchange means, and when an operation is
//! interrupted.

use ferry_core::{Error, ErrorKind, Exchange, OpState, Result};

use super::{Engine, Interest};

impl Engine {
    /// The error an operation with `interest` gets now, if any: its communicator generation
    /// was revoked, or a rank it involves failed.
    pub fn interruption(&self, interest: &Interest) -> Option<Error> {
        if interest.revocable && self.is_revoked(interest.comm, interest.generation) {
            return Some(
                Error::new(ErrorKind::Revoked, interest.op)
                    .on_rank(self.me)
                    .with_detail(format!(
                        "communicator {} generation {} was revoked",
                        interest.comm, interest.generation
                    )),
            );
        }
        // Root causes first: a rank that ended the job because of another failure comes last.
        let mut dead: Vec<usize> = interest
            .ranks
            .iter()
            .copied()
            .filter(|r| self.failed.contains(r))
            .collect();
        dead.sort_by_key(|r| (self.aborted.contains(r), *r));
        let first = *dead.first()?;
        let detail = dead
            .iter()
            .map(|&r| self.how_known(r))
            .collect::<Vec<_>>()
            .join(", ");
        Some(
            Error::new(ErrorKind::PeerFailed, interest.op)
                .on_rank(self.me)
                .with_peer(first)
                .with_detail(detail),
        )
    }

    /// A transport error during a combined exchange: the failure of a peer this rank watches
    /// or talks to is noted (and interrupts the operation only if the interest says so); a
    /// withdrawn message ends the receive it was for; anything else ends the operation.
    pub(super) fn absorb(
        &mut self,
        user: &Exchange<'_>,
        e: Error,
        interest: &Interest,
    ) -> Result<()> {
        let Some(p) = e.peer().filter(|&p| p != self.me && p < self.t.size()) else {
            return Err(e);
        };
        if e.kind() == ErrorKind::Revoked {
            return self.withdrawn(user, e, p);
        }
        if !e.is_peer_failure() || e.kind() == ErrorKind::Timeout {
            return Err(e);
        }
        if self.left.contains(&p) {
            // It ended in an orderly way: not a failure, but this operation needed it.
            return Err(e);
        }
        if self.failed.contains(&p) {
            // Known already (a notice overtook the transport's own report, which some
            // backends deliver once more, e.g. tcp's pending connection error): whether it
            // interrupts the operation is the interest's call.
            return Ok(());
        }
        let user_peer = user.pending_peers().contains(&p);
        let watched = self.watch.contains_key(&p) || self.out.iter().any(|o| o.peer == p);
        if !user_peer && !watched {
            // A failure the engine cannot attribute to any operation it holds: continuing
            // would meet the same error again.
            return Err(e);
        }
        self.note_failure(p, None, None);
        if user_peer && !interest.ranks.contains(&p) {
            // A program operation with a rank outside the communicator's members cannot
            // exist; stay safe and fail it with the transport's own error.
            return Err(e);
        }
        Ok(())
    }

    /// A live sender `p` took back a message because its operation was abandoned (a revoke,
    /// or a failure it saw): tcp's withdrawn announcement, shm's aborted message. It ends the
    /// receive that message was for, and nothing else.
    ///
    /// Backends that name the message (tcp and shm give its key) are matched exactly: a
    /// program receive with that key fails; the standing control receive from `p` is posted
    /// anew (the transport forgot it; the flow's next message is for the new one); a key
    /// nobody here waits for answers a receive abandoned already (the agreement of a recovery
    /// often meets it) and is no error. Without a key, a pending program receive from `p` is
    /// taken to be the one.
    fn withdrawn(&mut self, user: &Exchange<'_>, e: Error, p: usize) -> Result<()> {
        let pending = |key: Option<ferry_core::MsgKey>| {
            user.recvs
                .iter()
                .any(|r| r.peer == p && r.state != OpState::Done && key.is_none_or(|k| r.key == k))
        };
        match e.key() {
            Some(k) if pending(Some(k)) => Err(e),
            Some(k) if k == self.ctl_key => {
                tracing::warn!(
                    "rank {}: rank {p} withdrew a control message; listening anew: {e}",
                    self.me
                );
                if let Some(w) = self.watch.get_mut(&p) {
                    w.buf.clear();
                    w.state = OpState::New;
                }
                Ok(())
            }
            Some(_) => {
                tracing::debug!(
                    "rank {}: withdrawn message no longer waited for: {e}",
                    self.me
                );
                Ok(())
            }
            None if pending(None) => Err(e),
            None => Ok(()),
        }
    }
}

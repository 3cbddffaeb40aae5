//! The end of a rank (000 §4.4.1 "shutdown OK?"): serve the peers until every message of the
//! outbox was taken by a live peer (dead ones are skipped at once), then say goodbye on every
//! connection and wait, at most [`super::EndpointConfig::linger`], for the peers to close.

use std::time::Duration;

use super::inbox::{Posted, RecvState};
use super::{Action, ConnId, Endpoint, EndpointError, ErrorKind, PeerStatus, Phase, RecvId};
use crate::frame::{FrameType, Header};
use crate::ident::MsgKey;
use crate::matching::Arrival;

#[derive(Debug)]
pub(crate) struct Finish {
    /// Rank whose failure ends this one, carried in the goodbye.
    pub blame: Option<usize>,
    /// Set once the goodbye was said.
    pub linger_until: Option<Duration>,
    pub result: Option<Result<(), EndpointError>>,
    pub done: bool,
    /// The goodbye is being said.
    pub saying: bool,
}

impl Endpoint {
    /// Starts the end of this rank. `blame` names the rank whose failure makes this one end,
    /// if any: the goodbye carries it so that peers report that rank, not this one. Progress
    /// comes from [`Endpoint::progress`] and the I/O; [`Endpoint::finished`] says when it is
    /// over.
    pub fn finish(&mut self, blame: Option<usize>, now: Duration) {
        if self.finishing.is_none() {
            self.finishing = Some(Finish {
                blame: blame.or(self.first_failed).filter(|_| !self.tolerant),
                linger_until: None,
                result: None,
                done: false,
                saying: false,
            });
            self.advance_finish(now);
        }
    }

    /// `Some(result)` once [`Endpoint::finish`] is over: every live peer took what it was owed
    /// and the goodbye is said; an error names a peer that failed while it still had to take
    /// messages of this rank.
    pub fn finished(&self) -> Option<Result<(), EndpointError>> {
        let f = self.finishing.as_ref()?;
        if f.done {
            Some(f.result.clone().unwrap_or(Ok(())))
        } else {
            None
        }
    }

    /// Whether the outbox still holds messages that a live peer may take (or a flow
    /// retirement waits for its answer: sends given up while held go out after it).
    pub fn owes_live_peers(&self) -> bool {
        self.outbox
            .keys()
            .map(|k| k.0)
            .chain(self.retiring.keys().map(|k| k.0))
            .any(|p| {
                !self.gave_up[p]
                    && (self.peers[p].status == PeerStatus::Alive || self.may_still_deliver(p))
            })
    }

    /// Live peers (not given up on) that still have to take messages of this rank.
    pub fn owed_peers(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .outbox
            .keys()
            .map(|k| k.0)
            .chain(self.retiring.keys().map(|k| k.0))
            .filter(|&p| {
                !self.gave_up[p]
                    && (self.peers[p].status == PeerStatus::Alive || self.may_still_deliver(p))
            })
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub(crate) fn advance_finish(&mut self, now: Duration) {
        let Some(f) = self.finishing.as_ref() else {
            return;
        };
        if f.done {
            return;
        }
        if f.linger_until.is_none() {
            if self.owes_live_peers() {
                self.drain_announced(now);
                return;
            }
            if !self.retain_may_leave(now) {
                return;
            }
            let lost = self
                .lost
                .iter()
                .map(|(&p, &n)| (p, n))
                .chain(self.outbox.keys().map(|k| (k.0, 1)))
                .next();
            let result = match lost {
                None => Ok(()),
                Some((p, n)) => Err(match self.peer_gone("finish", p) {
                    Some(e) => EndpointError {
                        cause: format!("{} ({n} messages to it were not taken)", e.cause),
                        ..e
                    },
                    None => self.error(
                        ErrorKind::Timeout,
                        "finish",
                        p,
                        format!(
                            "{n} messages to rank {p} were not taken: an operation already \
                             timed out waiting for it (general.operation_timeout_ms)"
                        ),
                    ),
                }),
            };
            let result = match (result, self.retain_finish_error()) {
                (Ok(()), Some(e)) => Err(e),
                (r, _) => r,
            };
            self.say_goodbye();
            // Messages for peers an operation gave up on are reported above, never delivered
            // after the goodbye (nor dialled for): such a peer's receives fail once it has the
            // goodbye, so a late message would only sit in its inbox.
            let (gave_up, mut freed) = (&self.gave_up, 0);
            self.outbox.retain(|id, m| {
                let keep = !gave_up[id.0];
                if !keep && m.data.is_some() {
                    freed += m.len;
                }
                keep
            });
            self.outbox_bytes = self.outbox_bytes.saturating_sub(freed);
            self.unsent.retain(|id| !gave_up[id.0]);
            if let Some(f) = self.finishing.as_mut() {
                f.result = Some(result);
                f.linger_until = Some(now + self.cfg.linger);
            }
        }
        let over = self.conns.is_empty()
            || self
                .conns
                .values()
                .all(|c| c.peer.is_some_and(|p| self.gave_up[p]))
            || self
                .finishing
                .as_ref()
                .and_then(|f| f.linger_until)
                .is_some_and(|l| now >= l);
        if over {
            let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
            ids.sort_unstable();
            for id in ids {
                self.forget(id);
                self.actions.push_back(Action::Close(id));
            }
            if let Some(f) = self.finishing.as_mut() {
                f.done = true;
            }
            // Nothing can be received any more: what arrived unasked goes.
            self.inbox.retain(|_| false);
            self.overflow.clear();
            self.remote.clear();
            self.want_get.clear();
            self.posted.retain(|_, p| !p.abandoned);
        }
    }

    /// Takes, and throws away, the messages peers announced to this rank (or that it
    /// refused) and that no receive wants, while this rank cannot say goodbye because live
    /// peers still have to take messages of its own. Nothing can receive them any more, and
    /// their senders wait for them to be taken before they end too: two ranks that each end
    /// owing the other a large message would otherwise wait for each other forever (so would
    /// any cycle of them). A rank that owes nothing says goodbye at once instead, and its
    /// senders' finish reports what it never took.
    fn drain_announced(&mut self, now: Duration) {
        let mut owed: Vec<Arrival> = self
            .remote
            .iter()
            .filter(|(a, asked)| !**asked && !self.posted.contains_key(a))
            .map(|(a, _)| *a)
            .collect();
        if owed.is_empty() {
            return;
        }
        owed.sort_unstable_by_key(|a| (a.source, a.key, a.serial));
        for a in owed {
            // Posted as a receive the program gave up: its message is consumed when it comes.
            self.posted.insert(
                a,
                Posted {
                    op: RecvId(u64::MAX),
                    peer: a.source,
                    state: RecvState::Waiting,
                    abandoned: true,
                },
            );
            self.pull(a, now);
        }
    }

    /// Whether the goodbye was said (connections identified later get it at once).
    pub(crate) fn said_goodbye(&self) -> bool {
        self.finishing
            .as_ref()
            .is_some_and(|f| f.linger_until.is_some() || f.saying)
    }

    /// Says goodbye on `id`, an authenticated connection with `peer`.
    pub(crate) fn goodbye_on(&mut self, id: ConnId, peer: usize) {
        let blame = self.finishing.as_ref().and_then(|f| f.blame);
        let serial = blame.map_or(0, |x| x as u64 + 1);
        let h = Header::control(
            FrameType::Bye,
            MsgKey::user(0),
            self.cfg.rank as u32,
            peer as u32,
            serial,
        );
        self.transmit(id, h, super::Payload::None);
        if let Some(c) = self.conns.get_mut(&id) {
            c.phase = Phase::ByeSent;
        }
        self.actions.push_back(Action::ShutdownWrite(id));
    }

    fn say_goodbye(&mut self) {
        if let Some(f) = self.finishing.as_mut() {
            f.saying = true;
        }
        let mut ids: Vec<ConnId> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(c) = self.conns.get(&id) else {
                continue;
            };
            match (c.phase, c.peer) {
                (Phase::Open | Phase::ClosingSent, Some(p)) => self.goodbye_on(id, p),
                // A stranger may be a peer whose Hello is still on its way, and a dialled
                // connection waits for the peer's HelloAck (which a goodbye said now would
                // turn into a frame on an established connection, a protocol violation that
                // fails the peer and drops its other connection with the goodbye still
                // queued): both get the goodbye right after their handshake (within the
                // linger).
                (Phase::AwaitHello { .. } | Phase::AwaitHelloAck, _) => {}
                _ => {
                    self.forget(id);
                    self.actions.push_back(Action::Drop(id));
                }
            }
        }
    }
}

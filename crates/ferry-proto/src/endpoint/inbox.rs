//! The receive side (000 §4.4, M2; T1): posted receives matched by flow serial against the
//! bounded inbox, never-refused arrivals (ADD, answers to our GETs), refusals when the inbox is
//! full, and pulls (GET) of refused or announced messages once their receive is posted.

use std::time::Duration;

use super::{Action, ConnId, Endpoint, EndpointError, ErrorKind, Landed, OpRef, RecvId, Sink};
use crate::frame::{FrameType, Header};
use crate::ident::MsgKey;
use crate::matching::{Arrival, MatchError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvState {
    /// Nothing arrived yet.
    Waiting,
    /// GET sent.
    GetSent,
    /// The payload is being read into the receive's buffer.
    Receiving,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Posted {
    pub op: RecvId,
    pub peer: usize,
    pub state: RecvState,
    /// The program gave the receive up: its message is still taken (its serial is spent, so
    /// nobody else can receive it, and its sender must be able to free it) and thrown away.
    pub abandoned: bool,
}

impl Endpoint {
    /// Posts receive `op` for the next message of the flow (`peer`, `key`) (M2: the n-th receive
    /// of a flow takes its n-th message). Completes with [`Action::RecvDone`] or
    /// [`Action::Failed`], possibly before this returns.
    pub fn post_recv(
        &mut self,
        op: RecvId,
        peer: usize,
        key: MsgKey,
        now: Duration,
    ) -> Result<(), EndpointError> {
        self.check_peer(peer, "recv")?;
        self.now = self.now.max(now);
        let serial = self.flows.take_recv_serial(peer, key);
        let arrival = Arrival {
            source: peer,
            key,
            serial,
        };
        if let Some(data) = self.take_stored(&arrival) {
            let len = data.len();
            self.actions.push_back(Action::RecvDone {
                op,
                data: Some(data),
                len,
            });
            return Ok(());
        }
        self.posted.insert(
            arrival,
            Posted {
                op,
                peer,
                state: RecvState::Waiting,
                abandoned: false,
            },
        );
        self.recv_ids.insert(op, arrival);
        if peer == self.cfg.rank {
            // A send to self waiting for inbox room goes with the driver's next progress call.
            return Ok(());
        }
        if self.remote.get(&arrival) == Some(&false) {
            self.pull(arrival, now);
        } else if let Some(e) = self.peer_gone("recv", peer) {
            if !self.may_still_deliver(peer) {
                self.posted.remove(&arrival);
                self.recv_ids.remove(&op);
                return Err(e);
            }
        }
        Ok(())
    }

    fn take_stored(&mut self, a: &Arrival) -> Option<Vec<u8>> {
        if !self.inbox.is_empty() {
            if self.mutations.inbox_not_emptied {
                if let Some(d) = self.inbox.peek(a) {
                    return Some(d.to_vec());
                }
            }
            if let Some(d) = self.inbox.take(a) {
                return Some(d);
            }
        }
        if !self.overflow.is_empty() {
            return self.overflow.remove(a);
        }
        None
    }

    /// The program gave up receive `op` (its exchange failed): nothing is written into its
    /// buffer any more and it is never reported. Its message is still taken and thrown away
    /// when it comes (pulled if it waits in the sender's outbox), so that the sender's outbox
    /// frees and the flow's later messages are not held up.
    pub fn abandon_recv(&mut self, op: RecvId) {
        // A completion already queued is not reported either (its message is consumed).
        self.actions.retain(|a| match a {
            Action::RecvDone { op: o, .. } | Action::Failed(OpRef::Recv(o), _) => *o != op,
            _ => true,
        });
        if let Some(a) = self.recv_ids.remove(&op) {
            if let Some(p) = self.posted.get_mut(&a) {
                p.abandoned = true;
            }
        }
    }

    /// Sends the GET for `arrival`, which waits in its sender's outbox (000 §4.4.3).
    pub(crate) fn pull(&mut self, arrival: Arrival, now: Duration) {
        let peer = arrival.source;
        match self.get_conn(peer, "recv", now) {
            Ok(Some(c)) => {
                let h = Header::control(
                    FrameType::Get,
                    arrival.key,
                    peer as u32,
                    self.cfg.rank as u32,
                    arrival.serial,
                );
                if let Some(conn) = self.conns.get_mut(&c) {
                    conn.outstanding += 1;
                }
                self.transmit(c, h, super::Payload::None);
                self.remote.insert(arrival, true);
                self.counters.gets_sent += 1;
                if let Some(p) = self.posted.get_mut(&arrival) {
                    p.state = RecvState::GetSent;
                }
            }
            Ok(None) => self.want_get.push_back(arrival),
            Err(e) => {
                if let Some(p) = self.posted.remove(&arrival) {
                    self.remote.remove(&arrival);
                    if !p.abandoned {
                        self.recv_ids.remove(&p.op);
                        self.actions.push_back(Action::Failed(OpRef::Recv(p.op), e));
                    }
                }
            }
        }
    }

    pub(crate) fn retry_gets(&mut self, now: Duration) {
        for _ in 0..self.want_get.len() {
            let Some(a) = self.want_get.pop_front() else {
                break;
            };
            let wanted = (self
                .posted
                .get(&a)
                .is_some_and(|p| p.state == RecvState::Waiting)
                || self.retain_duplicate(&a))
                && self.remote.get(&a) == Some(&false);
            if wanted {
                self.pull(a, now);
            }
        }
    }

    /// A message of `peer` waits in its outbox (ANNOUNCE, or our own REFUSE).
    pub(crate) fn on_remote(&mut self, arrival: Arrival, now: Duration) {
        if self.finishing.as_ref().is_some_and(|f| f.done) {
            // Nothing can be received any more (a late announcement for a receive the program
            // gave up): not recorded.
            return;
        }
        self.remote.insert(arrival, false);
        // A restarted peer's duplicate is pulled too (and dropped), so that its outbox frees.
        if self
            .posted
            .get(&arrival)
            .is_some_and(|p| p.state == RecvState::Waiting)
            || self.retain_duplicate(&arrival)
        {
            self.pull(arrival, now);
        }
    }

    /// Header of a TRY, ADD or DATA from `peer`: where its payload goes.
    pub(crate) fn on_message_header(
        &mut self,
        conn: ConnId,
        peer: usize,
        h: &Header,
    ) -> Result<Sink, String> {
        let arrival = Arrival {
            source: h.source as usize,
            key: h.key,
            serial: h.serial,
        };
        let len = h.len as usize;
        if h.ty == FrameType::Data {
            // Only answers to our own GETs are taken: they are bounded by what this rank asked
            // for, so they may bypass the inbox cap.
            if self.remote.remove(&arrival) != Some(true) {
                return Err(format!(
                    "DATA for {:?} serial {} from rank {peer} that was never requested",
                    h.key, h.serial
                ));
            }
            if let Some(c) = self.conns.get_mut(&conn) {
                c.outstanding = c.outstanding.saturating_sub(1);
            }
        }
        if let Some(p) = self.posted.get_mut(&arrival) {
            if p.state != RecvState::Receiving {
                p.state = RecvState::Receiving;
                if p.abandoned {
                    return Ok(Sink::Discard(len));
                }
                return Ok(Sink::Recv(p.op, len));
            }
        }
        if self.retain_duplicate(&arrival) {
            // A restarted peer sends again what this rank already has: taken and dropped.
            self.retain_count_duplicate();
            return Ok(Sink::Discard(len));
        }
        if h.ty != FrameType::Try || self.inbox.has_room_for(len) {
            Ok(Sink::Owned(len))
        } else {
            Ok(Sink::Discard(len))
        }
    }

    /// The payload of a TRY, ADD or DATA landed where [`Self::on_message_header`] said.
    pub(crate) fn on_message_payload(
        &mut self,
        conn: ConnId,
        peer: usize,
        h: &Header,
        landed: Landed,
        now: Duration,
    ) -> Result<(), String> {
        let arrival = Arrival {
            source: peer,
            key: h.key,
            serial: h.serial,
        };
        let len = h.len as usize;
        let mut refuse = false;
        match landed {
            // A receive abandoned while its payload was read has nothing to complete.
            Landed::Direct => {
                if let Some(p) = self.posted.remove(&arrival).filter(|p| !p.abandoned) {
                    self.recv_ids.remove(&p.op);
                    self.actions.push_back(Action::RecvDone {
                        op: p.op,
                        data: None,
                        len,
                    });
                }
            }
            // A TRY without room is refused (and pulled once its receive is posted, which may
            // have happened while the payload was read); a GET answer whose receive was
            // abandoned is consumed.
            Landed::Discarded => {
                if self.posted.get(&arrival).is_some_and(|p| p.abandoned) {
                    // Taken for a receive the program gave up: consumed, never refused.
                    self.posted.remove(&arrival);
                } else {
                    refuse = h.ty == FrameType::Try && !self.retain_duplicate(&arrival);
                }
            }
            Landed::Owned(_) if self.posted.get(&arrival).is_some_and(|p| p.abandoned) => {
                self.posted.remove(&arrival);
            }
            Landed::Owned(v) => {
                if let Some(p) = self.posted.remove(&arrival) {
                    // Posted while the payload was on its way.
                    self.recv_ids.remove(&p.op);
                    self.actions.push_back(Action::RecvDone {
                        op: p.op,
                        data: Some(v),
                        len,
                    });
                } else if self.finishing.as_ref().is_some_and(|f| f.done) {
                    // Nothing can be received any more: consumed.
                } else if h.ty == FrameType::Try {
                    match self.inbox.insert(arrival, v) {
                        Ok(()) => {}
                        Err(MatchError::Full { .. }) => refuse = true,
                        Err(MatchError::Duplicate(..)) if self.retain.is_some() => {
                            self.retain_count_duplicate();
                        }
                        Err(MatchError::Duplicate(..)) => {
                            return Err(format!("duplicate message {arrival:?}"));
                        }
                    }
                } else {
                    if self.overflow.contains_key(&arrival) && self.retain.is_some() {
                        self.retain_count_duplicate();
                        self.transmit_control(conn, FrameType::Accept, h);
                        return Ok(());
                    }
                    if self.overflow.contains_key(&arrival) {
                        return Err(format!("duplicate message {arrival:?}"));
                    }
                    self.overflow.insert(arrival, v);
                }
            }
        }
        if refuse && h.ty == FrameType::Try {
            self.counters.refusals_sent += 1;
            self.transmit_control(conn, FrameType::Refuse, h);
            self.on_remote(arrival, now);
        } else {
            self.transmit_control(conn, FrameType::Accept, h);
        }
        Ok(())
    }

    /// MISS: the peer no longer holds a message we pulled (its send was abandoned).
    pub(crate) fn on_miss(&mut self, conn: ConnId, peer: usize, h: &Header) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.outstanding = c.outstanding.saturating_sub(1);
        }
        let arrival = Arrival {
            source: peer,
            key: h.key,
            serial: h.serial,
        };
        self.remote.remove(&arrival);
        if let Some(p) = self.posted.remove(&arrival).filter(|p| !p.abandoned) {
            self.recv_ids.remove(&p.op);
            let e = EndpointError {
                key: Some(h.key),
                ..self.error(
                    ErrorKind::Withdrawn,
                    "recv",
                    peer,
                    format!(
                        "rank {peer} no longer holds message {:?} serial {} it announced \
                         (its sending operation was abandoned)",
                        h.key, h.serial
                    ),
                )
            };
            self.actions.push_back(Action::Failed(OpRef::Recv(p.op), e));
        }
    }

    /// Dials the peers that receives have waited for without a connection (see
    /// [`super::EndpointConfig::probe_after`]); a peer that cannot be reached fails them.
    pub(crate) fn probe_silent_peers(&mut self, now: Duration) {
        for p in self.waited_peers() {
            let peer = &self.peers[p];
            if peer.n_conns == 0
                && peer.status == super::PeerStatus::Alive
                && now >= peer.silent_since + self.cfg.probe_after
            {
                // Errors reach the waiting operations through mark_dead.
                let _ = self.get_conn(p, "probe", now);
            }
        }
    }

    /// Whether `peer`, which said goodbye on one connection, may still deliver on another (two
    /// ranks that dialled each other at once).
    pub(crate) fn may_still_deliver(&self, peer: usize) -> bool {
        matches!(self.peers[peer].status, super::PeerStatus::Finished { .. })
            && self.peers[peer].n_conns > 0
    }
}

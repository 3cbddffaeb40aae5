//! Retiring idle point-to-point flows (bounded state: a program that uses a new tag per
//! message must not leave a counter per tag and peer behind on both sides forever).
//!
//! The sender proposes: once its outgoing flows pass [`super::EndpointConfig::retire_p2p_above`]
//! it sends `RETIRE(key, n)` for every user flow whose next serial is `n` and of which nothing
//! is in its outbox or waits for room, on an established connection (an outstanding request
//! there, so the close handshake keeps the connection until the answer). Sends of the flow
//! posted before the answer are held without a serial. The receiver agrees (`RETIRE_OK`) and
//! forgets the flow only if its next receive is `n` and no receive of the flow is posted or
//! message of it stored, announced or being pulled: then it took every message below `n`, and
//! no other can come because the sender sends nothing more of the flow until the answer.
//! Otherwise it answers `RETIRE_NO`. On the answer the sender forgets the flow (OK) or keeps
//! it, then gives the held sends their serials in order: after an OK both sides start the
//! flow again at serial 0. The answer is lost only with a connection that breaks while busy,
//! which without retention fails the peer, and the held sends with it. With retention
//! (`tcp.retain`) nothing is retired: retained copies and a restarted rank's recomputation
//! number messages from the start of the run.

use std::collections::VecDeque;
use std::sync::Arc;

use super::outbox::{OutMsg, OutState, WaitingSend};
use super::{Action, ConnId, Endpoint, ErrorKind, OpRef, Payload, PeerStatus, Phase, SendId};
use crate::fasthash::FastMap;
use crate::frame::{FrameType, Header};
use crate::ident::{MsgKey, MsgKind};

/// A send posted on a flow whose retirement is being asked: it takes its serial after the
/// answer.
#[derive(Debug)]
pub(crate) struct Held {
    pub op: SendId,
    pub len: usize,
    /// The payload, once the program gave the send up (its buffer is no longer readable).
    pub data: Option<Arc<Vec<u8>>>,
}

/// A proposal of this rank waiting for its answer.
#[derive(Debug)]
pub(crate) struct Retiring {
    /// The flow's next serial when proposed.
    pub n: u64,
    /// The connection the proposal went on (its answer comes on it).
    pub conn: ConnId,
    /// Sends of the flow posted since, in order.
    pub held: VecDeque<Held>,
}

impl Endpoint {
    /// Holds send `op` if its flow's retirement is being asked; `true` if held.
    pub(crate) fn hold_if_retiring(
        &mut self,
        op: SendId,
        peer: usize,
        key: MsgKey,
        len: usize,
    ) -> bool {
        match self.retiring.get_mut(&(peer, key)) {
            Some(r) => {
                r.held.push_back(Held {
                    op,
                    len,
                    data: None,
                });
                true
            }
            None => false,
        }
    }

    /// Proposes the retirement of idle user flows once the send table passed its bound.
    pub(crate) fn maybe_retire(&mut self) {
        let above = self.cfg.retire_p2p_above;
        let len = self.flows.send_len();
        if above == 0 || self.retain.is_some() || self.finishing.is_some() || len < above {
            return;
        }
        if len < self.retire_sweep_at && self.now < self.retire_last + self.cfg.retire_every {
            return;
        }
        if self
            .cap_pressed
            .is_some_and(|t| self.now < t + 2 * self.cfg.retire_every)
        {
            // A connection is wanted at the cap: the idle one to close must not be kept busy.
            return;
        }
        self.retire_last = self.now;
        let mut busy: FastMap<(usize, MsgKey), ()> = FastMap::default();
        for &(p, k, _) in self.outbox.keys() {
            busy.insert((p, k), ());
        }
        for w in &self.waiting_sends {
            busy.insert((w.peer, w.key), ());
        }
        let me = self.cfg.rank;
        let mut idle: Vec<(usize, MsgKey, u64)> = self
            .flows
            .send_flows()
            .filter(|&(p, k, n)| {
                k.kind == MsgKind::USER
                    && p != me
                    && n > 0
                    && !busy.contains_key(&(p, k))
                    && !self.retiring.contains_key(&(p, k))
            })
            .collect();
        // Deterministic order (the simulation replays schedules).
        idle.sort_unstable();
        for (peer, key, n) in idle {
            let Some(conn) = self.open_conn_to(peer) else {
                continue;
            };
            if let Some(c) = self.conns.get_mut(&conn) {
                c.outstanding += 1;
            }
            let h = Header::control(FrameType::Retire, key, me as u32, peer as u32, n);
            self.transmit(conn, h, Payload::None);
            self.retiring.insert(
                (peer, key),
                Retiring {
                    n,
                    conn,
                    held: VecDeque::new(),
                },
            );
            self.counters.retire_proposed += 1;
        }
        // The next sweep once the flows that could not be proposed (busy ones) doubled:
        // amortised cost per send. Flows whose answers are on their way go soon and do not
        // count (counting them let the table grow to twice the bound and more under load).
        let stay = self.flows.send_len().saturating_sub(self.retiring.len());
        self.retire_sweep_at = (2 * stay).max(above);
    }

    /// The established connection used to send to `peer`, if any.
    fn open_conn_to(&self, peer: usize) -> Option<ConnId> {
        let p = self.peers.get(peer)?;
        if p.status != PeerStatus::Alive || self.gave_up[peer] {
            return None;
        }
        let id = p.conn?;
        let c = self.conns.get(&id)?;
        (c.phase == Phase::Open && self.now >= c.quiet_until).then_some(id)
    }

    /// `RETIRE` from `peer` (the sender of the flow) on `conn`.
    pub(crate) fn on_retire(&mut self, conn: ConnId, peer: usize, h: &Header) {
        let (key, n) = (h.key, h.serial);
        let agreed = self.retain.is_none()
            && self.flows.has_recv(peer, key)
            && self.flows.next_recv(peer, key) == n
            && !self.posted.keys().any(|a| a.source == peer && a.key == key)
            && !self
                .overflow
                .keys()
                .any(|a| a.source == peer && a.key == key)
            && !self.remote.keys().any(|a| a.source == peer && a.key == key)
            && !self.inbox_has_flow(peer, key, n);
        let answer = if agreed {
            self.flows.forget_recv(peer, key);
            self.counters.retired_flows += 1;
            FrameType::RetireOk
        } else {
            FrameType::RetireNo
        };
        self.transmit_control(conn, answer, h);
    }

    /// Whether the inbox holds a message of flow (`peer`, `key`) near serial `n` (with the
    /// receive counter at `n` and no receive posted there can be none: a defensive check).
    fn inbox_has_flow(&self, peer: usize, key: MsgKey, n: u64) -> bool {
        [n.wrapping_sub(1), n].iter().any(|&serial| {
            self.inbox.contains(&crate::matching::Arrival {
                source: peer,
                key,
                serial,
            })
        })
    }

    /// `RETIRE_OK` or `RETIRE_NO` from `peer` (the receiver of the flow) on `conn`.
    pub(crate) fn on_retire_answer(&mut self, conn: ConnId, peer: usize, h: &Header) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.outstanding = c.outstanding.saturating_sub(1);
        }
        let Some(r) = self.retiring.remove(&(peer, h.key)) else {
            return;
        };
        if h.ty == FrameType::RetireOk
            && h.serial == r.n
            && self.flows.next_send(peer, h.key) == r.n
        {
            self.flows.forget_send(peer, h.key);
            self.counters.retired_flows += 1;
        }
        self.release_held(peer, h.key, r.held);
    }

    /// Gives held sends their serials, in order: they go on like any send waiting for room
    /// (or, given up by the program, from their copy).
    fn release_held(&mut self, peer: usize, key: MsgKey, held: VecDeque<Held>) {
        if self.gave_up[peer] {
            // Like the outbox at the goodbye: nothing more goes to a peer given up on.
            for s in held.iter().filter(|s| s.data.is_none()) {
                let e = self.error(
                    ErrorKind::Timeout,
                    "send",
                    peer,
                    format!(
                        "an operation timed out waiting for rank {peer}: this rank gave up on it"
                    ),
                );
                self.actions.push_back(Action::Failed(OpRef::Send(s.op), e));
            }
            return;
        }
        for s in held {
            let serial = self.flows.take_send_serial(peer, key);
            match s.data {
                None => self.waiting_sends.push_back(WaitingSend {
                    op: s.op,
                    peer,
                    key,
                    serial,
                    len: s.len,
                }),
                Some(data) => {
                    let id = (peer, key, serial);
                    self.outbox.insert(
                        id,
                        OutMsg {
                            data: Some(data),
                            op: None,
                            len: s.len,
                            state: OutState::Unsent,
                            since: self.now,
                        },
                    );
                    self.outbox_bytes += s.len;
                    self.unsent.push_back(id);
                }
            }
        }
    }

    /// The program gave up held send `op`: it keeps a copy of the payload (`bytes`, or
    /// nothing if the buffer is gone). `false` if `op` is not held.
    pub(crate) fn abandon_held(&mut self, op: SendId, bytes: Option<&[u8]>) -> bool {
        for r in self.retiring.values_mut() {
            if let Some(i) = r.held.iter().position(|s| s.op == op) {
                match bytes {
                    Some(b) if b.len() == r.held[i].len => {
                        r.held[i].data = Some(Arc::new(b.to_vec()));
                    }
                    _ => {
                        r.held.remove(i);
                    }
                }
                return true;
            }
        }
        false
    }

    /// Connection `conn` is gone. The answers to proposals sent on it will not come: that
    /// happens while the peer lives only when this rank gave up on it or is ending (a busy
    /// connection that breaks fails the peer, and the close handshake waits for answers), so
    /// nothing more is sent on those flows and the proposals simply end. A send held for one
    /// fails rather than guess the flow's serial.
    pub(crate) fn retire_conn_gone(&mut self, conn: ConnId) {
        if self.retiring.is_empty() {
            return;
        }
        let mut keys: Vec<(usize, MsgKey)> = self
            .retiring
            .iter()
            .filter(|(_, r)| r.conn == conn)
            .map(|(k, _)| *k)
            .collect();
        keys.sort_unstable();
        for k in keys {
            let Some(r) = self.retiring.remove(&k) else {
                continue;
            };
            // The usual way here is the peer's goodbye crossing the proposal (the peer ended
            // and dropped the answer): its sends then fail for what the goodbye said (the
            // peer finished, or ended after another rank failed), like any other send to it.
            let e = self.peer_gone("send", k.0).unwrap_or_else(|| {
                self.error(
                    ErrorKind::PeerFailed,
                    "send",
                    k.0,
                    "the connection broke while the flow's retirement was being agreed".into(),
                )
            });
            for s in r.held.iter().filter(|s| s.data.is_none()) {
                self.actions
                    .push_back(Action::Failed(OpRef::Send(s.op), e.clone()));
            }
        }
    }

    /// `peer` is gone: its proposals end, and the sends held for them fail (returned).
    pub(crate) fn drop_retiring_with(&mut self, peer: usize) -> Vec<SendId> {
        let keys: Vec<(usize, MsgKey)> = self
            .retiring
            .keys()
            .filter(|(p, _)| *p == peer)
            .copied()
            .collect();
        let mut failed = Vec::new();
        for k in keys {
            if let Some(r) = self.retiring.remove(&k) {
                failed.extend(r.held.iter().filter(|s| s.data.is_none()).map(|s| s.op));
            }
        }
        failed
    }
}

//! The send side (000 §4.4; T1, T4): serials, the bounded outbox, TRY/ADD/ANNOUNCE, the
//! answers to them (ACCEPT frees an entry, REFUSE leaves it for a GET), GETs served from the
//! outbox or straight from the program's buffer, and the rendezvous copy after the grace period.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Action, ConnId, Endpoint, EndpointError, ErrorKind, MsgId, OpRef, Payload, SendBuffers, SendId,
};
use crate::frame::{FrameType, Header};
use crate::ident::MsgKey;
use crate::matching::Arrival;
use crate::tcp_protocol;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutState {
    /// Waiting for a connection.
    Unsent,
    /// TRY/ADD written, or ANNOUNCE written and waiting for GET.
    Sent,
    /// Refused; waiting for GET.
    Refused,
    /// DATA written in answer to GET; waiting for its ACCEPT.
    Served,
}

#[derive(Debug)]
pub(crate) struct OutMsg {
    /// The payload, or `None` while it is still the announcing send's buffer.
    pub data: Option<Arc<Vec<u8>>>,
    /// The announcing send while the payload is borrowed.
    pub op: Option<SendId>,
    pub len: usize,
    pub state: OutState,
    /// When the message was announced (rendezvous grace).
    pub since: Duration,
}

impl OutMsg {
    /// An announced message whose payload is still the program's and whose GET has not come:
    /// the rendezvous copy may take it once the grace is over. One that waits for a connection
    /// is not announced yet and is never copied for that (the connection is not the peer's
    /// program, so waiting for it cannot be part of a cycle of blocked senders).
    pub(crate) fn awaits_pull(&self) -> bool {
        self.data.is_none() && matches!(self.state, OutState::Sent | OutState::Refused)
    }
}

/// A send that waits for room (outbox, or this rank's inbox for a send to itself).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitingSend {
    pub op: SendId,
    pub peer: usize,
    pub key: MsgKey,
    pub serial: u64,
    pub len: usize,
}

/// Whether a posted send completed at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    /// Complete: the buffer is the program's again.
    Done,
    /// Not yet: [`Action::SendDone`] or [`Action::Failed`] follows.
    Pending,
}

impl Endpoint {
    /// Posts send `op` of `len` bytes to `peer` with `key`; the serial is taken now (M2), so
    /// sends of one flow must be posted in program order. Small messages are copied into the
    /// outbox through `bufs` and complete at once when it has room; large ones are announced
    /// and stay in the program's buffer until the receiver pulls them.
    pub fn post_send(
        &mut self,
        op: SendId,
        peer: usize,
        key: MsgKey,
        len: usize,
        now: Duration,
        bufs: &dyn SendBuffers,
    ) -> Result<SendStatus, EndpointError> {
        self.check_peer(peer, "send")?;
        self.now = self.now.max(now);
        if len as u64 > self.cfg.max_message_bytes {
            return Err(self.error(
                ErrorKind::Invalid,
                "send",
                peer,
                format!(
                    "message of {len} bytes exceeds tcp.max_message_bytes = {}",
                    self.cfg.max_message_bytes
                ),
            ));
        }
        if peer != self.cfg.rank {
            if let Some(e) = self.peer_gone("send", peer) {
                return Err(e);
            }
        }
        if let Some(e) = self.retain_check_room(peer, len) {
            return Err(e);
        }
        if self.hold_if_retiring(op, peer, key, len) {
            // Its serial depends on the answer about the flow's retirement.
            return Ok(SendStatus::Pending);
        }
        let serial = self.flows.take_send_serial(peer, key);
        let w = WaitingSend {
            op,
            peer,
            key,
            serial,
            len,
        };
        if self.try_send(w, now, bufs)? {
            Ok(SendStatus::Done)
        } else {
            Ok(SendStatus::Pending)
        }
    }

    /// Tries to get a send going; `true` if it completed.
    fn try_send(
        &mut self,
        w: WaitingSend,
        now: Duration,
        bufs: &dyn SendBuffers,
    ) -> Result<bool, EndpointError> {
        let WaitingSend {
            op,
            peer,
            key,
            serial,
            len,
        } = w;
        if peer == self.cfg.rank {
            return self.send_to_self(w, bufs);
        }
        // Retained messages are copies: a restart of the receiver may need them long after
        // the program's buffer changed.
        if tcp_protocol::request_for(key, len, self.cfg.eager_bytes) == FrameType::Announce
            && self.retain.is_none()
        {
            // The payload stays in the program's buffer until the receiver pulls it. Without a
            // connection yet (the first message to a peer) the entry waits, still borrowed, and
            // is announced once the connection is up: copying a large first message whole into
            // the outbox would cost its size in memory and a memcpy for nothing.
            let conn = self.get_conn(peer, "send", now)?;
            let id = (peer, key, serial);
            self.outbox.insert(
                id,
                OutMsg {
                    data: None,
                    op: Some(op),
                    len,
                    state: if conn.is_some() {
                        OutState::Sent
                    } else {
                        OutState::Unsent
                    },
                    since: now,
                },
            );
            self.announced.insert(op, id);
            match conn {
                Some(c) => {
                    let h = Header {
                        ty: FrameType::Announce,
                        key,
                        source: self.cfg.rank as u32,
                        dest: peer as u32,
                        serial,
                        len: len as u64,
                    };
                    self.transmit(c, h, Payload::None);
                    self.counters.announced += 1;
                }
                None => self.unsent.push_back(id),
            }
            return Ok(false);
        }
        if self.outbox_bytes.saturating_add(len) > self.cfg.outbox_bytes && !self.outbox.is_empty()
        {
            // Full outbox: the send waits (T1).
            self.waiting_sends.push_back(w);
            return Ok(false);
        }
        let Some(bytes) = bufs.bytes(op) else {
            // Called without the program's buffers (from a connection event): later.
            self.waiting_sends.push_back(w);
            return Ok(false);
        };
        let id = (peer, key, serial);
        if len >= self.cfg.eager_direct_min
            && self.retain.is_none()
            && bytes.len() == len
            && tcp_protocol::request_for(key, len, self.cfg.eager_bytes) == FrameType::Try
        {
            // Written straight from the program's buffer while the call is active: the copy
            // into the outbox (needed in case the receiver refuses and pulls later) is made
            // only if the message is still unanswered when the call ends, and then after the
            // socket took what it could (off the message's path).
            if let Some(c) = self.get_conn(peer, "send", now)? {
                self.outbox.insert(
                    id,
                    OutMsg {
                        data: None,
                        op: Some(op),
                        len,
                        state: OutState::Sent,
                        since: now,
                    },
                );
                self.eager_out.insert(op, id);
                self.eager_activity = self.eager_activity.max(now);
                if let Some(conn) = self.conns.get_mut(&c) {
                    conn.outstanding += 1;
                }
                let h = Header {
                    ty: FrameType::Try,
                    key,
                    source: self.cfg.rank as u32,
                    dest: peer as u32,
                    serial,
                    len: len as u64,
                };
                self.transmit(c, h, Payload::Op(op, len));
                return Ok(false);
            }
        }
        self.outbox.insert(
            id,
            OutMsg {
                data: Some(Arc::new(bytes.to_vec())),
                op: None,
                len,
                state: OutState::Unsent,
                since: now,
            },
        );
        self.outbox_bytes += len;
        if !self.send_msg(id, now)? {
            self.unsent.push_back(id);
        }
        Ok(true)
    }

    fn send_to_self(
        &mut self,
        w: WaitingSend,
        bufs: &dyn SendBuffers,
    ) -> Result<bool, EndpointError> {
        let arrival = Arrival {
            source: self.cfg.rank,
            key: w.key,
            serial: w.serial,
        };
        let Some(bytes) = bufs.bytes(w.op) else {
            self.waiting_sends.push_back(w);
            return Ok(false);
        };
        if let Some(p) = self.posted.remove(&arrival) {
            if p.abandoned {
                // Consumed by the receive the program gave up.
                return Ok(true);
            }
            self.recv_ids.remove(&p.op);
            self.actions.push_back(Action::RecvDone {
                op: p.op,
                data: Some(bytes.to_vec()),
                len: w.len,
            });
            return Ok(true);
        }
        match self.inbox.insert(arrival, bytes.to_vec()) {
            Ok(()) => Ok(true),
            Err(_) => {
                // Full inbox: like any sender facing a full receiver, the send waits.
                self.waiting_sends.push_back(w);
                Ok(false)
            }
        }
    }

    /// Retries the sends waiting for room.
    pub(crate) fn retry_waiting_sends(&mut self, now: Duration, bufs: &dyn SendBuffers) {
        for _ in 0..self.waiting_sends.len() {
            let Some(w) = self.waiting_sends.pop_front() else {
                break;
            };
            let before = self.waiting_sends.len();
            match self.try_send(w, now, bufs) {
                Ok(true) => self.actions.push_back(Action::SendDone(w.op)),
                Ok(false) => {
                    if self.waiting_sends.len() > before {
                        // Still full: later sends of the queue wait behind it (flow order).
                        if let Some(back) = self.waiting_sends.pop_back() {
                            self.waiting_sends.push_front(back);
                        }
                        break;
                    }
                }
                Err(e) => self.actions.push_back(Action::Failed(OpRef::Send(w.op), e)),
            }
        }
    }

    /// Queues outbox message `id` on a connection; `false` if none is available yet.
    pub(crate) fn send_msg(&mut self, id: MsgId, now: Duration) -> Result<bool, EndpointError> {
        let (peer, key, serial) = id;
        let Some(c) = self.get_conn(peer, "send", now)? else {
            return Ok(false);
        };
        let Some(msg) = self.outbox.get_mut(&id) else {
            return Ok(true);
        };
        let ty = tcp_protocol::request_for(key, msg.len, self.cfg.eager_bytes);
        let header = Header {
            ty,
            key,
            source: self.cfg.rank as u32,
            dest: peer as u32,
            serial,
            len: msg.len as u64,
        };
        msg.state = OutState::Sent;
        msg.since = now;
        let payload = match (&msg.data, ty) {
            (Some(d), t) if t != FrameType::Announce => Payload::Shared(d.clone()),
            _ => Payload::None,
        };
        if ty == FrameType::Announce {
            self.counters.announced += 1;
        } else if let Some(conn) = self.conns.get_mut(&c) {
            conn.outstanding += 1;
        }
        self.transmit(c, header, payload);
        Ok(true)
    }

    pub(crate) fn retry_unsent(&mut self, now: Duration) {
        for _ in 0..self.unsent.len() {
            let Some(id) = self.unsent.pop_front() else {
                break;
            };
            if !self.outbox.contains_key(&id) {
                continue;
            }
            if self.peer_gone("send", id.0).is_some() {
                // Kept until finish reports it lost.
                self.unsent.push_back(id);
                continue;
            }
            match self.send_msg(id, now) {
                Ok(true) => {}
                Ok(false) | Err(_) => self.unsent.push_back(id),
            }
        }
    }

    /// The rendezvous grace period in force (see [`super::EndpointConfig::rndv_grace`]).
    pub(crate) fn grace(&self) -> Duration {
        if self.remote.values().any(|&asked| !asked) {
            self.cfg.rndv_grace
        } else {
            self.cfg.rndv_grace_idle
        }
    }

    /// Copies announced messages whose GET did not come in time into the outbox, so their
    /// sends complete (blocking sends in a cycle never deadlock). Only while this rank waits
    /// for no receive of its own and the receiver is not pulling (no GET within the grace).
    pub(crate) fn rndv_copies(&mut self, now: Duration, bufs: &dyn SendBuffers) {
        if self.announced.is_empty() || self.waits_for_receive() {
            return;
        }
        let grace = self.grace();
        if now < self.last_get + grace {
            return;
        }
        let mut due: Vec<(SendId, MsgId)> = self
            .announced
            .iter()
            .filter(|(_, id)| {
                self.outbox
                    .get(id)
                    .is_some_and(|m| m.awaits_pull() && now >= m.since + grace)
            })
            .map(|(op, id)| (*op, *id))
            .collect();
        due.sort_unstable();
        for (op, id) in due {
            let Some(m) = self.outbox.get(&id) else {
                continue;
            };
            let room = self.outbox_bytes.saturating_add(m.len) <= self.cfg.outbox_bytes
                || self.outbox_bytes == 0;
            if !room {
                break;
            }
            let Some(bytes) = bufs.bytes(op) else {
                continue;
            };
            let data = Arc::new(bytes.to_vec());
            if let Some(m) = self.outbox.get_mut(&id) {
                self.outbox_bytes += m.len;
                m.data = Some(data);
                m.op = None;
            }
            self.announced.remove(&op);
            self.counters.rndv_copies += 1;
            self.actions.push_back(Action::SendDone(op));
        }
    }

    /// Serves a GET for our message `h` from the outbox or the announcing send's buffer.
    pub(crate) fn serve_get(&mut self, conn: ConnId, peer: usize, h: &Header, now: Duration) {
        self.counters.gets_served += 1;
        self.last_get = now;
        let key = (peer, h.key, h.serial);
        let Some(m) = self.outbox.get_mut(&key) else {
            self.transmit_control(conn, FrameType::Miss, h);
            return;
        };
        // The entry stays until the receiver ACCEPTs the DATA, so that the goodbye (possibly
        // on another connection) cannot overtake it.
        let d = Header {
            ty: FrameType::Data,
            len: m.len as u64,
            ..*h
        };
        let payload = match (&m.data, m.op) {
            (Some(data), _) => Payload::Shared(data.clone()),
            (None, Some(op)) => Payload::Op(op, m.len),
            (None, None) => {
                self.outbox.remove(&key);
                self.transmit_control(conn, FrameType::Miss, h);
                return;
            }
        };
        m.state = OutState::Served;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.outstanding += 1;
        }
        if self.mutations.get_answered_twice {
            self.transmit(conn, d, payload.clone());
        }
        self.transmit(conn, d, payload);
    }

    /// The call that posted sends ends (or will only wait for their answers): every TRY send
    /// still written from the program's buffer that `bufs` holds gets its copy in the outbox
    /// and completes ([`Action::SendDone`]). Returns the copies, so that the driver writes the
    /// rest of frames still queued from the program's buffer from them (no second copy); after
    /// this nothing refers to those buffers. A message the outbox has no room for stays
    /// borrowed: its send waits for the receiver's answer like any send facing a full outbox
    /// (T1).
    pub fn release_eager(&mut self, bufs: &dyn SendBuffers) -> Vec<(SendId, Arc<Vec<u8>>)> {
        let mut copies = Vec::new();
        if self.eager_out.is_empty() {
            return copies;
        }
        let mut due: Vec<(SendId, MsgId)> = self.eager_out.iter().map(|(o, i)| (*o, *i)).collect();
        due.sort_unstable();
        for (op, id) in due {
            let Some(b) = bufs.bytes(op) else {
                continue;
            };
            let Some(len) = self.outbox.get(&id).map(|m| m.len) else {
                continue;
            };
            let room = self.outbox_bytes.saturating_add(len) <= self.cfg.outbox_bytes
                || self.outbox_bytes == 0;
            if b.len() != len || !room {
                continue;
            }
            let data = Arc::new(b.to_vec());
            if let Some(m) = self.outbox.get_mut(&id) {
                m.data = Some(data.clone());
                m.op = None;
            }
            self.outbox_bytes += len;
            self.eager_out.remove(&op);
            self.counters.eager_copies += 1;
            self.share_queued(op, &data);
            self.actions.push_back(Action::SendDone(op));
            copies.push((op, data));
        }
        copies
    }

    /// When a call that waits for nothing but TRY sends written from the program's buffer
    /// should stop waiting for their answers and have them copied ([`Endpoint::release_eager`]);
    /// `None` when no send is borrowed. Until then the driver keeps serving the connections:
    /// a receiver that is reading answers every message within the time it takes to read it,
    /// and each answer completes a send without any copy (in a window of 64 x 64 KiB, the
    /// copy made at once was a 4 MiB `memcpy` and 64 allocations per window on the sender).
    /// The time is [`eager_hold`](super::EndpointConfig::eager_hold) after the last answer,
    /// post or write ([`Endpoint::on_written`]), plus the time to read all unanswered bytes
    /// at [`eager_hold_rate`](super::EndpointConfig::eager_hold_rate) (the copy it may save
    /// costs a fraction of that): so the wait ends once the receiver stops answering (busy,
    /// descheduled long enough to have read them all), never because the whole window took
    /// long, and at once when every unanswered message was refused (a refused message waits
    /// for its receive to be posted, which may be after this call) or when less than
    /// [`eager_hold_min`](super::EndpointConfig::eager_hold_min) bytes are unanswered. A performance wait only:
    /// the driver may release earlier, and a failed peer fails the sends regardless.
    pub fn eager_release_at(&self) -> Option<Duration> {
        if self.eager_out.is_empty() {
            return None;
        }
        let unanswered: u64 = self
            .eager_out
            .values()
            .filter_map(|id| self.outbox.get(id))
            .filter(|m| m.state == OutState::Sent)
            .map(|m| m.len as u64)
            .sum();
        if unanswered == 0 || unanswered < self.cfg.eager_hold_min as u64 {
            return Some(Duration::ZERO);
        }
        let reading = match self.cfg.eager_hold_rate {
            0 => Duration::ZERO,
            rate => Duration::from_nanos(unanswered.saturating_mul(1_000_000_000) / rate),
        };
        if self.mutations.eager_hold_unbounded {
            return Some(self.eager_activity + Duration::from_secs(1));
        }
        Some(self.eager_activity + self.cfg.eager_hold + reading)
    }

    /// Whether send `op` is a TRY still written from the program's buffer (complete once
    /// answered, or at [`Endpoint::release_eager`]).
    pub fn is_eager_borrowed(&self, op: SendId) -> bool {
        self.eager_out.contains_key(&op)
    }

    /// Whether any send is written from the program's buffer.
    pub fn has_eager_borrowed(&self) -> bool {
        !self.eager_out.is_empty()
    }

    /// Frames of send `op` not yet handed to the driver take their payload from `data`.
    fn share_queued(&mut self, op: SendId, data: &Arc<Vec<u8>>) {
        for a in self.actions.iter_mut() {
            if let Action::Transmit { payload, .. } = a {
                if matches!(payload, Payload::Op(o, len) if *o == op && *len == data.len()) {
                    *payload = Payload::Shared(data.clone());
                }
            }
        }
    }

    /// Bytes left this rank at `now` (read after the write: writing a window of messages can
    /// take longer than the hold itself). A receiver can answer a TRY only after it read it,
    /// so while sends are written from the program's buffer, their hold
    /// ([`EndpointConfig::eager_hold`](super::EndpointConfig::eager_hold)) counts from the
    /// last write too.
    pub fn on_written(&mut self, now: Duration) {
        if !self.eager_out.is_empty() {
            self.now = self.now.max(now);
            self.eager_activity = self.eager_activity.max(now);
        }
    }

    /// Bytes of a zero-copy DATA frame moved (the receiver is pulling): the rendezvous grace
    /// of the other announced messages starts again, so they stay in place instead of being
    /// copied while the receiver works through them.
    pub fn on_data_moved(&mut self, now: Duration) {
        self.last_get = self.last_get.max(now);
    }

    /// The zero-copy DATA frame of send `op` was written completely: the send is done.
    pub fn on_op_written(&mut self, op: SendId, now: Duration) {
        self.last_get = now;
        if let Some(id) = self.announced.remove(&op) {
            if let Some(m) = self.outbox.get_mut(&id) {
                m.op = None;
            }
            self.actions.push_back(Action::SendDone(op));
        }
    }

    /// The program gave up send `op` (its exchange failed) while `bufs` still holds its bytes:
    /// from now on nothing refers to the program's buffer. A message still waiting for a GET
    /// or for room is copied into the outbox (its serial is spent: leaving it out would hold
    /// up every later message of the flow at a live receiver); one whose zero-copy DATA is
    /// being written stays with the driver, which must copy that frame's payload too.
    pub fn abandon_send(&mut self, op: SendId, bufs: &dyn SendBuffers) {
        // A completion already queued is not reported either.
        self.actions.retain(|a| match a {
            Action::SendDone(o) | Action::Failed(OpRef::Send(o), _) => *o != op,
            _ => true,
        });
        let bytes = bufs.bytes(op);
        // Zero-copy DATA the driver has not taken yet goes out as a copy.
        if let Some(b) = bytes {
            for a in self.actions.iter_mut() {
                if let Action::Transmit { payload, .. } = a {
                    if matches!(payload, Payload::Op(o, len) if *o == op && *len == b.len()) {
                        *payload = Payload::Shared(Arc::new(b.to_vec()));
                    }
                }
            }
        }
        if self.abandon_held(op, bytes) {
            return;
        }
        let waiting = self.waiting_sends.iter().position(|w| w.op == op);
        if let Some(w) = waiting.and_then(|i| self.waiting_sends.remove(i)) {
            if let (Some(b), true) = (bytes, w.peer == self.cfg.rank) {
                // To itself, waiting for inbox room: kept with the never-refused arrivals.
                let arrival = Arrival {
                    source: w.peer,
                    key: w.key,
                    serial: w.serial,
                };
                match self.posted.remove(&arrival) {
                    Some(p) if p.abandoned => {}
                    Some(p) => {
                        self.recv_ids.remove(&p.op);
                        self.actions.push_back(Action::RecvDone {
                            op: p.op,
                            data: Some(b.to_vec()),
                            len: w.len,
                        });
                    }
                    None => {
                        self.overflow.insert(arrival, b.to_vec());
                    }
                }
            } else if let Some(b) = bytes {
                let id = (w.peer, w.key, w.serial);
                self.outbox.insert(
                    id,
                    OutMsg {
                        data: Some(Arc::new(b.to_vec())),
                        op: None,
                        len: w.len,
                        state: OutState::Unsent,
                        since: self.now,
                    },
                );
                self.outbox_bytes += w.len;
                self.unsent.push_back(id);
            }
        }
        if let Some(id) = self.eager_out.remove(&op) {
            match (self.outbox.get_mut(&id), bytes) {
                (Some(m), Some(b)) if b.len() == m.len => {
                    // Its receiver may still refuse it and pull it later.
                    m.data = Some(Arc::new(b.to_vec()));
                    m.op = None;
                    self.outbox_bytes += m.len;
                }
                (Some(_), _) => {
                    // Without its bytes a GET is answered MISS.
                    self.outbox.remove(&id);
                }
                (None, _) => {}
            }
        }
        if let Some(id) = self.announced.remove(&op) {
            if let Some(m) = self.outbox.get_mut(&id) {
                if m.state == OutState::Served {
                    m.op = None;
                    return;
                }
                match bytes {
                    Some(b) if b.len() == m.len => {
                        m.data = Some(Arc::new(b.to_vec()));
                        m.op = None;
                        self.outbox_bytes += m.len;
                    }
                    _ => {
                        // Without its bytes a GET is answered MISS.
                        self.outbox.remove(&id);
                    }
                }
            }
        }
    }

    /// ACCEPT or REFUSE of our message.
    pub(crate) fn on_answer(&mut self, peer: usize, h: &Header) {
        let key = (peer, h.key, h.serial);
        if h.ty == FrameType::Accept {
            // A zero-copy send whose DATA this answers was reported written before (the
            // peer can only answer what it read whole), so the entry simply goes.
            if let Some(m) = self.outbox.remove(&key) {
                if m.data.is_some() {
                    self.outbox_bytes -= m.len;
                }
                // A TRY written from the program's buffer is complete once taken.
                if let Some(op) = m.op.filter(|op| self.eager_out.remove(op).is_some()) {
                    self.eager_activity = self.eager_activity.max(self.now);
                    self.actions.push_back(Action::SendDone(op));
                }
                self.retain_accepted(key, &m);
            }
        } else if let Some(m) = self.outbox.get_mut(&key) {
            m.state = OutState::Refused;
            self.counters.refusals_received += 1;
            if m.op.is_some_and(|op| self.eager_out.contains_key(&op)) {
                self.eager_activity = self.eager_activity.max(self.now);
            }
        }
    }
}

//! The exchange's operations as endpoint operations (rendezvous and zero-copy, T4): new
//! operations are posted, the endpoint's completions and failures land in the exchange, a
//! send's buffer is read (copied into the outbox, or written straight from where it is) and a
//! receive's buffer written only while its exchange is at hand, and a failed exchange is
//! abandoned so that nothing refers to its buffers afterwards.
//!
//! An operation posted to the endpoint is `OpState::Active { serial: id, progress: POSTED }`
//! with `id = generation << 32 | index`; the generation (bumped per exchange that posts
//! something) makes every id unique, so an id of an abandoned exchange never matches an
//! operation of a later one. The state identifies the operation, not its place: a caller may
//! carry a pending operation over into a rebuilt exchange at another index (the
//! fault-tolerance layer does, with its standing control receives). The index is where the
//! lookup starts; an operation that moved is found by a scan.

use ferry_core::{OpState, RecvBuf, SendOp};
use ferry_proto::endpoint::{Action, OpRef, Payload, RecvId, SendBuffers, SendStatus};
use ferry_proto::frame::FrameType;

use super::*;
use crate::link::{After, Dest, ReadState};

/// `OpState::Active::progress` of the operations this transport posted to its endpoint.
pub(super) const POSTED: usize = 0x7cb0;

fn index_of(id: u64) -> usize {
    (id & 0xffff_ffff) as usize
}

fn posted(id: u64) -> OpState {
    OpState::Active {
        serial: id,
        progress: POSTED,
    }
}

/// The exchange's send buffers, by operation id.
pub(super) struct ExBufs<'x, 'a>(pub &'x [SendOp<'a>]);

impl SendBuffers for ExBufs<'_, '_> {
    fn bytes(&self, op: SendId) -> Option<&[u8]> {
        find(self.0, op.0, |s| s.state).map(|i| self.0[i].data)
    }
}

/// Index of the operation of `ops` posted as `id`: at its original index, or wherever it
/// was moved to.
fn find<T>(ops: &[T], id: u64, state: impl Fn(&T) -> OpState) -> Option<usize> {
    let want = posted(id);
    let i = index_of(id);
    if ops.get(i).is_some_and(|o| state(o) == want) {
        return Some(i);
    }
    ops.iter().position(|o| state(o) == want)
}

/// Index of receive `op` in `ex`, if it is still there.
pub(super) fn recv_index(ex: &Exchange<'_>, op: RecvId) -> Option<usize> {
    find(&ex.recvs, op.0, |r| r.state)
}

fn send_index(ex: &Exchange<'_>, op: SendId) -> Option<usize> {
    find(&ex.sends, op.0, |s| s.state)
}

impl TcpTransport {
    /// Whether `peer` is another transport's (hybrid) and its operations are not ours.
    pub(super) fn foreign(&self, peer: usize) -> bool {
        peer < self.size && self.excluded[peer]
    }

    /// Whether every operation of `ex` this transport serves is complete.
    pub(super) fn own_part_complete(&self, ex: &Exchange<'_>) -> bool {
        ex.sends
            .iter()
            .all(|s| s.state == OpState::Done || self.foreign(s.peer))
            && ex
                .recvs
                .iter()
                .all(|r| r.state == OpState::Done || self.foreign(r.peer))
    }

    /// Whether all that `ex` still waits for on this transport is TRY sends written from
    /// their buffers (their call would return now, but for them).
    pub(super) fn only_eager_left(&self, ex: &Exchange<'_>) -> bool {
        let recvs_done = ex
            .recvs
            .iter()
            .all(|r| r.state == OpState::Done || self.foreign(r.peer));
        recvs_done
            && ex.sends.iter().all(|s| match s.state {
                OpState::Done => true,
                _ if self.foreign(s.peer) => true,
                OpState::Active {
                    serial: id,
                    progress: POSTED,
                } => self.ep.is_eager_borrowed(SendId(id)),
                _ => false,
            })
    }

    /// The sends of `ex` written from their buffers get their outbox copies and complete;
    /// queued frames switch to the copies (see `Endpoint::release_eager`).
    pub(super) fn release_eager(&mut self, ex: &Exchange<'_>) {
        for (op, data) in self.ep.release_eager(&ExBufs(&ex.sends)) {
            for l in self.links.values_mut().filter(|l| l.borrowed > 0) {
                l.share_op(op, &data);
            }
        }
    }

    /// Posts the exchange's new operations to the endpoint. One that cannot be posted (its
    /// peer is gone, its message too large) stays new and fails again when the exchange is
    /// progressed again; the others are posted all the same. Returns the first failure.
    pub(super) fn post_new(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let mut first: Option<Error> = None;
        let mut generation = None;
        let now = self.now();
        for i in 0..ex.sends.len() {
            let s = &ex.sends[i];
            if s.state != OpState::New {
                continue;
            }
            let (peer, key, len) = (s.peer, s.key, s.data.len());
            if let Err(e) = check_peer(self.rank, self.size, peer, "send") {
                first.get_or_insert(e);
                continue;
            }
            if self.excluded[peer] {
                continue;
            }
            let g = *generation.get_or_insert_with(|| {
                self.op_gen += 1;
                self.op_gen
            });
            let id = g << 32 | i as u64;
            ex.sends[i].state = posted(id);
            let status = self
                .ep
                .post_send(SendId(id), peer, key, len, now, &ExBufs(&ex.sends));
            match status {
                Ok(SendStatus::Done) => ex.sends[i].state = OpState::Done,
                Ok(SendStatus::Pending) => {}
                Err(e) => {
                    ex.sends[i].state = OpState::New;
                    first.get_or_insert(self.error(e));
                    continue;
                }
            }
            self.stats.record_send(peer, len);
        }
        for i in 0..ex.recvs.len() {
            let r = &ex.recvs[i];
            if r.state != OpState::New {
                continue;
            }
            let (peer, key) = (r.peer, r.key);
            if let Err(e) = check_peer(self.rank, self.size, peer, "recv") {
                first.get_or_insert(e);
                continue;
            }
            if self.excluded[peer] {
                continue;
            }
            let g = *generation.get_or_insert_with(|| {
                self.op_gen += 1;
                self.op_gen
            });
            let id = g << 32 | i as u64;
            ex.recvs[i].state = posted(id);
            if let Err(e) = self.ep.post_recv(RecvId(id), peer, key, now) {
                ex.recvs[i].state = OpState::New;
                first.get_or_insert(self.error(e));
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Carries out what the endpoint asked for. Completions land in `ex`'s operations; the
    /// first failure of one of them is returned once every action was carried out.
    pub(super) fn apply_actions(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let mut first: Option<Error> = None;
        while let Some(a) = self.ep.poll_action() {
            match a {
                Action::Dial { conn, peer } => self.dial(conn, peer),
                Action::Transmit {
                    conn,
                    header,
                    payload,
                } => {
                    let Some(l) = self.links.get_mut(&conn) else {
                        continue;
                    };
                    let zero_copy = matches!(payload, Payload::Op(..));
                    l.push(&header, payload);
                    if zero_copy && !self.borrowing.contains(&conn) {
                        self.borrowing.push(conn);
                    }
                    // ACCEPTs wait for company (see the module documentation).
                    let list = if header.ty == FrameType::Accept {
                        &mut self.dirty
                    } else {
                        &mut self.batch
                    };
                    if !list.contains(&conn) {
                        list.push(conn);
                    }
                }
                Action::ShutdownWrite(conn) | Action::Close(conn) => {
                    let close = matches!(a, Action::Close(_));
                    if let Some(l) = self.links.get_mut(&conn) {
                        l.after = if close {
                            After::Close
                        } else {
                            After::ShutdownWrite
                        };
                        if !self.batch.contains(&conn) {
                            self.batch.push(conn);
                        }
                    }
                }
                Action::Drop(conn) => {
                    tracing::debug!("rank {}: drop {conn:?}", self.rank);
                    self.remove_link(conn)
                }
                Action::SendDone(op) => {
                    if let Some(i) = send_index(ex, op) {
                        ex.sends[i].state = OpState::Done;
                    }
                }
                Action::RecvDone { op, data, len } => {
                    if let Some(i) = recv_index(ex, op) {
                        let r = &mut ex.recvs[i];
                        if let Some(v) = data {
                            let res = match &mut r.buf {
                                // Copied out: the vector serves a later early arrival.
                                RecvBuf::Slice(s) if s.len() == v.len() => {
                                    s.copy_from_slice(&v);
                                    self.spare.give(v);
                                    Ok(())
                                }
                                _ => r.buf.fill_from(v),
                            };
                            if let Err(want) = res {
                                first.get_or_insert(
                                    want.to_error("recv", len)
                                        .on_rank(self.rank)
                                        .with_peer(r.peer),
                                );
                            }
                        }
                        r.state = OpState::Done;
                        self.stats.record_recv(r.peer, len);
                    }
                }
                Action::Failed(op, e) => {
                    let ours = match op {
                        OpRef::Send(s) => send_index(ex, s).is_some(),
                        OpRef::Recv(r) => recv_index(ex, r).is_some(),
                    };
                    if ours {
                        if first.is_none() {
                            first = Some(self.error(e));
                        }
                    } else {
                        tracing::debug!("rank {}: {e} (operation no longer waited for)", self.rank);
                    }
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Where the payload for receive `op` (`len` bytes) goes: its buffer, made `len` long, or
    /// nowhere when the receive is gone or its buffer cannot take the message (the receive
    /// then fails with the reason, and the endpoint consumes the message).
    pub(super) fn recv_dest(
        &mut self,
        op: RecvId,
        len: usize,
        source: usize,
        ex: &mut Exchange<'_>,
    ) -> Dest {
        if let Some(i) = recv_index(ex, op) {
            match ex.recvs[i].buf.prepare(len) {
                Ok(_) => return Dest::Recv(op),
                Err(want) => {
                    ex.recvs[i].state = OpState::Done;
                    if self.pending_error.is_none() {
                        self.pending_error = Some(
                            want.to_error("recv", len)
                                .on_rank(self.rank)
                                .with_peer(source),
                        );
                    }
                }
            }
        }
        self.ep.abandon_recv(op);
        Dest::Discard
    }

    /// Abandons the operations of `ex` that this transport still holds (the exchange failed):
    /// a send's message is copied (into the outbox, or into the frame being written, so a live
    /// receiver still gets it), a receive's message is thrown away when it comes. Afterwards
    /// nothing refers to the exchange's buffers, and its operations never complete (they stay
    /// as they are, so that the failed exchange cannot be mistaken for a finished one).
    /// [`Transport::exchange`] calls it when it fails; a caller that drives
    /// [`Transport::progress_exchange`] itself (hybrid, fault tolerance) calls it when it gives
    /// the exchange up.
    pub fn abandon_ops(&mut self, ex: &mut Exchange<'_>) {
        for i in 0..ex.sends.len() {
            let OpState::Active {
                serial: id,
                progress: POSTED,
            } = ex.sends[i].state
            else {
                continue;
            };
            let op = SendId(id);
            let data = ex.sends[i].data;
            for l in self.links.values_mut().filter(|l| l.borrowed > 0) {
                l.detach_op(op, data);
            }
            self.ep.abandon_send(op, &ExBufs(&ex.sends));
        }
        for i in 0..ex.recvs.len() {
            let OpState::Active {
                serial: id,
                progress: POSTED,
            } = ex.recvs[i].state
            else {
                continue;
            };
            let op = RecvId(id);
            self.ep.abandon_recv(op);
            for l in self.links.values_mut() {
                if let ReadState::Payload { dest, .. } = &mut l.rstate {
                    if matches!(dest, Dest::Recv(o) if *o == op) {
                        *dest = Dest::Discard;
                    }
                }
            }
        }
    }
}

//! The receive side (000 §4.4, M2; T1): matching posted receives, pulls (GET), and the
//! handling of every frame read from an authenticated peer.

use super::*;

impl TcpTransport {
    /// Matches posted receives against what arrived; the GETs of one pass leave together.
    pub(super) fn match_recvs(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let res = self.match_recvs_inner(ex);
        self.flush_batch();
        res
    }

    pub(super) fn match_recvs_inner(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        // Waiting receives were checked against everything stored when nothing was stored
        // since: skip the lookups (they dominated the polling loop's cost).
        let changed = self.stored_epoch != self.seen_epoch;
        self.seen_epoch = self.stored_epoch;
        for i in 0..ex.recvs.len() {
            let r = &mut ex.recvs[i];
            let (serial, progress) = match r.state {
                OpState::Done => continue,
                OpState::Active { .. } if !changed => continue,
                OpState::New => {
                    check_peer(self.rank, self.size, r.peer, "recv")?;
                    if self.excluded[r.peer] {
                        continue;
                    }
                    let serial = self.flows.take_recv_serial(r.peer, r.key);
                    r.state = OpState::Active {
                        serial,
                        progress: WAITING,
                    };
                    (serial, WAITING)
                }
                OpState::Active { serial, progress } => {
                    if r.peer >= self.size || self.excluded[r.peer] {
                        continue;
                    }
                    (serial, progress)
                }
            };
            if progress == RECEIVING {
                continue;
            }
            let arrival = Arrival {
                source: r.peer,
                key: r.key,
                serial,
            };
            let stored = if self.inbox.is_empty() {
                None
            } else {
                self.inbox.take(&arrival)
            };
            let stored = match stored {
                None if !self.overflow.is_empty() => self.overflow.remove(&arrival),
                other => other,
            };
            if let Some(payload) = stored {
                let len = payload.len();
                r.buf.fill_from(payload).map_err(|want| {
                    Error::invalid("recv", format!("message of {len} bytes, buffer of {want}"))
                        .on_rank(self.rank)
                        .with_peer(arrival.source)
                })?;
                r.state = OpState::Done;
                self.stats.record_recv(arrival.source, len);
                continue;
            }
            if progress == WAITING
                && !self.remote.is_empty()
                && self.remote.get(&arrival) == Some(&false)
            {
                // The message waits in the sender's outbox: pull it (000 §4.4.3).
                let peer = arrival.source;
                let conn = self.get_conn(peer, "recv")?;
                if conn.is_none() {
                    // No connection yet: look again next time.
                    self.stored_epoch += 1;
                }
                if let Some(c) = conn {
                    let h = Header::control(
                        FrameType::Get,
                        arrival.key,
                        peer as u32,
                        self.rank as u32,
                        serial,
                    );
                    let Some(conn) = self.conns.get_mut(c).and_then(Option::as_mut) else {
                        continue;
                    };
                    conn.wq.push_back(OutFrame::new(&h, None));
                    conn.outstanding += 1;
                    self.remote.insert(arrival, true);
                    self.count.gets_sent += 1;
                    ex.recvs[i].state = OpState::Active {
                        serial,
                        progress: GET_SENT,
                    };
                    self.batch_push(c);
                }
            }
        }
        Ok(())
    }

    /// Queues an answer to `h`. Message-level answers keep the message's identity (source and
    /// destination of the message); connection-level ones come from this rank.
    pub(super) fn queue_control(&mut self, id: usize, conn: &mut Conn, ty: FrameType, h: &Header) {
        let c = tcp_protocol::answer(ty, h);
        conn.wq.push_back(OutFrame::new(&c, None));
        self.dirty.push(id);
    }

    pub(super) fn on_header(
        &mut self,
        id: usize,
        conn: &mut Conn,
        h: Header,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        let payload_state = |target: Target| ReadState::Payload {
            header: h,
            target,
            done: 0,
        };
        match conn.phase {
            Phase::AwaitHello(_) | Phase::AwaitHelloAck => {
                let want = if matches!(conn.phase, Phase::AwaitHello(_)) {
                    FrameType::Hello
                } else {
                    FrameType::HelloAck
                };
                if h.ty != want {
                    return Ok(Verdict::Fault {
                        cause: format!("expected {want:?} first, got {:?}", h.ty),
                        peer_failed: false,
                    });
                }
                // Handshake payloads are capped at MAX_HELLO_LEN by the decoder.
                conn.rstate = payload_state(Target::Owned(vec![0; h.len as usize]));
                return self.maybe_empty_payload(id, conn, ex);
            }
            Phase::Connecting(_) => {
                return Ok(Verdict::Fault {
                    cause: "data before the connection was established".into(),
                    peer_failed: false,
                })
            }
            _ => {}
        }
        let Some(p) = conn.peer else {
            return Ok(Verdict::Fault {
                cause: "frame on a connection without peer".into(),
                peer_failed: false,
            });
        };
        if let Err(e) = tcp_protocol::check_route(&h, self.rank, p) {
            return Ok(Verdict::Fault {
                cause: e.to_string(),
                peer_failed: false,
            });
        }
        let arrival = Arrival {
            source: h.source as usize,
            key: h.key,
            serial: h.serial,
        };
        match h.ty {
            FrameType::Try | FrameType::Add | FrameType::Data => {
                let len = h.len as usize;
                if h.ty == FrameType::Data {
                    // Only answers to our own GETs are taken: they are bounded by what this
                    // rank asked for, so they may bypass the inbox cap.
                    if self.remote.remove(&arrival) != Some(true) {
                        return Ok(Verdict::Fault {
                            cause: format!("DATA for {arrival:?} that was never requested"),
                            peer_failed: false,
                        });
                    }
                    conn.outstanding = conn.outstanding.saturating_sub(1);
                }
                let alloc_fault = |what: &str| Verdict::Fault {
                    cause: format!(
                        "cannot allocate {len} bytes for {what} announced by rank {p} \
                         (out of memory; tcp.max_message_bytes = {})",
                        self.set.max_msg
                    ),
                    peer_failed: true,
                };
                let target = match find_posted(&ex.recvs, arrival) {
                    Some(i) => {
                        let r = &mut ex.recvs[i];
                        if let RecvBuf::Vec(v) = &mut r.buf {
                            // A peer-announced size is reserved fallibly: too much for memory
                            // is an error naming the peer, never an abort.
                            if v.try_reserve_exact(len.saturating_sub(v.len())).is_err() {
                                return Ok(alloc_fault("a message"));
                            }
                        }
                        match r.buf.prepare(len) {
                            Ok(_) => {
                                r.state = OpState::Active {
                                    serial: h.serial,
                                    progress: RECEIVING,
                                };
                                Target::Direct(i)
                            }
                            Err(want) => {
                                // The program's buffer is wrong (or cannot grow to the
                                // announced length): the message is consumed and the receive
                                // fails with the reason.
                                r.state = OpState::Done;
                                self.pending_error = Some(
                                    want.to_error("recv", len).on_rank(self.rank).with_peer(p),
                                );
                                Target::Discard
                            }
                        }
                    }
                    None if h.ty != FrameType::Try || self.inbox.has_room_for(len) => {
                        match alloc_zeroed(len) {
                            Some(v) => Target::Owned(v),
                            None => return Ok(alloc_fault("an early message")),
                        }
                    }
                    None => Target::Discard,
                };
                conn.rstate = payload_state(target);
                self.maybe_empty_payload(id, conn, ex)
            }
            FrameType::Announce => {
                self.remote.insert(arrival, false);
                self.stored_epoch += 1;
                Ok(Verdict::Keep)
            }
            FrameType::Miss => {
                conn.outstanding = conn.outstanding.saturating_sub(1);
                // Only an abandoned operation withdraws an announced message (the fault-
                // tolerance layer gave up on it after a revoke or a failure elsewhere): the
                // receiver's operation is interrupted the same way, not a protocol breach.
                Err(self.err(
                    ErrorKind::Revoked,
                    "recv",
                    p,
                    format!(
                        "rank {p} no longer holds message {:?} serial {} it announced \
                         (its sending operation was abandoned)",
                        h.key, h.serial
                    ),
                ))
            }
            FrameType::Accept | FrameType::Refuse => {
                conn.outstanding = conn.outstanding.saturating_sub(1);
                let key = (p, h.key, h.serial);
                if h.ty == FrameType::Accept {
                    if let Some(m) = self.outbox.remove(&key) {
                        if let Some(d) = m.data {
                            self.outbox_bytes -= m.len;
                            self.recycle(d);
                        }
                    }
                } else if let Some(m) = self.outbox.get_mut(&key) {
                    m.state = OutState::Refused;
                    self.count.refusals_received += 1;
                }
                Ok(Verdict::Keep)
            }
            FrameType::Get => {
                self.count.gets_served += 1;
                self.last_get = Instant::now();
                let key = (p, h.key, h.serial);
                let Some(m) = self.outbox.get_mut(&key) else {
                    self.queue_control(id, conn, FrameType::Miss, &h);
                    return Ok(Verdict::Keep);
                };
                // The entry stays until the receiver ACCEPTs the DATA: finish() must not say
                // BYE (on another connection, possibly overtaking it) before.
                let d = Header {
                    ty: FrameType::Data,
                    len: m.len as u64,
                    ..h
                };
                let payload = match &m.data {
                    Some(data) => Payload::Shared(data.clone()),
                    None => {
                        // Zero-copy: the payload is still the announcing op's buffer.
                        let announced = OpState::Active {
                            serial: h.serial,
                            progress: SEND_ANNOUNCED,
                        };
                        let op = ex
                            .sends
                            .iter()
                            .position(|s| s.peer == p && s.key == h.key && s.state == announced);
                        let Some(op) = op else {
                            // Its exchange was abandoned (after an error): nothing to send.
                            self.outbox.remove(&key);
                            self.queue_control(id, conn, FrameType::Miss, &h);
                            return Ok(Verdict::Keep);
                        };
                        ex.sends[op].state = OpState::Active {
                            serial: h.serial,
                            progress: SEND_STREAMING,
                        };
                        conn.borrowed += 1;
                        if !self.borrowing.contains(&id) {
                            self.borrowing.push(id);
                        }
                        Payload::Borrowed {
                            op,
                            key: h.key,
                            serial: h.serial,
                            len: m.len,
                        }
                    }
                };
                m.state = OutState::Served;
                conn.wq.push_back(OutFrame {
                    header: d.encode(),
                    payload,
                    off: 0,
                });
                conn.outstanding += 1;
                self.dirty.push(id);
                Ok(Verdict::Keep)
            }
            FrameType::CloseReq => {
                match conn.phase {
                    Phase::Open if conn.outstanding == 0 => {
                        self.queue_control(id, conn, FrameType::CloseAck, &h);
                        conn.phase = Phase::Closing;
                        self.detach(id, p);
                    }
                    Phase::Open => self.queue_control(id, conn, FrameType::CloseNak, &h),
                    Phase::ClosingSent => {
                        self.queue_control(id, conn, FrameType::CloseAck, &h);
                        conn.phase = Phase::Closing;
                    }
                    _ => {}
                }
                Ok(Verdict::Keep)
            }
            FrameType::CloseAck => Ok(if conn.phase == Phase::ClosingSent {
                Verdict::Close
            } else {
                Verdict::Keep
            }),
            FrameType::CloseNak => {
                if conn.phase == Phase::ClosingSent {
                    conn.phase = Phase::Open;
                    if self.peers[p].conn.is_none() {
                        self.peers[p].conn = Some(id);
                    }
                }
                Ok(Verdict::Keep)
            }
            FrameType::Bye => {
                let after = (h.serial > 0)
                    .then(|| (h.serial - 1) as usize)
                    .filter(|&x| x < self.size && x != p);
                if let Some(x) = after {
                    self.blame.get_or_insert(x);
                }
                self.peers[p].status = PeerStatus::Finished(after);
                conn.phase = Phase::Closing;
                self.detach(id, p);
                self.dirty.push(id);
                Ok(Verdict::Keep)
            }
            FrameType::Hello | FrameType::HelloAck => unreachable_frame(),
        }
    }

    pub(super) fn detach(&mut self, id: usize, peer: usize) {
        if self.peers[peer].conn == Some(id) {
            self.peers[peer].conn = None;
        }
    }

    /// Completes a frame whose payload is empty right away.
    pub(super) fn maybe_empty_payload(
        &mut self,
        id: usize,
        conn: &mut Conn,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        if let ReadState::Payload { header, .. } = &conn.rstate {
            if header.len == 0 {
                let ReadState::Payload { header, target, .. } =
                    std::mem::replace(&mut conn.rstate, ReadState::Header)
                else {
                    return Ok(Verdict::Keep);
                };
                return self.on_payload(id, conn, header, target, ex);
            }
        }
        Ok(Verdict::Keep)
    }

    pub(super) fn on_payload(
        &mut self,
        id: usize,
        conn: &mut Conn,
        h: Header,
        target: Target,
        ex: &mut Exchange<'_>,
    ) -> Result<Verdict> {
        match h.ty {
            FrameType::Hello => {
                let Target::Owned(secret) = target else {
                    return Ok(Verdict::Keep);
                };
                match handshake::check_hello(&h, &secret, &self.secret, self.rank, self.size) {
                    Ok(p) if !self.excluded[p] => {
                        conn.peer = Some(p);
                        self.peers[p].n_conns += 1;
                        if self.peers[p].n_conns > 1 {
                            self.dup_pending = true;
                        }
                        conn.phase = Phase::Open;
                        let ack = handshake::hello_ack(self.rank, p, &self.secret);
                        conn.wq
                            .push_back(OutFrame::new(&ack, Some(self.secret.clone())));
                        self.dirty.push(id);
                        if self.peers[p].conn.is_none() || p < self.rank {
                            // A lower rank's connection is the one both keep.
                            self.peers[p].conn = Some(id);
                        }
                        Ok(Verdict::Keep)
                    }
                    Ok(p) => {
                        self.count.strangers += 1;
                        Ok(Verdict::Fault {
                            cause: format!("rank {p} is served by another transport"),
                            peer_failed: false,
                        })
                    }
                    Err(e) => {
                        self.count.strangers += 1;
                        Ok(Verdict::Fault {
                            cause: format!("handshake rejected: {e}"),
                            peer_failed: false,
                        })
                    }
                }
            }
            FrameType::HelloAck => {
                let Target::Owned(secret) = target else {
                    return Ok(Verdict::Keep);
                };
                let peer = conn.peer.unwrap_or(usize::MAX);
                match handshake::check_hello_ack(&h, &secret, &self.secret, self.rank, peer) {
                    Ok(()) => {
                        conn.phase = Phase::Open;
                        let p = &mut self.peers[peer];
                        p.first_failure = None;
                        p.retry_at = None;
                        p.backoff = Duration::from_millis(5);
                        Ok(Verdict::Keep)
                    }
                    Err(e) => Ok(Verdict::Fault {
                        cause: format!("handshake answer rejected: {e}"),
                        peer_failed: true,
                    }),
                }
            }
            FrameType::Try | FrameType::Add | FrameType::Data => {
                let source = h.source as usize;
                let arrival = Arrival {
                    source,
                    key: h.key,
                    serial: h.serial,
                };
                let len = h.len as usize;
                let mut refuse = false;
                match target {
                    Target::Direct(i) if direct_valid(ex, i, &h) => {
                        ex.recvs[i].state = OpState::Done;
                        self.stats.record_recv(source, len);
                    }
                    Target::Direct(_) | Target::Discard => {
                        if self.pending_error.is_none() {
                            refuse = true;
                        }
                    }
                    Target::Owned(v) => {
                        if h.ty == FrameType::Try {
                            match self.inbox.insert(arrival, v) {
                                Ok(()) => self.stored_epoch += 1,
                                Err(MatchError::Full { .. }) => refuse = true,
                                Err(MatchError::Duplicate(..)) => {
                                    return Ok(Verdict::Fault {
                                        cause: format!("duplicate message {arrival:?}"),
                                        peer_failed: false,
                                    })
                                }
                            }
                        } else {
                            self.overflow.insert(arrival, v);
                            self.stored_epoch += 1;
                        }
                    }
                }
                if h.ty == FrameType::Data {
                    if refuse {
                        tracing::warn!(
                            "rank {}: answer to GET {arrival:?} arrived for an abandoned receive",
                            self.rank
                        );
                    }
                    self.queue_control(id, conn, FrameType::Accept, &h);
                } else if refuse {
                    self.count.refusals_sent += 1;
                    self.remote.insert(arrival, false);
                    self.stored_epoch += 1;
                    self.queue_control(id, conn, FrameType::Refuse, &h);
                } else {
                    self.queue_control(id, conn, FrameType::Accept, &h);
                }
                Ok(Verdict::Keep)
            }
            _ => Ok(Verdict::Keep),
        }
    }
}

fn unreachable_frame() -> Result<Verdict> {
    // on_header rejects handshake frames on established connections before dispatching.
    Ok(Verdict::Fault {
        cause: "handshake frame on an established connection".into(),
        peer_failed: false,
    })
}

/// `len` zero bytes, or `None` when memory cannot hold them (never an abort).
fn alloc_zeroed(len: usize) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, 0);
    Some(v)
}

/// Index of the posted receive waiting for exactly this message (M2).
pub(super) fn find_posted(recvs: &[ferry_core::RecvOp<'_>], a: Arrival) -> Option<usize> {
    recvs.iter().position(|r| {
        r.peer == a.source
            && r.key == a.key
            && matches!(r.state, OpState::Active { serial, progress } if serial == a.serial && progress != RECEIVING)
    })
}

pub(super) fn direct_valid(ex: &Exchange<'_>, i: usize, h: &Header) -> bool {
    ex.recvs.get(i).is_some_and(|r| {
        r.peer == h.source as usize
            && r.key == h.key
            && r.state
                == OpState::Active {
                    serial: h.serial,
                    progress: RECEIVING,
                }
    })
}

//! The send side (000 §4.4; T1, T4): serials, the bounded outbox, TRY/ADD/ANNOUNCE, the
//! rendezvous copy after the grace period, recycled outbox buffers.

use super::recv::find_posted;
use super::*;

impl TcpTransport {
    pub(super) fn frame_type_for(&self, key: MsgKey, len: usize) -> FrameType {
        tcp_protocol::request_for(key, len, self.set.eager)
    }

    /// Starts and advances the exchange's sends; the requests of one pass leave together, one
    /// `writev` per connection (T4).
    pub(super) fn start_sends(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let res = self.start_sends_inner(ex);
        self.flush_batch();
        res
    }

    pub(super) fn start_sends_inner(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let Exchange { sends, recvs } = ex;
        // Announced messages are copied into the outbox (and their sends completed) only when
        // nothing else of this exchange is pending and the receiver did not ask within the
        // grace period: a receiver that is ready pulls straight from the program's buffer
        // (zero-copy), one that is not cannot deadlock a blocking send.
        let recvs_done = recvs
            .iter()
            .all(|r| r.state == OpState::Done || r.peer >= self.size || self.excluded[r.peer]);
        let grace = if recvs_done && self.remote.values().any(|&asked| !asked) {
            self.set.policy.spin.max(RNDV_GRACE)
        } else {
            self.set.policy.spin.max(RNDV_GRACE_IDLE)
        };
        for s in sends.iter_mut() {
            let serial = match s.state {
                OpState::Done => continue,
                OpState::New => {
                    check_peer(self.rank, self.size, s.peer, "send")?;
                    if self.excluded[s.peer] {
                        continue;
                    }
                    if s.data.len() as u64 > self.set.max_msg {
                        return Err(Error::invalid(
                            "send",
                            format!(
                                "message of {} bytes exceeds tcp.max_message_bytes = {}",
                                s.data.len(),
                                self.set.max_msg
                            ),
                        )
                        .on_rank(self.rank)
                        .with_peer(s.peer));
                    }
                    let serial = self.flows.take_send_serial(s.peer, s.key);
                    s.state = OpState::Active {
                        serial,
                        progress: 0,
                    };
                    serial
                }
                OpState::Active { serial, progress } => {
                    // Active ops of another transport (hybrid) may name any peer: skip them.
                    if s.peer >= self.size || self.excluded[s.peer] || progress == SEND_STREAMING {
                        continue;
                    }
                    if progress == SEND_ANNOUNCED {
                        let id = (s.peer, s.key, serial);
                        let len = s.data.len();
                        let waited = !matches!(self.outbox.get(&id), Some(m) if m.since.elapsed() < grace)
                            && self.last_get.elapsed() >= grace;
                        let room = self.outbox_bytes.saturating_add(len) <= self.set.outbox_cap
                            || self.outbox_bytes == 0;
                        if recvs_done && waited && room {
                            let data = self.buffer_from(s.data);
                            if let Some(m) = self.outbox.get_mut(&id) {
                                m.data = Some(data);
                                self.outbox_bytes += len;
                            }
                            self.count.rndv_copies += 1;
                            s.state = OpState::Done;
                        }
                        continue;
                    }
                    serial
                }
            };
            let len = s.data.len();
            if s.peer == self.rank {
                // To self: straight into a posted receive, else into the inbox when it has
                // room (the send waits otherwise, like any sender facing a full inbox).
                let arrival = Arrival {
                    source: self.rank,
                    key: s.key,
                    serial,
                };
                if let Some(i) = find_posted(recvs, arrival) {
                    let r = &mut recvs[i];
                    r.buf.fill_from(s.data.to_vec()).map_err(|want| {
                        Error::invalid("recv", format!("message of {len} bytes, buffer of {want}"))
                            .on_rank(self.rank)
                            .with_peer(self.rank)
                    })?;
                    r.state = OpState::Done;
                    self.stats.record_recv(self.rank, len);
                } else if self.inbox.insert(arrival, s.data.to_vec()).is_err() {
                    continue;
                }
                self.stored_epoch += 1;
                self.stats.record_send(self.rank, len);
                s.state = OpState::Done;
                continue;
            }
            if let Some(e) = self.peer_gone("send", s.peer) {
                return Err(e);
            }
            if self.frame_type_for(s.key, len) == FrameType::Announce {
                if let Some(c) = self.get_conn(s.peer, "send")? {
                    let id = (s.peer, s.key, serial);
                    self.outbox.insert(
                        id,
                        OutMsg {
                            data: None,
                            len,
                            state: OutState::Sent,
                            since: Instant::now(),
                        },
                    );
                    let h = Header {
                        ty: FrameType::Announce,
                        key: s.key,
                        source: self.rank as u32,
                        dest: s.peer as u32,
                        serial,
                        len: len as u64,
                    };
                    if let Some(conn) = self.conns.get_mut(c).and_then(Option::as_mut) {
                        conn.wq.push_back(OutFrame::new(&h, None));
                    }
                    self.count.announced += 1;
                    self.batch_push(c);
                    self.stats.record_send(s.peer, len);
                    s.state = OpState::Active {
                        serial,
                        progress: SEND_ANNOUNCED,
                    };
                    continue;
                }
            }
            if self.outbox_bytes.saturating_add(len) > self.set.outbox_cap
                && !self.outbox.is_empty()
            {
                // Full outbox: the send waits while the exchange keeps serving sockets (T1).
                continue;
            }
            let id = (s.peer, s.key, serial);
            let data = self.buffer_from(s.data);
            self.outbox.insert(
                id,
                OutMsg {
                    data: Some(data),
                    len,
                    state: OutState::Unsent,
                    since: Instant::now(),
                },
            );
            self.outbox_bytes += len;
            if !self.transmit(id)? {
                self.unsent.push_back(id);
            }
            self.stats.record_send(s.peer, len);
            s.state = OpState::Done;
        }
        Ok(())
    }

    /// Queues the outbox message `id` on a connection (written at the end of the pass); false
    /// if none is available yet.
    pub(super) fn transmit(&mut self, id: MsgId) -> Result<bool> {
        let (peer, key, serial) = id;
        let Some(c) = self.get_conn(peer, "send")? else {
            return Ok(false);
        };
        let Some(len) = self.outbox.get(&id).map(|m| m.len) else {
            return Ok(true);
        };
        let ty = self.frame_type_for(key, len);
        let Some(msg) = self.outbox.get_mut(&id) else {
            return Ok(true);
        };
        let header = Header {
            ty,
            key,
            source: self.rank as u32,
            dest: peer as u32,
            serial,
            len: len as u64,
        };
        let Some(conn) = self.conns.get_mut(c).and_then(Option::as_mut) else {
            return Ok(false);
        };
        let payload = if ty == FrameType::Announce {
            None
        } else {
            msg.data.clone()
        };
        msg.state = OutState::Sent;
        if ty == FrameType::Announce {
            self.count.announced += 1;
        }
        if ty != FrameType::Announce {
            conn.outstanding += 1;
        }
        conn.wq.push_back(OutFrame::new(&header, payload));
        self.batch_push(c);
        Ok(true)
    }

    /// A shared copy of `data` in a recycled buffer when one is large enough.
    pub(super) fn buffer_from(&mut self, data: &[u8]) -> Arc<Vec<u8>> {
        if data.len() >= SPARE_MIN {
            if let Some(i) = self.spare.iter().position(|v| v.capacity() >= data.len()) {
                let mut v = self.spare.swap_remove(i);
                self.spare_bytes -= v.capacity();
                v.clear();
                v.extend_from_slice(data);
                return Arc::new(v);
            }
        }
        Arc::new(data.to_vec())
    }

    /// Keeps a delivered message's buffer for reuse, within a bounded pool.
    pub(super) fn recycle(&mut self, data: Arc<Vec<u8>>) {
        let Ok(v) = Arc::try_unwrap(data) else {
            return;
        };
        if v.capacity() >= SPARE_MIN
            && self.spare.len() < SPARE_MAX_BUFFERS
            && self.spare_bytes + v.capacity() <= SPARE_MAX_BYTES
        {
            self.spare_bytes += v.capacity();
            self.spare.push(v);
        }
    }
}

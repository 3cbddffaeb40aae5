//! Sending: pushing messages into the rings inline or in fragments, and offering large
//! ones as single-copy descriptors.

use super::*;
use crate::heap;
use crate::ring::HeapDesc;

/// Chunks a pipelined message is cut into at least (while they fit into `chunk_span` slots).
const PIPELINE_DEPTH: usize = 4;

impl ShmTransport {
    // ----- sending -------------------------------------------------------------------------

    /// Pushes what it can of one send; returns the new state.
    pub(super) fn progress_send(
        &mut self,
        l: usize,
        peer: usize,
        key: MsgKey,
        serial: u64,
        progress: usize,
        data: &[u8],
    ) -> Result<OpState> {
        let len = data.len();
        if l == self.me {
            let arrival = Arrival {
                source: peer,
                key,
                serial,
            };
            if !self.given_up.is_empty() && self.given_up.remove(&arrival) {
                // This rank gave up the receive of its own message.
                return Ok(OpState::Done);
            }
            if !self.room_for(len) {
                return Ok(OpState::Active { serial, progress });
            }
            self.inbox.insert(arrival, data.to_vec()).map_err(|e| {
                self.err(ErrorKind::Protocol, "send")
                    .with_peer(peer)
                    .with_source(e)
            })?;
            self.stats.record_send(peer, len);
            return Ok(OpState::Done);
        }
        self.open_tx(l);
        let by_single_copy = self.by_single_copy(data);
        let Some(tx) = self.tx[l].as_mut() else {
            return Err(self.err(ErrorKind::InvalidArgument, "send").with_peer(peer));
        };
        if len <= self.inline_cap {
            let e = Entry {
                typ: T_INLINE,
                key,
                serial,
                total_len: len as u64,
            };
            if tx.push(&e, data) {
                self.wake(l);
                self.stats.record_send(peer, len);
                return Ok(OpState::Done);
            }
            self.blocked[l] = true;
            self.want_space.push(l);
            return Ok(OpState::Active { serial, progress });
        }
        if progress & SETTLED != 0 {
            return Err(self
                .err(ErrorKind::InvalidArgument, "send")
                .with_peer(peer)
                .with_detail(
                    "this send was abandoned when an earlier attempt of its exchange failed",
                ));
        }
        let forced = progress & FORCED_FRAG != 0;
        let progress = progress & !FORCED_FRAG;
        if by_single_copy && !forced {
            let mut progress = progress;
            if progress == 0 {
                let seq = self.cma_next[l];
                if !window_free(tx.ring(), seq) {
                    // Completion window full: wait for the oldest descriptor.
                    self.want_acks.push((l, seq - ACK_WINDOW));
                    return Ok(OpState::Active { serial, progress });
                }
                let desc = encode_desc(&CmaDesc {
                    pid: sys::my_pid(),
                    addr: data.as_ptr() as u64,
                    len: len as u64,
                    seq,
                    heap: heap::find(data).map(|r| HeapDesc {
                        generation: r.generation,
                        fd: r.fd as u64,
                        ino: r.ino,
                        base: r.base as u64,
                        len: r.len as u64,
                    }),
                });
                let e = Entry {
                    typ: T_CMA,
                    key,
                    serial,
                    total_len: len as u64,
                };
                if !tx.push(&e, &desc) {
                    self.blocked[l] = true;
                    self.want_space.push(l);
                    return Ok(OpState::Active { serial, progress });
                }
                self.cma_next[l] = seq + 1;
                self.posted_at[l * ACK_WINDOW as usize + (seq % ACK_WINDOW) as usize] =
                    Instant::now();
                progress = seq as usize + 1;
                self.wake(l);
            }
            let seq = progress as u64 - 1;
            if self.busy[l] {
                // An earlier descriptor of this pass is being copied; see `busy`.
                return Ok(OpState::Active { serial, progress });
            }
            let Some(tx) = self.tx[l].as_ref() else {
                return Err(self.err(ErrorKind::InvalidArgument, "send").with_peer(peer));
            };
            let word = tx.ring().ack(seq);
            let offer = ring::offer_state(word, seq);
            if offer == Offer::Done {
                self.peer_progress[l] = Instant::now();
                self.stats.record_send(peer, len);
                return Ok(OpState::Done);
            }
            if offer == Offer::Claimed {
                // The peer is copying this message right now: it consumes, nothing stalls.
                self.peer_progress[l] = Instant::now();
                self.busy[l] = true;
                self.want_acks.push((l, seq));
                return Ok(OpState::Active { serial, progress });
            }
            let posted = self.posted_at[l * ACK_WINDOW as usize + (seq % ACK_WINDOW) as usize];
            let idle_since = posted.max(self.peer_progress[l]);
            if idle_since.elapsed() >= self.eager_wait {
                // Neither this descriptor nor any other single-copy send to this peer was
                // taken for eager_wait: the peer has not posted the receive (it may itself
                // be blocked in a send to us) or is not running. Withdraw it (unless it
                // claims it right now) and send the data through the ring instead, so a send
                // never waits for its receive to be posted (eager semantics like the TCP
                // backend; no send/send deadlock). Withdrawing by the age of one descriptor
                // alone would also fire while the peer copies the predecessors of a window
                // (half the offers of a 64 x 1 MiB window), paying two copies for nothing.
                if ring::withdraw(word, seq, false) {
                    self.stats.bump("shm single copies withdrawn", 1);
                    return self.progress_send(l, peer, key, serial, FORCED_FRAG, data);
                }
            }
            self.want_acks.push((l, seq));
            return Ok(OpState::Active { serial, progress });
        }
        // Fragments through the ring (2 copies). One fragmented message per ring at a time,
        // so the receiver reassembles one stream per peer; an abandoned stream is closed first.
        if !self.flush_abort(l) {
            self.blocked[l] = true;
            self.want_space.push(l);
            return Ok(OpState::Active {
                serial,
                progress: progress | if forced { FORCED_FRAG } else { 0 },
            });
        }
        match self.frag_owner[l] {
            Some(owner) if owner != (key, serial) => {
                // Waits for the other stream, which a later op of this pass may be pushing:
                // so the peer is not marked blocked.
                return Ok(OpState::Active {
                    serial,
                    progress: progress | if forced { FORCED_FRAG } else { 0 },
                });
            }
            _ => {}
        }
        let chunk_span = (len / (PIPELINE_DEPTH * self.inline_cap)).clamp(1, self.chunk_span);
        let Some(tx) = self.tx[l].as_mut() else {
            return Err(self.err(ErrorKind::InvalidArgument, "send").with_peer(peer));
        };
        let mut off = progress;
        let mut pushed = 0u64;
        // At least PIPELINE_DEPTH chunks per message, so that the receiver's copy overlaps the
        // sender's for all but one chunk (the latency of a medium message), and at most
        // `chunk_span` slots per chunk (one header and one publication per chunk amortised
        // over a large message).
        while off < len {
            // A chunk covers up to `chunk_span` consecutive slots: one header and one
            // publication per chunk instead of per slot, while the receiver copies the
            // previous chunk out (pipelined). At the ring's end a shorter chunk is pushed.
            let span = tx.free_run().min(chunk_span);
            if span == 0 {
                break;
            }
            let chunk = tx.span_cap(span).min(len - off);
            let e = Entry {
                typ: T_FRAG,
                key,
                serial,
                total_len: len as u64,
            };
            if !tx.push_span(&e, &data[off..off + chunk]) {
                break;
            }
            pushed += 1;
            off += chunk;
        }
        if pushed > 0 {
            self.stats.bump("shm fragments sent", pushed);
            self.peer_progress[l] = Instant::now();
            self.wake(l);
        }
        if off == len {
            self.frag_owner[l] = None;
            self.stats.record_send(peer, len);
            return Ok(OpState::Done);
        }
        if off > 0 {
            self.frag_owner[l] = Some((key, serial));
        }
        self.blocked[l] = true;
        self.want_space.push(l);
        Ok(OpState::Active {
            serial,
            progress: off | if forced { FORCED_FRAG } else { 0 },
        })
    }

    pub(super) fn progress_sends(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.blocked.iter_mut().for_each(|b| *b = false);
        self.busy.iter_mut().for_each(|b| *b = false);
        for s in ex.sends.iter_mut() {
            if s.state == OpState::Done {
                continue;
            }
            check_peer(self.rank, self.size, s.peer, "send")?;
            let Some(l) = self.local_of[s.peer] else {
                continue;
            };
            if self.blocked[l] {
                self.waiting.push(l);
                continue;
            }
            let (serial, progress) = match s.state {
                OpState::New => (self.send_flows.take(s.peer, s.key), 0),
                OpState::Active { serial, progress } => (serial, progress),
                OpState::Done => continue,
            };
            s.state = self.progress_send(l, s.peer, s.key, serial, progress, s.data)?;
            if s.state != OpState::Done {
                self.waiting.push(l);
            }
        }
        Ok(())
    }

    /// The lean start of a send to the node-local `peer` (validated): pushed inline when it
    /// fits into the ring right now, without the exchange machinery. Otherwise returns the
    /// flow serial it took: the send goes on as an `Active` operation with that serial and
    /// progress 0 (here or in the hybrid backend's exchange).
    pub fn send_start(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Option<u64> {
        let serial = self.send_flows.take(peer, key);
        if let Some(l) = self.local_of.get(peer).copied().flatten() {
            if l != self.me && data.len() <= self.inline_cap {
                self.open_tx(l);
                if let Some(tx) = self.tx[l].as_mut() {
                    let e = Entry {
                        typ: T_INLINE,
                        key,
                        serial,
                        total_len: data.len() as u64,
                    };
                    if tx.push(&e, data) {
                        self.wake(l);
                        self.stats.record_send(peer, data.len());
                        return None;
                    }
                }
            }
        }
        Some(serial)
    }
}

//! The simulated receiver's steps: taking entries out of the ring, claiming and copying
//! descriptors, posting and giving up receives, and the delivery checks.

use super::*;

impl Sim {
    pub(super) fn receive_one(&mut self) -> Result<(), Violation> {
        let Some(e) = self.consumer.peek() else {
            return Ok(());
        };
        if e.serial != self.popped {
            return Err(Violation(format!(
                "ring entry {} arrived when {} was due (lost, duplicated or reordered)",
                e.serial, self.popped
            )));
        }
        let msg = e.key.tag as usize;
        if msg >= self.bufs.len() {
            return Err(Violation(format!("entry of unknown message {msg}")));
        }
        match e.typ {
            T_FRAG if self.kind[msg] == Kind::Stream => return self.receive_chunk(msg, &e),
            T_INLINE | T_FRAG => {
                let mut data = vec![0u8; MSG_BYTES];
                self.consumer.read_payload(&mut data);
                self.consumer.pop();
                if e.typ == T_FRAG {
                    if !self.awaiting_fragment.contains(&msg) {
                        return Err(Violation(format!("fragment of message {msg} unasked")));
                    }
                    self.awaiting_fragment.retain(|&m| m != msg);
                }
                self.deliver(msg, data)?;
            }
            T_CMA => {
                let mut raw = [0u8; CMA_DESC];
                self.consumer.read_payload(&mut raw);
                self.consumer.pop();
                let d = decode_cma(&raw);
                match ring::claim(self.word(d.seq), d.seq) {
                    Claim::Got => {
                        self.cov.claimed += 1;
                        self.copying.push((d.addr as usize, d.seq, d.heap))
                    }
                    Claim::Withdrawn => {
                        self.cov.withdrawn += 1;
                        self.awaiting_fragment.push(msg)
                    }
                    Claim::Aborted => {
                        self.cov.aborted += 1;
                        self.reported_failed.push(msg)
                    }
                }
            }
            T_ABORT => {
                self.consumer.pop();
                if let Some(p) = self.partial.take_if(|p| p.msg == msg) {
                    if p.target != Target::Discard {
                        self.reported_failed.push(msg);
                    }
                    self.cov.stream_aborted += 1;
                } else if self.awaiting_fragment.contains(&msg) {
                    self.awaiting_fragment.retain(|&m| m != msg);
                    self.reported_failed.push(msg);
                    self.cov.stream_aborted += 1;
                } else {
                    return Err(Violation(format!(
                        "abort of message {msg}, which is not streaming in"
                    )));
                }
            }
            other => return Err(Violation(format!("unknown entry type {other}"))),
        }
        self.popped += 1;
        Ok(())
    }

    /// One chunk of stream `msg` at the head of the ring.
    pub(super) fn receive_chunk(&mut self, msg: usize, e: &Entry) -> Result<(), Violation> {
        let total = e.total_len as usize;
        if self.partial.is_none() {
            let target = if self.given_up[msg] {
                Target::Discard
            } else if msg < self.posted_upto {
                Target::Posted
            } else if self.rng.below(3) != 0 {
                // Receive not posted: left in the ring for now (`defer_early`).
                self.cov.deferred += 1;
                return Ok(());
            } else {
                self.cov.early += 1;
                Target::Early
            };
            self.partial = Some(Partial {
                msg,
                total,
                received: 0,
                buf: vec![0u8; total],
                target,
            });
        }
        let Some(mut p) = self.partial.take() else {
            return Ok(());
        };
        if p.msg != msg || p.total != total {
            return Err(Violation(format!(
                "chunk of message {msg} interleaved with stream {}",
                p.msg
            )));
        }
        let chunk = self.consumer.head_cap().min(total - p.received);
        if p.target != Target::Discard {
            self.consumer
                .read_chunk(&mut p.buf[p.received..p.received + chunk]);
        }
        self.consumer.pop();
        self.popped += 1;
        p.received += chunk;
        if p.received < total {
            self.partial = Some(p);
            return Ok(());
        }
        if p.target == Target::Discard {
            self.cov.discarded += 1;
            return Ok(());
        }
        self.deliver(msg, p.buf)
    }

    /// The receiver posts the receive of the next message.
    pub(super) fn post_one(&mut self) {
        self.posted_upto = (self.posted_upto + 1).min(self.bufs.len());
    }

    /// The receiver gives up a receive (its operation was abandoned): that of the stream
    /// streaming in, if any, else that of a stream not received yet.
    pub(super) fn give_up_one(&mut self) {
        if let Some(p) = self.partial.as_mut() {
            if !self.given_up[p.msg] {
                self.given_up[p.msg] = true;
                p.target = Target::Discard;
                return;
            }
        }
        let open = (0..self.bufs.len()).find(|&m| {
            self.kind[m] == Kind::Stream
                && !self.given_up[m]
                && !self.delivered.contains_key(&m)
                && !self.reported_failed.contains(&m)
        });
        if let Some(m) = open {
            self.given_up[m] = true;
            self.posted_upto = self.posted_upto.max(m + 1);
        }
    }

    pub(super) fn copy_one(&mut self) -> Result<(), Violation> {
        if self.copying.is_empty() {
            return Ok(());
        }
        let i = self.rng.below(self.copying.len() as u64) as usize;
        let (msg, seq, heap) = self.copying.remove(i);
        if let Some(h) = heap {
            // Through the receiver's mapping of the named region (`heap_map.rs`): it must
            // still be the region the sender lent, and it reads even after the sender died.
            if h.generation != self.generation[msg] {
                return Err(Violation(format!(
                    "copy of message {msg} (descriptor {seq}) through a mapping of a region the \
                     sender had freed (generation {} now {})",
                    h.generation, self.generation[msg]
                )));
            }
            self.cov.heap_copies += 1;
            if self.sender_dead {
                self.cov.heap_after_death += 1;
            }
        }
        if self.sender_dead && heap.is_none() {
            // process_vm_readv fails with ESRCH: an error, not data.
            self.reported_failed.push(msg);
        } else {
            let data = self.bufs[msg].clone();
            if data.contains(&POISON) {
                return Err(Violation(format!(
                    "copy of message {msg} (descriptor {seq}) read a buffer the sender had reused"
                )));
            }
            self.deliver(msg, data)?;
        }
        ring::complete(self.word(seq), seq);
        Ok(())
    }

    pub(super) fn deliver(&mut self, msg: usize, data: Vec<u8>) -> Result<(), Violation> {
        if self.given_up[msg] && self.kind[msg] == Kind::Stream {
            return Err(Violation(format!(
                "message {msg} delivered after its receive was given up"
            )));
        }
        if data != want(&self.kind, msg) {
            return Err(Violation(format!(
                "message {msg} delivered with wrong bytes"
            )));
        }
        if self.delivered.insert(msg, data).is_some() {
            return Err(Violation(format!("message {msg} delivered twice")));
        }
        Ok(())
    }
}

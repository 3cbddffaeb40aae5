//! Control messages in and out: failure notices and revokes (flooded per communicator),
//! agreements, and the process-wide LEAVE and ABORT.
//!
//! A failure is a fact about a process, so every communicator learns it, but its notice is
//! flooded only on the communicators that contain the failed rank: the rank that detects a
//! failure floods it on each of its communicators that contain it; a rank told by a notice
//! on one communicator floods it on its other communicators that contain the failed rank,
//! unless the notice's origin is a live member of them (the origin floods there itself; if it
//! dies first, this rank does, see `Engine::delegated`). A revoke concerns one communicator
//! generation and is flooded on it alone.

use std::collections::BTreeSet;

use ferry_core::{Error, ErrorKind, Exchange, OpState, Result};
use ferry_proto::ft::{peek_instance, Agreement, Decision};

use super::table::Route;
use super::{CommId, Engine, Interest, Outgoing, KEPT_AGREEMENTS, MAX_EARLY};
use crate::wire::{self, Notice};

impl Engine {
    /// Collects what the protocols of every communicator want to send.
    pub(super) fn pump(&mut self) {
        let mut new = Vec::new();
        for c in self.comms.values_mut().chain(self.retired.iter_mut()) {
            let id = c.id;
            for (g, f) in c.floods.iter_mut() {
                while let Some((to, bytes)) = f.poll_transmit() {
                    new.push((to as usize, wire::envelope(wire::FLOOD, id, *g, &bytes)));
                }
            }
            for a in c.agreements.iter_mut() {
                let g = (a.instance() >> 32) as u32;
                while let Some((to, bytes)) = a.poll_transmit() {
                    tracing::trace!(
                        "rank {}: agreement {id}:{:#x} -> rank {to}: {:?}",
                        self.me,
                        a.instance(),
                        &bytes[..bytes.len().min(24)]
                    );
                    new.push((to as usize, wire::envelope(wire::AGREE, id, g, &bytes)));
                }
            }
        }
        for (to, data) in new {
            if to == self.me
                || self.failed.contains(&to)
                || self.left.contains(&to)
                || to >= self.t.size()
            {
                continue;
            }
            self.out.push(Outgoing {
                peer: to,
                data,
                state: OpState::New,
            });
        }
    }

    /// Floods a notice on the current generation of communicator `id`.
    fn originate(&mut self, id: CommId, notice: Notice) {
        if self.plain {
            return;
        }
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if let Notice::Failed(r) = notice {
            c.notified.insert(r as usize);
        }
        let g = c.generation;
        if let Some(f) = c.flood(g) {
            f.originate(&notice.encode());
        }
        self.pump();
    }

    /// Revokes generation `generation` of communicator `id` everywhere (F4); the other
    /// communicators are not concerned.
    pub fn revoke(&mut self, id: CommId, generation: u32) {
        let Some(c) = self.comms.get_mut(&id) else {
            return;
        };
        if c.revoked.insert(generation) && generation == c.generation {
            self.originate(id, Notice::Revoked);
            self.flush_sends();
        }
    }

    /// Records that `rank` failed; `by` is the rank that told us (None: seen here, or
    /// agreed), `via` the communicator whose notice or agreement told us. The notice is
    /// flooded on the communicators that contain `rank` and have not carried it yet (see the
    /// module doc for who floods where).
    pub fn note_failure(&mut self, rank: usize, by: Option<usize>, via: Option<CommId>) {
        self.record_failure(rank, by, via, true);
    }

    /// As [`Engine::note_failure`]; `flood: false` floods nothing (ABORT: the rank that ends
    /// the job tells every peer itself).
    fn record_failure(&mut self, rank: usize, by: Option<usize>, via: Option<CommId>, flood: bool) {
        if rank == self.me {
            return;
        }
        if let Some(c) = via.and_then(|v| self.comms.get_mut(&v)) {
            c.notified.insert(rank);
        }
        if !self.failed.insert(rank) {
            return;
        }
        self.told_by.insert(rank, by);
        tracing::debug!(
            "rank {}: rank {rank} failed ({})",
            self.me,
            by.map_or("detected here".to_string(), |b| format!(
                "notice from rank {b}"
            ))
        );
        self.watch.remove(&rank);
        self.out.retain(|o| o.peer != rank);
        for c in self.comms.values_mut().chain(self.retired.iter_mut()) {
            for (_, f) in c.floods.iter_mut() {
                f.on_failure(rank as u32);
            }
            for a in c.agreements.iter_mut() {
                a.on_failure(rank as u32);
            }
        }
        if !flood {
            self.pump();
            return;
        }
        let mut flood_on = Vec::new();
        for c in self.comms.values() {
            if Some(c.id) == via || !c.has(rank) || c.notified.contains(&rank) {
                continue;
            }
            match by {
                Some(o) if o != rank && c.has(o) && !self.failed.contains(&o) => {
                    self.delegated.push((rank, c.id, o));
                }
                _ => flood_on.push(c.id),
            }
        }
        // Notices whose origin this was, not seen yet on a communicator it was to flood.
        let mut orphaned = Vec::new();
        self.delegated.retain(|&(r, id, o)| {
            if o == rank {
                orphaned.push((r, id));
                false
            } else {
                true
            }
        });
        for (r, id) in orphaned {
            if self
                .comms
                .get(&id)
                .is_some_and(|c| c.has(r) && !c.notified.contains(&r))
            {
                self.originate(id, Notice::Failed(r as u32));
            }
        }
        for id in flood_on {
            self.originate(id, Notice::Failed(rank as u32));
        }
        self.pump();
    }

    /// Feeds one control message from `from` to the protocol of its communicator.
    pub(super) fn on_control(&mut self, from: usize, msg: Vec<u8>) {
        self.control_received += 1;
        let Some(env) = wire::open(&msg) else {
            tracing::warn!(
                "rank {}: malformed control message from rank {from}",
                self.me
            );
            return;
        };
        if env.kind == wire::ABORT {
            let rank = env
                .body
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(|b| u32::from_le_bytes(b) as usize);
            // The sender ends because of `rank`; its own end follows this message.
            if let Some(r) = rank.filter(|&r| r < self.t.size()) {
                self.record_failure(r, Some(from), None, false);
            }
            self.aborted.insert(from);
            self.record_failure(from, Some(from), None, false);
            return;
        }
        if env.kind == wire::LEAVE {
            self.watch.remove(&from);
            self.out.retain(|o| o.peer != from);
            self.left.insert(from);
            return;
        }
        let (id, generation) = (env.comm, env.generation);
        let route = self.route(id, generation);
        let state = match route {
            Route::Active => self.comms.get_mut(&id),
            Route::Retired(i) => self.retired.get_mut(i),
            Route::Early => {
                if self.early.len() < MAX_EARLY {
                    self.early.push((from, msg));
                }
                return;
            }
            Route::Stale => return,
        };
        let Some(c) = state else {
            return;
        };
        if env.kind == wire::FLOOD {
            let Some(f) = c.flood(generation) else {
                return; // a generation long gone
            };
            let delivered = match f.on_message(from as u32, env.body) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("rank {}: flood message from rank {from}: {e}", self.me);
                    return;
                }
            };
            if let Some((origin, payload)) = delivered {
                match Notice::decode(&payload) {
                    Some(Notice::Failed(r)) => {
                        let via = (route == Route::Active).then_some(id);
                        self.note_failure(r as usize, Some(origin as usize), via)
                    }
                    Some(Notice::Revoked) => {
                        if route == Route::Active {
                            c.revoked.insert(generation);
                        }
                    }
                    None => {
                        tracing::warn!("rank {}: malformed notice from rank {origin}", self.me)
                    }
                }
            }
        } else {
            let Ok(instance) = peek_instance(env.body) else {
                tracing::warn!(
                    "rank {}: malformed agreement message from rank {from}",
                    self.me
                );
                return;
            };
            tracing::trace!(
                "rank {}: agreement {id}:{instance:#x} <- rank {from}: {:?}",
                self.me,
                &env.body[..env.body.len().min(24)]
            );
            if let Some(a) = c.agreements.iter_mut().find(|a| a.instance() == instance) {
                if let Err(e) = a.on_message(from as u32, env.body) {
                    tracing::warn!("rank {}: agreement message from rank {from}: {e}", self.me);
                }
            } else if route == Route::Active
                && instance >= c.next_instance()
                && self.early.len() < MAX_EARLY
            {
                self.early.push((from, msg));
            }
        }
        self.pump();
    }

    /// Fault-tolerant agreement among the live members of the current generation of
    /// communicator `id` on the AND of `value` and on the set of failed ranks (F4). Every
    /// survivor returns the same.
    pub fn agree(&mut self, id: CommId, value: u64) -> Result<Decision> {
        let me = self.me;
        let Some(c) = self.comms.get_mut(&id) else {
            return Err(Error::new(ErrorKind::InvalidArgument, "agree")
                .on_rank(me)
                .with_detail(format!("communicator {id} was freed")));
        };
        let instance = c.next_instance();
        c.agree_seq += 1;
        let members: Vec<u32> = c.live.iter().map(|&r| r as u32).collect();
        let known: BTreeSet<u32> = self
            .failed
            .iter()
            .filter(|r| c.has(**r))
            .map(|&r| r as u32)
            .collect();
        tracing::debug!(
            "rank {me}: agreement {id}:{}:{} starts (value {value:#x}, known failed {known:?})",
            instance >> 32,
            instance & 0xffff_ffff
        );
        let a = Agreement::new(me as u32, &members, instance, value, &known);
        c.agreements.push_back(a);
        while c.agreements.len() > KEPT_AGREEMENTS {
            c.agreements.pop_front();
        }
        let generation = c.generation;
        // Messages that came before this rank got here.
        self.replay_early();
        self.pump();
        let interest = Interest {
            comm: id,
            generation,
            ranks: Vec::new(),
            op: "agree",
            revocable: false,
            timeout: false,
        };
        let decided = |e: &Engine| {
            e.comms.get(&id).is_some_and(|c| {
                c.agreements
                    .iter()
                    .any(|a| a.instance() == instance && a.decision().is_some())
            })
        };
        let mut ex = Exchange::new();
        self.drive(&mut ex, &interest, &decided)?;
        let d = self
            .comms
            .get(&id)
            .and_then(|c| c.agreements.iter().find(|a| a.instance() == instance))
            .and_then(|a| a.decision())
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::Protocol, "agree").on_rank(me))?;
        tracing::debug!(
            "rank {me}: agreement {id}:{}:{} decided {:#x}, failed {:?}",
            instance >> 32,
            instance & 0xffff_ffff,
            d.value,
            d.failed
        );
        for &r in &d.failed {
            // Agreed failures are facts for this rank too (someone saw them); the members of
            // this communicator all know them now, the other communicators may not.
            self.note_failure(r as usize, None, Some(id));
        }
        self.pump();
        Ok(d)
    }
}

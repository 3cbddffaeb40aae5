//! The in-memory backend: ranks are threads of one process, connected by channels.
//!
//! Not selectable through `FERRY_BACKEND`; it exists so that collectives and the data layer can
//! be tested with many ranks in one test process (threads-as-ranks), independent of sockets.

use std::sync::Arc;
use std::time::Duration;

use crossbeam::channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use ferry_proto::{Arrival, EarlyArrivals, FifoFlows, MsgKey};

use crate::error::{Error, ErrorKind, Result};
use crate::shared::{HeapShared, SharedMemory};
use crate::stats::Stats;
use crate::transport::{check_peer, Exchange, OpState, RetiredFlows, Transport, WaitPolicy};

/// A message on its way. It carries no flow serial: each rank's channel delivers every
/// sender's packets in send order, so the receiver numbers them on arrival ([`FifoFlows`]).
struct Packet {
    source: usize,
    key: MsgKey,
    payload: Vec<u8>,
}

/// One rank of an in-memory job.
pub struct MemTransport {
    rank: usize,
    peers: Vec<Sender<Packet>>,
    incoming: Receiver<Packet>,
    flows: FifoFlows,
    inbox: EarlyArrivals,
    stats: Stats,
    policy: WaitPolicy,
    shared: Arc<HeapShared>,
}

impl MemTransport {
    /// Creates the `size` ranks of one job; hand one to each thread.
    pub fn create_job(size: usize) -> Vec<MemTransport> {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..size).map(|_| unbounded()).unzip();
        receivers
            .into_iter()
            .zip(HeapShared::for_job(size))
            .enumerate()
            .map(|(rank, (incoming, shared))| MemTransport {
                rank,
                peers: senders.clone(),
                incoming,
                flows: FifoFlows::new(),
                inbox: EarlyArrivals::new(usize::MAX, usize::MAX),
                stats: Stats::new(rank, size, "mem"),
                policy: WaitPolicy {
                    spin: Duration::from_micros(20),
                    timeout: Some(Duration::from_secs(30)),
                    failure_timeout: Duration::from_secs(10),
                    // Ranks are threads that may outnumber cores.
                    yield_each_poll: crate::config::oversubscribed(
                        size,
                        crate::config::host_cores(),
                    ),
                    // Threads of one process share its affinity mask: never one core each.
                    spin_yields: true,
                },
                shared: Arc::new(shared),
            })
            .collect()
    }

    /// Runs `f` on `size` threads, one rank each, and returns their results in rank order.
    pub fn run<R, F>(size: usize, f: F) -> Vec<R>
    where
        R: Send,
        F: Fn(MemTransport) -> R + Sync,
    {
        let ranks = MemTransport::create_job(size);
        std::thread::scope(|scope| {
            let handles: Vec<_> = ranks
                .into_iter()
                .map(|t| {
                    let f = &f;
                    scope.spawn(move || f(t))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(p) => std::panic::resume_unwind(p),
                })
                .collect()
        })
    }

    fn stash(&mut self, p: Packet) -> Result<()> {
        let arrival = Arrival {
            source: p.source,
            key: p.key,
            serial: self.flows.arrive(p.source, p.key),
        };
        self.inbox.insert(arrival, p.payload).map_err(|e| {
            Error::new(ErrorKind::Protocol, "recv")
                .on_rank(self.rank)
                .with_peer(p.source)
                .with_source(e)
        })
    }
}

impl Transport for MemTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.peers.len()
    }

    fn name(&self) -> &'static str {
        "mem"
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.stats.calls += 1;
        let size = self.size();
        for s in ex.sends.iter_mut().filter(|s| s.state == OpState::New) {
            check_peer(self.rank, size, s.peer, "send")?;
            let packet = Packet {
                source: self.rank,
                key: s.key,
                payload: s.data.to_vec(),
            };
            self.peers[s.peer].send(packet).map_err(|_| {
                Error::new(ErrorKind::PeerFailed, "send")
                    .on_rank(self.rank)
                    .with_peer(s.peer)
            })?;
            self.stats.record_send(s.peer, s.data.len());
            s.state = OpState::Done;
        }
        while let Ok(p) = self.incoming.try_recv() {
            self.stash(p)?;
        }
        for r in ex.recvs.iter_mut() {
            let serial = match r.state {
                OpState::Done => continue,
                OpState::New => {
                    check_peer(self.rank, size, r.peer, "recv")?;
                    let serial = self.flows.post(r.peer, r.key);
                    r.state = OpState::Active {
                        serial,
                        progress: 0,
                    };
                    serial
                }
                OpState::Active { serial, .. } => serial,
            };
            let arrival = Arrival {
                source: r.peer,
                key: r.key,
                serial,
            };
            if let Some(payload) = self.inbox.take(&arrival) {
                self.flows.taken(r.peer, r.key);
                let len = payload.len();
                r.buf.fill_from(payload).map_err(|want| {
                    want.to_error("recv", len)
                        .on_rank(self.rank)
                        .with_peer(r.peer)
                })?;
                self.stats.record_recv(r.peer, len);
                r.state = OpState::Done;
            }
        }
        Ok(ex.is_complete())
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        match self.incoming.recv_timeout(timeout) {
            Ok(p) => self.stash(p),
            Err(RecvTimeoutError::Timeout) => Ok(()),
            Err(RecvTimeoutError::Disconnected) => Err(Error::new(ErrorKind::PeerFailed, "recv")
                .on_rank(self.rank)
                .with_detail("every peer is gone")),
        }
    }

    fn retire_flows(&mut self, flows: RetiredFlows) {
        self.flows.retire_where(|k| flows.contains(k));
    }

    fn flow_count(&self) -> Option<usize> {
        Some(self.flows.len())
    }

    fn stats(&self) -> Stats {
        self.stats.clone()
    }

    fn shared_memory(&self) -> Option<Arc<dyn SharedMemory>> {
        Some(self.shared.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_exchange_on_threads() {
        let out = MemTransport::run(4, |mut t| {
            let r = t.rank();
            let n = t.size();
            let msg = [r as u8];
            let mut got = Vec::new();
            let mut ex = Exchange::new();
            ex.send((r + 1) % n, MsgKey::user(0), &msg);
            ex.recv((r + n - 1) % n, MsgKey::user(0), &mut got);
            t.exchange(&mut ex).unwrap();
            drop(ex);
            got[0]
        });
        assert_eq!(out, vec![3, 0, 1, 2]);
    }

    /// A ring on a new tag per iteration keeps every rank's flows at what is in flight, and
    /// tags reused in a second round start again in order (the contents differ per round).
    #[test]
    fn new_tag_per_iteration_keeps_flows_flat() {
        let out = MemTransport::run(4, |mut t| {
            let (r, n) = (t.rank(), t.size());
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            let mut max_flows = 0;
            for round in 0..2u32 {
                for tag in 0..5_000u32 {
                    let mut got = Vec::new();
                    let mut ex = Exchange::new();
                    let mine = (tag ^ round).to_le_bytes();
                    ex.send(next, MsgKey::user(tag), &mine);
                    ex.recv(prev, MsgKey::user(tag), &mut got);
                    t.exchange(&mut ex).unwrap();
                    drop(ex);
                    assert_eq!(got, mine, "rank {r} tag {tag} round {round}");
                    max_flows = max_flows.max(t.flow_count().unwrap());
                }
            }
            max_flows
        });
        // A rank's predecessor can be up to size - 1 iterations ahead (a ring only couples
        // neighbours), so that many flows may have a message waiting, plus the one receiving.
        for (rank, max) in out.iter().enumerate() {
            assert!(*max <= 4, "rank {rank}: up to {max} flows");
        }
    }
}

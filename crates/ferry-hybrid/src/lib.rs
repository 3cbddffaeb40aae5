//! `HybridTransport`: shared memory between ranks of one node, TCP between nodes (S2; the
//! "secondary backend" of 001 §3.4, built by composition instead of action substitution).
//!
//! Both transports see the same [`Exchange`]: each skips the operations whose peer it does not
//! serve, so one exchange mixes node-local and remote traffic and still progresses all of it
//! together. Nodes are told apart by `FERRY_NODE`, else the host name; the node map is
//! gathered through the job's rendezvous store (001 §4.2.2 does the same through the primary
//! backend), so every rank computes the same `node_of`. Node `k`'s segment is named after the
//! job and `k`.
//!
//! Every blocking operation, node-local ones included, runs in this transport's own progress
//! loop and never in one of the two parts alone: a rank owes its peers progress on both sides
//! while it waits for either. A completed TCP send may still wait in the outbox for the
//! receiver's GET, and a node mate's send completes only while this rank drains its ring; a
//! rank that waited for a node mate inside the shm transport alone (or for a remote rank
//! inside TCP alone) could leave the peer that its own partner waits for stuck.
//!
//! This crate sits above both transports: `ferry-shm` and `ferry-tcp` know nothing of each
//! other, and the hybrid reaches them only through their public constructors
//! ([`ShmTransport::join_node`], [`TcpTransport::from_store_excluding`]).

use std::time::Duration;

use ferry_core::transport::{check_peer, drive_exchange};
use ferry_core::{
    Config, Error, Exchange, LaunchInfo, MsgKey, OpState, RecvBuf, RecvOp, Result, RetiredFlows,
    SendOp, Stats, Store, Transport, WaitPolicy,
};
use ferry_shm::ShmTransport;
use ferry_tcp::TcpTransport;

/// How long a rank waiting for both node-local and remote input blocks in TCP's poll before it
/// looks at its shared-memory rings again (shm peers do not wake a rank blocked in epoll), and
/// how long one waiting for node-local input only sleeps on shm before it serves its TCP peers
/// (sockets do not ring shm's doorbell).
const MIXED_WAIT_SLICE: Duration = Duration::from_millis(1);

/// Which transports the last progress pass still waited for.
#[derive(Debug, Clone, Copy, Default)]
struct Pending {
    local: bool,
    remote: bool,
}

/// One rank of a job spread over several nodes.
pub struct HybridTransport {
    shm: ShmTransport,
    tcp: TcpTransport,
    node: Vec<usize>,
    rank: usize,
    size: usize,
    calls: u64,
    pending: Pending,
    policy: WaitPolicy,
    /// Whether the job has ranks on other nodes (TCP peers to serve while waiting on shm).
    multi_node: bool,
    /// Operation vectors of the point-to-point calls, recycled (no allocation per message).
    spare_sends: Vec<SendOp<'static>>,
    spare_recvs: Vec<RecvOp<'static>>,
}

impl std::fmt::Debug for HybridTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("node", &self.node)
            .finish()
    }
}

impl HybridTransport {
    /// Builds this rank from the launcher's environment (`FERRY_RANK`, `FERRY_SIZE`,
    /// `FERRY_JOB_ID`, `FERRY_SECRET`, `FERRY_NODE`) and its rendezvous `store`.
    pub fn from_env(config: &Config, launch: &LaunchInfo, store: &dyn Store) -> Result<Self> {
        let need = |what: &str| {
            Error::config(format!(
                "the hybrid backend needs {what} (normally set by `ferry run`)"
            ))
        };
        let rank = launch.rank.ok_or_else(|| need("FERRY_RANK"))?;
        let size = launch.size.ok_or_else(|| need("FERRY_SIZE"))?;
        let job = launch
            .job_id
            .as_deref()
            .ok_or_else(|| need("FERRY_JOB_ID"))?;
        let secret = launch
            .secret
            .clone()
            .or_else(|| config.tcp.secret.clone())
            .unwrap_or_default();
        HybridTransport::from_store(rank, size, &launch.node_name(), job, store, config, &secret)
    }

    /// Builds rank `rank` of `size` on node `node_name` of job `job`: publishes the node name
    /// in `store`, reads everybody's, joins the node's segment and connects TCP for the ranks
    /// of other nodes.
    pub fn from_store(
        rank: usize,
        size: usize,
        node_name: &str,
        job: &str,
        store: &dyn Store,
        config: &Config,
        secret: &str,
    ) -> Result<Self> {
        HybridTransport::from_store_watched(
            rank,
            size,
            node_name,
            job,
            store,
            config,
            secret,
            &|| None,
        )
    }

    /// [`HybridTransport::from_store`] whose wait for the node's other ranks to attach gives
    /// up when `watch` returns an error (see [`ShmTransport::join_node_watched`]); the waits
    /// for the store's keys are the store's own.
    #[allow(clippy::too_many_arguments)] // from_store's arguments plus the watch
    pub fn from_store_watched(
        rank: usize,
        size: usize,
        node_name: &str,
        job: &str,
        store: &dyn Store,
        config: &Config,
        secret: &str,
        watch: ferry_shm::StartupWatch<'_>,
    ) -> Result<Self> {
        if rank >= size {
            return Err(Error::invalid(
                "hybrid init",
                format!("rank {rank} of {size} ranks"),
            ));
        }
        store
            .set(&format!("shm/node/{rank}"), node_name.as_bytes())
            .map_err(|e| e.context("hybrid init").or_rank(rank))?;
        let mut names: Vec<Vec<u8>> = Vec::with_capacity(size);
        for r in 0..size {
            let v = if r == rank {
                node_name.as_bytes().to_vec()
            } else {
                store
                    .get(&format!("shm/node/{r}"), config.startup_timeout())
                    .map_err(|e| e.context("hybrid init").or_rank(rank).with_peer(r))?
            };
            names.push(v);
        }
        let node = node_numbers(&names);
        let mine = node[rank];
        let members: Vec<usize> = (0..size).filter(|&r| node[r] == mine).collect();
        let shm =
            ShmTransport::join_node_watched(job, mine, members.clone(), rank, size, config, watch)
                .map_err(|e| e.or_rank(rank))?;
        let tcp = TcpTransport::from_store_excluding(rank, size, store, config, secret, &members)?;
        if rank == 0 {
            let nodes = node.iter().max().map_or(0, |m| m + 1);
            tracing::info!(ranks = size, nodes, "hybrid: job started");
        }
        Ok(HybridTransport {
            shm,
            tcp,
            multi_node: members.len() < size,
            spare_sends: Vec::new(),
            spare_recvs: Vec::new(),
            node,
            rank,
            size,
            calls: 0,
            pending: Pending::default(),
            policy: config.wait_policy(ferry_core::config::local_ranks_hint(size)),
        })
    }

    fn is_local(&self, peer: usize) -> bool {
        self.node.get(peer) == self.node.get(self.rank)
    }

    /// Number of nodes of the job.
    pub fn nodes(&self) -> usize {
        self.node.iter().max().map_or(0, |m| m + 1)
    }

    /// shm's lean start of a send to a node-local peer (an inline push when the ring has
    /// room): None when it is complete, else the state it goes on with in [`Self::drive_ops`].
    /// Sends to other nodes start there.
    fn start_send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Option<OpState> {
        if !self.is_local(peer) {
            return Some(OpState::New);
        }
        let serial = self.shm.send_start(peer, key, data)?;
        Some(OpState::Active {
            serial,
            progress: 0,
        })
    }

    /// shm's lean start of a receive from a node-local peer (bounded spinning, never
    /// blocking): like [`Self::start_send`].
    fn start_recv(
        &mut self,
        peer: usize,
        key: MsgKey,
        buf: &mut RecvBuf<'_>,
    ) -> Result<Option<OpState>> {
        if !self.is_local(peer) {
            return Ok(Some(OpState::New));
        }
        Ok(self
            .shm
            .recv_start(peer, key, buf)?
            .map(|serial| OpState::Active {
                serial,
                progress: 0,
            }))
    }

    /// Runs the operations `fill` adds to a recycled exchange in this transport's own
    /// progress loop, so both transports progress while it waits (see the module doc).
    fn drive_ops<'a>(&mut self, fill: impl FnOnce(&mut Exchange<'a>)) -> Result<()> {
        let mut ex = Exchange::from_parts(
            std::mem::take(&mut self.spare_sends),
            std::mem::take(&mut self.spare_recvs),
        );
        fill(&mut ex);
        // A failed operation is over: its node-local part is settled and given up (a
        // fragmented send left open would hold its ring's stream, and a receive's remaining
        // fragments would meet the next exchange); TCP copies what it still owes other nodes.
        let result = drive_exchange(self, &mut ex).inspect_err(|e| {
            self.shm.abandon(&mut ex, e);
            self.tcp.abandon_ops(&mut ex);
        });
        (self.spare_sends, self.spare_recvs) = ex.into_parts();
        result
    }
}

/// Numbers node names 0, 1, ... in order of their lowest rank, so every rank derives the same
/// numbering from the same list.
fn node_numbers(names: &[Vec<u8>]) -> Vec<usize> {
    let mut seen: Vec<&[u8]> = Vec::new();
    names
        .iter()
        .map(|n| match seen.iter().position(|s| *s == n.as_slice()) {
            Some(i) => i,
            None => {
                seen.push(n);
                seen.len() - 1
            }
        })
        .collect()
}

impl Transport for HybridTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn name(&self) -> &'static str {
        "hybrid"
    }

    fn node_of(&self, rank: usize) -> usize {
        self.node.get(rank).copied().unwrap_or(0)
    }

    /// The node's shared memory (S3): the data layer shares containers between the ranks of
    /// one node and sends messages to the others.
    fn shared_memory(&self) -> Option<std::sync::Arc<dyn ferry_core::SharedMemory>> {
        self.shm.shared_memory()
    }

    fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.shm.progress_exchange(ex)?;
        self.tcp.progress_exchange(ex)?;
        let mut p = Pending::default();
        let sends = ex
            .sends
            .iter()
            .filter(|s| s.state != OpState::Done)
            .map(|s| s.peer);
        let recvs = ex
            .recvs
            .iter()
            .filter(|r| r.state != OpState::Done)
            .map(|r| r.peer);
        for peer in sends.chain(recvs) {
            if self.is_local(peer) {
                p.local = true;
            } else {
                p.remote = true;
            }
        }
        self.pending = p;
        Ok(!p.local && !p.remote)
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        match (self.pending.local, self.pending.remote) {
            (true, false) if !self.multi_node => self.shm.wait_for_input(timeout),
            (true, false) => {
                // Remote peers may need this rank while it waits for node-local ones.
                self.shm.wait_for_input(timeout.min(MIXED_WAIT_SLICE))?;
                self.tcp.serve_peers()
            }
            (false, true) => self.tcp.wait_for_input(timeout),
            _ => {
                self.tcp.wait_for_input(timeout.min(MIXED_WAIT_SLICE))?;
                // Node-local peers are not watched while blocked in TCP's poll.
                self.shm.check_liveness_if_due()
            }
        }
    }

    fn exchange(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.calls += 1;
        // No peer may still read or write the caller's buffers (no use after failure).
        drive_exchange(self, ex).inspect_err(|e| {
            self.shm.abandon(ex, e);
            self.tcp.abandon_ops(ex);
        })
    }

    fn send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        self.calls += 1;
        check_peer(self.rank, self.size, peer, "send")?;
        let Some(state) = self.start_send(peer, key, data) else {
            return Ok(());
        };
        self.drive_ops(|ex| {
            ex.sends.push(SendOp {
                peer,
                key,
                data,
                state,
            })
        })
    }

    fn recv(&mut self, peer: usize, key: MsgKey, buf: &mut Vec<u8>) -> Result<()> {
        self.calls += 1;
        check_peer(self.rank, self.size, peer, "recv")?;
        let mut buf = RecvBuf::Vec(buf);
        let Some(state) = self.start_recv(peer, key, &mut buf)? else {
            return Ok(());
        };
        self.drive_ops(|ex| {
            ex.recvs.push(RecvOp {
                peer,
                key,
                buf,
                state,
            })
        })
    }

    fn sendrecv(
        &mut self,
        to: usize,
        send_key: MsgKey,
        data: &[u8],
        from: usize,
        recv_key: MsgKey,
        mut buf: RecvBuf<'_>,
    ) -> Result<()> {
        self.calls += 1;
        check_peer(self.rank, self.size, to, "sendrecv")?;
        check_peer(self.rank, self.size, from, "sendrecv")?;
        // As shm's own step: the receive goes on alone only once the send is complete.
        let send_state = if self.is_local(to) && self.is_local(from) {
            match self.start_send(to, send_key, data) {
                None => {
                    let Some(state) = self.start_recv(from, recv_key, &mut buf)? else {
                        return Ok(());
                    };
                    return self.drive_ops(|ex| {
                        ex.recvs.push(RecvOp {
                            peer: from,
                            key: recv_key,
                            buf,
                            state,
                        })
                    });
                }
                Some(state) => state,
            }
        } else {
            OpState::New
        };
        self.drive_ops(|ex| {
            ex.sends.push(SendOp {
                peer: to,
                key: send_key,
                data,
                state: send_state,
            });
            ex.recvs.push(RecvOp {
                peer: from,
                key: recv_key,
                buf,
                state: OpState::New,
            });
        })
    }

    fn abandon_exchange(&mut self, ex: &mut Exchange<'_>, why: &Error) {
        // Node-local peers may hold single-copy descriptors into the caller's buffers, and
        // fragments of a given-up receive must be dropped when they come; TCP copies what it
        // still owes other nodes and drops what it would have received.
        self.shm.abandon(ex, why);
        self.tcp.abandon_ops(ex);
    }

    fn tolerate_failures(&mut self) {
        self.shm.tolerate_failures();
        self.tcp.tolerate_failures();
    }

    fn retire_flows(&mut self, flows: RetiredFlows) {
        self.shm.retire_flows(flows);
        self.tcp.retire_flows(flows);
    }

    fn flow_count(&self) -> Option<usize> {
        Some(self.shm.flow_count()? + self.tcp.flow_count()?)
    }

    fn stats(&self) -> Stats {
        let mut s = Stats::new(self.rank, self.size, "hybrid");
        s.merge(&self.shm.stats());
        s.merge(&self.tcp.stats());
        s.calls = self.calls;
        s
    }

    fn finish(&mut self) -> Result<()> {
        let a = self.shm.finish();
        let b = self.tcp.finish();
        a.and(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_numbers_follow_lowest_rank() {
        let names: Vec<Vec<u8>> = ["b", "a", "b", "c", "a"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(node_numbers(&names), vec![0, 1, 0, 2, 1]);
    }
}

//! The end of a rank: deliver what live peers are owed, say BYE, linger briefly.

use super::*;

impl TcpTransport {
    pub(super) fn shutdown(&mut self) -> Result<()> {
        // Peers that are alive get all the time they need to take what they are owed (a slow
        // rank is not a dead one); only the optional operation timeout bounds the wait.
        let deadline = self.set.policy.timeout.map(|limit| Instant::now() + limit);
        let mut empty = Exchange::new();
        // 1. Deliver what peers may still need from the outbox (000 §4.4.1: a rank must not
        //    exit while a peer still needs one of its messages).
        let mut result = Ok(());
        loop {
            self.tick += 1;
            if let Err(e) = self.maintain().and_then(|_| self.poll_io(&mut empty, 0)) {
                if !e.is_peer_failure() {
                    result = Err(e);
                    break;
                }
            }
            self.flush_dirty();
            let waiting: Vec<usize> = self
                .outbox
                .keys()
                .map(|k| k.0)
                .filter(|&p| {
                    !self.gave_up[p]
                        && (matches!(self.peers[p].status, PeerStatus::Alive)
                            || self.may_still_deliver(p))
                })
                .collect();
            if waiting.is_empty() {
                break;
            }
            if let Some(limit) = self
                .set
                .policy
                .timeout
                .filter(|_| deadline.is_some_and(|deadline| Instant::now() >= deadline))
            {
                let mut peers = waiting;
                peers.sort_unstable();
                peers.dedup();
                result = Err(Error::new(ErrorKind::Timeout, "finish")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "{} messages to ranks {peers:?} were not taken within {limit:?} \
                         (general.operation_timeout_ms)",
                        self.outbox.len(),
                    )));
                break;
            }
            self.wait_io(10);
        }
        if result.is_ok() {
            let lost: Vec<usize> = self.outbox.keys().map(|k| k.0).collect();
            if let Some(&p) = lost.first() {
                let n = lost.iter().filter(|&&q| q == p).count();
                result = Err(self.peer_gone("finish", p).unwrap_or_else(|| {
                    Error::new(ErrorKind::Timeout, "finish")
                        .on_rank(self.rank)
                        .with_peer(p)
                        .with_detail(format!(
                            "{n} messages to rank {p} were not taken: an operation already \
                             timed out waiting for it (general.operation_timeout_ms)"
                        ))
                }));
            }
        }
        // 2. Say goodbye on every connection, then wait briefly for the peers to close theirs
        //    (closing with unread input would reset the connection and could destroy the BYE).
        for id in 0..self.conns.len() {
            let Some(conn) = self.conns[id].as_mut() else {
                continue;
            };
            match (conn.phase, conn.peer) {
                (Phase::Open | Phase::ClosingSent | Phase::AwaitHelloAck, Some(p)) => {
                    // The serial names the rank whose failure this rank saw first (plus
                    // one), so that peers still waiting for us blame that rank, not us.
                    let h = Header::control(
                        FrameType::Bye,
                        MsgKey::user(0),
                        self.rank as u32,
                        p as u32,
                        self.blame
                            .filter(|_| !self.tolerant)
                            .map_or(0, |x| x as u64 + 1),
                    );
                    conn.wq.push_back(OutFrame::new(&h, None));
                    conn.phase = Phase::ByeSent;
                    let _ = conn.flush(None);
                    let _ = conn.sock.shutdown(Shutdown::Write);
                }
                _ => {
                    if let Some(conn) = self.conns[id].take() {
                        self.drop_conn(id, conn);
                    }
                }
            }
        }
        let linger = Instant::now()
            + self
                .set
                .policy
                .timeout
                .map_or(Duration::from_secs(2), |t| t.min(Duration::from_secs(2)));
        while self.n_conns > 0 && Instant::now() < linger {
            let only_given_up = self
                .conns
                .iter()
                .flatten()
                .all(|c| c.peer.is_some_and(|p| self.gave_up[p]));
            if only_given_up {
                break;
            }
            let _ = self.poll_io(&mut empty, 10);
        }
        for id in 0..self.conns.len() {
            if let Some(conn) = self.conns[id].take() {
                self.drop_conn(id, conn);
            }
        }
        result
    }
}

//! The sockets of the connection cache (T2, T5, T8): dialling with a non-blocking connect and
//! telling the endpoint how it went (a refusal, an unreachable host, or this process out of
//! descriptors), accepting (always, even at the cap: a peer stuck in our backlog could be
//! waiting for us while we wait for it), pausing the listener when descriptors run out,
//! closing and dropping sockets, and re-reading addresses in file mode. Which connection to
//! open, keep or close is the endpoint's decision.

use ferry_proto::endpoint::ConnectFailure;

use super::*;

/// Connections accepted per pass.
const ACCEPT_BUDGET: usize = 16;

impl TcpTransport {
    /// Opens connection `conn` to `peer` (the endpoint's `Dial`).
    pub(super) fn dial(&mut self, conn: ConnId, peer: usize) {
        let now = self.now();
        let Some(addr) = self.addrs.get(peer).copied().flatten() else {
            self.reload_addresses();
            let why = ConnectFailure::Unreachable(format!("no usable address for rank {peer}"));
            self.connect_failed(conn, why, now);
            return;
        };
        tracing::debug!("rank {}: dial rank {peer} at {addr} ({conn:?})", self.rank);
        match start_connect(addr, self.set.failure_timeout, self.unpaced_local()) {
            Ok((sock, done)) => {
                let fd = sock.as_raw_fd();
                if let Err(e) = self.poller.add(fd, conn.0, !done) {
                    tracing::warn!("rank {}: cannot watch a socket: {e}", self.rank);
                }
                self.links.insert(conn, Link::new(sock, Some(peer), !done));
                if done {
                    self.ep.on_connected(conn, now);
                }
            }
            Err(e) => {
                let why = failure(&e, peer, addr);
                self.connect_failed(conn, why, now);
            }
        }
    }

    fn connect_failed(&mut self, conn: ConnId, why: ConnectFailure, now: Duration) {
        if !matches!(why, ConnectFailure::OutOfDescriptors(_)) {
            tracing::debug!("rank {}: connect: {why:?}", self.rank);
            self.reload_addresses();
        }
        if let Some(e) = self.ep.on_connect_failed(conn, why, now) {
            // Out of descriptors with nothing to close: retrying would only spin.
            if self.pending_error.is_none() {
                self.pending_error = Some(self.error(e));
            }
        }
    }

    /// The non-blocking connect of link `id` reported: connected, or failed.
    pub(super) fn finish_connect(&mut self, id: ConnId) {
        let now = self.now();
        let Some(l) = self.links.get_mut(&id) else {
            return;
        };
        let err = match l.sock.take_error() {
            Ok(None) => match l.sock.peer_addr() {
                Ok(_) => None,
                // A spurious readiness report: still connecting.
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => Some(e),
            },
            Ok(Some(e)) | Err(e) => Some(e),
        };
        match err {
            None => {
                l.connecting = false;
                tracing::debug!("rank {}: {id:?} connected", self.rank);
                self.ep.on_connected(id, now);
            }
            Some(e) => {
                let peer = l.peer.unwrap_or(0);
                self.remove_link(id);
                let why = match self.addrs.get(peer).copied().flatten() {
                    Some(addr) => failure(&e, peer, addr),
                    None => ConnectFailure::Unreachable(e.to_string()),
                };
                self.connect_failed(id, why, now);
            }
        }
    }

    /// Closes link `id` (the endpoint no longer uses it, or it broke).
    pub(super) fn remove_link(&mut self, id: ConnId) {
        if let Some(l) = self.links.remove(&id) {
            self.poller.remove(l.sock.as_raw_fd());
        }
    }

    /// Whether connections within this host get a congestion controller that does not pace
    /// (`limits::set_local_congestion`): not when this host runs more ranks than it has cores.
    /// There, a 4-rank 1 MiB allreduce on 2 cores took 1.45x as long without pacing (median of
    /// 8 paired runs; docs/PERFORMANCE.md), while 2 ranks gained 1.5x at 1-4 MiB.
    fn unpaced_local(&self) -> bool {
        !self.set.policy.yield_each_poll
    }

    pub(super) fn accept_some(&mut self) {
        for _ in 0..ACCEPT_BUDGET {
            if self.links.len() >= self.ep.config().connection_cap {
                // Accept anyway (see the module documentation); the cap is restored by
                // closing idle connections (T2).
                self.ep.evict_idle();
            }
            match self.listener.accept() {
                Ok((sock, from)) => {
                    let setup = sock
                        .set_nonblocking(true)
                        .and(sock.set_nodelay(true))
                        .and(crate::limits::set_liveness(&sock, self.set.failure_timeout));
                    if let Err(e) = setup {
                        tracing::warn!("rank {}: accepted socket from {from}: {e}", self.rank);
                        continue;
                    }
                    if self.unpaced_local() {
                        crate::limits::set_local_congestion(&sock, from);
                    }
                    let id = self.ep.on_accepted(self.now());
                    tracing::debug!("rank {}: accepted {from} ({id:?})", self.rank);
                    if let Err(e) = self.poller.add(sock.as_raw_fd(), id.0, false) {
                        tracing::warn!("rank {}: cannot watch a socket: {e}", self.rank);
                    }
                    self.links.insert(id, Link::new(sock, None, false));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or similar: stop accepting until a
                    // connection was closed, instead of spinning on a ready listener.
                    if crate::limits::out_of_descriptors(&e) {
                        tracing::warn!(
                            "rank {}: {}",
                            self.rank,
                            crate::limits::describe_out_of_descriptors(&e, "accept")
                        );
                    } else {
                        tracing::warn!("rank {}: accept failed: {e}", self.rank);
                    }
                    self.ep.evict_idle();
                    self.pause_listener();
                    return;
                }
            }
        }
    }

    fn pause_listener(&mut self) {
        if !self.listener_paused {
            self.paused_at = self.links.len();
            self.poller.remove(self.listener.as_raw_fd());
            self.listener_paused = true;
        }
    }

    /// Resumes accepting once a connection closed since the listener was paused.
    pub(super) fn maybe_resume_listener(&mut self) {
        if !self.listener_paused {
            return;
        }
        if self.links.len() < self.paused_at {
            if self
                .poller
                .add(self.listener.as_raw_fd(), LISTENER, false)
                .is_ok()
            {
                self.listener_paused = false;
            }
        } else {
            self.ep.evict_idle();
        }
    }

    /// File mode: picks up changed addresses (000 §5.1: a restarted rank may have moved).
    pub(super) fn reload_addresses(&mut self) {
        let Some(w) = self.watcher.as_mut() else {
            return;
        };
        match w.poll() {
            None => {}
            Some(Err(e)) => {
                tracing::warn!("rank {}: configuration reload failed: {e}", self.rank)
            }
            Some(Ok(cfg)) => {
                if cfg.tcp.addresses.len() != self.size {
                    tracing::warn!(
                        "rank {}: reloaded configuration lists {} addresses, the job has {} ranks; ignored",
                        self.rank,
                        cfg.tcp.addresses.len(),
                        self.size
                    );
                    return;
                }
                for (p, a) in cfg.tcp.addresses.iter().enumerate() {
                    if p != self.rank {
                        if let Some(addr) = resolve(a) {
                            if self.addrs[p] != Some(addr) {
                                tracing::debug!("rank {}: rank {p} moved to {addr}", self.rank);
                            }
                            self.addrs[p] = Some(addr);
                        }
                    }
                }
            }
        }
    }
}

/// What a failed connect to `peer` at `addr` means to the endpoint.
fn failure(e: &io::Error, peer: usize, addr: SocketAddr) -> ConnectFailure {
    if crate::limits::out_of_descriptors(e) {
        ConnectFailure::OutOfDescriptors(crate::limits::describe_out_of_descriptors(
            e,
            &format!("connect to rank {peer} at {addr}"),
        ))
    } else if e.kind() == io::ErrorKind::ConnectionRefused {
        ConnectFailure::Refused(format!("connection to {addr} refused"))
    } else {
        ConnectFailure::Unreachable(format!("connect to {addr}: {e}"))
    }
}

/// Starts a non-blocking connect; `true` if it completed at once.
fn start_connect(
    addr: SocketAddr,
    failure_timeout: Duration,
    unpaced_local: bool,
) -> io::Result<(std::net::TcpStream, bool)> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_nonblocking(true)?;
    sock.set_nodelay(true)?;
    let sock: std::net::TcpStream = sock.into();
    crate::limits::set_liveness(&sock, failure_timeout)?;
    let done = match socket2::SockRef::from(&sock).connect(&addr.into()) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => false,
        Err(e) => return Err(e),
    };
    // The local address is bound once the connect started.
    if unpaced_local {
        crate::limits::set_local_congestion(&sock, addr);
    }
    Ok((sock, done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::config::YieldWhenIdle;
    use ferry_core::store::MemStore;
    use ferry_proto::MsgKey;

    /// The congestion controller of every connection rank `t` holds.
    fn controllers(t: &TcpTransport) -> Vec<String> {
        t.links
            .values()
            .map(|l| {
                let name = socket2::SockRef::from(&l.sock).tcp_congestion().unwrap();
                String::from_utf8_lossy(&name)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .collect()
    }

    /// Runs a ping-pong between two ranks and returns the controllers of each one's connections.
    fn ping_pong_controllers(cfg: &Config) -> Vec<Vec<String>> {
        let store = MemStore::new();
        std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2)
                .map(|rank| {
                    let store = &store;
                    s.spawn(move || {
                        let mut t = TcpTransport::from_store(rank, 2, store, cfg, "cc").unwrap();
                        let key = MsgKey::user(1);
                        let mut buf = Vec::new();
                        if rank == 0 {
                            t.send(1, key, &[1; 100]).unwrap();
                            t.recv(1, key, &mut buf).unwrap();
                        } else {
                            t.recv(0, key, &mut buf).unwrap();
                            t.send(0, key, &buf).unwrap();
                        }
                        let names = controllers(&t);
                        t.finish().unwrap();
                        names
                    })
                })
                .collect();
            ranks
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    }

    #[test]
    fn dialled_and_accepted_connections_within_the_host_do_not_pace() {
        let mut cfg = Config::default();
        cfg.general.yield_when_idle = YieldWhenIdle::Never;
        // Rank 0 dialled, rank 1 accepted: both ends changed.
        for names in ping_pong_controllers(&cfg) {
            assert!(!names.is_empty());
            for n in names {
                assert!(["cubic", "reno"].contains(&n.as_str()), "{n}");
            }
        }
    }

    #[test]
    fn an_oversubscribed_host_keeps_its_congestion_control() {
        let mut cfg = Config::default();
        cfg.general.yield_when_idle = YieldWhenIdle::Always;
        let fresh = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let default = socket2::SockRef::from(&fresh).tcp_congestion().unwrap();
        let default = String::from_utf8_lossy(&default)
            .trim_end_matches('\0')
            .to_string();
        for names in ping_pong_controllers(&cfg) {
            assert!(!names.is_empty());
            assert!(
                names.iter().all(|n| *n == default),
                "{names:?} vs {default}"
            );
        }
    }
}

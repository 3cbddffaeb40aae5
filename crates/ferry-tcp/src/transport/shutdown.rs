//! The end of a rank: the endpoint serves the peers until every message of the outbox was
//! taken by a live peer, says goodbye (naming the rank whose failure this rank saw first, if
//! any) and lingers briefly for the peers to close; this driver keeps the sockets going
//! meanwhile and bounds the wait by `general.operation_timeout_ms` when it is set.

use super::*;

impl TcpTransport {
    pub(super) fn shutdown(&mut self) -> Result<()> {
        // Peers that are alive get all the time they need to take what they are owed (a slow
        // rank is not a dead one); only the optional operation timeout bounds the wait.
        let limit = self.set.policy.timeout;
        let deadline = limit.map(|l| self.advance_clock() + l);
        let mut empty = Exchange::new();
        let mut timed_out: Option<Error> = None;
        self.ep.finish(None, self.now());
        let result = loop {
            self.tick += 1;
            self.advance_clock();
            // Failures of operations cannot show here (there are none); failed peers are
            // skipped by the endpoint.
            let _ = self.poll_io(&mut empty, 0);
            let _ = self.housekeeping(&mut empty, true);
            self.flush_batch(None);
            self.flush_dirty();
            if let Some(r) = self.ep.finished() {
                break r;
            }
            let now = self.now();
            if let (Some(d), Some(limit), None) = (deadline, limit, &timed_out) {
                let owed = self.ep.owed_peers();
                if now >= d && !owed.is_empty() {
                    timed_out = Some(
                        Error::new(ErrorKind::Timeout, "finish")
                            .on_rank(self.rank)
                            .with_detail(format!(
                                "messages to ranks {owed:?} were not taken within {limit:?} \
                                 (general.operation_timeout_ms)"
                            )),
                    );
                    for p in owed {
                        self.ep.give_up(p);
                    }
                    continue;
                }
            }
            let wait = self
                .ep
                .poll_timeout()
                .map_or(Duration::from_millis(10), |t| t.saturating_sub(now))
                .min(Duration::from_millis(10));
            self.wait_io(wait.as_millis().max(1) as i32);
        };
        let ids: Vec<ConnId> = self.links.keys().copied().collect();
        for id in ids {
            self.remove_link(id);
        }
        match timed_out {
            Some(e) => Err(e),
            None => result.map_err(|e| self.error(e)),
        }
    }
}

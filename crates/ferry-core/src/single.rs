//! The `single` backend: a job of one rank. Messages to self are matched in memory.

use std::time::Duration;

use ferry_proto::{Arrival, EarlyArrivals, FifoFlows};

use crate::error::{Error, ErrorKind, Result};
use crate::stats::Stats;
use crate::transport::{check_peer, Exchange, OpState, RetiredFlows, Transport};

/// One rank talking only to itself.
#[derive(Debug)]
pub struct SingleTransport {
    /// Messages to self are in send order: numbered on "arrival" (the send), forgotten once
    /// taken ([`FifoFlows`]).
    flows: FifoFlows,
    inbox: EarlyArrivals,
    stats: Stats,
}

impl Default for SingleTransport {
    fn default() -> Self {
        SingleTransport::new()
    }
}

impl SingleTransport {
    /// The world of one rank.
    pub fn new() -> SingleTransport {
        SingleTransport {
            flows: FifoFlows::new(),
            inbox: EarlyArrivals::new(usize::MAX, usize::MAX),
            stats: Stats::new(0, 1, "single"),
        }
    }
}

impl Transport for SingleTransport {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn name(&self) -> &'static str {
        "single"
    }

    fn progress_exchange(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.stats.calls += 1;
        for s in ex.sends.iter_mut().filter(|s| s.state == OpState::New) {
            check_peer(0, 1, s.peer, "send")?;
            let serial = self.flows.arrive(0, s.key);
            let arrival = Arrival {
                source: 0,
                key: s.key,
                serial,
            };
            self.inbox.insert(arrival, s.data.to_vec()).map_err(|e| {
                Error::new(ErrorKind::Protocol, "send")
                    .on_rank(0)
                    .with_source(e)
            })?;
            self.stats.record_send(0, s.data.len());
            s.state = OpState::Done;
        }
        for r in ex.recvs.iter_mut() {
            let serial = match r.state {
                OpState::Done => continue,
                OpState::New => {
                    check_peer(0, 1, r.peer, "recv")?;
                    let serial = self.flows.post(0, r.key);
                    r.state = OpState::Active {
                        serial,
                        progress: 0,
                    };
                    serial
                }
                OpState::Active { serial, .. } => serial,
            };
            let arrival = Arrival {
                source: 0,
                key: r.key,
                serial,
            };
            if let Some(payload) = self.inbox.take(&arrival) {
                self.flows.taken(0, r.key);
                let len = payload.len();
                r.buf
                    .fill_from(payload)
                    .map_err(|want| want.to_error("recv", len).on_rank(0).with_peer(0))?;
                self.stats.record_recv(0, len);
                r.state = OpState::Done;
            }
        }
        Ok(ex.is_complete())
    }

    fn wait_for_input(&mut self, timeout: Duration) -> Result<()> {
        // Nobody else can send: waiting cannot help, so the driver's timeout reports the bug
        // (a receive without a matching send) without burning the whole timeout.
        let _ = timeout;
        Err(Error::new(ErrorKind::InvalidArgument, "recv")
            .on_rank(0)
            .with_detail("receive from self without a matching send"))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_proto::MsgKey;

    #[test]
    fn self_messages_match_in_flow_order() {
        let mut t = SingleTransport::new();
        t.send(0, MsgKey::user(1), b"a").unwrap();
        t.send(0, MsgKey::user(1), b"b").unwrap();
        let mut buf = Vec::new();
        t.recv(0, MsgKey::user(1), &mut buf).unwrap();
        assert_eq!(buf, b"a");
        t.recv(0, MsgKey::user(1), &mut buf).unwrap();
        assert_eq!(buf, b"b");
        assert!(t.recv(0, MsgKey::user(1), &mut buf).is_err());
        assert!(t.send(1, MsgKey::user(1), b"x").is_err());
    }

    /// A new tag per message leaves no flow behind once each message was received; a message
    /// still waiting keeps its flow (and its order) until it is taken.
    #[test]
    fn self_messages_on_new_tags_leave_no_flows() {
        let mut t = SingleTransport::new();
        let mut buf = Vec::new();
        for tag in 0..10_000u32 {
            t.send(0, MsgKey::user(tag), &tag.to_le_bytes()).unwrap();
            t.send(0, MsgKey::user(tag), b"second").unwrap();
            t.recv(0, MsgKey::user(tag), &mut buf).unwrap();
            assert_eq!(buf, tag.to_le_bytes());
            assert_eq!(
                t.flow_count(),
                Some(1),
                "the second message is still waiting"
            );
            t.recv(0, MsgKey::user(tag), &mut buf).unwrap();
            assert_eq!(buf, b"second");
            assert_eq!(t.flow_count(), Some(0), "tag {tag}");
        }
    }
}

//! Frames read from a connection: validation against the connection's phase and peer, then
//! dispatch to the handshake, the send side, the receive side or connection control.

use std::time::Duration;

use super::{ConnId, Endpoint, Landed, Phase, Sink};
use crate::frame::{FrameType, Header};
use crate::matching::Arrival;
use crate::tcp_protocol;

impl Endpoint {
    /// A frame header was read from `conn` (already decoded with
    /// [`crate::frame::Header::decode`] against [`super::EndpointConfig::max_message_bytes`]).
    /// Returns where its payload goes; for [`Sink::Done`] the frame is handled. A frame that
    /// breaks the protocol drops the connection ([`super::Action::Drop`]) and yields
    /// `Sink::Done`.
    pub fn on_header(&mut self, conn: ConnId, h: Header, now: Duration) -> Sink {
        let Some(c) = self.conns.get_mut(&conn) else {
            return Sink::Discard(h.payload_len() as usize);
        };
        c.last_used = self.tick;
        self.now = self.now.max(now);
        let (phase, peer) = (c.phase, c.peer);
        let fault = |ep: &mut Endpoint, cause: String| {
            let p = if matches!(phase, Phase::AwaitHello { .. }) {
                None
            } else {
                peer
            };
            ep.drop_conn(conn, p, cause);
            Sink::Done
        };
        match phase {
            Phase::AwaitHello { .. } | Phase::AwaitHelloAck => {
                let want = if matches!(phase, Phase::AwaitHello { .. }) {
                    FrameType::Hello
                } else {
                    FrameType::HelloAck
                };
                if h.ty != want {
                    return fault(self, format!("expected {want:?} first, got {:?}", h.ty));
                }
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.reading = Some(h);
                }
                if h.len == 0 {
                    self.on_payload(conn, Landed::Owned(Vec::new()), now);
                    return Sink::Done;
                }
                return Sink::Owned(h.len as usize);
            }
            Phase::Connecting { .. } => {
                return fault(self, "data before the connection was established".into())
            }
            _ => {}
        }
        let Some(p) = peer else {
            return fault(self, "frame on a connection without peer".into());
        };
        if let Err(e) = tcp_protocol::check_route(&h, self.cfg.rank, p) {
            return fault(self, e.to_string());
        }
        match h.ty {
            FrameType::Try | FrameType::Add | FrameType::Data => {
                match self.on_message_header(conn, p, &h) {
                    Ok(sink) => {
                        if let Some(c) = self.conns.get_mut(&conn) {
                            c.reading = Some(h);
                        }
                        if h.len == 0 {
                            let landed = match sink {
                                Sink::Recv(..) => Landed::Direct,
                                Sink::Owned(_) => Landed::Owned(Vec::new()),
                                _ => Landed::Discarded,
                            };
                            self.on_payload(conn, landed, now);
                            return Sink::Done;
                        }
                        sink
                    }
                    Err(cause) => fault(self, cause),
                }
            }
            FrameType::Announce => {
                let a = Arrival {
                    source: p,
                    key: h.key,
                    serial: h.serial,
                };
                self.on_remote(a, now);
                Sink::Done
            }
            FrameType::Miss => {
                self.on_miss(conn, p, &h);
                Sink::Done
            }
            FrameType::Accept | FrameType::Refuse => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.outstanding = c.outstanding.saturating_sub(1);
                }
                self.on_answer(p, &h);
                Sink::Done
            }
            FrameType::Get => {
                self.serve_get(conn, p, &h, now);
                Sink::Done
            }
            FrameType::CloseReq | FrameType::CloseAck | FrameType::CloseNak | FrameType::Bye => {
                self.on_conn_control(conn, p, &h);
                Sink::Done
            }
            FrameType::Done => {
                self.on_done(p);
                Sink::Done
            }
            FrameType::Consumed => {
                self.on_consumed(p, &h);
                Sink::Done
            }
            FrameType::Rejoined => {
                self.on_rejoined(p, h.serial);
                Sink::Done
            }
            FrameType::Retire => {
                self.on_retire(conn, p, &h);
                Sink::Done
            }
            FrameType::RetireOk | FrameType::RetireNo => {
                self.on_retire_answer(conn, p, &h);
                Sink::Done
            }
            FrameType::Hello | FrameType::HelloAck => fault(
                self,
                format!("{:?} frame on an established connection", h.ty),
            ),
        }
    }

    /// The payload of the frame whose header was last read from `conn` landed as `landed`.
    pub fn on_payload(&mut self, conn: ConnId, landed: Landed, now: Duration) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(h) = c.reading.take() else {
            return;
        };
        let peer = c.peer;
        match h.ty {
            FrameType::Hello | FrameType::HelloAck => {
                let secret = match &landed {
                    Landed::Owned(v) => v.as_slice(),
                    _ => &[],
                };
                self.on_handshake(conn, &h, secret, now);
            }
            _ => {
                let Some(p) = peer else { return };
                if let Err(cause) = self.on_message_payload(conn, p, &h, landed, now) {
                    self.drop_conn(conn, Some(p), cause);
                }
            }
        }
    }
}

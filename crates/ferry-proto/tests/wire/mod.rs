//! Stepping an endpoint by hand in tests: the frames it transmits, with their payloads as the
//! driver would write them, and feeding a frame to the other endpoint.

use std::time::Duration;

use ferry_proto::endpoint::{Action, ConnId, Endpoint, Landed, Payload, SendBuffers, Sink};
use ferry_proto::frame::Header;

/// A frame with its payload as the driver would write it; `borrowed` if it came straight from
/// the program's buffer.
pub struct Frame {
    pub header: Header,
    pub payload: Vec<u8>,
    pub borrowed: bool,
}

/// Drains `ep`'s actions: the transmitted frames, and every other action in order.
pub fn actions(ep: &mut Endpoint, bufs: &dyn SendBuffers) -> (Vec<Frame>, Vec<Action>) {
    let (mut frames, mut other) = (Vec::new(), Vec::new());
    while let Some(a) = ep.poll_action() {
        match a {
            Action::Transmit {
                header, payload, ..
            } => {
                let (payload, borrowed) = match payload {
                    Payload::None => (Vec::new(), false),
                    Payload::Shared(v) => (v.as_ref().clone(), false),
                    Payload::Op(op, len) => {
                        let b = bufs.bytes(op).expect("payload of a live send");
                        assert_eq!(b.len(), len);
                        (b.to_vec(), true)
                    }
                };
                frames.push(Frame {
                    header,
                    payload,
                    borrowed,
                });
            }
            a => other.push(a),
        }
    }
    (frames, other)
}

/// Hands frame `f` to `ep` as arriving on `conn`.
pub fn feed(ep: &mut Endpoint, conn: ConnId, f: &Frame, now: Duration) {
    match ep.on_header(conn, f.header, now) {
        Sink::Done => {}
        Sink::Owned(_) => ep.on_payload(conn, Landed::Owned(f.payload.clone()), now),
        Sink::Recv(..) => ep.on_payload(conn, Landed::Direct, now),
        Sink::Discard(_) => ep.on_payload(conn, Landed::Discarded, now),
    }
}

//! Feeds arbitrary bytes to the connection handshake as an acceptor and as a connector would
//! see them: header decode, then `check_hello` / `check_hello_ack` for ranks and secret taken
//! from the input. Nothing may panic, and an accepted peer must be a valid rank of the job.
#![no_main]

use ferry_proto::frame::{FrameType, Header, HEADER_LEN, MAX_HELLO_LEN};
use ferry_proto::handshake::{check_hello, check_hello_ack};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Layout: me, size/peer, secret length, secret, then the frame as read from the socket.
    let [me, other, secret_len, rest @ ..] = data else {
        return;
    };
    let (me, other) = (usize::from(*me), usize::from(*other));
    let Some((secret, wire)) = rest.split_at_checked(usize::from(*secret_len).min(rest.len()))
    else {
        return;
    };
    let Ok(h) = Header::decode(wire, 1 << 20) else {
        return;
    };
    let payload = &wire[HEADER_LEN..];
    // The transport reads exactly `len` payload bytes: a handshake never announces more than
    // the hello cap, whatever the data cap.
    if matches!(h.ty, FrameType::Hello | FrameType::HelloAck) {
        assert!(h.len <= MAX_HELLO_LEN, "{h:?}");
    }
    let payload = &payload[..payload.len().min(h.len as usize)];
    if let Ok(peer) = check_hello(&h, payload, secret, me, other) {
        assert!(
            peer < other && peer != me,
            "accepted rank {peer} of {other} as rank {me}"
        );
        assert_eq!(payload, secret);
    }
    if check_hello_ack(&h, payload, secret, me, other).is_ok() {
        assert_eq!(h.source as usize, other);
        assert_eq!(h.dest as usize, me);
        assert_eq!(payload, secret);
    }
});

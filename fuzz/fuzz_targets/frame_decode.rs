//! Feeds arbitrary bytes to the frame and handshake decoders: they must return errors, never
//! panic, and whatever decodes must re-encode to the same header bytes.
#![no_main]

use ferry_proto::frame::{Header, HEADER_LEN};
use ferry_proto::handshake::{check_hello, check_hello_ack};
use ferry_proto::tcp_protocol::check_route;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cap = data.first().map(|&b| 1u64 << (b % 40)).unwrap_or(0);
    let body = data.get(1..).unwrap_or(&[]);
    if let Ok(h) = Header::decode(body, cap) {
        assert_eq!(&h.encode()[..], &body[..HEADER_LEN]);
        let payload = &body[HEADER_LEN..];
        let _ = check_hello(&h, payload, b"job-secret", 0, 8);
        let _ = check_hello_ack(&h, payload, b"job-secret", 0, 1);
        let _ = check_route(&h, 0, 1);
    }
});

//! Feeds arbitrary bytes to every decoder of the rendezvous store's wire format
//! (`ferry_core::store::wire`: hello head, length prefixes, request and response bodies). Nothing
//! may panic, announced lengths stay within the caps, and whatever decodes re-encodes to the
//! same bytes (a get's timeout is capped at `MAX_GET_WAIT`, so longer ones re-encode capped).
#![no_main]

use ferry_core::store::wire::{
    decode_body_len, decode_hello_head, decode_request, decode_response, encode_request,
    encode_response, Request, HELLO_HEAD, MAX_BODY, MAX_GET_WAIT, MAX_SECRET_BYTES,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(n) = data.get(..HELLO_HEAD).and_then(decode_hello_head) {
        assert!(n <= MAX_SECRET_BYTES);
    }
    if let Some(prefix) = data.first_chunk::<4>() {
        for request in [true, false] {
            if let Some(n) = decode_body_len(*prefix, request) {
                assert!(n <= MAX_BODY, "{n}");
            }
        }
    }
    if let Ok(req) = decode_request(data) {
        let frame = encode_request(&req).expect("a decoded request re-encodes");
        let capped = matches!(req, Request::Get { timeout, .. } if timeout == MAX_GET_WAIT);
        if !capped {
            assert_eq!(&frame[4..], data);
        }
        assert_eq!(decode_request(&frame[4..]), Ok(req));
    }
    if let Ok((status, payload)) = decode_response(data) {
        assert_eq!(&encode_response(status, payload)[4..], data);
    }
});

//! Feeds arbitrary bytes to every decoder of the rendezvous store protocol (hello head, length
//! prefixes, request and response bodies). Nothing may panic, announced lengths stay within the
//! caps, and whatever decodes re-encodes to the same bytes.
#![no_main]

use ferry_core::store_codec::{
    decode_hello_head, decode_request, decode_response, encode_request, encode_response,
    request_len, response_len, Request, LEN_PREFIX, MAX_BODY, MAX_KEY_BYTES, MAX_SECRET_BYTES,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = decode_hello_head(data) {
        assert!(n <= MAX_SECRET_BYTES);
    }
    if let Some(prefix) = data
        .get(..LEN_PREFIX)
        .and_then(|p| <[u8; 4]>::try_from(p).ok())
    {
        if let Ok(n) = request_len(prefix) {
            assert!(n <= MAX_BODY);
        }
        if let Ok(n) = response_len(prefix) {
            assert!(n <= MAX_BODY);
        }
    }
    if let Ok(req) = decode_request(data) {
        // The encoder refuses keys the server would refuse; the framing itself round-trips.
        let key_ok = !req.key().is_empty() && req.key().len() <= MAX_KEY_BYTES;
        match encode_request(&req) {
            Ok(body) => assert_eq!(body, data),
            Err(e) => assert!(
                !key_ok || matches!(req, Request::Set { .. }),
                "valid request not re-encodable: {e}"
            ),
        }
    }
    if let Ok((status, payload)) = decode_response(data) {
        let framed = encode_response(status, payload).expect("decoded response re-encodes");
        assert_eq!(&framed[LEN_PREFIX..], data);
    }
});

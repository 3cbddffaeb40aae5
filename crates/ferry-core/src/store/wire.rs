//! Wire format of the launcher's rendezvous store (R1, T8): pure encoders and decoders shared
//! by the client ranks use ([`super::TcpStoreClient`]) and the server the launcher runs (crate
//! `ferry-cli`). No sockets here: every function works on byte slices, so the decoders can be
//! property-tested and fuzzed on their own.
//!
//! Protocol (all integers little-endian):
//! - hello, client to server: magic `FYKV`, version `u16`, secret length `u16`, secret bytes
//!   ([`encode_hello`], [`decode_hello_head`]); the server answers one status byte (0 =
//!   welcome) and drops any client whose magic, version or secret is wrong (T8: only members
//!   of the job can use the store);
//! - request: body length `u32`, then op `u8` (1 set, 2 get, 3 add), key length `u16`, key
//!   (UTF-8), then the value (set), the timeout in ms as `u64` (get) or the delta as `i64`
//!   (add) ([`encode_request`], [`decode_request`]);
//! - response: body length `u32`, then a status `u8` ([`Status`]) and the value (get), the old
//!   counter value as `i64` (add), or a UTF-8 message (errors) ([`encode_response`],
//!   [`decode_response`]).
//!
//! Every size is bounded ([`MAX_KEY_BYTES`], [`MAX_VALUE_BYTES`], [`MAX_SECRET_BYTES`],
//! [`MAX_BODY`]); a decoder never panics and never allocates more than its input.

use std::time::Duration;

use crate::error::{Error, ErrorKind};

/// Longest key in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value in bytes: addresses and node maps are small; bulk data never goes here.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Longest accepted secret in bytes.
pub const MAX_SECRET_BYTES: usize = 1024;
/// First bytes of every hello.
pub const MAGIC: [u8; 4] = *b"FYKV";
/// Protocol version carried by the hello.
pub const VERSION: u16 = 1;
/// Length of the fixed part of a hello (magic, version, secret length).
pub const HELLO_HEAD: usize = 8;
/// Largest request or response body: a key, a value and a few header bytes.
pub const MAX_BODY: usize = 3 + MAX_KEY_BYTES + MAX_VALUE_BYTES + 8;
/// Smallest request body (op and key length).
pub const MIN_REQUEST_BODY: usize = 3;
/// Longest blocking get a server honours; longer requests are cut to this.
pub const MAX_GET_WAIT: Duration = Duration::from_secs(24 * 3600);

const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;

/// Status byte of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// Done; the payload is the result.
    Ok = 0,
    /// A get found no value within its timeout.
    Timeout = 1,
    /// The request was malformed or not applicable (e.g. adding to a non-integer).
    Invalid = 2,
    /// The store is full (the server's limits).
    Full = 3,
    /// The hello was refused (wrong magic, version or secret).
    Refused = 4,
}

impl Status {
    /// The status of a byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Status> {
        Some(match b {
            0 => Status::Ok,
            1 => Status::Timeout,
            2 => Status::Invalid,
            3 => Status::Full,
            4 => Status::Refused,
            _ => return None,
        })
    }

    /// The error a client reports for a response with this status and `message`.
    pub fn into_error(self, op: &'static str, message: String) -> Error {
        let kind = match self {
            Status::Timeout => ErrorKind::Timeout,
            Status::Full => ErrorKind::ResourceExhausted,
            Status::Invalid => ErrorKind::InvalidArgument,
            Status::Refused | Status::Ok => ErrorKind::Protocol,
        };
        Error::new(kind, op).with_detail(message)
    }
}

/// One decoded request, borrowing from its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// Set `key` to `value`.
    Set {
        /// Key.
        key: &'a str,
        /// New value.
        value: &'a [u8],
    },
    /// Get `key`, waiting up to `timeout` for it to be set.
    Get {
        /// Key.
        key: &'a str,
        /// How long the server may wait.
        timeout: Duration,
    },
    /// Add `delta` to the counter `key` and answer the old value.
    Add {
        /// Key.
        key: &'a str,
        /// Increment.
        delta: i64,
    },
}

/// Why a request could not be decoded (the server answers [`Status::Invalid`] with it and
/// drops the connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed request: {}", self.0)
    }
}

/// Checks a key's length (1 to [`MAX_KEY_BYTES`] bytes).
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key of {} bytes: keys must have 1 to {MAX_KEY_BYTES} bytes",
            key.len()
        ));
    }
    Ok(())
}

/// The hello a client sends: magic, version, secret length and secret.
pub fn encode_hello(secret: &str) -> Result<Vec<u8>, String> {
    if secret.len() > MAX_SECRET_BYTES {
        return Err(format!("secret longer than {MAX_SECRET_BYTES} bytes"));
    }
    let mut hello = Vec::with_capacity(HELLO_HEAD + secret.len());
    hello.extend_from_slice(&MAGIC);
    hello.extend_from_slice(&VERSION.to_le_bytes());
    hello.extend_from_slice(&(secret.len() as u16).to_le_bytes());
    hello.extend_from_slice(secret.as_bytes());
    Ok(hello)
}

/// Decodes the fixed part of a hello and returns the length of the secret that follows, or
/// `None` for anything that is not a ferry store client of this version.
pub fn decode_hello_head(head: &[u8]) -> Option<usize> {
    let head: &[u8; HELLO_HEAD] = head.try_into().ok()?;
    let version = u16::from_le_bytes([head[4], head[5]]);
    let secret_len = u16::from_le_bytes([head[6], head[7]]) as usize;
    (head[..4] == MAGIC && version == VERSION && secret_len <= MAX_SECRET_BYTES)
        .then_some(secret_len)
}

/// The length prefix of a frame, checked against the bounds of a request (`request`) or a
/// response body. `None`: the peer is broken or hostile, drop the connection.
pub fn decode_body_len(prefix: [u8; 4], request: bool) -> Option<usize> {
    let n = u32::from_le_bytes(prefix) as usize;
    let min = if request { MIN_REQUEST_BODY } else { 1 };
    (min..=MAX_BODY).contains(&n).then_some(n)
}

/// A whole request frame (length prefix and body).
pub fn encode_request(req: &Request<'_>) -> Result<Vec<u8>, String> {
    let (op, key, arg): (u8, &str, std::borrow::Cow<'_, [u8]>) = match *req {
        Request::Set { key, value } => {
            if value.len() > MAX_VALUE_BYTES {
                return Err(format!(
                    "value of {} bytes for `{key}` exceeds {MAX_VALUE_BYTES}",
                    value.len()
                ));
            }
            (OP_SET, key, value.into())
        }
        Request::Get { key, timeout } => {
            let ms = timeout.min(MAX_GET_WAIT).as_millis() as u64;
            (OP_GET, key, ms.to_le_bytes().to_vec().into())
        }
        Request::Add { key, delta } => (OP_ADD, key, delta.to_le_bytes().to_vec().into()),
    };
    check_key(key)?;
    let body_len = 3 + key.len() + arg.len();
    let mut frame = Vec::with_capacity(4 + body_len);
    frame.extend_from_slice(&(body_len as u32).to_le_bytes());
    frame.push(op);
    frame.extend_from_slice(&(key.len() as u16).to_le_bytes());
    frame.extend_from_slice(key.as_bytes());
    frame.extend_from_slice(&arg);
    Ok(frame)
}

/// Decodes a request body (without its length prefix).
pub fn decode_request(body: &[u8]) -> Result<Request<'_>, Malformed> {
    let bad = |what: &str| Malformed(what.to_string());
    let (&[op, k0, k1], rest) = body
        .split_first_chunk::<3>()
        .ok_or_else(|| bad("shorter than its header"))?;
    let key_len = u16::from_le_bytes([k0, k1]) as usize;
    if key_len > rest.len() {
        return Err(bad("key longer than the request"));
    }
    let (key, arg) = rest.split_at(key_len);
    let key = std::str::from_utf8(key).map_err(|_| bad("key is not UTF-8"))?;
    check_key(key).map_err(Malformed)?;
    let arg8 = || -> Result<[u8; 8], Malformed> {
        arg.try_into()
            .map_err(|_| bad("expected an 8-byte argument"))
    };
    match op {
        OP_SET => {
            if arg.len() > MAX_VALUE_BYTES {
                return Err(bad("value too large"));
            }
            Ok(Request::Set { key, value: arg })
        }
        OP_GET => {
            let ms = u64::from_le_bytes(arg8()?);
            Ok(Request::Get {
                key,
                timeout: Duration::from_millis(ms).min(MAX_GET_WAIT),
            })
        }
        OP_ADD => Ok(Request::Add {
            key,
            delta: i64::from_le_bytes(arg8()?),
        }),
        other => Err(Malformed(format!("unknown operation {other}"))),
    }
}

/// A whole response frame (length prefix, status, payload).
pub fn encode_response(status: Status, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&((payload.len() + 1) as u32).to_le_bytes());
    out.push(status as u8);
    out.extend_from_slice(payload);
    out
}

/// Decodes a response body (without its length prefix) into its status and payload.
pub fn decode_response(body: &[u8]) -> Result<(Status, &[u8]), String> {
    let (&first, payload) = body.split_first().ok_or("empty response")?;
    let status = Status::from_byte(first).ok_or_else(|| format!("unknown status {first}"))?;
    Ok((status, payload))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(frame: &[u8]) -> &[u8] {
        let n = decode_body_len(frame[..4].try_into().unwrap(), true).unwrap();
        assert_eq!(n, frame.len() - 4);
        &frame[4..]
    }

    #[test]
    fn requests_round_trip() {
        let reqs = [
            Request::Set {
                key: "tcp/addr/3",
                value: b"10.0.0.1:4000",
            },
            Request::Get {
                key: "k",
                timeout: Duration::from_millis(1500),
            },
            Request::Add {
                key: "ctr",
                delta: -7,
            },
        ];
        for r in reqs {
            let f = encode_request(&r).unwrap();
            assert_eq!(decode_request(body(&f)).unwrap(), r);
        }
        assert!(encode_request(&Request::Add { key: "", delta: 1 }).is_err());
    }

    #[test]
    fn hello_and_responses() {
        let h = encode_hello("s3cret").unwrap();
        assert_eq!(decode_hello_head(&h[..HELLO_HEAD]), Some(6));
        assert_eq!(decode_hello_head(b"GET / HT"), None);
        assert_eq!(decode_hello_head(&h[..4]), None);
        let r = encode_response(Status::Full, b"full");
        assert_eq!(decode_body_len(r[..4].try_into().unwrap(), false), Some(5));
        assert_eq!(
            decode_response(&r[4..]).unwrap(),
            (Status::Full, &b"full"[..])
        );
        assert!(decode_response(&[9]).is_err());
        assert_eq!(decode_body_len(u32::MAX.to_le_bytes(), true), None);
    }

    proptest! {
        /// Arbitrary bytes never panic a decoder.
        #[test]
        fn decoders_take_any_input(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_request(&b);
            let _ = decode_response(&b);
            let _ = decode_hello_head(&b);
        }
    }
}

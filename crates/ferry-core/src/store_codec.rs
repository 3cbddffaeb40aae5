//! Wire codec of the rendezvous store protocol ([`crate::tcp_store`]): pure functions from bytes
//! to messages and back, with no sockets, so that the client, the server and the fuzz targets
//! share one decoder and every malformed input is an error value.
//!
//! Protocol (all integers little-endian):
//! - hello, client to server: magic `FYKV`, version `u16`, secret length `u16`, secret bytes;
//!   the server answers one status byte (0 = welcome);
//! - request: body length `u32`, then op `u8` (1 set, 2 get, 3 add), key length `u16`, key
//!   (UTF-8), then the value (set), the timeout in ms as `u64` (get) or the delta as `i64` (add);
//! - response: body length `u32`, then a status `u8` ([`Status`]) and the value (get), the old
//!   counter value as `i64` (add), or a UTF-8 message (errors).

/// Longest key in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value in bytes: addresses and node maps are small; bulk data never goes here.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Longest accepted secret in bytes.
pub const MAX_SECRET_BYTES: usize = 1024;
/// Largest request or response body: a key, a value and a few header bytes.
pub const MAX_BODY: usize = 3 + MAX_KEY_BYTES + MAX_VALUE_BYTES + 8;
/// Bytes of the hello before the secret: magic, version, secret length.
pub const HELLO_HEAD_LEN: usize = 8;
/// Bytes of the length prefix of requests and responses.
pub const LEN_PREFIX: usize = 4;

const MAGIC: [u8; 4] = *b"FYKV";
const VERSION: u16 = 1;
const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
/// Op byte and key length.
const REQUEST_HEAD: usize = 3;

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
    /// The store is full.
    Full = 3,
    /// The hello was refused (wrong magic, version or secret).
    Refused = 4,
}

impl Status {
    /// The status a byte stands for, if any.
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
}

/// Input that is not a well-formed store message; the text says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {0}")]
pub struct Malformed(pub String);

fn malformed(what: impl Into<String>) -> Malformed {
    Malformed(what.into())
}

/// One request, borrowing key and value from the body it was decoded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// Store `value` under `key`.
    Set {
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// Wait up to `timeout_ms` for `key` to be set and return its value.
    Get {
        /// The key.
        key: &'a str,
        /// How long the server may wait, in milliseconds.
        timeout_ms: u64,
    },
    /// Add `delta` to the integer under `key` (0 when absent) and return the old value.
    Add {
        /// The key.
        key: &'a str,
        /// The increment.
        delta: i64,
    },
}

impl Request<'_> {
    /// The key the request is about.
    pub fn key(&self) -> &str {
        match self {
            Request::Set { key, .. } | Request::Get { key, .. } | Request::Add { key, .. } => key,
        }
    }
}

/// The client's hello: magic, version, secret length and secret.
pub fn encode_hello(secret: &[u8]) -> Result<Vec<u8>, Malformed> {
    if secret.len() > MAX_SECRET_BYTES {
        return Err(malformed(format!(
            "hello: secret of {} bytes exceeds {MAX_SECRET_BYTES}",
            secret.len()
        )));
    }
    let mut hello = Vec::with_capacity(HELLO_HEAD_LEN + secret.len());
    hello.extend_from_slice(&MAGIC);
    hello.extend_from_slice(&VERSION.to_le_bytes());
    hello.extend_from_slice(&(secret.len() as u16).to_le_bytes());
    hello.extend_from_slice(secret);
    Ok(hello)
}

/// Checks the first [`HELLO_HEAD_LEN`] bytes of a hello; returns the length of the secret
/// that follows them.
pub fn decode_hello_head(head: &[u8]) -> Result<usize, Malformed> {
    let Some(head) = head.get(..HELLO_HEAD_LEN) else {
        return Err(malformed(format!(
            "hello: {} bytes, need {HELLO_HEAD_LEN}",
            head.len()
        )));
    };
    if head[..4] != MAGIC {
        return Err(malformed("hello: not a ferry store client (bad magic)"));
    }
    let version = u16::from_le_bytes([head[4], head[5]]);
    if version != VERSION {
        return Err(malformed(format!(
            "hello: protocol version {version}, this store speaks {VERSION}"
        )));
    }
    let secret_len = usize::from(u16::from_le_bytes([head[6], head[7]]));
    if secret_len > MAX_SECRET_BYTES {
        return Err(malformed(format!(
            "hello: secret of {secret_len} bytes exceeds {MAX_SECRET_BYTES}"
        )));
    }
    Ok(secret_len)
}

/// The body length announced by a request's length prefix, if it is one a request can have.
pub fn request_len(prefix: [u8; LEN_PREFIX]) -> Result<usize, Malformed> {
    let n = u32::from_le_bytes(prefix) as usize;
    if !(REQUEST_HEAD..=MAX_BODY).contains(&n) {
        return Err(malformed(format!("request: body of {n} bytes")));
    }
    Ok(n)
}

/// The body length announced by a response's length prefix, if it is one a response can have.
pub fn response_len(prefix: [u8; LEN_PREFIX]) -> Result<usize, Malformed> {
    let n = u32::from_le_bytes(prefix) as usize;
    if !(1..=MAX_BODY).contains(&n) {
        return Err(malformed(format!("response: body of {n} bytes")));
    }
    Ok(n)
}

/// Encodes a request body (without the length prefix). Keys must have 1 to [`MAX_KEY_BYTES`]
/// bytes and values at most [`MAX_VALUE_BYTES`].
pub fn encode_request(req: &Request<'_>) -> Result<Vec<u8>, Malformed> {
    let key = req.key();
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(malformed(format!(
            "request: key of {} bytes: keys must have 1 to {MAX_KEY_BYTES} bytes",
            key.len()
        )));
    }
    let (op, arg): (u8, &[u8]) = match req {
        Request::Set { value, .. } => {
            if value.len() > MAX_VALUE_BYTES {
                return Err(malformed(format!(
                    "request: value of {} bytes for `{key}` exceeds {MAX_VALUE_BYTES}",
                    value.len()
                )));
            }
            (OP_SET, value)
        }
        Request::Get { timeout_ms, .. } => (OP_GET, &timeout_ms.to_le_bytes()),
        Request::Add { delta, .. } => (OP_ADD, &delta.to_le_bytes()),
    };
    let mut body = Vec::with_capacity(REQUEST_HEAD + key.len() + arg.len());
    body.push(op);
    body.extend_from_slice(&(key.len() as u16).to_le_bytes());
    body.extend_from_slice(key.as_bytes());
    body.extend_from_slice(arg);
    Ok(body)
}

/// Decodes a request body (without the length prefix). Key length limits are the server's to
/// check; this only checks the framing.
pub fn decode_request(body: &[u8]) -> Result<Request<'_>, Malformed> {
    let [op, k0, k1, rest @ ..] = body else {
        return Err(malformed(format!(
            "request: body of {} bytes, need at least {REQUEST_HEAD}",
            body.len()
        )));
    };
    let key_len = usize::from(u16::from_le_bytes([*k0, *k1]));
    let (Some(key), Some(arg)) = (rest.get(..key_len), rest.get(key_len..)) else {
        return Err(malformed("request: key longer than the request"));
    };
    let key = std::str::from_utf8(key).map_err(|_| malformed("request: key is not UTF-8"))?;
    let arg8 = || -> Result<[u8; 8], Malformed> {
        arg.try_into().map_err(|_| {
            malformed(format!(
                "request: expected an 8-byte argument, got {} bytes",
                arg.len()
            ))
        })
    };
    match *op {
        OP_SET => Ok(Request::Set { key, value: arg }),
        OP_GET => Ok(Request::Get {
            key,
            timeout_ms: u64::from_le_bytes(arg8()?),
        }),
        OP_ADD => Ok(Request::Add {
            key,
            delta: i64::from_le_bytes(arg8()?),
        }),
        other => Err(malformed(format!("request: unknown operation {other}"))),
    }
}

/// Encodes a response with its length prefix.
pub fn encode_response(status: Status, payload: &[u8]) -> Result<Vec<u8>, Malformed> {
    if payload.len() >= MAX_BODY {
        return Err(malformed(format!(
            "response: payload of {} bytes exceeds {}",
            payload.len(),
            MAX_BODY - 1
        )));
    }
    let mut out = Vec::with_capacity(LEN_PREFIX + 1 + payload.len());
    out.extend_from_slice(&((payload.len() + 1) as u32).to_le_bytes());
    out.push(status as u8);
    out.extend_from_slice(payload);
    Ok(out)
}

/// Decodes a response body (without the length prefix) into its status and payload.
pub fn decode_response(body: &[u8]) -> Result<(Status, &[u8]), Malformed> {
    let [status, payload @ ..] = body else {
        return Err(malformed("response: empty body"));
    };
    let status = Status::from_byte(*status)
        .ok_or_else(|| malformed(format!("response: unknown status {status}")))?;
    Ok((status, payload))
}

/// Prefixes a request body with its length.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(LEN_PREFIX + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for req in [
            Request::Set {
                key: "tcp/addr/1",
                value: b"10.0.0.1:4000",
            },
            Request::Set {
                key: "k",
                value: b"",
            },
            Request::Get {
                key: "node/0",
                timeout_ms: u64::MAX,
            },
            Request::Add {
                key: "ctr",
                delta: -7,
            },
        ] {
            let body = encode_request(&req).unwrap();
            assert_eq!(decode_request(&body).unwrap(), req);
            let framed = frame(&body);
            assert_eq!(
                request_len(framed[..4].try_into().unwrap()).unwrap(),
                body.len()
            );
        }
        let r = encode_response(Status::Timeout, b"not set").unwrap();
        assert_eq!(response_len(r[..4].try_into().unwrap()).unwrap(), 8);
        assert_eq!(
            decode_response(&r[4..]).unwrap(),
            (Status::Timeout, &b"not set"[..])
        );
        let hello = encode_hello(b"s3cret").unwrap();
        assert_eq!(decode_hello_head(&hello).unwrap(), 6);
    }

    /// Short and truncated bodies are errors: the server used to index `body[0..3]` directly,
    /// safe only because its caller checked the length first.
    #[test]
    fn truncated_input_is_an_error() {
        for n in 0..3 {
            let e = decode_request(&[OP_GET, 0, 0][..n]).unwrap_err();
            assert!(e.to_string().contains("at least 3"), "{e}");
        }
        let e = decode_request(&[OP_SET, 5, 0, b'a']).unwrap_err();
        assert!(e.to_string().contains("key longer"), "{e}");
        let e = decode_request(&[OP_GET, 1, 0, b'a', 1, 2]).unwrap_err();
        assert!(e.to_string().contains("8-byte"), "{e}");
        let e = decode_request(&[9, 1, 0, b'a']).unwrap_err();
        assert!(e.to_string().contains("unknown operation 9"), "{e}");
        let e = decode_request(&[OP_SET, 1, 0, 0xff]).unwrap_err();
        assert!(e.to_string().contains("UTF-8"), "{e}");
        assert!(decode_response(&[]).is_err());
        assert!(decode_response(&[5]).is_err());
        assert!(decode_hello_head(b"FYKV").is_err());
    }

    #[test]
    fn limits_are_checked() {
        assert!(request_len(2u32.to_le_bytes()).is_err());
        assert!(request_len(u32::MAX.to_le_bytes()).is_err());
        assert!(request_len((MAX_BODY as u32).to_le_bytes()).is_ok());
        assert!(response_len(0u32.to_le_bytes()).is_err());
        assert!(response_len((MAX_BODY as u32 + 1).to_le_bytes()).is_err());
        let mut head = encode_hello(b"").unwrap();
        head[6..8].copy_from_slice(&(MAX_SECRET_BYTES as u16 + 1).to_le_bytes());
        assert!(decode_hello_head(&head).is_err());
        head[4] = 2;
        assert!(decode_hello_head(&head).unwrap_err().0.contains("version"));
        assert!(decode_hello_head(b"GET / HTTP/1.1").is_err());
        assert!(encode_hello(&[0; MAX_SECRET_BYTES + 1]).is_err());
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(encode_request(&Request::Add {
            key: &long,
            delta: 1
        })
        .is_err());
        assert!(encode_request(&Request::Get {
            key: "",
            timeout_ms: 0
        })
        .is_err());
        assert!(encode_request(&Request::Set {
            key: "big",
            value: &vec![0; MAX_VALUE_BYTES + 1]
        })
        .is_err());
    }
}

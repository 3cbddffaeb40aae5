//! A rank's connection to the launcher's rendezvous store (`FERRY_RENDEZVOUS`, R1): the client
//! side of [`super::wire`]. The server is the launcher's (crate `ferry-cli`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::wire::{self, Request, Status};
use super::Store;
use crate::error::{Error, ErrorKind, Result};

/// A rank's connection to the launcher's store (`FERRY_RENDEZVOUS`).
///
/// One connection, used by one request at a time; a connection broken by an error or a
/// client-side timeout is dropped and re-established on the next request.
pub struct TcpStoreClient {
    addr: String,
    secret: String,
    connect_timeout: Duration,
    stream: Mutex<Option<TcpStream>>,
}

impl std::fmt::Debug for TcpStoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("TcpStoreClient")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Extra time a client waits for a get's answer beyond the get's own timeout, for the
/// round trip on a loaded machine.
const GET_MARGIN: Duration = Duration::from_secs(10);

fn poisoned(op: &'static str) -> Error {
    Error::new(ErrorKind::Io, op).with_detail("store lock poisoned by a panicking thread")
}

impl TcpStoreClient {
    /// Connects to the store at `addr` (`host:port`) and presents `secret`. Retries refused
    /// connections until `connect_timeout`, since the launcher may be a little behind.
    pub fn connect(addr: &str, secret: &str, connect_timeout: Duration) -> Result<TcpStoreClient> {
        if secret.len() > wire::MAX_SECRET_BYTES {
            return Err(Error::invalid(
                "store connect",
                format!("secret longer than {} bytes", wire::MAX_SECRET_BYTES),
            ));
        }
        let client = TcpStoreClient {
            addr: addr.to_string(),
            secret: secret.to_string(),
            connect_timeout,
            stream: Mutex::new(None),
        };
        let stream = client.open()?;
        *client
            .stream
            .lock()
            .map_err(|_| poisoned("store connect"))? = Some(stream);
        Ok(client)
    }

    /// The store's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn open(&self) -> Result<TcpStream> {
        let op = "store connect";
        let deadline = Instant::now() + self.connect_timeout;
        let addrs: Vec<SocketAddr> = self
            .addr
            .to_socket_addrs()
            .map_err(|e| {
                Error::io(op, e).with_detail(format!("cannot resolve rendezvous `{}`", self.addr))
            })?
            .collect();
        if addrs.is_empty() {
            return Err(Error::new(ErrorKind::Config, op)
                .with_detail(format!("rendezvous `{}` resolves to no address", self.addr)));
        }
        let mut backoff = Duration::from_millis(10);
        loop {
            let mut last_err = None;
            for a in &addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                match TcpStream::connect_timeout(a, left.max(Duration::from_millis(100))) {
                    Ok(s) => return self.hello(s),
                    Err(e) => last_err = Some(e),
                }
            }
            let now = Instant::now();
            if now >= deadline {
                let e = last_err.unwrap_or_else(|| std::io::ErrorKind::TimedOut.into());
                return Err(Error::io(op, e).with_detail(format!(
                    "cannot reach rendezvous store {} within {:?}",
                    self.addr, self.connect_timeout
                )));
            }
            std::thread::sleep(backoff.min(deadline - now));
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    fn hello(&self, mut s: TcpStream) -> Result<TcpStream> {
        let op = "store connect";
        let io = |e: std::io::Error| {
            Error::io(op, e).with_detail(format!("handshake with rendezvous {}", self.addr))
        };
        s.set_nodelay(true).map_err(io)?;
        s.set_read_timeout(Some(self.connect_timeout.max(Duration::from_millis(100))))
            .map_err(io)?;
        s.set_write_timeout(Some(self.connect_timeout.max(Duration::from_millis(100))))
            .map_err(io)?;
        let hello = wire::encode_hello(&self.secret).map_err(|m| Error::invalid(op, m))?;
        s.write_all(&hello).map_err(io)?;
        let mut answer = [0u8; 1];
        s.read_exact(&mut answer).map_err(io)?;
        match Status::from_byte(answer[0]) {
            Some(Status::Ok) => Ok(s),
            Some(Status::Refused) => Err(Error::new(ErrorKind::Protocol, op).with_detail(format!(
                "rendezvous {} refused this process: wrong job secret (FERRY_SECRET)",
                self.addr
            ))),
            _ => Err(Error::new(ErrorKind::Protocol, op).with_detail(format!(
                "rendezvous {} answered the hello with byte {}",
                self.addr, answer[0]
            ))),
        }
    }

    /// Sends one request and reads its answer; `wait` is how long the server may take.
    fn request(&self, op: &'static str, req: &Request<'_>, wait: Duration) -> Result<Vec<u8>> {
        let frame = wire::encode_request(req).map_err(|m| Error::invalid(op, m))?;
        let mut guard = self.stream.lock().map_err(|_| poisoned(op))?;
        if guard.is_none() {
            *guard = Some(self.open().map_err(|e| e.context(op))?);
        }
        let Some(stream) = guard.as_mut() else {
            return Err(Error::new(ErrorKind::Io, op).with_detail("no connection"));
        };
        match exchange_frame(stream, &frame, wait) {
            Ok((Status::Ok, payload)) => Ok(payload),
            Ok((status, payload)) => {
                Err(status.into_error(op, String::from_utf8_lossy(&payload).into_owned()))
            }
            Err(e) => {
                // The stream may be mid-frame: never reuse it.
                *guard = None;
                Err(Error::io(op, e).with_detail(format!("rendezvous store {}", self.addr)))
            }
        }
    }
}

fn exchange_frame(
    stream: &mut TcpStream,
    frame: &[u8],
    wait: Duration,
) -> std::io::Result<(Status, Vec<u8>)> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    stream.write_all(frame)?;
    stream.set_read_timeout(Some(wait + GET_MARGIN))?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let n = wire::decode_body_len(len, false).ok_or_else(|| {
        bad(format!(
            "response body of {} bytes",
            u32::from_le_bytes(len)
        ))
    })?;
    let mut reply = vec![0u8; n];
    stream.read_exact(&mut reply)?;
    let (status, payload) = wire::decode_response(&reply).map_err(bad)?;
    Ok((status, payload.to_vec()))
}

impl Store for TcpStoreClient {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.request("store set", &Request::Set { key, value }, Duration::ZERO)
            .map(|_| ())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let timeout = timeout.min(wire::MAX_GET_WAIT);
        self.request("store get", &Request::Get { key, timeout }, timeout)
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        let op = "store add";
        let reply = self.request(op, &Request::Add { key, delta }, Duration::ZERO)?;
        let bytes: [u8; 8] = reply.as_slice().try_into().map_err(|_| {
            Error::new(ErrorKind::Protocol, op)
                .with_detail(format!("answer of {} bytes, expected 8", reply.len()))
        })?;
        Ok(i64::from_le_bytes(bytes))
    }
}

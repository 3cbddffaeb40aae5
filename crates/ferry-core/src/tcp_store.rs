//! The launcher's rendezvous store over TCP (R1, T8): a small key-value server that `ferry run`
//! serves on an ephemeral port, and the client every rank uses to reach it through
//! `FERRY_RENDEZVOUS` (the role PMI plays for MPI launchers).
//!
//! Backends publish their addresses here at start-up (`tcp/addr/<rank>`, node maps, ...) and
//! read the others' with a blocking get; `fetch_add` serves races such as node numbering.
//!
//! Protocol (all integers little-endian):
//! - hello, client to server: magic `FYKV`, version `u16`, secret length `u16`, secret bytes;
//!   the server answers one status byte (0 = welcome) and drops any client whose magic,
//!   version or secret is wrong (T8: only members of the job can use the store);
//! - request: body length `u32`, then op `u8` (1 set, 2 get, 3 add), key length `u16`, key
//!   (UTF-8), then the value (set), the timeout in ms as `u64` (get) or the delta as `i64` (add);
//! - response: body length `u32`, then a status `u8` ([`Status`]) and the value (get), the old
//!   counter value as `i64` (add), or a UTF-8 message (errors).
//!
//! Every size is bounded ([`MAX_KEY_BYTES`], [`MAX_VALUE_BYTES`], [`StoreLimits`]), every read
//! on the server has a deadline once a frame has begun, and malformed input ends only the
//! offending connection. Nothing here panics on what a peer sends.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;

/// Longest key in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value in bytes: addresses and node maps are small; bulk data never goes here.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Longest accepted secret in bytes.
pub const MAX_SECRET_BYTES: usize = 1024;

const MAGIC: [u8; 4] = *b"FYKV";
const VERSION: u16 = 1;
const OP_SET: u8 = 1;
const OP_GET: u8 = 2;
const OP_ADD: u8 = 3;
/// Largest request or response body: a key, a value and a few header bytes.
const MAX_BODY: usize = 3 + MAX_KEY_BYTES + MAX_VALUE_BYTES + 8;
/// How often blocked server threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);
/// Longest blocking get the server honours; longer requests are cut to this.
const MAX_GET_WAIT: Duration = Duration::from_secs(24 * 3600);

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
    /// The store is full ([`StoreLimits`]).
    Full = 3,
    /// The hello was refused (wrong magic, version or secret).
    Refused = 4,
}

impl Status {
    fn from_byte(b: u8) -> Option<Status> {
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

/// Caps of one store server, so that a misbehaving rank or a stranger cannot exhaust the
/// launcher.
#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    /// Most keys held at once.
    pub max_keys: usize,
    /// Most bytes of keys plus values held at once.
    pub max_bytes: usize,
    /// Most client connections open at once (one thread each).
    pub max_connections: usize,
    /// Deadline for a hello, and for the rest of a request once its first byte arrived.
    pub io_timeout: Duration,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_keys: 1 << 16,
            max_bytes: 64 << 20,
            max_connections: 4096,
            io_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Default)]
struct Table {
    map: HashMap<String, Vec<u8>>,
    bytes: usize,
}

struct Shared {
    secret: Vec<u8>,
    limits: StoreLimits,
    table: Mutex<Table>,
    changed: Condvar,
    stop: AtomicBool,
    connections: AtomicUsize,
}

fn poisoned(op: &'static str) -> Error {
    Error::new(ErrorKind::Io, op).with_detail("store lock poisoned by a panicking thread")
}

impl Shared {
    fn set(&self, key: &str, value: &[u8]) -> std::result::Result<(), (Status, String)> {
        check_key(key).map_err(|e| (Status::Invalid, e))?;
        if value.len() > MAX_VALUE_BYTES {
            return Err((
                Status::Invalid,
                format!("value of {} bytes exceeds {MAX_VALUE_BYTES}", value.len()),
            ));
        }
        let mut t = self
            .table
            .lock()
            .map_err(|_| (Status::Invalid, "store lock poisoned".to_string()))?;
        let old = t.map.get(key).map(|v| key.len() + v.len()).unwrap_or(0);
        let new_bytes = t.bytes - old + key.len() + value.len();
        let new_keys = t.map.len() + usize::from(!t.map.contains_key(key));
        if new_bytes > self.limits.max_bytes || new_keys > self.limits.max_keys {
            return Err((
                Status::Full,
                format!(
                    "store full (limits: {} keys, {} bytes)",
                    self.limits.max_keys, self.limits.max_bytes
                ),
            ));
        }
        t.bytes = new_bytes;
        t.map.insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> std::result::Result<Vec<u8>, (Status, String)> {
        check_key(key).map_err(|e| (Status::Invalid, e))?;
        let timeout = timeout.min(MAX_GET_WAIT);
        let deadline = Instant::now() + timeout;
        let mut t = self
            .table
            .lock()
            .map_err(|_| (Status::Invalid, "store lock poisoned".to_string()))?;
        loop {
            if let Some(v) = t.map.get(key) {
                return Ok(v.clone());
            }
            if self.stop.load(Ordering::Relaxed) {
                return Err((
                    Status::Invalid,
                    format!("the store is shutting down; key `{key}` was never set"),
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err((
                    Status::Timeout,
                    format!("key `{key}` not set within {timeout:?}"),
                ));
            }
            t = self
                .changed
                .wait_timeout(t, (deadline - now).min(STOP_POLL))
                .map_err(|_| (Status::Invalid, "store lock poisoned".to_string()))?
                .0;
        }
    }

    fn add(&self, key: &str, delta: i64) -> std::result::Result<i64, (Status, String)> {
        check_key(key).map_err(|e| (Status::Invalid, e))?;
        let mut t = self
            .table
            .lock()
            .map_err(|_| (Status::Invalid, "store lock poisoned".to_string()))?;
        let (old, old_len) = match t.map.get(key) {
            Some(v) => (
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .ok_or_else(|| {
                        (
                            Status::Invalid,
                            format!("key `{key}` does not hold an integer"),
                        )
                    })?,
                key.len() + v.len(),
            ),
            None => {
                if t.map.len() >= self.limits.max_keys {
                    return Err((Status::Full, "store full (key limit)".to_string()));
                }
                (0, 0)
            }
        };
        let new = old.checked_add(delta).ok_or_else(|| {
            (
                Status::Invalid,
                format!("counter `{key}` overflows ({old} + {delta})"),
            )
        })?;
        let text = new.to_string().into_bytes();
        t.bytes = t.bytes - old_len + key.len() + text.len();
        t.map.insert(key.to_string(), text);
        self.changed.notify_all();
        Ok(old)
    }
}

fn check_key(key: &str) -> std::result::Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key of {} bytes: keys must have 1 to {MAX_KEY_BYTES} bytes",
            key.len()
        ));
    }
    Ok(())
}

fn status_error(op: &'static str, status: Status, message: String) -> Error {
    let kind = match status {
        Status::Timeout => ErrorKind::Timeout,
        Status::Full => ErrorKind::ResourceExhausted,
        Status::Invalid => ErrorKind::InvalidArgument,
        Status::Refused => ErrorKind::Protocol,
        Status::Ok => ErrorKind::Protocol,
    };
    Error::new(kind, op).with_detail(message)
}

/// The rendezvous server: binds a listener, serves every client on its own thread, and stops
/// when dropped.
pub struct StoreServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl StoreServer {
    /// Binds `addr` (use port 0 for an ephemeral port: two jobs on one host never collide) and
    /// starts serving clients that present `secret`.
    pub fn bind(addr: &str, secret: &str) -> Result<StoreServer> {
        StoreServer::bind_with_limits(addr, secret, StoreLimits::default())
    }

    /// Like [`StoreServer::bind`] with explicit caps.
    pub fn bind_with_limits(addr: &str, secret: &str, limits: StoreLimits) -> Result<StoreServer> {
        if secret.is_empty() || secret.len() > MAX_SECRET_BYTES {
            return Err(Error::invalid(
                "store serve",
                format!("the secret must have 1 to {MAX_SECRET_BYTES} bytes"),
            ));
        }
        let listener = TcpListener::bind(addr).map_err(|e| {
            Error::io("store serve", e)
                .with_detail(format!("cannot bind rendezvous address {addr}"))
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::io("store serve", e))?;
        let shared = Arc::new(Shared {
            secret: secret.as_bytes().to_vec(),
            limits,
            table: Mutex::new(Table::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("ferry-store-accept".into())
            .spawn(move || accept_loop(listener, s))
            .map_err(|e| Error::io("store serve", e).with_detail("cannot start accept thread"))?;
        Ok(StoreServer {
            shared,
            addr: local,
            accept: Some(accept),
        })
    }

    /// The address the server listens on (with the ephemeral port filled in).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Direct access to the served table from the launcher's own process (no sockets).
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::new(ServerStore {
            shared: self.shared.clone(),
        })
    }

    /// Number of client connections currently open.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Stops accepting and serving. Client threads notice within a fraction of a second.
    pub fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
        if let Some(h) = self.accept.take() {
            // Wake the accept loop at once with a connection of our own; without it the loop
            // still notices the flag within STOP_POLL.
            let mut wake = self.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake {
                    SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            let _ = TcpStream::connect_timeout(&wake, STOP_POLL);
            let _ = h.join();
        }
    }
}

impl Drop for StoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Waits until `fd` is readable or `timeout` passes; errors only on poll failure.
fn wait_readable(fd: i32, timeout: Duration) -> std::io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd on our stack, count 1.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(rc > 0)
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let fd = listener.as_raw_fd();
    while !shared.stop.load(Ordering::Relaxed) {
        match wait_readable(fd, STOP_POLL) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!("rendezvous store: poll on listener failed: {e}");
                std::thread::sleep(STOP_POLL);
                continue;
            }
        }
        let (stream, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) => {
                // EMFILE and friends: keep serving the connections we have, retry later.
                tracing::warn!("rendezvous store: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if shared.stop.load(Ordering::Relaxed) {
            // The wake-up connection of shutdown(), or a client arriving too late.
            break;
        }
        let open = shared.connections.fetch_add(1, Ordering::Relaxed);
        if open >= shared.limits.max_connections {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(
                "rendezvous store: dropping connection from {peer}: {open} connections open"
            );
            continue;
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("ferry-store-conn".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Err(e) = serve_client(stream, &s) {
                    tracing::warn!("rendezvous store: connection from {peer} dropped: {e}");
                }
                s.connections.fetch_sub(1, Ordering::Relaxed);
            });
        if let Err(e) = spawned {
            shared.connections.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!("rendezvous store: cannot serve {peer}: {e}");
        }
    }
}

/// Reads exactly `buf.len()` bytes, giving up at the connection's I/O deadline.
fn read_full(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    stream.read_exact(buf)
}

fn serve_client(mut stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(shared.limits.io_timeout))?;
    stream.set_write_timeout(Some(shared.limits.io_timeout))?;
    let mut head = [0u8; 8];
    read_full(&mut stream, &mut head)?;
    let version = u16::from_le_bytes([head[4], head[5]]);
    let secret_len = u16::from_le_bytes([head[6], head[7]]) as usize;
    if head[..4] != MAGIC || version != VERSION || secret_len > MAX_SECRET_BYTES {
        // A stranger speaking another protocol: say nothing, drop it.
        return Err(bad(
            "not a ferry store client (bad magic, version or length)".into(),
        ));
    }
    let mut secret = vec![0u8; secret_len];
    read_full(&mut stream, &mut secret)?;
    if !constant_time_eq(&secret, &shared.secret) {
        let _ = stream.write_all(&[Status::Refused as u8]);
        return Err(bad("wrong job secret".into()));
    }
    stream.write_all(&[Status::Ok as u8])?;
    let fd = stream.as_raw_fd();
    let mut body = Vec::new();
    loop {
        // Idle clients may stay connected for the whole job; a started frame has a deadline.
        loop {
            if shared.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            if wait_readable(fd, STOP_POLL)? {
                break;
            }
        }
        let mut len = [0u8; 4];
        match stream.read(&mut len[..1]) {
            Ok(0) => return Ok(()), // orderly close
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        read_full(&mut stream, &mut len[1..])?;
        let n = u32::from_le_bytes(len) as usize;
        if !(3..=MAX_BODY).contains(&n) {
            return Err(bad(format!("request body of {n} bytes")));
        }
        body.resize(n, 0);
        read_full(&mut stream, &mut body)?;
        let reply = handle_request(&body, shared);
        let (status, payload) = match &reply {
            Ok(p) => (Status::Ok, p.as_slice()),
            Err((s, m)) => (*s, m.as_bytes()),
        };
        let mut out = Vec::with_capacity(5 + payload.len());
        out.extend_from_slice(&((payload.len() + 1) as u32).to_le_bytes());
        out.push(status as u8);
        out.extend_from_slice(payload);
        stream.write_all(&out)?;
        if let Err((Status::Invalid, m)) = &reply {
            if m.starts_with("malformed") {
                return Err(bad(m.clone()));
            }
        }
    }
}

fn handle_request(body: &[u8], shared: &Shared) -> std::result::Result<Vec<u8>, (Status, String)> {
    let malformed = |what: &str| (Status::Invalid, format!("malformed request: {what}"));
    let op = body[0];
    let key_len = u16::from_le_bytes([body[1], body[2]]) as usize;
    let rest = &body[3..];
    if key_len > rest.len() {
        return Err(malformed("key longer than the request"));
    }
    let key = std::str::from_utf8(&rest[..key_len]).map_err(|_| malformed("key is not UTF-8"))?;
    let arg = &rest[key_len..];
    let arg8 = || -> std::result::Result<[u8; 8], (Status, String)> {
        arg.try_into()
            .map_err(|_| malformed("expected an 8-byte argument"))
    };
    match op {
        OP_SET => shared.set(key, arg).map(|()| Vec::new()),
        OP_GET => {
            let ms = u64::from_le_bytes(arg8()?);
            shared.get(key, Duration::from_millis(ms))
        }
        OP_ADD => {
            let delta = i64::from_le_bytes(arg8()?);
            shared.add(key, delta).map(|old| old.to_le_bytes().to_vec())
        }
        other => Err(malformed(&format!("unknown operation {other}"))),
    }
}

/// Compares secrets without an early exit, so response timing does not reveal a prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The server's table seen from the launcher's own process.
struct ServerStore {
    shared: Arc<Shared>,
}

impl Store for ServerStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.shared
            .set(key, value)
            .map_err(|(s, m)| status_error("store set", s, m))
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.shared
            .get(key, timeout)
            .map_err(|(s, m)| status_error("store get", s, m))
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        self.shared
            .add(key, delta)
            .map_err(|(s, m)| status_error("store add", s, m))
    }
}

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

impl TcpStoreClient {
    /// Connects to the store at `addr` (`host:port`) and presents `secret`. Retries refused
    /// connections until `connect_timeout`, since the launcher may be a little behind.
    pub fn connect(addr: &str, secret: &str, connect_timeout: Duration) -> Result<TcpStoreClient> {
        if secret.len() > MAX_SECRET_BYTES {
            return Err(Error::invalid(
                "store connect",
                format!("secret longer than {MAX_SECRET_BYTES} bytes"),
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
        let mut hello = Vec::with_capacity(8 + self.secret.len());
        hello.extend_from_slice(&MAGIC);
        hello.extend_from_slice(&VERSION.to_le_bytes());
        hello.extend_from_slice(&(self.secret.len() as u16).to_le_bytes());
        hello.extend_from_slice(self.secret.as_bytes());
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
    fn request(&self, op: &'static str, body: &[u8], wait: Duration) -> Result<Vec<u8>> {
        let mut guard = self.stream.lock().map_err(|_| poisoned(op))?;
        if guard.is_none() {
            *guard = Some(self.open().map_err(|e| e.context(op))?);
        }
        let Some(stream) = guard.as_mut() else {
            return Err(Error::new(ErrorKind::Io, op).with_detail("no connection"));
        };
        let result = exchange_frame(stream, body, wait);
        match result {
            Ok((status, payload)) => {
                if status == Status::Ok {
                    Ok(payload)
                } else {
                    let msg = String::from_utf8_lossy(&payload).into_owned();
                    Err(status_error(op, status, msg))
                }
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
    body: &[u8],
    wait: Duration,
) -> std::io::Result<(Status, Vec<u8>)> {
    let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame)?;
    stream.set_read_timeout(Some(wait + GET_MARGIN))?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if !(1..=MAX_BODY).contains(&n) {
        return Err(bad(format!("response body of {n} bytes")));
    }
    let mut reply = vec![0u8; n];
    stream.read_exact(&mut reply)?;
    let status =
        Status::from_byte(reply[0]).ok_or_else(|| bad(format!("unknown status {}", reply[0])))?;
    reply.remove(0);
    Ok((status, reply))
}

fn request_body(op: u8, key: &str, arg: &[u8]) -> std::result::Result<Vec<u8>, String> {
    check_key(key)?;
    let mut body = Vec::with_capacity(3 + key.len() + arg.len());
    body.push(op);
    body.extend_from_slice(&(key.len() as u16).to_le_bytes());
    body.extend_from_slice(key.as_bytes());
    body.extend_from_slice(arg);
    Ok(body)
}

impl Store for TcpStoreClient {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let op = "store set";
        if value.len() > MAX_VALUE_BYTES {
            return Err(Error::invalid(
                op,
                format!(
                    "value of {} bytes for `{key}` exceeds {MAX_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        let body = request_body(OP_SET, key, value).map_err(|m| Error::invalid(op, m))?;
        self.request(op, &body, Duration::ZERO).map(|_| ())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let op = "store get";
        let timeout = timeout.min(MAX_GET_WAIT);
        let ms = timeout.as_millis().min(u64::MAX as u128) as u64;
        let body =
            request_body(OP_GET, key, &ms.to_le_bytes()).map_err(|m| Error::invalid(op, m))?;
        self.request(op, &body, timeout)
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        let op = "store add";
        let body =
            request_body(OP_ADD, key, &delta.to_le_bytes()).map_err(|m| Error::invalid(op, m))?;
        let reply = self.request(op, &body, Duration::ZERO)?;
        let bytes: [u8; 8] = reply.as_slice().try_into().map_err(|_| {
            Error::new(ErrorKind::Protocol, op)
                .with_detail(format!("answer of {} bytes, expected 8", reply.len()))
        })?;
        Ok(i64::from_le_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef";

    fn server() -> (StoreServer, String) {
        let s = StoreServer::bind("127.0.0.1:0", SECRET).unwrap();
        let a = s.local_addr().to_string();
        (s, a)
    }

    #[test]
    fn set_get_add_across_clients() {
        let (srv, addr) = server();
        let a = TcpStoreClient::connect(&addr, SECRET, Duration::from_secs(5)).unwrap();
        let b = TcpStoreClient::connect(&addr, SECRET, Duration::from_secs(5)).unwrap();
        let waiter = std::thread::spawn({
            let addr = addr.clone();
            move || {
                let c = TcpStoreClient::connect(&addr, SECRET, Duration::from_secs(5)).unwrap();
                c.get("tcp/addr/1", Duration::from_secs(20)).unwrap()
            }
        });
        std::thread::sleep(Duration::from_millis(50));
        a.set("tcp/addr/1", b"10.0.0.1:4000").unwrap();
        assert_eq!(waiter.join().unwrap(), b"10.0.0.1:4000");
        assert_eq!(
            b.get("tcp/addr/1", Duration::ZERO).unwrap(),
            b"10.0.0.1:4000"
        );
        assert_eq!(a.fetch_add("n", 1).unwrap(), 0);
        assert_eq!(b.fetch_add("n", 5).unwrap(), 1);
        assert_eq!(srv.store().fetch_add("n", 0).unwrap(), 6);
        let e = b.get("missing", Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().contains("missing"), "{e}");
        // The connection survives a server-side timeout.
        assert_eq!(b.fetch_add("n", 0).unwrap(), 6);
        a.set("text", b"x").unwrap();
        let e = a.fetch_add("text", 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn counter_is_atomic_under_concurrency() {
        let (_srv, addr) = server();
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let c = TcpStoreClient::connect(&addr, SECRET, Duration::from_secs(5)).unwrap();
                    (0..50)
                        .map(|_| c.fetch_add("ctr", 1).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<i64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..400).collect::<Vec<i64>>());
    }

    #[test]
    fn wrong_secret_is_refused_and_strangers_are_dropped() {
        let (srv, addr) = server();
        let e = TcpStoreClient::connect(&addr, "guess", Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert!(e.to_string().contains("secret"), "{e}");
        // A stranger that sends garbage is cut off without an answer.
        let mut raw = TcpStream::connect(&addr).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        raw.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(raw.read(&mut buf).unwrap_or(0), 0);
        // A member with an oversized frame is cut off too; the store keeps serving others.
        let mut raw = TcpStream::connect(&addr).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&VERSION.to_le_bytes());
        hello.extend_from_slice(&(SECRET.len() as u16).to_le_bytes());
        hello.extend_from_slice(SECRET.as_bytes());
        raw.write_all(&hello).unwrap();
        raw.read_exact(&mut buf[..1]).unwrap();
        assert_eq!(buf[0], Status::Ok as u8);
        raw.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(raw.read(&mut buf).unwrap_or(0), 0);
        let ok = TcpStoreClient::connect(&addr, SECRET, Duration::from_secs(5)).unwrap();
        ok.set("k", b"v").unwrap();
        assert_eq!(srv.store().get("k", Duration::ZERO).unwrap(), b"v");
    }

    #[test]
    fn bounds_are_enforced() {
        let limits = StoreLimits {
            max_keys: 2,
            ..StoreLimits::default()
        };
        let srv = StoreServer::bind_with_limits("127.0.0.1:0", SECRET, limits).unwrap();
        let c = TcpStoreClient::connect(
            &srv.local_addr().to_string(),
            SECRET,
            Duration::from_secs(5),
        )
        .unwrap();
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            c.set(&long_key, b"v").unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            c.set("big", &vec![0u8; MAX_VALUE_BYTES + 1])
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidArgument
        );
        c.set("a", b"1").unwrap();
        c.set("b", b"2").unwrap();
        c.set("a", b"3").unwrap(); // replacing does not grow the table
        let e = c.set("c", b"4").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted, "{e}");
        assert_eq!(
            c.fetch_add("d", 1).unwrap_err().kind(),
            ErrorKind::ResourceExhausted
        );
    }

    #[test]
    fn server_gone_is_a_peer_failure() {
        let (mut srv, addr) = server();
        let c = TcpStoreClient::connect(&addr, SECRET, Duration::from_millis(300)).unwrap();
        srv.shutdown();
        drop(srv);
        let e = c.get("x", Duration::from_secs(30)).unwrap_err();
        // Either the connection is gone, or the server answered while shutting down.
        assert!(
            matches!(e.kind(), ErrorKind::PeerFailed | ErrorKind::InvalidArgument),
            "{e}"
        );
    }
}

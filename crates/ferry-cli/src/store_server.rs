//! The launcher's rendezvous store over TCP (R1, T8): a small key-value server that `ferry run`
//! serves on an ephemeral port for the ranks' `TcpStoreClient`s (`FERRY_RENDEZVOUS`; the role
//! PMI plays for MPI launchers).
//!
//! Backends publish their addresses here at start-up (`tcp/addr/<rank>`, node maps, ...) and
//! read the others' with a blocking get; `fetch_add` serves races such as node numbering. The
//! wire format is `ferry_core::store::wire` (shared with the client).
//!
//! Every size is bounded (the wire format's caps, [`StoreLimits`]), every read has a deadline
//! once a frame has begun, and malformed input ends only the offending connection. Nothing
//! here panics on what a peer sends.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferry_core::store::wire::{
    self, check_key, Request, Status, MAX_SECRET_BYTES, MAX_VALUE_BYTES,
};
use ferry_core::{Error, Result, Store};

/// How often blocked server threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);

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
    /// One condition variable per key that readers wait for, woken when that key is set: with
    /// one for all keys, every set woke every waiting reader (at 256 ranks waiting for one
    /// key, 65,000 wake-ups while the job gathered). Removed when the key is set or its last
    /// reader stops waiting.
    waiting: HashMap<String, Arc<Condvar>>,
}

impl Table {
    fn wake(&mut self, key: &str) {
        if let Some(cv) = self.waiting.remove(key) {
            cv.notify_all();
        }
    }
}

struct Shared {
    secret: Vec<u8>,
    limits: StoreLimits,
    table: Mutex<Table>,
    stop: AtomicBool,
    connections: AtomicUsize,
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
        t.wake(key);
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> std::result::Result<Vec<u8>, (Status, String)> {
        check_key(key).map_err(|e| (Status::Invalid, e))?;
        let timeout = timeout.min(wire::MAX_GET_WAIT);
        let deadline = Instant::now() + timeout;
        let mut t = self
            .table
            .lock()
            .map_err(|_| (Status::Invalid, "store lock poisoned".to_string()))?;
        let mut cv: Option<Arc<Condvar>> = None;
        let result = loop {
            if let Some(v) = t.map.get(key) {
                break Ok(v.clone());
            }
            if self.stop.load(Ordering::Relaxed) {
                break Err((
                    Status::Invalid,
                    format!("the store is shutting down; key `{key}` was never set"),
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                break Err((
                    Status::Timeout,
                    format!("key `{key}` not set within {timeout:?}"),
                ));
            }
            let c = t
                .waiting
                .entry(key.to_string())
                .or_insert_with(|| Arc::new(Condvar::new()))
                .clone();
            t = c
                .wait_timeout(t, (deadline - now).min(STOP_POLL))
                .map_err(|_| (Status::Invalid, "store lock poisoned".to_string()))?
                .0;
            cv = Some(c);
        };
        // The last reader of a key that was never set removes its condition variable.
        if let Some(c) = cv {
            if Arc::strong_count(&c) == 2 && t.waiting.get(key).is_some_and(|w| Arc::ptr_eq(w, &c))
            {
                t.waiting.remove(key);
            }
        }
        result
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
        t.wake(key);
        Ok(old)
    }
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

    /// Stops accepting and serving. Client threads notice within a fraction of a second.
    pub fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Ok(t) = self.shared.table.lock() {
            for cv in t.waiting.values() {
                cv.notify_all();
            }
        }
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
    let mut head = [0u8; wire::HELLO_HEAD];
    read_full(&mut stream, &mut head)?;
    let Some(secret_len) = wire::decode_hello_head(&head) else {
        // A stranger speaking another protocol: say nothing, drop it.
        return Err(bad(
            "not a ferry store client (bad magic, version or length)".into(),
        ));
    };
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
        let n = wire::decode_body_len(len, true)
            .ok_or_else(|| bad(format!("request body of {} bytes", u32::from_le_bytes(len))))?;
        body.resize(n, 0);
        read_full(&mut stream, &mut body)?;
        let (reply, malformed) = match wire::decode_request(&body) {
            Ok(req) => (handle_request(req, shared), false),
            Err(m) => (Err((Status::Invalid, m.to_string())), true),
        };
        let out = match &reply {
            Ok(p) => wire::encode_response(Status::Ok, p),
            Err((s, m)) => wire::encode_response(*s, m.as_bytes()),
        };
        stream.write_all(&out)?;
        if malformed {
            return Err(bad(format!("{}", String::from_utf8_lossy(&out[5..]))));
        }
    }
}

fn handle_request(
    req: Request<'_>,
    shared: &Shared,
) -> std::result::Result<Vec<u8>, (Status, String)> {
    match req {
        Request::Set { key, value } => shared.set(key, value).map(|()| Vec::new()),
        Request::Get { key, timeout } => shared.get(key, timeout),
        Request::Add { key, delta } => shared.add(key, delta).map(|old| old.to_le_bytes().to_vec()),
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
            .map_err(|(s, m)| s.into_error("store set", m))
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.shared
            .get(key, timeout)
            .map_err(|(s, m)| s.into_error("store get", m))
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        self.shared
            .add(key, delta)
            .map_err(|(s, m)| s.into_error("store add", m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::store::wire::{MAGIC, MAX_KEY_BYTES, VERSION};
    use ferry_core::store::TcpStoreClient;
    use ferry_core::ErrorKind;
    use std::io::Read;

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

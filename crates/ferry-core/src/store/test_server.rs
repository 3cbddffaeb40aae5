//! A minimal rendezvous server for tests of the client side (feature `test-util`): one thread
//! per connection over a [`MemStore`], no limits beyond the wire format's. The launcher's
//! production server, with its caps, deadlines and shutdown, lives in `ferry-cli`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::wire::{self, Request, Status};
use super::{MemStore, Store};
use crate::error::{Error, Result};

/// A rendezvous store served on a loopback port for the life of the value.
pub struct TestStoreServer {
    store: Arc<MemStore>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl TestStoreServer {
    /// Serves clients that present `secret` on an ephemeral loopback port.
    pub fn start(secret: &str) -> Result<TestStoreServer> {
        let io = |e| Error::io("test store serve", e);
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let addr = listener.local_addr().map_err(io)?;
        let store = Arc::new(MemStore::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, secret) = (store.clone(), stop.clone(), secret.as_bytes().to_vec());
        let accept = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (s, secret) = (s.clone(), secret.clone());
                        std::thread::spawn(move || serve(conn, &s, &secret));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(TestStoreServer {
            store,
            addr,
            stop,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The served table, without sockets.
    pub fn store(&self) -> Arc<MemStore> {
        self.store.clone()
    }
}

impl Drop for TestStoreServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Serves one connection until it closes or misbehaves.
fn serve(mut conn: TcpStream, store: &MemStore, secret: &[u8]) -> Option<()> {
    conn.set_nonblocking(false).ok()?;
    let mut head = [0u8; wire::HELLO_HEAD];
    conn.read_exact(&mut head).ok()?;
    let mut theirs = vec![0u8; wire::decode_hello_head(&head)?];
    conn.read_exact(&mut theirs).ok()?;
    if theirs != secret {
        let _ = conn.write_all(&[Status::Refused as u8]);
        return None;
    }
    conn.write_all(&[Status::Ok as u8]).ok()?;
    loop {
        let mut len = [0u8; 4];
        conn.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; wire::decode_body_len(len, true)?];
        conn.read_exact(&mut body).ok()?;
        let reply = match wire::decode_request(&body) {
            Ok(Request::Set { key, value }) => store.set(key, value).map(|()| Vec::new()),
            Ok(Request::Get { key, timeout }) => store.get(key, timeout),
            Ok(Request::Add { key, delta }) => store
                .fetch_add(key, delta)
                .map(|v| v.to_le_bytes().to_vec()),
            Err(m) => {
                let _ = conn.write_all(&wire::encode_response(Status::Invalid, m.0.as_bytes()));
                return None;
            }
        };
        let frame = match reply {
            Ok(v) => wire::encode_response(Status::Ok, &v),
            Err(e) if e.kind() == crate::ErrorKind::Timeout => {
                wire::encode_response(Status::Timeout, e.to_string().as_bytes())
            }
            Err(e) => wire::encode_response(Status::Invalid, e.to_string().as_bytes()),
        };
        conn.write_all(&frame).ok()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TcpStoreClient;
    use crate::ErrorKind;

    #[test]
    fn client_talks_to_a_server_and_wrong_secrets_are_refused() {
        let srv = TestStoreServer::start("s3cret").unwrap();
        let addr = srv.local_addr().to_string();
        let e = TcpStoreClient::connect(&addr, "guess", Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert!(e.to_string().contains("secret"), "{e}");
        let c = TcpStoreClient::connect(&addr, "s3cret", Duration::from_secs(5)).unwrap();
        c.set("tcp/addr/0", b"127.0.0.1:1").unwrap();
        assert_eq!(
            srv.store().get("tcp/addr/0", Duration::ZERO).unwrap(),
            b"127.0.0.1:1"
        );
        assert_eq!(c.fetch_add("n", 2).unwrap(), 0);
        assert_eq!(c.fetch_add("n", 1).unwrap(), 2);
        let e = c.get("missing", Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert_eq!(c.get("tcp/addr/0", Duration::ZERO).unwrap(), b"127.0.0.1:1");
    }
}

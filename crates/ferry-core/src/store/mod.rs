//! Key-value stores for bootstrap (rendezvous of addresses, like PMI) and small shared state.
//!
//! One trait, several implementations: [`MemStore`] for threads of one process (tests), the
//! client of the launcher's TCP store for real jobs ([`TcpStoreClient`], wire format in
//! [`wire`]; the server is the launcher's, crate `ferry-cli`), file stores for jobs started by
//! `mpirun`/`srun` or by hand (`crate::file_store`).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

mod client;
#[cfg(any(test, feature = "test-util"))]
mod test_server;
pub mod wire;

pub use client::TcpStoreClient;
#[cfg(any(test, feature = "test-util"))]
pub use test_server::TestStoreServer;

/// A key-value store shared by the ranks of one job.
pub trait Store: Send + Sync {
    /// Sets `key` to `value`, replacing any earlier value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Returns the value of `key`, waiting up to `timeout` for it to be set.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;

    /// Atomically adds `delta` to the integer counter `key` (absent = 0) and returns the value
    /// before the addition. Used for races such as rank assignment.
    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64>;
}

/// A store in the memory of one process, for threads-as-ranks tests.
#[derive(Debug, Default)]
pub struct MemStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> MemStore {
        MemStore::default()
    }
}

fn poisoned(op: &'static str) -> Error {
    Error::new(ErrorKind::Io, op).with_detail("store lock poisoned by a panicking thread")
}

impl Store for MemStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut map = self.map.lock().map_err(|_| poisoned("store set"))?;
        map.insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut map = self.map.lock().map_err(|_| poisoned("store get"))?;
        loop {
            if let Some(v) = map.get(key) {
                return Ok(v.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::new(ErrorKind::Timeout, "store get")
                    .with_detail(format!("key `{key}` not set within {timeout:?}")));
            }
            map = self
                .changed
                .wait_timeout(map, deadline - now)
                .map_err(|_| poisoned("store get"))?
                .0;
        }
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        let mut map = self.map.lock().map_err(|_| poisoned("store add"))?;
        let old = match map.get(key) {
            Some(v) => std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| {
                    Error::invalid("store add", format!("key `{key}` does not hold an integer"))
                })?,
            None => 0,
        };
        map.insert(key.to_string(), (old + delta).to_string().into_bytes());
        self.changed.notify_all();
        Ok(old)
    }
}

/// A view of another store with every key prefixed, so that jobs or layers never collide.
pub struct PrefixStore<S> {
    prefix: String,
    inner: S,
}

impl<S: Store> PrefixStore<S> {
    /// Prefixes every key with `prefix` and a `/`.
    pub fn new(prefix: impl Into<String>, inner: S) -> PrefixStore<S> {
        PrefixStore {
            prefix: prefix.into(),
            inner,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{}", self.prefix, key)
    }
}

impl<S: Store> Store for PrefixStore<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&self.key(key), value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.inner.get(&self.key(key), timeout)
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        self.inner.fetch_add(&self.key(key), delta)
    }
}

impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        (**self).set(key, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        (**self).get(key, timeout)
    }

    fn fetch_add(&self, key: &str, delta: i64) -> Result<i64> {
        (**self).fetch_add(key, delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn get_waits_for_set_and_counter_is_atomic() {
        let s = Arc::new(MemStore::new());
        let s2 = s.clone();
        let h = std::thread::spawn(move || s2.get("k", Duration::from_secs(5)).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        s.set("k", b"v").unwrap();
        assert_eq!(h.join().unwrap(), b"v");
        assert_eq!(s.fetch_add("c", 1).unwrap(), 0);
        assert_eq!(s.fetch_add("c", 1).unwrap(), 1);
        assert!(s.get("missing", Duration::from_millis(10)).is_err());
        let p = PrefixStore::new("job", s.clone());
        p.set("a", b"1").unwrap();
        assert_eq!(s.get("job/a", Duration::ZERO).unwrap(), b"1");
    }
}

//! Memory the transport owns: the pool of reusable buffers, and messages kept aside because
//! they were taken off MPI's queue before a receive asked for them (hashed tags whose header
//! names another key, and messages drained while waiting, see [`MpiTransport::drain`]).

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::MsgKey;

use super::{MpiTransport, MAX_EARLY_BYTES, MAX_EARLY_MESSAGES};

/// Free buffers kept for reuse, the largest one kept, and the most bytes kept in all: enough
/// for the steady state of halo exchanges without holding on to the memory of huge messages.
const POOL_BUFFERS: usize = 64;
const POOL_MAX_CAPACITY: usize = 16 << 20;
const POOL_MAX_BYTES: usize = 64 << 20;

impl MpiTransport {
    /// An empty buffer with room for `capacity` bytes: the smallest pooled one that fits (so a
    /// small message does not pin a large block), else a new one. An allocation that fails is
    /// an error naming `peer`, never an abort.
    pub(super) fn take_buffer(&mut self, capacity: usize, peer: usize) -> Result<Vec<u8>> {
        let best = self
            .pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= capacity)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let mut buf = self.pool.swap_remove(i);
            self.pool_bytes -= buf.capacity();
            buf.clear();
            return Ok(buf);
        }
        let mut buf = Vec::new();
        buf.try_reserve_exact(capacity).map_err(|_| {
            Error::new(ErrorKind::ResourceExhausted, "mpi buffer")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!("cannot allocate {capacity} bytes"))
        })?;
        Ok(buf)
    }

    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if self.pool.len() < POOL_BUFFERS
            && cap > 0
            && cap <= POOL_MAX_CAPACITY
            && self.pool_bytes + cap <= POOL_MAX_BYTES
        {
            self.pool_bytes += cap;
            self.pool.push(buf);
        }
    }

    /// The oldest message kept aside for `(peer, key)`.
    pub(super) fn take_early(&mut self, peer: usize, key: MsgKey) -> Option<Vec<u8>> {
        if self.early_messages == 0 {
            return None;
        }
        let queue = self.early.get_mut(&(peer, key))?;
        let msg = queue.pop_front()?;
        if queue.is_empty() {
            self.early.remove(&(peer, key));
        }
        self.early_bytes -= msg.len();
        self.early_messages -= 1;
        Some(msg)
    }

    /// Keeps `msg` aside for a later receive of `(peer, key)`; beyond the caps (bytes and
    /// messages, drains in flight included) it is a [`ErrorKind::ResourceExhausted`] error.
    pub(super) fn put_early(&mut self, peer: usize, key: MsgKey, msg: Vec<u8>) -> Result<()> {
        if self.early_messages + self.drained.len() >= MAX_EARLY_MESSAGES
            || self.early_bytes + self.drained_bytes + msg.len() > MAX_EARLY_BYTES
        {
            return Err(Error::new(ErrorKind::ResourceExhausted, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "{} messages / {} bytes of other keys are already kept aside (cap {} / {}); \
                     a message for {key:?} does not fit",
                    self.early_messages, self.early_bytes, MAX_EARLY_MESSAGES, MAX_EARLY_BYTES
                )));
        }
        self.keep_early(peer, key, msg);
        Ok(())
    }

    /// Keeps `msg` aside without checking the caps (a drained message was counted against them
    /// when it was taken).
    pub(super) fn keep_early(&mut self, peer: usize, key: MsgKey, msg: Vec<u8>) {
        self.early_bytes += msg.len();
        self.early_messages += 1;
        self.kept_aside_total += 1;
        self.early.entry((peer, key)).or_default().push_back(msg);
    }

    /// Whether a drained message of flow `(peer, tag)` is still being received: later messages
    /// of that flow must wait for it (serial order, M2).
    pub(super) fn drain_pending(&self, peer: usize, tag: i32) -> bool {
        self.drained.iter().any(|d| d.peer == peer && d.tag == tag)
    }

    /// Whether one more message may be drained within the caps (the one taken may pass the
    /// byte cap by its own length: MPI tells its length only once it is matched).
    pub(super) fn room_to_drain(&self) -> bool {
        self.early_messages + self.drained.len() < MAX_EARLY_MESSAGES
            && self.early_bytes + self.drained_bytes < MAX_EARLY_BYTES
    }
}

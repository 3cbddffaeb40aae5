//! Recycled payload vectors. A message that arrives before its receive is posted is read into
//! a vector the endpoint keeps in its inbox until the receive comes and copies it out; in a
//! stream of such messages a fresh, zeroed allocation per message cost a page fault per 4 KiB
//! and a `memset` on top of the two copies. Vectors whose contents were copied out come back
//! here and serve the next arrivals, within a bound.

/// Vectors smaller than this are not kept (the allocator serves them cheaply).
const SPARE_MIN: usize = 4 << 10;
/// Vectors kept at most.
const SPARE_MAX_BUFFERS: usize = 64;
/// Bytes kept at most.
const SPARE_MAX_BYTES: usize = 32 << 20;

/// A bounded pool of vectors.
#[derive(Default)]
pub(crate) struct Spare {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

impl Spare {
    /// A vector of `len` bytes (contents unspecified: the caller overwrites all of them), or
    /// `None` when memory cannot hold it (never an abort).
    pub fn take(&mut self, len: usize) -> Option<Vec<u8>> {
        if len >= SPARE_MIN {
            // The smallest that fits, so that large vectors stay for large messages.
            let best = self
                .bufs
                .iter()
                .enumerate()
                .filter(|(_, v)| v.capacity() >= len)
                .min_by_key(|(_, v)| v.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                let mut v = self.bufs.swap_remove(i);
                self.bytes -= v.capacity();
                // Only bytes past the vector's old length are written here.
                v.resize(len, 0);
                return Some(v);
            }
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len).ok()?;
        v.resize(len, 0);
        Some(v)
    }

    /// Keeps `v` for a later [`Spare::take`] if it is worth it and there is room.
    pub fn give(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        if cap >= SPARE_MIN
            && self.bufs.len() < SPARE_MAX_BUFFERS
            && self.bytes + cap <= SPARE_MAX_BYTES
        {
            self.bytes += cap;
            self.bufs.push(v);
        }
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_vector_serves_the_next_message_of_its_size() {
        let mut s = Spare::default();
        let v = s.take(64 << 10).unwrap();
        let ptr = v.as_ptr();
        s.give(v);
        assert_eq!(s.bytes(), 64 << 10);
        let w = s.take(60 << 10).unwrap();
        assert_eq!(w.len(), 60 << 10);
        assert_eq!(w.as_ptr(), ptr);
        assert_eq!(s.bytes(), 0);
        // Too large for what is kept: a fresh one.
        s.give(w);
        let x = s.take(1 << 20).unwrap();
        assert_eq!(x.len(), 1 << 20);
        assert_eq!(s.bytes(), 64 << 10);
    }

    #[test]
    fn the_pool_stays_bounded() {
        let mut s = Spare::default();
        for _ in 0..SPARE_MAX_BUFFERS * 2 {
            s.give(vec![0u8; 1 << 20]);
        }
        assert!(s.bytes() <= SPARE_MAX_BYTES);
        s.give(vec![0u8; 100]);
        assert!(s.bytes() <= SPARE_MAX_BYTES);
    }

    #[test]
    fn an_impossible_size_is_none_not_an_abort() {
        assert!(Spare::default().take(usize::MAX / 2).is_none());
    }
}

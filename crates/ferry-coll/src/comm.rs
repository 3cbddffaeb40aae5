//! The context every algorithm runs in, and thin point-to-point helpers over the transport.
//!
//! Algorithms address peers by index into `ranks` (the members taking part, in group order), so
//! one implementation serves the whole group and any sub-group (node-local or leader groups of
//! the node-aware variants).

use ferry_core::{Error, ErrorKind, Exchange, MsgKey, MsgKind, RecvBuf, Result, Transport};

/// Collective kinds, encoded in the tag so that mismatched calls (one rank in `reduce`, another
/// in `broadcast`) time out instead of mixing data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CollKind {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    Allreduce = 4,
    Gather = 5,
    Allgather = 6,
    Scatter = 7,
    Alltoall = 8,
}

/// Sequence numbers are reused after this many collectives of one group. Flows keep FIFO order
/// (M2 serials), so reuse is safe; the window bounds the per-flow tables of the backends.
pub(crate) const SEQ_WINDOW: u32 = 256;

/// Where and as whom an algorithm runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx<'a> {
    /// World ranks of the participants, in group order.
    pub ranks: &'a [usize],
    /// My index in `ranks`.
    pub me: usize,
    generation: u32,
    tag_base: u32,
    phase: u8,
    /// The group follows a topology whose neighbours are consecutive group indices: the
    /// automatic choice keeps to the chain (X7).
    pub chain: bool,
}

impl<'a> Ctx<'a> {
    /// The context of one collective call: tag = sequence (mod window) << 16 | kind << 8 | phase.
    pub fn new(ranks: &'a [usize], me: usize, generation: u32, seq: u32, kind: CollKind) -> Self {
        Ctx {
            ranks,
            me,
            generation,
            tag_base: ((seq % SEQ_WINDOW) << 16) | ((kind as u32) << 8),
            phase: 0,
            chain: false,
        }
    }

    /// The same context, marked as running over a chain-shaped topology.
    pub fn on_chain(self, chain: bool) -> Self {
        Ctx { chain, ..self }
    }

    /// Number of participants.
    pub fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The same participants, messages tagged with a phase `offset` further on (sub-steps of a
    /// composite algorithm use different tags; offsets add up when algorithms nest).
    pub fn phase(&self, offset: u8) -> Ctx<'a> {
        Ctx {
            phase: self.phase.wrapping_add(offset),
            ..*self
        }
    }

    /// A sub-group (e.g. the ranks of one node), tagged `offset` phases further on.
    pub fn sub<'b>(&self, ranks: &'b [usize], me: usize, offset: u8) -> Ctx<'b> {
        Ctx {
            ranks,
            me,
            generation: self.generation,
            tag_base: self.tag_base,
            phase: self.phase.wrapping_add(offset),
            chain: false,
        }
    }

    fn key(&self) -> MsgKey {
        MsgKey::new(
            self.generation,
            MsgKind::COLLECTIVE,
            self.tag_base | self.phase as u32,
        )
    }

    fn peer_err(&self, idx: usize) -> impl Fn(Error) -> Error + '_ {
        let world = self.ranks[idx];
        move |e: Error| {
            if e.peer().is_none() {
                e.with_peer(world)
            } else {
                e
            }
        }
    }

    /// Sends `data` to participant `to`.
    pub fn send(&self, t: &mut dyn Transport, to: usize, data: &[u8]) -> Result<()> {
        t.send(self.ranks[to], self.key(), data)
            .map_err(self.peer_err(to))
    }

    /// Receives a message of any length from participant `from`.
    pub fn recv(&self, t: &mut dyn Transport, from: usize, buf: &mut Vec<u8>) -> Result<()> {
        t.recv(self.ranks[from], self.key(), buf)
            .map_err(self.peer_err(from))
    }

    /// Receives exactly `buf.len()` bytes from participant `from`.
    pub fn recv_into(&self, t: &mut dyn Transport, from: usize, buf: &mut [u8]) -> Result<()> {
        let mut ex = Exchange::new();
        ex.recv_into(self.ranks[from], self.key(), buf);
        t.exchange(&mut ex).map_err(self.peer_err(from))
    }

    /// Sends to `to` and receives exactly `buf.len()` bytes from `from`, progressed together.
    pub fn sendrecv_into(
        &self,
        t: &mut dyn Transport,
        to: usize,
        data: &[u8],
        from: usize,
        buf: &mut [u8],
    ) -> Result<()> {
        // One-peer step: the backend's lean sendrecv where it has one (same bits, fewer
        // operation vectors).
        t.sendrecv(
            self.ranks[to],
            self.key(),
            data,
            self.ranks[from],
            self.key(),
            RecvBuf::Slice(buf),
        )
        .map_err(self.peer_err(from))
    }

    /// Sends to `to` and receives a message of any length from `from`, progressed together.
    pub fn sendrecv(
        &self,
        t: &mut dyn Transport,
        to: usize,
        data: &[u8],
        from: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        t.sendrecv(
            self.ranks[to],
            self.key(),
            data,
            self.ranks[from],
            self.key(),
            RecvBuf::Vec(buf),
        )
        .map_err(self.peer_err(from))
    }

    /// The (world rank, key) pair for participant `idx`, for building exchanges by hand.
    pub fn addr(&self, idx: usize) -> (usize, MsgKey) {
        (self.ranks[idx], self.key())
    }
}

/// A broadcast buffer: a vector that takes the root's length, or a slice of fixed length.
pub(crate) enum Buf<'a> {
    /// Resized to the message on non-roots.
    Vec(&'a mut Vec<u8>),
    /// Must match the root's length.
    Slice(&'a mut [u8]),
}

impl Buf<'_> {
    /// The current contents.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Buf::Vec(v) => v,
            Buf::Slice(s) => s,
        }
    }

    /// The contents, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Buf::Vec(v) => v,
            Buf::Slice(s) => s,
        }
    }

    /// Receives from participant `from` of `c` into this buffer.
    pub fn recv(&mut self, c: &Ctx<'_>, t: &mut dyn Transport, from: usize) -> Result<()> {
        match self {
            Buf::Vec(v) => c.recv(t, from, v),
            Buf::Slice(s) => c.recv_into(t, from, s),
        }
    }
}

/// Packs indexed byte blocks into one message: `count:u32`, then per block `index:u32`,
/// `len:u64`, bytes (little endian).
pub(crate) fn pack<'a>(blocks: impl Iterator<Item = (usize, &'a [u8])>, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count = 0u32;
    for (idx, data) in blocks {
        out.extend_from_slice(&(idx as u32).to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(data);
        count += 1;
    }
    out[..4].copy_from_slice(&count.to_le_bytes());
}

/// Appends one indexed block to a message made by [`pack`] (an empty `out` starts a new one);
/// a non-empty message shorter than its count is a protocol error naming `peer`.
pub(crate) fn pack_append(
    out: &mut Vec<u8>,
    idx: usize,
    data: &[u8],
    op: &'static str,
    peer: usize,
) -> Result<()> {
    if out.is_empty() {
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    let head: [u8; 4] = out
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| {
            Error::new(ErrorKind::Protocol, op)
                .with_peer(peer)
                .with_detail("malformed block list: truncated")
        })?;
    let count = u32::from_le_bytes(head).wrapping_add(1);
    out[..4].copy_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(idx as u32).to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
    Ok(())
}

/// Unpacks a message made by [`pack`] into `slots` (indexed by block index). A malformed
/// message or an index out of range is a protocol error naming `peer`.
pub(crate) fn unpack_into(
    msg: &[u8],
    slots: &mut [Option<Vec<u8>>],
    op: &'static str,
    peer: usize,
) -> Result<()> {
    let bad = |why: &str| {
        Error::new(ErrorKind::Protocol, op)
            .with_peer(peer)
            .with_detail(format!("malformed block list: {why}"))
    };
    let mut rest = msg;
    let mut take = |n: usize| -> Result<&[u8]> {
        if rest.len() < n {
            return Err(bad("truncated"));
        }
        let (head, tail) = rest.split_at(n);
        rest = tail;
        Ok(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad("count"))?);
    for _ in 0..count {
        let idx = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad("index"))?) as usize;
        let len = u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad("length"))?);
        let len = usize::try_from(len).map_err(|_| bad("length"))?;
        let data = take(len)?;
        let slot = slots
            .get_mut(idx)
            .ok_or_else(|| bad(&format!("block index {idx} out of range")))?;
        *slot = Some(data.to_vec());
    }
    if !rest.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(())
}

/// Splits `buf` into a shared view of `a` and a mutable view of `b`. The ranges must not
/// overlap (empty ranges may touch or coincide with the other's bounds).
pub(crate) fn split_pair(
    buf: &mut [u8],
    a: std::ops::Range<usize>,
    b: std::ops::Range<usize>,
) -> (&[u8], &mut [u8]) {
    debug_assert!(a.end <= b.start || b.end <= a.start || a.is_empty() || b.is_empty());
    if a.end <= b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.end - b.start])
    } else if b.end <= a.start {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.end - a.start], &mut lo[b])
    } else if a.is_empty() {
        (&[], &mut buf[b])
    } else {
        // `b` is empty inside `a`.
        let (lo, _) = buf.split_at_mut(a.end);
        let b_empty: &mut [u8] = &mut [];
        (&lo[a], b_empty)
    }
}

/// Element range of chunk `i` of `n` elements split into `parts` nearly equal chunks.
pub(crate) fn chunk(n: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let base = n / parts;
    let extra = n % parts;
    let start = i * base + i.min(extra);
    let len = base + usize::from(i < extra);
    start..start + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trip_and_rejects_garbage() {
        let mut msg = Vec::new();
        pack([(2usize, &b"ab"[..]), (0, &b""[..])].into_iter(), &mut msg);
        let mut slots = vec![None, None, None];
        unpack_into(&msg, &mut slots, "gather", 1).unwrap();
        assert_eq!(slots, vec![Some(vec![]), None, Some(b"ab".to_vec())]);
        let mut few = vec![None];
        assert!(unpack_into(&msg, &mut few, "gather", 1).is_err());
        assert!(unpack_into(&msg[..msg.len() - 1], &mut slots, "gather", 1).is_err());
        assert!(unpack_into(&[1, 0, 0], &mut slots, "gather", 1).is_err());
    }

    #[test]
    fn chunks_cover_exactly() {
        for n in 0..20 {
            for p in 1..7 {
                let mut next = 0;
                for i in 0..p {
                    let r = chunk(n, p, i);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn split_pair_either_order() {
        let mut b = [0u8, 1, 2, 3, 4, 5];
        let (x, y) = split_pair(&mut b, 0..2, 3..5);
        assert_eq!(x, &[0, 1]);
        y[0] = 9;
        let (x, y) = split_pair(&mut b, 4..6, 0..1);
        assert_eq!(x, &[4, 5]);
        y[0] = 7;
        assert_eq!(b, [7, 1, 2, 9, 4, 5]);
        // Empty ranges at the same start as the other range.
        let (x, y) = split_pair(&mut b, 0..0, 0..2);
        assert!(x.is_empty());
        assert_eq!(y, &[7, 1]);
        let (x, y) = split_pair(&mut b, 2..4, 2..2);
        assert_eq!(x, &[2, 9]);
        assert!(y.is_empty());
    }
}

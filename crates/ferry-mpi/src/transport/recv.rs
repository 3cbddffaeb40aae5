//! Receives: exact-tag receives post their first part before the message is there (see
//! [`super::split`]), hashed-tag receives and receives outside `exchange` match their message
//! with a probe; then the rest of a split message, into the caller's memory inside `exchange`.

use std::ffi::c_int;

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::transport::{Exchange, OpState, RecvBuf, RecvOp};
use ferry_core::MsgKey;
use mpi::ffi;

use super::call::{self, mpi_error, Matched};
use super::split::{self, decode_first, EAGER_BYTES, PREFIX};
use super::{Borrowed, BorrowedReq, MpiTransport, Polled, RecvSlot, SlotKind, BORROWED};
use crate::tags::{decode_header, HEADER_LEN};

/// Most free [`EAGER_BYTES`] buffers kept.
const EAGER_FREE: usize = 64;

/// Most first parts one progress pass posts for receives behind an earlier one of their flow
/// (each holds an [`EAGER_BYTES`] buffer until its message arrives).
const MAX_POSTED_AHEAD: usize = 64;

impl MpiTransport {
    /// A buffer with room for [`EAGER_BYTES`].
    pub(super) fn take_eager(&mut self, peer: usize) -> Result<Vec<u8>> {
        match self.eager_free.pop() {
            Some(buf) => Ok(buf),
            None => self.take_buffer(EAGER_BYTES, peer),
        }
    }

    /// Returns a buffer to the free lists.
    pub(super) fn recycle_any(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() == EAGER_BYTES && self.eager_free.len() < EAGER_FREE {
            buf.clear();
            self.eager_free.push(buf);
        } else {
            self.recycle(buf);
        }
    }

    /// Stores a receive request on backend memory in a free slot; returns its index.
    fn put_slot(&mut self, slot: RecvSlot) -> usize {
        match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        }
    }

    /// Posts the first-part receive of the next message of `(peer, tag)` into a backend
    /// buffer; returns its slot.
    pub(super) fn post_first(&mut self, peer: usize, tag: i32) -> Result<usize> {
        let (req, buf) = self.irecv_first(peer, tag)?;
        Ok(self.adopt_first(peer, tag, req, buf, Polled::Unknown))
    }

    /// Posts the first-part receive of the next message of `(peer, tag)` into a backend
    /// buffer, without a slot: the caller must keep `buf` (its heap block) until the request
    /// completes, or hand both to [`MpiTransport::adopt_first`].
    pub(super) fn irecv_first(
        &mut self,
        peer: usize,
        tag: i32,
    ) -> Result<(ffi::MPI_Request, Vec<u8>)> {
        let mut buf = self.take_eager(peer)?;
        // SAFETY: `buf` has capacity for EAGER_BYTES; the caller keeps its heap block in place
        // until the request completes or is cancelled (see above).
        let req = match unsafe {
            call::irecv(
                self.comm,
                buf.as_mut_ptr(),
                EAGER_BYTES,
                peer,
                tag,
                self.rank,
            )
        } {
            Ok(req) => req,
            Err(e) => {
                self.recycle_any(buf);
                return Err(e);
            }
        };
        Ok((req, buf))
    }

    /// Keeps a first-part receive started by [`MpiTransport::irecv_first`] (and what a test
    /// said about it) in a slot, as a posted first part of its flow; returns the slot.
    pub(super) fn adopt_first(
        &mut self,
        peer: usize,
        tag: i32,
        req: ffi::MPI_Request,
        buf: Vec<u8>,
        polled: Polled,
    ) -> usize {
        self.posted_flows.push((peer, tag));
        self.put_slot(RecvSlot {
            req,
            buf,
            kind: SlotKind::First,
            polled,
        })
    }

    /// Receives a matched message into a backend buffer; returns the slot.
    pub(super) fn recv_owned(&mut self, m: &mut Matched) -> Result<usize> {
        let mut buf = self.take_buffer(m.len, m.source)?;
        // SAFETY: `buf` has capacity for `m.len` bytes and stays owned by the slot (its heap
        // block does not move) until the request completes; its length is set only then.
        let req = unsafe { call::imrecv(m, buf.as_mut_ptr(), self.rank)? };
        Ok(self.put_slot(RecvSlot {
            req,
            buf,
            kind: SlotKind::Whole { len: m.len },
            polled: Polled::Unknown,
        }))
    }

    /// Receives the rest of a split message of `total` bytes from `(peer, tag)` into a backend
    /// buffer that already holds `prefix`; returns the slot.
    pub(super) fn recv_rest_owned(
        &mut self,
        peer: usize,
        tag: i32,
        prefix: &[u8],
        total: usize,
    ) -> Result<usize> {
        let mut buf = self.take_buffer(total, peer)?;
        buf.extend_from_slice(prefix);
        let rest_tag = self.rest_tag(tag);
        // SAFETY: `buf` has capacity for `total` bytes, `PREFIX` of them filled; MPI writes the
        // other `total - PREFIX` after them, and the slot keeps the block in place until then.
        let req = unsafe {
            call::irecv(
                self.rest_comm,
                buf.as_mut_ptr().add(PREFIX),
                total - PREFIX,
                peer,
                rest_tag,
                self.rank,
            )
        };
        let req = match req {
            Ok(req) => req,
            Err(e) => {
                self.recycle(buf);
                return Err(e);
            }
        };
        self.split_messages += 1;
        Ok(self.put_slot(RecvSlot {
            req,
            buf,
            kind: SlotKind::Rest { len: total },
            polled: Polled::Unknown,
        }))
    }

    /// Receives a probed message of an exact tag: a whole short message into a slot, or, for
    /// a first part, the part at once (it is short and already there) and then its rest.
    fn recv_probed_exact(&mut self, m: &mut Matched) -> Result<usize> {
        if m.len < EAGER_BYTES {
            return self.recv_owned(m);
        }
        if m.len > EAGER_BYTES {
            return Err(Error::new(ErrorKind::Protocol, "recv")
                .on_rank(self.rank)
                .with_peer(m.source)
                .with_detail(format!(
                    "message of {} bytes in one piece on an exact tag: messages of {} bytes \
                     and more come as a first part and a rest (is the peer another ferry \
                     version?)",
                    m.len, EAGER_BYTES
                )));
        }
        let (peer, tag) = (m.source, m.tag);
        let mut first = self.take_eager(peer)?;
        // SAFETY: `first` has room for the EAGER_BYTES probed; the wait below does not return
        // before MPI is done with it.
        let mut req = unsafe { call::imrecv(m, first.as_mut_ptr(), self.rank)? };
        loop {
            match call::test(&mut req) {
                Ok(true) => break,
                Ok(false) => std::hint::spin_loop(),
                Err(rc) => return Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer)),
            }
        }
        // SAFETY: MPI wrote the EAGER_BYTES matched.
        unsafe { first.set_len(EAGER_BYTES) };
        let total = self.announced(&first, peer)?;
        let slot = self.recv_rest_owned(peer, tag, &first[..PREFIX], total);
        self.recycle_any(first);
        slot
    }

    /// The total length first part `first` from `peer` announces, or a protocol error.
    pub(super) fn announced(&self, first: &[u8], peer: usize) -> Result<usize> {
        decode_first(first).ok_or_else(|| {
            Error::new(ErrorKind::Protocol, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "a first part of {} bytes does not announce a valid length",
                    first.len()
                ))
        })
    }

    /// Receives the rest of a split message nobody will read (its receive failed on its
    /// length), so that the flow's later rests match their own first parts.
    pub(super) fn discard_rest(&mut self, peer: usize, tag: i32, total: usize) -> Result<()> {
        let prefix = [0u8; PREFIX];
        let slot = self.recv_rest_owned(peer, tag, &prefix, total)?;
        self.discards.push(slot);
        Ok(())
    }

    /// Frees the discarded rests MPI has finished receiving.
    pub(super) fn progress_discards(&mut self) -> Result<()> {
        let mut i = 0;
        while i < self.discards.len() {
            let slot = self.discards[i];
            match self.test_slot(slot, self.rank)? {
                Some((_, buf)) => {
                    self.discards.swap_remove(i);
                    self.recycle(buf);
                }
                None => i += 1,
            }
        }
        Ok(())
    }

    /// Forgets one posted first part of flow `(peer, tag)` (its rest was asked for, or it was
    /// cancelled).
    pub(super) fn unpost(&mut self, peer: usize, tag: i32) {
        if let Some(i) = self.posted_flows.iter().position(|&f| f == (peer, tag)) {
            self.posted_flows.swap_remove(i);
        }
    }

    /// The protocol error of a message of `got` bytes for a receive of `expected`.
    fn length_error(&self, op: &RecvOp<'_>, got: usize, expected: usize) -> Error {
        Error::new(ErrorKind::Protocol, "recv")
            .on_rank(self.rank)
            .with_peer(op.peer)
            .with_detail(format!(
                "message {:?} has {got} bytes, the receive expects {expected}",
                op.key
            ))
    }

    /// Handles the first part `first` that receive `op` (index `i`) got on flow `(peer, tag)`:
    /// a whole short message is copied into the receive; for a split one, the prefix is, and
    /// the rest is asked for (into the caller's memory when `zero_copy`).
    pub(super) fn first_arrived(
        &mut self,
        op: &mut RecvOp<'_>,
        i: usize,
        tag: i32,
        first: Vec<u8>,
        zero_copy: bool,
    ) -> Result<()> {
        let peer = op.peer;
        // Its slot is gone; `ask_rest` makes it active again if the rest follows.
        op.state = OpState::Done;
        let result = if split::is_split(first.len()) {
            self.announced(&first, peer)
                .and_then(|total| self.ask_rest(op, i, tag, &first, total, zero_copy))
        } else {
            self.deliver_copy(op, &first)
        };
        // After the rest was asked for (or the message was whole): later first parts of the
        // flow may ask for theirs.
        self.unpost(peer, tag);
        self.recycle_any(first);
        result
    }

    /// Asks for the rest of a split message of `total` bytes whose first part receive `op`
    /// got.
    fn ask_rest(
        &mut self,
        op: &mut RecvOp<'_>,
        i: usize,
        tag: i32,
        first: &[u8],
        total: usize,
        zero_copy: bool,
    ) -> Result<()> {
        let peer = op.peer;
        let rest = total - PREFIX;
        let ptr = match &mut op.buf {
            RecvBuf::Slice(s) if s.len() != total => {
                let expected = s.len();
                self.discard_rest(peer, tag, total)?;
                return Err(self.length_error(op, total, expected));
            }
            _ if !zero_copy => {
                let slot = self.recv_rest_owned(peer, tag, &first[..PREFIX], total)?;
                op.state = OpState::Active {
                    serial: 0,
                    progress: slot,
                };
                return Ok(());
            }
            RecvBuf::Slice(s) => {
                s[..PREFIX].copy_from_slice(&first[..PREFIX]);
                // SAFETY: the slice holds `total` bytes.
                unsafe { s.as_mut_ptr().add(PREFIX) }
            }
            RecvBuf::Vec(v) => {
                v.clear();
                if v.try_reserve_exact(total).is_err() {
                    self.discard_rest(peer, tag, total)?;
                    return Err(Error::new(ErrorKind::ResourceExhausted, "recv")
                        .on_rank(self.rank)
                        .with_peer(peer)
                        .with_detail(format!(
                            "cannot allocate a receive buffer for a message of {total} bytes"
                        )));
                }
                v.extend_from_slice(&first[..PREFIX]);
                // SAFETY: the vector has capacity for `total` bytes, `PREFIX` of them filled.
                unsafe { v.as_mut_ptr().add(PREFIX) }
            }
        };
        let rest_tag = self.rest_tag(tag);
        // SAFETY: `ptr` is valid for `rest` bytes of the exchange's buffer, which `exchange`
        // does not release before this request completed (`settle_borrowed`), and which
        // nothing resizes meanwhile.
        let mut req = unsafe { call::irecv(self.rest_comm, ptr, rest, peer, rest_tag, self.rank)? };
        self.split_messages += 1;
        self.zero_copy_messages += 1;
        match call::test_count(&mut req) {
            Ok(Some(got)) => self.complete_rest(op, peer, total, Ok(got)),
            Ok(None) => {
                self.borrowed.push(BorrowedReq {
                    req,
                    op: Borrowed::Rest {
                        op: i,
                        peer,
                        len: total,
                    },
                    polled: Polled::Unknown,
                });
                op.state = OpState::Active {
                    serial: BORROWED,
                    progress: 0,
                };
                Ok(())
            }
            Err(rc) => self.complete_rest(op, peer, total, Err(rc)),
        }
    }

    /// Completes a rest received into the caller's memory for a message of `total` bytes,
    /// with `outcome` (bytes received, or an MPI error code).
    pub(super) fn complete_rest(
        &mut self,
        op: &mut RecvOp<'_>,
        peer: usize,
        total: usize,
        outcome: std::result::Result<usize, c_int>,
    ) -> Result<()> {
        let rest = total - PREFIX;
        match outcome {
            Ok(got) if got == rest => {
                self.complete_in_place(op, peer, total);
                Ok(())
            }
            Ok(got) => {
                op.state = OpState::Done;
                Err(self.length_error(op, PREFIX + got, total))
            }
            Err(rc) => {
                op.state = OpState::Done;
                if call::is_truncation(rc) {
                    Err(self.length_error(op, total + 1, total))
                } else {
                    Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer))
                }
            }
        }
    }

    /// Marks a receive into the caller's memory complete: MPI wrote `len` bytes into it.
    pub(super) fn complete_in_place(&mut self, op: &mut RecvOp<'_>, peer: usize, len: usize) {
        if let RecvBuf::Vec(v) = &mut op.buf {
            // SAFETY: the prefix and MPI's `len - PREFIX` bytes after it fill the first `len`
            // bytes of the capacity reserved in `ask_rest`; the vector was not touched since.
            unsafe { v.set_len(len) };
        }
        self.stats.record_recv(peer, len);
        self.completions += 1;
        op.state = OpState::Done;
    }

    /// Copies a whole short message into the receive.
    fn deliver_copy(&mut self, op: &mut RecvOp<'_>, msg: &[u8]) -> Result<()> {
        let len = msg.len();
        match &mut op.buf {
            RecvBuf::Vec(v) => {
                v.clear();
                if v.try_reserve_exact(len).is_err() {
                    return Err(Error::new(ErrorKind::ResourceExhausted, "recv")
                        .on_rank(self.rank)
                        .with_peer(op.peer)
                        .with_detail(format!("cannot allocate {len} bytes")));
                }
                v.extend_from_slice(msg);
            }
            RecvBuf::Slice(s) if s.len() != len => {
                let expected = s.len();
                op.state = OpState::Done;
                return Err(self.length_error(op, len, expected));
            }
            RecvBuf::Slice(s) => s.copy_from_slice(msg),
        }
        self.stats.record_recv(op.peer, len);
        self.completions += 1;
        op.state = OpState::Done;
        Ok(())
    }

    /// Hands a received message (header already stripped) to the receive, moving it into a
    /// `Vec` receive.
    fn deliver(&mut self, op: &mut RecvOp<'_>, msg: Vec<u8>) -> Result<()> {
        let len = msg.len();
        match &mut op.buf {
            RecvBuf::Vec(v) => {
                let old = std::mem::replace(&mut **v, msg);
                self.recycle(old);
            }
            RecvBuf::Slice(s) => {
                if s.len() != len {
                    let expected = s.len();
                    self.recycle(msg);
                    return Err(self.length_error(op, len, expected));
                }
                s.copy_from_slice(&msg);
                self.recycle(msg);
            }
        }
        self.stats.record_recv(op.peer, len);
        self.completions += 1;
        op.state = OpState::Done;
        Ok(())
    }

    pub(super) fn progress_recvs(
        &mut self,
        ex: &mut Exchange<'_>,
        zero_copy: bool,
    ) -> Result<bool> {
        let mut all_done = true;
        let mut ahead = 0;
        self.blocked.clear();
        for (i, op) in ex.recvs.iter_mut().enumerate() {
            if op.state == OpState::Done {
                continue;
            }
            all_done = false;
            self.check_peer(op.peer, "recv")?;
            let wire = self.tags.wire(op.key);
            let flow = (op.peer, wire.tag);
            // An earlier receive of the same MPI flow is not through with its first part: it
            // must be matched first and ask for its rest first (serial order, M2).
            if let Some(b) = self.blocked.iter().position(|(f, _)| *f == flow) {
                // But if that receive holds a posted first part or a rest in MPI (not a probe
                // or a drained message), this one may post its first part now: MPI matches
                // the flow's messages to posted receives in posting order, so it gets the
                // next message, which then lands in place instead of in MPI's unexpected
                // queue (a window of messages on one flow, as `osu_bw` sends). It is handled
                // only once the earlier receive is through.
                if self.blocked[b].1 && zero_copy && !wire.hashed && op.state == OpState::New {
                    // A message of the flow taken off MPI's queue before is older than MPI's
                    // next one and belongs to this receive: then neither this one nor any
                    // later one of the flow may post ahead in this pass.
                    let older = (!self.drained.is_empty() && self.drain_pending(op.peer, wire.tag))
                        || (self.early_messages > 0 && self.early.contains_key(&(op.peer, op.key)));
                    if older || ahead >= MAX_POSTED_AHEAD {
                        self.blocked[b].1 = false;
                        // The next pass may post it (the cap is per pass).
                        self.unsettled = true;
                    } else {
                        let slot = self.post_first(op.peer, wire.tag)?;
                        op.state = OpState::Active {
                            serial: 0,
                            progress: slot,
                        };
                        ahead += 1;
                        self.posted_ahead += 1;
                    }
                }
                continue;
            }
            let slot = match op.state {
                // The rest is filling the caller's memory: `progress_borrowed` completes it.
                OpState::Active {
                    serial: BORROWED, ..
                } => continue,
                OpState::Active { progress, .. } => progress,
                _ => {
                    // Messages kept aside are older than those still in MPI's queue, and a
                    // drained one still arriving is older than both.
                    if let Some(msg) = self.take_early(op.peer, op.key) {
                        self.deliver(op, msg)?;
                        continue;
                    }
                    if !self.drained.is_empty() && self.drain_pending(op.peer, wire.tag) {
                        self.blocked.push((flow, false));
                        continue;
                    }
                    let slot = if !wire.hashed && zero_copy {
                        // Posted now, MPI matches the message as it arrives (no probe).
                        self.post_first(op.peer, wire.tag)?
                    } else {
                        let Some(mut m) =
                            call::improbe(self.comm, self.rank, op.peer as c_int, wire.tag)?
                        else {
                            // Only probing again finds the message.
                            self.unsettled = true;
                            self.blocked.push((flow, false));
                            continue;
                        };
                        self.probed_receives += 1;
                        if wire.hashed {
                            self.recv_owned(&mut m)?
                        } else {
                            self.recv_probed_exact(&mut m)?
                        }
                    };
                    op.state = OpState::Active {
                        serial: 0,
                        progress: slot,
                    };
                    slot
                }
            };
            let tested = self.test_slot(slot, op.peer);
            if tested.is_err() {
                // The slot is gone.
                op.state = OpState::Done;
            }
            match tested? {
                None => self.blocked.push((flow, true)),
                Some((SlotKind::First, first)) => {
                    self.first_arrived(op, i, wire.tag, first, zero_copy)?;
                    if op.state != OpState::Done {
                        self.blocked.push((flow, true));
                    }
                }
                Some((_, mut msg)) if wire.hashed => {
                    let key = self.strip_header(&mut msg, op.peer)?;
                    if key == op.key {
                        self.deliver(op, msg)?;
                    } else {
                        self.put_early(op.peer, key, msg)?;
                        op.state = OpState::New;
                        // Back to a probe: the next pass must walk the receives again.
                        self.unsettled = true;
                        self.blocked.push((flow, false));
                    }
                }
                Some((_, msg)) => self.deliver(op, msg)?,
            }
        }
        Ok(all_done || ex.recvs.iter().all(|r| r.state == OpState::Done))
    }

    /// Removes the key header of a hashed-tag message and returns the key.
    pub(super) fn strip_header(&mut self, msg: &mut Vec<u8>, peer: usize) -> Result<MsgKey> {
        let Some(key) = decode_header(msg) else {
            return Err(Error::new(ErrorKind::Protocol, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "message of {} bytes on a hashed tag lacks the key header",
                    msg.len()
                )));
        };
        msg.drain(..HEADER_LEN);
        Ok(key)
    }

    /// Returns the kind and the message of `slot` if MPI has finished receiving it (and frees
    /// the slot).
    pub(super) fn test_slot(
        &mut self,
        idx: usize,
        peer: usize,
    ) -> Result<Option<(SlotKind, Vec<u8>)>> {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return Err(Error::new(ErrorKind::InvalidArgument, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(
                    "receive state refers to no pending MPI receive (was the exchange \
                     used with another transport?)",
                ));
        };
        let outcome = match std::mem::take(&mut slot.polled) {
            Polled::Pending => return Ok(None),
            Polled::Done(outcome) => outcome.map(Some),
            Polled::Unknown => {
                self.request_tests += 1;
                call::test_count(&mut slot.req)
            }
        };
        let kind = slot.kind;
        let got = match outcome {
            Ok(None) => return Ok(None),
            Ok(Some(got)) => Ok(got),
            Err(rc) => Err(rc),
        };
        let Some(slot) = self.slots[idx].take() else {
            return Ok(None);
        };
        self.free_slots.push(idx);
        let mut buf = slot.buf;
        // Bytes MPI was to write after what the buffer already holds, and the length then.
        let (want, full) = match kind {
            SlotKind::Whole { len } => (Some(len), len),
            SlotKind::First => (None, 0),
            SlotKind::Rest { len } => (Some(len - PREFIX), len),
        };
        let fail = |this: &mut Self, buf: Vec<u8>, e: Error| {
            this.recycle_any(buf);
            Err(e)
        };
        match got {
            Err(rc) if call::is_truncation(rc) && kind == SlotKind::First => {
                let e = Error::new(ErrorKind::Protocol, "recv")
                    .on_rank(self.rank)
                    .with_peer(peer)
                    .with_detail(format!(
                        "a message of more than {EAGER_BYTES} bytes arrived in one piece on \
                         an exact tag (is the peer another ferry version?)"
                    ));
                fail(self, buf, e)
            }
            Err(rc) => fail(
                self,
                buf,
                mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer),
            ),
            Ok(got) if want.is_some_and(|w| w != got) => {
                let e = Error::new(ErrorKind::Protocol, "recv")
                    .on_rank(self.rank)
                    .with_peer(peer)
                    .with_detail(format!(
                        "MPI received {got} bytes where {} were announced",
                        want.unwrap_or(0)
                    ));
                fail(self, buf, e)
            }
            Ok(got) => {
                let len = if kind == SlotKind::First { got } else { full };
                // SAFETY: MPI wrote `got` bytes after the `buf.len()` already there (the
                // prefix of a rest, nothing otherwise), which makes `len`, within the capacity.
                unsafe { buf.set_len(len) };
                Ok(Some((kind, buf)))
            }
        }
    }

    /// Whether `ex` has a receive under way that finishes without any other rank's help (a
    /// matched message or a rest being received); a posted first part may wait for anything.
    pub(super) fn receiving(&self, ex: &Exchange<'_>) -> bool {
        ex.recvs.iter().any(|r| match r.state {
            OpState::Active {
                serial: BORROWED, ..
            } => true,
            OpState::Active { progress, .. } => !matches!(
                self.slots.get(progress),
                Some(Some(RecvSlot {
                    kind: SlotKind::First,
                    ..
                }))
            ),
            _ => false,
        })
    }

    /// After a failed exchange: cancels its posted first parts, so that no receive outlives
    /// the exchange and takes a later message of its flow. A first part that was matched
    /// meanwhile is received and dropped, and so is its rest.
    pub(super) fn cancel_posted(&mut self, ex: &mut Exchange<'_>) {
        for op in ex.recvs.iter_mut() {
            let OpState::Active {
                serial: 0,
                progress: idx,
            } = op.state
            else {
                continue;
            };
            let is_first = matches!(
                self.slots.get(idx),
                Some(Some(RecvSlot {
                    kind: SlotKind::First,
                    ..
                }))
            );
            if !is_first {
                continue;
            }
            let Some(mut slot) = self.slots[idx].take() else {
                continue;
            };
            self.free_slots.push(idx);
            let tag = self.tags.wire(op.key).tag;
            match slot.cancel() {
                Ok(None) => op.state = OpState::New,
                Ok(Some(got)) => {
                    op.state = OpState::Done;
                    if split::is_split(got) {
                        // SAFETY: MPI wrote the `got` (= EAGER_BYTES) bytes received.
                        unsafe { slot.buf.set_len(got) };
                        let discarded = self
                            .announced(&slot.buf, op.peer)
                            .and_then(|total| self.discard_rest(op.peer, tag, total));
                        if let Err(e) = discarded {
                            tracing::warn!("{e}");
                        }
                    }
                }
                Err(rc) => {
                    op.state = OpState::Done;
                    tracing::warn!(
                        "{}",
                        mpi_error(self.rank, "recv (MPI_Cancel)", rc).with_peer(op.peer)
                    );
                }
            }
            self.recycle_any(slot.buf);
        }
        // Only exchanges post first parts, and this one's are all cancelled or received now.
        self.posted_flows.clear();
    }
}

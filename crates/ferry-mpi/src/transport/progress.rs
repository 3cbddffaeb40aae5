//! One progress pass over an exchange: sends, receives, requests on the caller's memory, and
//! the draining of messages no receive has asked for yet.

use std::ffi::c_int;

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::transport::{check_peer, Exchange, OpState, RecvBuf, RecvOp};
use ferry_core::MsgKey;
use mpi::ffi;

use super::call::{self, check, mpi_error, Matched};
use super::{
    Borrowed, Drained, MpiTransport, RecvSlot, BORROWED, DRAIN_BATCH, MAX_INFLIGHT_SEND_BYTES,
    POSTED,
};
use crate::tags::{decode_header, encode_header, HEADER_LEN};

impl MpiTransport {
    /// One progress pass; `zero_copy` lets operations work on the exchange's memory (only
    /// inside [`ferry_core::Transport::exchange`], which does not return while MPI uses it).
    pub(super) fn progress(&mut self, ex: &mut Exchange<'_>, zero_copy: bool) -> Result<bool> {
        self.ensure_open("exchange")?;
        self.progress_sends()?;
        if !self.borrowed_reqs.is_empty() {
            self.progress_borrowed(ex)?;
        }
        if !self.drained.is_empty() {
            self.progress_drained()?;
        }
        let mut sends_done = true;
        for i in 0..ex.sends.len() {
            match ex.sends[i].state {
                OpState::Done => continue,
                OpState::Active { .. } => {
                    sends_done = false;
                    continue;
                }
                OpState::New => {}
            }
            let (peer, key, data) = (ex.sends[i].peer, ex.sends[i].key, ex.sends[i].data);
            check_peer(self.rank, self.size, peer, "send")?;
            let wire = self.tags.wire(key);
            if zero_copy && self.zero_copy_sends && !wire.hashed && data.len() <= i32::MAX as usize
            {
                // SAFETY: `data` is borrowed by the exchange, which `exchange` does not release
                // before this request completed (`settle_borrowed`).
                let mut req = unsafe { call::isend(self.comm, data, peer, wire.tag, self.rank)? };
                self.stats.record_send(peer, data.len());
                self.zero_copy_messages += 1;
                match call::test(&mut req) {
                    Ok(true) => ex.sends[i].state = OpState::Done,
                    Ok(false) => {
                        self.borrowed_reqs.push(req);
                        self.borrowed_ops.push(Borrowed::Send { op: i });
                        ex.sends[i].state = OpState::Active {
                            serial: BORROWED,
                            progress: 0,
                        };
                        sends_done = false;
                    }
                    Err(rc) => {
                        return Err(mpi_error(self.rank, "send (MPI_Test)", rc).with_peer(peer))
                    }
                }
                continue;
            }
            if self.start_send(peer, key, data)? {
                ex.sends[i].state = OpState::Done;
            } else {
                sends_done = false;
                break;
            }
        }
        let recvs_done = self.progress_recvs(ex, zero_copy)?;
        Ok(recvs_done && sends_done)
    }

    /// Completes whatever copied sends MPI has finished and releases their buffers.
    pub(super) fn progress_sends(&mut self) -> Result<()> {
        if self.send_reqs.is_empty() {
            return Ok(());
        }
        let n = self.send_reqs.len();
        self.done_indices.resize(n, 0);
        let mut outcount: c_int = 0;
        // SAFETY: the request and index arrays hold `n` entries each.
        let rc = unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                self.send_reqs.as_mut_ptr(),
                &mut outcount,
                self.done_indices.as_mut_ptr(),
                ffi::RSMPI_STATUSES_IGNORE,
            )
        };
        check(rc, self.rank, "send (MPI_Testsome)")?;
        if outcount <= 0 {
            // MPI_UNDEFINED (no active request) cannot happen: completed requests are removed.
            return Ok(());
        }
        let mut done: Vec<usize> = self.done_indices[..outcount as usize]
            .iter()
            .map(|&i| i as usize)
            .collect();
        // Remove from the back so that swap_remove never moves an index still to be removed.
        done.sort_unstable_by(|a, b| b.cmp(a));
        for i in done {
            self.send_reqs.swap_remove(i);
            let buf = self.send_bufs.swap_remove(i);
            self.inflight_bytes -= buf.len();
            self.recycle(buf);
        }
        Ok(())
    }

    /// Starts one send from a copy of `data`; returns false (nothing done) when the in-flight
    /// cap is reached and earlier sends must drain first.
    fn start_send(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<bool> {
        let wire = self.tags.wire(key);
        let len = data.len() + if wire.hashed { HEADER_LEN } else { 0 };
        if len > i32::MAX as usize {
            return Err(Error::new(ErrorKind::Unsupported, "send")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "message of {len} bytes: the MPI backend sends at most {} bytes per \
                     message (an MPI count is a C int)",
                    i32::MAX
                )));
        }
        if !self.send_reqs.is_empty() && self.inflight_bytes + len > MAX_INFLIGHT_SEND_BYTES {
            return Ok(false);
        }
        let mut buf = self.take_buffer(len, peer)?;
        if wire.hashed {
            buf.extend_from_slice(&encode_header(key));
            self.hashed_messages += 1;
        }
        buf.extend_from_slice(data);
        // SAFETY: `buf` is owned by the transport and kept (not moved on the heap) in
        // `send_bufs` until MPI reports the request complete.
        let req = match unsafe { call::isend(self.comm, &buf, peer, wire.tag, self.rank) } {
            Ok(req) => req,
            Err(e) => {
                self.recycle(buf);
                return Err(e);
            }
        };
        self.send_reqs.push(req);
        self.send_bufs.push(buf);
        self.inflight_bytes += len;
        self.stats.record_send(peer, data.len());
        Ok(true)
    }

    /// Receives a matched message into a backend buffer; returns the slot.
    fn recv_owned(&mut self, m: &mut Matched) -> Result<usize> {
        let mut buf = self.take_buffer(m.len, m.source)?;
        // SAFETY: `buf` has capacity for `m.len` bytes and stays owned by the slot (its heap
        // block does not move) until the request completes; its length is set only then.
        let req = unsafe { call::imrecv(m, buf.as_mut_ptr(), self.rank)? };
        let slot = RecvSlot {
            req,
            buf,
            len: m.len,
        };
        let idx = match self.free_slots.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        Ok(idx)
    }

    /// Receives matched message `m` straight into the buffer of receive `op` (index `i` of the
    /// exchange); only inside `exchange`. Returns false, doing nothing, when the buffer has a
    /// fixed length other than the message's (`deliver` then reports the mismatch).
    fn recv_in_place(&mut self, op: &mut RecvOp<'_>, i: usize, m: &mut Matched) -> Result<bool> {
        let ptr = match &mut op.buf {
            RecvBuf::Slice(s) if s.len() != m.len => return Ok(false),
            RecvBuf::Slice(s) => s.as_mut_ptr(),
            RecvBuf::Vec(v) => {
                v.clear();
                v.try_reserve_exact(m.len).map_err(|_| {
                    Error::new(ErrorKind::ResourceExhausted, "recv")
                        .on_rank(self.rank)
                        .with_peer(m.source)
                        .with_detail(format!(
                            "cannot allocate a receive buffer for a message of {} bytes",
                            m.len
                        ))
                })?;
                v.as_mut_ptr()
            }
        };
        // SAFETY: the buffer (a slice of exactly `m.len` bytes, or a vector with that much
        // capacity that nothing resizes meanwhile) is borrowed by the exchange, which `exchange`
        // does not release before this request completed (`settle_borrowed`).
        let mut req = unsafe { call::imrecv(m, ptr, self.rank)? };
        self.zero_copy_messages += 1;
        match call::test(&mut req) {
            Ok(true) => self.complete_in_place(op, m.source, m.len),
            Ok(false) => {
                self.borrowed_reqs.push(req);
                self.borrowed_ops.push(Borrowed::Recv {
                    op: i,
                    peer: m.source,
                    len: m.len,
                });
                op.state = OpState::Active {
                    serial: BORROWED,
                    progress: 0,
                };
            }
            Err(rc) => return Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(m.source)),
        }
        Ok(true)
    }

    /// Posts `MPI_Irecv` of exactly the length of the caller's slice of receive `op` (index `i`);
    /// only inside `exchange`.
    fn post_in_place(&mut self, op: &mut RecvOp<'_>, i: usize) -> Result<()> {
        let RecvBuf::Slice(s) = &mut op.buf else {
            return Ok(());
        };
        let (ptr, len) = (s.as_mut_ptr(), s.len());
        if len > i32::MAX as usize {
            return Err(Error::new(ErrorKind::Unsupported, "recv")
                .on_rank(self.rank)
                .with_peer(op.peer)
                .with_detail(format!(
                    "receive of {len} bytes: the MPI backend moves at most {} bytes per message",
                    i32::MAX
                )));
        }
        let wire = self.tags.wire(op.key);
        // SAFETY: the slice is borrowed by the exchange, which `exchange` does not release
        // before this request completed (`settle_borrowed`); MPI writes at most `len` bytes.
        let mut req = unsafe { call::irecv(self.comm, ptr, len, op.peer, wire.tag, self.rank)? };
        self.zero_copy_messages += 1;
        match call::test_count(&mut req) {
            Ok(Some(got)) => self.complete_posted(op, op.peer, len, Ok(got)),
            Ok(None) => {
                self.borrowed_reqs.push(req);
                self.borrowed_ops.push(Borrowed::Posted {
                    op: i,
                    peer: op.peer,
                    len,
                });
                op.state = OpState::Active {
                    serial: BORROWED,
                    progress: POSTED,
                };
                Ok(())
            }
            Err(rc) => self.complete_posted(op, op.peer, len, Err(rc)),
        }
    }

    /// Completes a posted receive of `len` bytes that ended with `outcome` (bytes received, or
    /// an MPI error code): a message of another length is a protocol error, as on every
    /// backend.
    fn complete_posted(
        &mut self,
        op: &mut RecvOp<'_>,
        peer: usize,
        len: usize,
        outcome: std::result::Result<usize, c_int>,
    ) -> Result<()> {
        op.state = OpState::Done;
        self.completions += 1;
        let mismatch = |what: String| {
            Error::new(ErrorKind::Protocol, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "message {:?} has {what} bytes, the receive expects {len}",
                    op.key
                ))
        };
        match outcome {
            Ok(got) if got == len => {
                self.stats.record_recv(peer, len);
                Ok(())
            }
            Ok(got) => Err(mismatch(got.to_string())),
            Err(rc) if call::is_truncation(rc) => Err(mismatch(format!("more than {len}"))),
            Err(rc) => Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer)),
        }
    }

    /// Marks a receive into the caller's memory complete: MPI wrote `len` bytes into it.
    fn complete_in_place(&mut self, op: &mut RecvOp<'_>, peer: usize, len: usize) {
        if let RecvBuf::Vec(v) = &mut op.buf {
            // SAFETY: MPI wrote exactly `len` bytes (the matched count) into the capacity that
            // `recv_in_place` reserved, and the vector was not touched since.
            unsafe { v.set_len(len) };
        }
        self.stats.record_recv(peer, len);
        self.completions += 1;
        op.state = OpState::Done;
    }

    /// Hands a received message (header already stripped) to the receive.
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
                    return Err(Error::new(ErrorKind::Protocol, "recv")
                        .on_rank(self.rank)
                        .with_peer(op.peer)
                        .with_detail(format!(
                            "message {:?} has {len} bytes, the receive expects {expected}",
                            op.key
                        )));
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

    fn progress_recvs(&mut self, ex: &mut Exchange<'_>, zero_copy: bool) -> Result<bool> {
        let mut all_done = true;
        self.blocked.clear();
        for (i, op) in ex.recvs.iter_mut().enumerate() {
            if op.state == OpState::Done {
                continue;
            }
            all_done = false;
            check_peer(self.rank, self.size, op.peer, "recv")?;
            let wire = self.tags.wire(op.key);
            let flow = (op.peer, wire.tag);
            // An earlier receive of the same MPI flow has no message yet: it must match first
            // (serial order, M2).
            if self.blocked.contains(&flow) {
                continue;
            }
            let slot = match op.state {
                // Matched and filling the caller's memory: `progress_borrowed` completes it.
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
                        self.blocked.push(flow);
                        continue;
                    }
                    // A fixed-length receive needs no probe: posted now, MPI matches the
                    // message as it arrives, straight into the caller's slice (later receives
                    // of the flow match later messages: MPI matches posted receives in order).
                    if zero_copy && !wire.hashed && matches!(op.buf, RecvBuf::Slice(_)) {
                        self.post_in_place(op, i)?;
                        continue;
                    }
                    let Some(mut m) =
                        call::improbe(self.comm, self.rank, op.peer as c_int, wire.tag)?
                    else {
                        self.blocked.push(flow);
                        continue;
                    };
                    if zero_copy && !wire.hashed && self.recv_in_place(op, i, &mut m)? {
                        continue;
                    }
                    let slot = self.recv_owned(&mut m)?;
                    op.state = OpState::Active {
                        serial: 0,
                        progress: slot,
                    };
                    slot
                }
            };
            match self.test_slot(slot, op.peer)? {
                None => {
                    // In hashed mode the message may turn out to belong to another key, so
                    // later receives of the flow wait until this one is verified.
                    if wire.hashed {
                        self.blocked.push(flow);
                    }
                }
                Some(mut msg) if wire.hashed => {
                    let key = self.strip_header(&mut msg, op.peer)?;
                    if key == op.key {
                        self.deliver(op, msg)?;
                    } else {
                        self.put_early(op.peer, key, msg)?;
                        op.state = OpState::New;
                        self.blocked.push(flow);
                    }
                }
                Some(msg) => self.deliver(op, msg)?,
            }
        }
        Ok(all_done || ex.recvs.iter().all(|r| r.state == OpState::Done))
    }

    /// Removes the key header of a hashed-tag message and returns the key.
    fn strip_header(&mut self, msg: &mut Vec<u8>, peer: usize) -> Result<MsgKey> {
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

    /// Returns the message of `slot` if MPI has finished receiving it.
    pub(super) fn test_slot(&mut self, idx: usize, peer: usize) -> Result<Option<Vec<u8>>> {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return Err(Error::new(ErrorKind::InvalidArgument, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(
                    "receive state refers to no pending MPI receive (was the exchange \
                     used with another transport?)",
                ));
        };
        match call::test(&mut slot.req) {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(rc) => return Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer)),
        }
        let Some(slot) = self.slots[idx].take() else {
            return Ok(None);
        };
        self.free_slots.push(idx);
        let mut buf = slot.buf;
        // SAFETY: MPI wrote exactly `len` bytes (the probed count) into the capacity.
        unsafe { buf.set_len(slot.len) };
        Ok(Some(buf))
    }

    /// Applies the completions of requests on caller memory to their operations. A request
    /// that failed is complete too (MPI no longer touches its buffer); the first error is
    /// returned after all completions were applied.
    pub(super) fn progress_borrowed(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        let mut first_err = None;
        let mut i = 0;
        while i < self.borrowed_reqs.len() {
            let op = self.borrowed_ops[i];
            // Ok(bytes received, for posted receives) once complete; Err(MPI code) on failure.
            let outcome = match op {
                Borrowed::Posted { .. } => match call::test_count(&mut self.borrowed_reqs[i]) {
                    Ok(None) => None,
                    Ok(Some(got)) => Some(Ok(got)),
                    Err(rc) => Some(Err(rc)),
                },
                _ => match call::test(&mut self.borrowed_reqs[i]) {
                    Ok(false) => None,
                    Ok(true) => Some(Ok(0)),
                    Err(rc) => Some(Err(rc)),
                },
            };
            let Some(outcome) = outcome else {
                i += 1;
                continue;
            };
            self.borrowed_reqs.swap_remove(i);
            self.borrowed_ops.swap_remove(i);
            let result = match op {
                Borrowed::Send { op } => {
                    self.completions += 1;
                    if let Some(o) = ex.sends.get_mut(op) {
                        o.state = OpState::Done;
                    }
                    outcome.map(|_| ()).map_err(|rc| {
                        let mut e = mpi_error(self.rank, "send (MPI_Test)", rc);
                        if let Some(o) = ex.sends.get(op) {
                            e = e.with_peer(o.peer);
                        }
                        e
                    })
                }
                Borrowed::Recv { op, peer, len } => {
                    if let Some(o) = ex.recvs.get_mut(op) {
                        if outcome.is_ok() {
                            self.complete_in_place(o, peer, len);
                        } else {
                            o.state = OpState::Done;
                        }
                    }
                    outcome
                        .map(|_| ())
                        .map_err(|rc| mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer))
                }
                Borrowed::Posted { op, peer, len } => match ex.recvs.get_mut(op) {
                    Some(o) => self.complete_posted(o, peer, len, outcome),
                    None => Ok(()),
                },
            };
            if let (Err(e), None) = (result, &first_err) {
                first_err = Some(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Takes messages no receive has asked for yet off MPI's queue into backend memory, so
    /// that their senders — which send from their own memory and wait until MPI delivers — do
    /// not wait for this rank to post the matching receive: a send never waits for an
    /// unrelated receive (M3), and two ranks that both send before they receive do not
    /// deadlock (T1). Called only while this rank waits with no receive of its own matched and
    /// under way, so messages about to be received in place are rarely copied. Stops at the
    /// caps of [`super::MAX_EARLY_BYTES`] and messages.
    pub(super) fn drain(&mut self) -> Result<()> {
        for _ in 0..DRAIN_BATCH {
            if !self.room_to_drain() {
                break;
            }
            // SAFETY: reading constants exported by the MPI binding.
            let (any_source, any_tag) = unsafe { (ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG) };
            let Some(mut m) = call::improbe(self.comm, self.rank, any_source, any_tag)? else {
                break;
            };
            let slot = self.recv_owned(&mut m)?;
            self.drained.push(Drained {
                peer: m.source,
                tag: m.tag,
                slot,
            });
            self.drained_bytes += m.len;
            self.drained_total += 1;
        }
        Ok(())
    }

    /// Moves drained messages MPI has finished receiving to the messages kept aside, in the
    /// order MPI matched them within each flow.
    pub(super) fn progress_drained(&mut self) -> Result<()> {
        let mut waiting: Vec<(usize, i32)> = Vec::new();
        let mut i = 0;
        while i < self.drained.len() {
            let d = self.drained[i];
            if waiting.contains(&(d.peer, d.tag)) {
                i += 1;
                continue;
            }
            let Some(mut msg) = self.test_slot(d.slot, d.peer)? else {
                waiting.push((d.peer, d.tag));
                i += 1;
                continue;
            };
            self.drained.remove(i);
            self.drained_bytes -= msg.len();
            let key = match self.tags.exact_key(d.tag) {
                Some(key) => key,
                None => self.strip_header(&mut msg, d.peer)?,
            };
            self.keep_early(d.peer, key, msg);
        }
        Ok(())
    }
}

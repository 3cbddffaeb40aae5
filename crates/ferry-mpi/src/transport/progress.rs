//! One progress pass over an exchange: sends, requests on the caller's memory, and the
//! draining of messages no receive has asked for yet (receives are in `recv.rs`).

use std::ffi::c_int;

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::transport::{Exchange, OpState};
use ferry_core::MsgKey;
use mpi::ffi;

use super::call::{self, check, mpi_error, Matched};
use super::split::{self, EAGER_BYTES, PREFIX};
use super::{
    Borrowed, BorrowedReq, DrainState, Drained, MpiTransport, Polled, SlotKind, BORROWED,
    DRAIN_BATCH, MAX_INFLIGHT_SEND_BYTES,
};
use crate::tags::{encode_header, HEADER_LEN};

impl MpiTransport {
    /// One progress pass; `zero_copy` lets operations work on the exchange's memory (only
    /// inside [`ferry_core::Transport::exchange`], which does not return while MPI uses it).
    pub(super) fn progress(&mut self, ex: &mut Exchange<'_>, zero_copy: bool) -> Result<bool> {
        self.ensure_open("exchange")?;
        self.passes += 1;
        // One test of everything in MPI's hands; the steps below read its answers.
        self.poll_all()?;
        self.progress_ops(ex, zero_copy)
    }

    /// One pass of the exchange driver ([`MpiTransport::drive`]): the batched test, and the
    /// walk over the exchange's operations only when it can change something. Once a full
    /// pass left every unfinished operation waiting on a request in MPI's hands (`settled`),
    /// nothing but a completion can move the exchange, so a pass whose batched test found
    /// none ends there: a window of 16 receives waiting for its messages costs one
    /// `MPI_Testsome` per pass instead of that plus a walk over the 16 operations.
    pub(super) fn drive_pass(&mut self, ex: &mut Exchange<'_>) -> Result<bool> {
        self.ensure_open("exchange")?;
        self.passes += 1;
        let done = self.poll_all()?;
        // A batch that tested nothing cannot have moved anything either: walk the
        // operations then (a safety net; a settled exchange always has a request in it).
        if self.settled && done == 0 && self.poll.tested > 0 {
            return Ok(false);
        }
        self.full_passes += 1;
        self.settled = false;
        self.unsettled = false;
        let before = self.completions;
        let finished = self.progress_ops(ex, true)?;
        // Settled unless the walk changed something (a completion may unblock the next
        // receive of its flow), left work that needs polling rather than a completion (a
        // probe, first parts not yet posted ahead), or messages taken off MPI's queue are
        // being handled.
        self.settled = !finished
            && !self.unsettled
            && self.completions == before
            && self.drained.is_empty()
            && self.discards.is_empty()
            && self.in_flight();
        Ok(finished)
    }

    /// The steps of a progress pass after its batched test.
    fn progress_ops(&mut self, ex: &mut Exchange<'_>, zero_copy: bool) -> Result<bool> {
        if !self.borrowed.is_empty() {
            self.progress_borrowed(ex, 0)?;
        }
        if !self.drained.is_empty() {
            self.progress_drained()?;
        }
        if !self.discards.is_empty() {
            self.progress_discards()?;
        }
        let mut sends_done = true;
        // Sends started below on the caller's memory are tested together after the loop.
        let started_from = self.borrowed.len();
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
            self.check_peer(peer, "send")?;
            let wire = self.tags.wire(key);
            if zero_copy && self.zero_copy_sends && !wire.hashed && data.len() <= i32::MAX as usize
            {
                // SAFETY: `data` is borrowed by the exchange, which `exchange` does not release
                // before this request completed (`settle_borrowed`).
                let req = unsafe { self.isend_exact(peer, wire.tag, data)? };
                self.borrowed.push(BorrowedReq {
                    req,
                    op: Borrowed::Send { op: i },
                    polled: Polled::Unknown,
                });
                ex.sends[i].state = OpState::Active {
                    serial: BORROWED,
                    progress: 0,
                };
                continue;
            }
            if self.start_send(peer, key, data)? {
                ex.sends[i].state = OpState::Done;
            } else {
                sends_done = false;
                break;
            }
        }
        if self.borrowed.len() > started_from {
            // One test for all sends just started (short ones are complete already, and
            // testing them costs no progress-engine run), then their completions.
            self.poll_borrowed_from(started_from)?;
            self.progress_borrowed(ex, started_from)?;
            sends_done &= ex.sends.iter().all(|o| o.state == OpState::Done);
        }
        let recvs_done = self.progress_recvs(ex, zero_copy)?;
        Ok(recvs_done && sends_done)
    }

    /// Completes whatever copied sends MPI has finished and releases their buffers. Inlined
    /// for the common case of none (every `send` and `recv` starts with it).
    #[inline]
    pub(super) fn progress_sends(&mut self) -> Result<()> {
        if self.send_reqs.is_empty() {
            return Ok(());
        }
        self.test_sends()
    }

    /// [`MpiTransport::progress_sends`] with copied sends in MPI's hands.
    #[inline(never)]
    fn test_sends(&mut self) -> Result<()> {
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
            self.recycle_any(buf);
        }
        Ok(())
    }

    /// Sends `data` with exact tag `tag` from the caller's memory: in one piece, or (split,
    /// see [`super::split`]) its first part from a copy, which completes at once, and the rest
    /// from `data`. Returns the request on the caller's memory.
    ///
    /// # Safety
    /// `data` must stay valid and unmodified until the returned request completes.
    pub(super) unsafe fn isend_exact(
        &mut self,
        peer: usize,
        tag: i32,
        data: &[u8],
    ) -> Result<ffi::MPI_Request> {
        self.stats.record_send(peer, data.len());
        self.zero_copy_messages += 1;
        if !split::is_split(data.len()) {
            // SAFETY: the caller keeps `data` as the function requires.
            return unsafe { call::isend(self.comm, data, peer, tag, self.rank) };
        }
        self.send_first(peer, tag, data)?;
        self.split_messages += 1;
        let rest_tag = self.rest_tag(tag);
        // SAFETY: as above.
        unsafe { call::isend(self.rest_comm, &data[PREFIX..], peer, rest_tag, self.rank) }
    }

    /// Sends the first part of split message `data` from a copy in backend memory. Not held
    /// back by [`MAX_INFLIGHT_SEND_BYTES`]: its rest must follow it, and it is short.
    fn send_first(&mut self, peer: usize, tag: i32, data: &[u8]) -> Result<()> {
        let mut buf = self.take_eager(peer)?;
        split::encode_first(&mut buf, data);
        self.isend_owned(self.comm, peer, tag, buf)
    }

    /// Sends `buf` (owned by the transport until MPI completes the send).
    fn isend_owned(
        &mut self,
        comm: ffi::MPI_Comm,
        peer: usize,
        tag: i32,
        buf: Vec<u8>,
    ) -> Result<()> {
        // SAFETY: `buf` is owned by the transport and kept (not moved on the heap) in
        // `send_bufs` until MPI reports the request complete.
        let req = match unsafe { call::isend(comm, &buf, peer, tag, self.rank) } {
            Ok(req) => req,
            Err(e) => {
                self.recycle_any(buf);
                return Err(e);
            }
        };
        self.inflight_bytes += buf.len();
        self.send_reqs.push(req);
        self.send_bufs.push(buf);
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
        let split = !wire.hashed && split::is_split(len);
        if split {
            self.send_first(peer, wire.tag, data)?;
            self.split_messages += 1;
        }
        let body = if split { &data[PREFIX..] } else { data };
        let mut buf = self.take_buffer(body.len() + HEADER_LEN, peer)?;
        if wire.hashed {
            buf.extend_from_slice(&encode_header(key));
            self.hashed_messages += 1;
        }
        buf.extend_from_slice(body);
        let (comm, tag) = if split {
            (self.rest_comm, self.rest_tag(wire.tag))
        } else {
            (self.comm, wire.tag)
        };
        self.isend_owned(comm, peer, tag, buf)?;
        self.stats.record_send(peer, data.len());
        Ok(true)
    }

    /// Applies the completions of requests on caller memory to their operations. A request
    /// that failed is complete too (MPI no longer touches its buffer); the first error is
    /// returned after all completions were applied.
    /// Only `borrowed[from..]` is looked at (`swap_remove` keeps the earlier entries in place).
    pub(super) fn progress_borrowed(&mut self, ex: &mut Exchange<'_>, from: usize) -> Result<()> {
        let mut first_err = None;
        let mut i = from;
        while i < self.borrowed.len() {
            let op = self.borrowed[i].op;
            let polled = std::mem::take(&mut self.borrowed[i].polled);
            if polled == Polled::Unknown {
                self.request_tests += 1;
            }
            let req = &mut self.borrowed[i].req;
            // Ok(bytes received, for posted receives) once complete; Err(MPI code) on failure.
            let outcome = match polled {
                Polled::Pending => None,
                Polled::Done(outcome) => Some(outcome),
                Polled::Unknown => match op {
                    Borrowed::Rest { .. } => match call::test_count(req) {
                        Ok(None) => None,
                        Ok(Some(got)) => Some(Ok(got)),
                        Err(rc) => Some(Err(rc)),
                    },
                    Borrowed::Send { .. } => match call::test(req) {
                        Ok(false) => None,
                        Ok(true) => Some(Ok(0)),
                        Err(rc) => Some(Err(rc)),
                    },
                },
            };
            let Some(outcome) = outcome else {
                i += 1;
                continue;
            };
            self.borrowed.swap_remove(i);
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
                Borrowed::Rest { op, peer, len } => match ex.recvs.get_mut(op) {
                    Some(o) => self.complete_rest(o, peer, len, outcome),
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
    /// caps of [`super::MAX_EARLY_BYTES`] and messages. The rest of a split message is asked
    /// for once its first part is in ([`MpiTransport::progress_drained`]).
    pub(super) fn drain(&mut self) -> Result<()> {
        for _ in 0..DRAIN_BATCH {
            if !self.room_to_drain() {
                break;
            }
            let (found, scanned) = self.next_unasked()?;
            let Some(mut m) = found else {
                break;
            };
            if m.len > EAGER_BYTES && self.tags.exact_key(m.tag).is_some() {
                return Err(Error::new(ErrorKind::Protocol, "recv")
                    .on_rank(self.rank)
                    .with_peer(m.source)
                    .with_detail(format!(
                        "message of {} bytes in one piece on an exact tag: messages of {} \
                         bytes and more come as a first part and a rest (is the peer another \
                         ferry version?)",
                        m.len, EAGER_BYTES
                    )));
            }
            let slot = self.recv_owned(&mut m)?;
            self.drained.push(Drained {
                peer: m.source,
                tag: m.tag,
                state: DrainState::Receiving(slot),
            });
            self.drained_bytes += m.len;
            self.drained_total += 1;
            if scanned {
                // One sender-by-sender scan per drain: its cost grows with the job.
                break;
            }
        }
        Ok(())
    }

    /// Matches the next message nobody asked for (`MPI_Improbe` with `MPI_ANY_SOURCE` and
    /// `MPI_ANY_TAG`), and whether finding it needed a scan sender by sender.
    ///
    /// On `MPI_COMM_WORLD` the rests of split messages share the communicator (marked by
    /// [`MpiTransport::rest_bit`]) and must never be drained: a rest's first part is already
    /// held by a receive of this rank, which asks for the rest itself, in the flow's order.
    /// So the next message is first looked at without matching it (`MPI_Iprobe`); if it is a
    /// rest, the messages behind it from the same sender wait for that receive (`MPI_ANY_TAG`
    /// keeps a sender's order, so they cannot be reached), and the other senders are looked
    /// at one by one. Only this thread calls MPI, so the message seen is the one matched.
    fn next_unasked(&mut self) -> Result<(Option<Matched>, bool)> {
        // SAFETY: reading constants exported by the MPI binding.
        let (any_source, any_tag) = unsafe { (ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG) };
        if self.rest_bit == 0 {
            let found = call::improbe(self.comm, self.rank, any_source, any_tag)?;
            return Ok((found, false));
        }
        match call::iprobe(self.comm, self.rank, any_source, any_tag)? {
            None => return Ok((None, false)),
            Some((source, tag)) if tag & self.rest_bit == 0 => {
                let found = call::improbe(self.comm, self.rank, source as c_int, tag)?;
                return Ok((found, false));
            }
            Some(_) => {}
        }
        for source in 0..self.size {
            if let Some((_, tag)) = call::iprobe(self.comm, self.rank, source as c_int, any_tag)? {
                if tag & self.rest_bit == 0 {
                    let found = call::improbe(self.comm, self.rank, source as c_int, tag)?;
                    return Ok((found, true));
                }
            }
        }
        Ok((None, true))
    }

    /// Moves drained messages MPI has finished receiving to the messages kept aside, in the
    /// order MPI matched them within each flow; asks for the rests of drained first parts,
    /// in that order too, after those of the flow's posted first parts.
    pub(super) fn progress_drained(&mut self) -> Result<()> {
        let mut waiting: Vec<(usize, i32)> = Vec::new();
        let mut i = 0;
        while i < self.drained.len() {
            let (peer, tag) = (self.drained[i].peer, self.drained[i].tag);
            if waiting.contains(&(peer, tag)) {
                i += 1;
                continue;
            }
            let got = match &mut self.drained[i].state {
                DrainState::Receiving(slot) => {
                    let slot = *slot;
                    self.test_slot(slot, peer)?
                }
                DrainState::AwaitRest(_) if self.posted_flows.contains(&(peer, tag)) => None,
                DrainState::AwaitRest(first) => {
                    let first = std::mem::take(first);
                    let total = self.announced(&first, peer)?;
                    let slot = self.recv_rest_owned(peer, tag, &first[..PREFIX], total);
                    self.drained_bytes += total - first.len();
                    self.recycle_any(first);
                    self.drained[i].state = DrainState::Receiving(slot?);
                    None
                }
            };
            let Some((kind, mut msg)) = got else {
                waiting.push((peer, tag));
                i += 1;
                continue;
            };
            let key = self.tags.exact_key(tag);
            if key.is_some() && kind == (SlotKind::Whole { len: EAGER_BYTES }) {
                // A first part: the message is complete once its rest is in.
                self.drained[i].state = DrainState::AwaitRest(msg);
                continue;
            }
            self.drained.remove(i);
            self.drained_bytes -= msg.len();
            let key = match key {
                Some(key) => key,
                None => self.strip_header(&mut msg, peer)?,
            };
            self.keep_early(peer, key, msg);
        }
        Ok(())
    }
}

//! Waiting: the exchange driver, the single-message fast paths of `send` and `recv`, settling
//! the caller's memory after a failure, and shutdown.

use std::time::{Duration, Instant};

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::transport::{Exchange, OpState};
use ferry_core::{MsgKey, Transport};
use mpi::ffi;

use super::call::{self, mpi_error};
use super::split::EAGER_BYTES;
use super::{
    Borrowed, BorrowedReq, MpiTransport, Polled, SlotKind, BORROWED, NAP, SETTLE_WARN_AFTER,
    YIELD_FOR,
};

/// Longest message `send` hands to a blocking `MPI_Send` (see `send_short`): a quarter of
/// the smallest eager limit of the MPI transports in use.
const SHORT_SEND_BYTES: usize = 256;

impl MpiTransport {
    /// Runs `ex` to completion or failure: busy polling (MPI needs calls to make progress),
    /// then yielding the core, then short naps — never a blocking MPI call, so the timeout
    /// always fires (T5). Past the busy polling, a rank with no receive of its own under way
    /// drains messages nobody asked for yet (see [`MpiTransport::drain`]).
    pub(super) fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.stats.calls += 1;
        // A new exchange: its first pass walks all its operations.
        self.settled = false;
        // Most small exchanges complete on the first pass: no clock read for them.
        if self.drive_pass(ex)? {
            return Ok(());
        }
        let start = Instant::now();
        let mut polls: u32 = 0;
        let mut elapsed = Duration::ZERO;
        // When an operation last completed: the exchange stalls only once that stops.
        let (mut seen, mut moved_at) = (self.completions, Duration::ZERO);
        loop {
            if self.drive_pass(ex)? {
                return Ok(());
            }
            polls = polls.wrapping_add(1);
            // While spinning, read the clock every 8th poll only (a read costs as much as a
            // poll); afterwards each poll is slow anyway.
            if polls & 7 == 0 || elapsed >= self.policy.spin {
                elapsed = start.elapsed();
            }
            if let Some(limit) = self.policy.timeout.filter(|&limit| elapsed >= limit) {
                return Err(ferry_core::transport::operation_timeout_error(
                    self.rank, ex, limit,
                ));
            }
            if self.completions != seen {
                (seen, moved_at) = (self.completions, elapsed);
            }
            if elapsed < self.policy.spin {
                // No pause instruction: each poll is a pass of MPI calls already.
                continue;
            }
            // Drain only when stalled: nothing completed for the spin time (a streaming
            // exchange keeps completing and receives its later messages in place), and no
            // matched receive under way (it finishes without any other rank's help; a posted
            // one may wait for anything, so it does not stop the draining).
            if !self.receiving(ex) && elapsed - moved_at >= self.policy.spin {
                let drained = self.drained_total;
                self.drain()?;
                if self.drained_total != drained {
                    // Drained messages may belong to this exchange's receives.
                    self.settled = false;
                }
            }
            if elapsed < self.policy.spin + YIELD_FOR {
                std::thread::yield_now();
            } else if polls & 3 == 0 {
                std::thread::sleep(NAP);
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// [`Transport::send`]: a whole message (shorter than [`EAGER_BYTES`]) without an
    /// operation timeout is one `MPI_Send` (see [`MpiTransport::send_short`]); otherwise one
    /// `MPI_Isend` from `data` (exact tags), done when MPI completes it at once (eager
    /// messages), else the request becomes the one operation of an exchange, which waits (and
    /// settles after a failure) as every exchange does.
    pub(super) fn send_direct(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        self.ensure_open("send")?;
        self.check_peer(peer, "send")?;
        let wire = self.tags.wire(key);
        if wire.hashed
            || !self.zero_copy_sends
            || data.len() > i32::MAX as usize
            || !self.borrowed.is_empty()
        {
            let mut ex = Exchange::new();
            ex.send(peer, key, data);
            return self.exchange(&mut ex);
        }
        self.progress_sends()?;
        if data.len() <= SHORT_SEND_BYTES && peer != self.rank && self.policy.timeout.is_none() {
            return self.send_short(peer, wire.tag, data);
        }
        // SAFETY: `data` outlives this call, and the call does not return before the request
        // completed: here, or in `exchange`, which settles requests on the caller's memory
        // before returning, also after a failure.
        let mut req = unsafe { self.isend_exact(peer, wire.tag, data)? };
        match call::test(&mut req) {
            Ok(true) => {
                self.stats.calls += 1;
                Ok(())
            }
            Ok(false) => {
                let mut ex = Exchange::new();
                ex.send(peer, key, data);
                ex.sends[0].state = OpState::Active {
                    serial: BORROWED,
                    progress: 0,
                };
                self.borrowed.push(BorrowedReq {
                    req,
                    op: Borrowed::Send { op: 0 },
                    polled: Polled::Unknown,
                });
                self.exchange(&mut ex)
            }
            Err(rc) => Err(mpi_error(self.rank, "send (MPI_Test)", rc).with_peer(peer)),
        }
    }

    /// A message of at most [`SHORT_SEND_BYTES`] to another rank as one `MPI_Send`: it costs
    /// the `MPI_Isend` without the `MPI_Test` that must follow it (callgrind: about 75
    /// instructions of Open MPI's per message, a tenth of a one-way 8 B message).
    ///
    /// The MPI standard lets a standard-mode send wait until its receive is posted; libraries
    /// do so only above their eager limit, and the smallest seen is Open MPI's `btl self` (1 KiB
    /// with the header: a 1015-byte `MPI_Send` to oneself never returns there, which is why
    /// messages to this rank never take this path). Every other limit is 4 KiB (vader, UCX)
    /// or more (tcp, MPICH), far above [`SHORT_SEND_BYTES`], so the send never waits for a
    /// receive (M3, T1 hold). Only without an operation timeout: a blocking call cannot be
    /// timed out (should MPI ever hold the send back, e.g. its queue to the peer full); with a
    /// timeout every send goes through `MPI_Isend` and the exchange.
    fn send_short(&mut self, peer: usize, tag: i32, data: &[u8]) -> Result<()> {
        self.stats.record_send(peer, data.len());
        self.zero_copy_messages += 1;
        self.short_sends += 1;
        // SAFETY: `data` is valid for its length (<= 256, so it fits a C int) for the
        // whole call, which returns only when MPI no longer needs it.
        let rc = unsafe {
            ffi::MPI_Send(
                data.as_ptr().cast(),
                data.len() as std::ffi::c_int,
                ffi::RSMPI_UINT8_T,
                peer as std::ffi::c_int,
                tag,
                self.comm,
            )
        };
        if rc != ffi::MPI_SUCCESS as std::ffi::c_int {
            return Err(mpi_error(self.rank, "send (MPI_Send)", rc).with_peer(peer));
        }
        self.stats.calls += 1;
        Ok(())
    }

    /// [`Transport::recv`]: for exact tags with nothing kept aside, posts the first-part
    /// receive at once and polls it alone for the spin time (a short message is usually well
    /// under a microsecond away), then copies it into `buf`; everything else (a split message,
    /// a longer wait, hashed tags) continues as an exchange of this one receive.
    pub(super) fn recv_direct(
        &mut self,
        peer: usize,
        key: MsgKey,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.ensure_open("recv")?;
        self.check_peer(peer, "recv")?;
        let wire = self.tags.wire(key);
        let general = wire.hashed
            || self.early_messages > 0
            || !self.drained.is_empty()
            || !self.borrowed.is_empty();
        if general {
            let mut ex = Exchange::new();
            ex.recv(peer, key, buf);
            return self.exchange(&mut ex);
        }
        self.progress_sends()?;
        // The request stays local while it is polled alone: no slot, no flow entry, nothing
        // but the test per poll; it gets a slot only if the receive goes on in an exchange.
        let (mut req, mut first) = self.irecv_first(peer, wire.tag)?;
        let mut start = None;
        let mut polls: u32 = 0;
        let mut status = call::new_status();
        // Kept lean: per poll only the test, the counter and (every 64th) the clock.
        let outcome = loop {
            polls = polls.wrapping_add(1);
            match call::test_count_into(&mut req, &mut status) {
                Ok(None) => {}
                done => break Some(done),
            }
            if polls.is_multiple_of(64)
                && start.get_or_insert_with(Instant::now).elapsed() >= self.policy.spin
            {
                break None;
            }
            // Poll again at once, like the driver's first phase: no yield (a rank bound to
            // its own core gains nothing from yielding it) and no pause instruction (each
            // poll is an MPI call already; a pause only delays noticing the message).
        };
        // The loop ends within `general.spin_us`, far fewer polls than u32 holds.
        self.request_tests += u64::from(polls);
        match outcome {
            Some(Ok(Some(len))) if len < EAGER_BYTES => {
                // SAFETY: MPI wrote `len` bytes, fewer than the EAGER_BYTES of capacity.
                unsafe { first.set_len(len) };
                buf.clear();
                let copied = buf.try_reserve_exact(len).map(|()| {
                    buf.extend_from_slice(&first);
                });
                self.recycle_any(first);
                copied.map_err(|_| {
                    Error::new(ErrorKind::ResourceExhausted, "recv")
                        .on_rank(self.rank)
                        .with_peer(peer)
                        .with_detail(format!("cannot allocate {len} bytes"))
                })?;
                self.stats.record_recv(peer, len);
                self.stats.calls += 1;
                Ok(())
            }
            Some(Ok(Some(len))) => {
                // SAFETY: MPI wrote `len` bytes (EAGER_BYTES: the receive was that long).
                unsafe { first.set_len(len.min(EAGER_BYTES)) };
                // A split message: its rest is received as part of an exchange, into `buf`.
                // The flow counts as posted until the rest is asked for, as in an exchange.
                self.posted_flows.push((peer, wire.tag));
                let mut ex = Exchange::new();
                ex.recv(peer, key, buf);
                let asked = self.first_arrived(&mut ex.recvs[0], 0, wire.tag, first, true);
                if let Err(e) = asked {
                    if !self.borrowed.is_empty() {
                        self.settle_borrowed(&mut ex);
                    }
                    return Err(e);
                }
                if ex.recvs[0].state == OpState::Done {
                    self.stats.calls += 1;
                    return Ok(());
                }
                self.exchange(&mut ex)
            }
            Some(Err(rc)) => {
                // MPI completed the request with an error: the slot's test reports it as an
                // exchange's receive would (and frees the buffer).
                let slot = self.adopt_first(peer, wire.tag, req, first, Polled::Done(Err(rc)));
                let result = self.test_slot(slot, peer);
                self.unpost(peer, wire.tag);
                match result {
                    Err(e) => Err(e),
                    Ok(got) => {
                        if let Some((_, b)) = got {
                            self.recycle_any(b);
                        }
                        Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer))
                    }
                }
            }
            Some(Ok(None)) | None => {
                let slot = self.adopt_first(peer, wire.tag, req, first, Polled::Unknown);
                let mut ex = Exchange::new();
                ex.recv(peer, key, buf);
                ex.recvs[0].state = OpState::Active {
                    serial: 0,
                    progress: slot,
                };
                self.exchange(&mut ex)
            }
        }
    }

    /// After a failed exchange: waits until MPI has finished with every request on the
    /// exchange's memory, which the caller may free as soon as `exchange` returns. These are
    /// receives whose message MPI already matched (they finish as soon as the sender's MPI
    /// library moves the data) and sends (which finish once the receiver's MPI takes them;
    /// every rank that waits in ferry drains messages nobody asked for, so only a receiver
    /// that never calls ferry again keeps this waiting).
    pub(super) fn settle_borrowed(&mut self, ex: &mut Exchange<'_>) {
        let start = Instant::now();
        let mut warned = false;
        while !self.borrowed.is_empty() {
            if let Err(e) = self.progress_borrowed(ex, 0) {
                tracing::warn!("{e}");
            }
            if !warned && start.elapsed() > self.policy.timeout.unwrap_or(SETTLE_WARN_AFTER) {
                warned = true;
                tracing::warn!(
                    rank = self.rank,
                    pending = self.borrowed.len(),
                    "exchange failed, but MPI still works on its buffers; waiting for MPI"
                );
            }
            std::thread::sleep(NAP);
        }
    }

    /// Shuts down: waits (bounded) for sends and abandoned receives still in MPI's hands, frees
    /// the communicator and finalises MPI if this transport initialised it.
    pub(super) fn shutdown(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        if !self.on_mpi_thread() {
            // MPI may not be called from here. Nothing is freed or finalised: the buffers MPI
            // may still use stay allocated (leaked with the transport), and mpirun reports the
            // missing MPI_Finalize.
            self.finished = true;
            if let Some(universe) = self.universe.take() {
                std::mem::forget(universe);
            }
            for buf in self.send_bufs.drain(..) {
                std::mem::forget(buf);
            }
            for slot in self.slots.drain(..).flatten() {
                std::mem::forget(slot.buf);
            }
            return Err(self.wrong_thread("finish"));
        }
        self.finished = true;
        // MPI reports a dead peer itself (or the job is ended by mpirun); live receivers get
        // all the time they need, bounded only by the optional operation timeout.
        let deadline = self.policy.timeout.map(|limit| Instant::now() + limit);
        let mut result = Ok(());
        loop {
            if let Err(e) = self.progress_sends() {
                result = Err(e);
                break;
            }
            let mut pending_recvs = false;
            for idx in 0..self.slots.len() {
                let posted = matches!(&self.slots[idx], Some(s) if s.kind == SlotKind::First);
                if posted {
                    // Left by an exchange that did not return normally: nothing will
                    // receive its message.
                    if let Some(mut slot) = self.slots[idx].take() {
                        if slot.cancel().is_err() {
                            std::mem::forget(slot.buf);
                        }
                    }
                    continue;
                }
                if self.slots[idx].is_some() {
                    match self.test_slot(idx, self.rank) {
                        Ok(Some((_, buf))) => self.recycle(buf),
                        Ok(None) => pending_recvs = true,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
            }
            // Drained messages whose slots just completed are never received now.
            self.drained.clear();
            self.drained_bytes = 0;
            if result.is_err() || (self.send_reqs.is_empty() && !pending_recvs) {
                break;
            }
            if let Some(limit) = self
                .policy
                .timeout
                .filter(|_| deadline.is_some_and(|d| Instant::now() >= d))
            {
                result = Err(Error::new(ErrorKind::Timeout, "finish")
                    .on_rank(self.rank)
                    .with_detail(format!(
                        "{} sends were not taken by their receivers within {limit:?} \
                         (general.operation_timeout_ms)",
                        self.send_reqs.len(),
                    )));
                break;
            }
            std::thread::sleep(NAP);
        }
        // Buffers MPI may still touch are leaked on purpose: freeing them could let MPI write
        // into memory that is reused.
        for buf in self.send_bufs.drain(..) {
            std::mem::forget(buf);
        }
        self.send_reqs.clear();
        for slot in self.slots.drain(..).flatten() {
            std::mem::forget(slot.buf);
        }
        // SAFETY: the communicators were created by MPI_Comm_dup in `setup`, unless they are
        // MPI_COMM_WORLD, which is never freed.
        unsafe {
            if self.world {
                self.comm = ffi::RSMPI_COMM_NULL;
                self.rest_comm = ffi::RSMPI_COMM_NULL;
            }
            if self.comm != ffi::RSMPI_COMM_NULL {
                ffi::MPI_Comm_free(&mut self.comm);
            }
            if self.rest_comm != ffi::RSMPI_COMM_NULL {
                ffi::MPI_Comm_free(&mut self.rest_comm);
            }
        }
        // Dropping the universe calls MPI_Finalize (only when this transport initialised MPI).
        self.universe.take();
        result
    }
}

//! Waiting: the exchange driver, the single-message fast paths of `send` and `recv`, settling
//! the caller's memory after a failure, and shutdown.

use std::ffi::c_int;
use std::time::{Duration, Instant};

use ferry_core::error::{Error, ErrorKind, Result};
use ferry_core::transport::{check_peer, Exchange, OpState};
use ferry_core::{MsgKey, Transport};
use mpi::ffi;

use super::call::{self, mpi_error};
use super::{Borrowed, MpiTransport, BORROWED, NAP, POSTED, SETTLE_WARN_AFTER, YIELD_FOR};

impl MpiTransport {
    /// Runs `ex` to completion or failure: busy polling (MPI needs calls to make progress),
    /// then yielding the core, then short naps — never a blocking MPI call, so the timeout
    /// always fires (T5). Past the busy polling, a rank with no receive of its own under way
    /// drains messages nobody asked for yet (see [`MpiTransport::drain`]).
    pub(super) fn drive(&mut self, ex: &mut Exchange<'_>) -> Result<()> {
        self.stats.calls += 1;
        // Most small exchanges complete on the first pass: no clock read for them.
        if self.progress(ex, true)? {
            return Ok(());
        }
        let start = Instant::now();
        let mut polls: u32 = 0;
        let mut elapsed = Duration::ZERO;
        // When an operation last completed: the exchange stalls only once that stops.
        let (mut seen, mut moved_at) = (self.completions, Duration::ZERO);
        loop {
            if self.progress(ex, true)? {
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
                std::hint::spin_loop();
                continue;
            }
            // Drain only when stalled: nothing completed for the spin time (a streaming
            // exchange keeps completing and receives its later messages in place), and no
            // matched receive under way (it finishes without any other rank's help; a posted
            // one may wait for anything, so it does not stop the draining).
            let receiving = ex.recvs.iter().any(|r| {
                matches!(r.state, OpState::Active { serial, progress }
                    if serial != BORROWED || progress != POSTED)
            });
            if !receiving && elapsed - moved_at >= self.policy.spin {
                self.drain()?;
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

    /// [`Transport::send`]: one `MPI_Isend` from `data` (exact tags), done when MPI completes
    /// it at once (eager messages); otherwise the request becomes the one operation of an
    /// exchange, which waits (and settles after a failure) as every exchange does.
    pub(super) fn send_direct(&mut self, peer: usize, key: MsgKey, data: &[u8]) -> Result<()> {
        self.ensure_open("send")?;
        check_peer(self.rank, self.size, peer, "send")?;
        let wire = self.tags.wire(key);
        if wire.hashed
            || !self.zero_copy_sends
            || data.len() > i32::MAX as usize
            || !self.borrowed_reqs.is_empty()
        {
            let mut ex = Exchange::new();
            ex.send(peer, key, data);
            return self.exchange(&mut ex);
        }
        self.progress_sends()?;
        // SAFETY: `data` outlives this call, and the call does not return before the request
        // completed: here, or in `exchange`, which settles requests on the caller's memory
        // before returning, also after a failure.
        let mut req = unsafe { call::isend(self.comm, data, peer, wire.tag, self.rank)? };
        self.stats.record_send(peer, data.len());
        self.zero_copy_messages += 1;
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
                self.borrowed_reqs.push(req);
                self.borrowed_ops.push(Borrowed::Send { op: 0 });
                self.exchange(&mut ex)
            }
            Err(rc) => Err(mpi_error(self.rank, "send (MPI_Test)", rc).with_peer(peer)),
        }
    }

    /// [`Transport::recv`]: if the message is there (exact tags, nothing kept aside), one
    /// `MPI_Imrecv` straight into `buf`; otherwise an exchange of this one receive.
    pub(super) fn recv_direct(
        &mut self,
        peer: usize,
        key: MsgKey,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        self.ensure_open("recv")?;
        check_peer(self.rank, self.size, peer, "recv")?;
        let wire = self.tags.wire(key);
        let general = wire.hashed
            || self.early_messages > 0
            || !self.drained.is_empty()
            || !self.borrowed_reqs.is_empty();
        let matched = if general {
            None
        } else {
            self.progress_sends()?;
            self.probe_for(peer, wire.tag)?
        };
        let Some(mut m) = matched else {
            let mut ex = Exchange::new();
            ex.recv(peer, key, buf);
            return self.exchange(&mut ex);
        };
        buf.clear();
        buf.try_reserve_exact(m.len).map_err(|_| {
            Error::new(ErrorKind::ResourceExhausted, "recv")
                .on_rank(self.rank)
                .with_peer(peer)
                .with_detail(format!(
                    "cannot allocate a receive buffer for a message of {} bytes",
                    m.len
                ))
        })?;
        // SAFETY: `buf` has capacity for `m.len` bytes and is not resized until the request
        // completed: here, or in `exchange`, which settles requests on the caller's memory
        // before returning, also after a failure.
        let mut req = unsafe { call::imrecv(&mut m, buf.as_mut_ptr(), self.rank)? };
        self.zero_copy_messages += 1;
        match call::test(&mut req) {
            Ok(true) => {
                // SAFETY: MPI wrote exactly the matched `m.len` bytes into the capacity.
                unsafe { buf.set_len(m.len) };
                self.stats.record_recv(peer, m.len);
                self.stats.calls += 1;
                Ok(())
            }
            Ok(false) => {
                let mut ex = Exchange::new();
                ex.recv(peer, key, buf);
                ex.recvs[0].state = OpState::Active {
                    serial: BORROWED,
                    progress: 0,
                };
                self.borrowed_reqs.push(req);
                self.borrowed_ops.push(Borrowed::Recv {
                    op: 0,
                    peer,
                    len: m.len,
                });
                self.exchange(&mut ex)
            }
            Err(rc) => Err(mpi_error(self.rank, "recv (MPI_Test)", rc).with_peer(peer)),
        }
    }

    /// Probes for the next message of `(peer, tag)` for at most the spin time, in a loop
    /// leaner than the exchange driver's (a small message is usually well under a microsecond
    /// away); `None` if none came.
    fn probe_for(&mut self, peer: usize, tag: i32) -> Result<Option<call::Matched>> {
        let mut start = None;
        let mut polls: u32 = 0;
        loop {
            if let Some(m) = call::improbe(self.comm, self.rank, peer as c_int, tag)? {
                return Ok(Some(m));
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(64)
                && start.get_or_insert_with(Instant::now).elapsed() >= self.policy.spin
            {
                return Ok(None);
            }
            // Spin like the driver's first phase (no yield per poll): under `mpirun` each rank
            // is bound to one core, so `yield_when_idle = auto` sees one core per two ranks and
            // would yield on every poll (8 B latency 1.07 us instead of 0.30).
            std::hint::spin_loop();
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
        while !self.borrowed_reqs.is_empty() {
            if let Err(e) = self.progress_borrowed(ex) {
                tracing::warn!("{e}");
            }
            if !warned && start.elapsed() > self.policy.timeout.unwrap_or(SETTLE_WARN_AFTER) {
                warned = true;
                tracing::warn!(
                    rank = self.rank,
                    pending = self.borrowed_reqs.len(),
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
                if self.slots[idx].is_some() {
                    match self.test_slot(idx, self.rank) {
                        Ok(Some(buf)) => self.recycle(buf),
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
        // SAFETY: the communicator was created by MPI_Comm_dup in `setup`.
        unsafe {
            if self.comm != ffi::RSMPI_COMM_NULL {
                ffi::MPI_Comm_free(&mut self.comm);
            }
        }
        // Dropping the universe calls MPI_Finalize (only when this transport initialised MPI).
        self.universe.take();
        result
    }
}

//! One batched test of every request the transport has in MPI's hands (copied sends, requests
//! on the caller's memory, receives into backend buffers), at the start of each progress pass.
//!
//! Testing an unfinished request with `MPI_Test` runs MPI's progress engine once; a pass that
//! tested its requests one by one ran the engine once per request (64 times per pass for a
//! window of 64 sends), where `MPI_Testsome` over all of them runs it once, as `MPI_Waitall`
//! does. The answers are kept with each request ([`Polled`]) and read by the pass's steps,
//! which test directly only receives started after the batch; the sends a pass starts get
//! one more batched test of their own ([`MpiTransport::poll_borrowed_from`]).

use std::ffi::c_int;

use ferry_core::error::Result;
use mpi::ffi;

use super::call::{self, mpi_error};
use super::{Borrowed, MpiTransport, Polled, RecvSlot};

/// Where a request of the batch came from.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// `send_reqs[i]` (a copied send).
    Copied(usize),
    /// `borrowed[i]`.
    Borrowed(usize),
    /// `slots[i]`.
    Slot(usize),
}

/// Reused arrays of the batched test.
#[derive(Default)]
pub(super) struct Scratch {
    reqs: Vec<ffi::MPI_Request>,
    origins: Vec<Origin>,
    indices: Vec<c_int>,
    statuses: Vec<ffi::MPI_Status>,
    /// Indices of completed copied sends, to remove from the back.
    copied_done: Vec<usize>,
    /// Requests the last batched test covered.
    pub(super) tested: usize,
}

impl RecvSlot {
    /// Cancels the posted receive of this slot and waits until MPI is done with it, as
    /// [`call::cancel_recv`]; a receive a batched test already found complete is not touched
    /// again (MPI freed its request).
    pub(super) fn cancel(&mut self) -> std::result::Result<Option<usize>, c_int> {
        match std::mem::take(&mut self.polled) {
            Polled::Done(outcome) => outcome.map(Some),
            Polled::Unknown | Polled::Pending => call::cancel_recv(&mut self.req),
        }
    }
}

impl MpiTransport {
    /// Whether any request is in MPI's hands (a copied send, a request on the caller's
    /// memory, or a receive into a backend buffer).
    pub(super) fn in_flight(&self) -> bool {
        !(self.send_reqs.is_empty()
            && self.borrowed.is_empty()
            && self.free_slots.len() == self.slots.len())
    }

    /// Tests every request the transport has in MPI's hands with one `MPI_Testsome`, keeps
    /// each answer with its request, and releases the buffers of completed copied sends.
    /// Returns how many requests completed.
    pub(super) fn poll_all(&mut self) -> Result<usize> {
        // Nothing in MPI's hands (every slot is free): the common first pass of an exchange.
        if !self.in_flight() {
            self.poll.tested = 0;
            return Ok(0);
        }
        let mut scratch = std::mem::take(&mut self.poll);
        let result = self.poll_with(&mut scratch, 0, true);
        self.poll = scratch;
        result
    }

    /// Tests the requests on the caller's memory from `borrowed[from]` on (sends just
    /// started) with one `MPI_Testsome`, as [`MpiTransport::poll_all`] tests all: a window of
    /// sends costs one run of MPI's progress engine, not one per send.
    pub(super) fn poll_borrowed_from(&mut self, from: usize) -> Result<usize> {
        let mut scratch = std::mem::take(&mut self.poll);
        let result = self.poll_with(&mut scratch, from, false);
        self.poll = scratch;
        result
    }

    /// The batched test of `borrowed[from..]`, and with `all` of every other request too.
    fn poll_with(&mut self, s: &mut Scratch, from: usize, all: bool) -> Result<usize> {
        s.reqs.clear();
        s.origins.clear();
        if all {
            for (i, &req) in self.send_reqs.iter().enumerate() {
                s.reqs.push(req);
                s.origins.push(Origin::Copied(i));
            }
        }
        for (i, b) in self.borrowed.iter().enumerate().skip(from) {
            if !matches!(b.polled, Polled::Done(_)) {
                s.reqs.push(b.req);
                s.origins.push(Origin::Borrowed(i));
            }
        }
        if all {
            for (i, slot) in self.slots.iter().enumerate() {
                if let Some(slot) = slot {
                    if !matches!(slot.polled, Polled::Done(_)) {
                        s.reqs.push(slot.req);
                        s.origins.push(Origin::Slot(i));
                    }
                }
            }
        }
        let n = s.reqs.len();
        s.tested = n;
        if n == 0 {
            return Ok(0);
        }
        s.indices.resize(n, 0);
        // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
        s.statuses.resize(n, unsafe { std::mem::zeroed() });
        self.request_tests += 1;
        let mut outcount: c_int = 0;
        // SAFETY: the three arrays hold `n` entries each; the requests are live requests of
        // this transport (completed ones were removed or are not in the batch).
        let rc = unsafe {
            ffi::MPI_Testsome(
                n as c_int,
                s.reqs.as_mut_ptr(),
                &mut outcount,
                s.indices.as_mut_ptr(),
                s.statuses.as_mut_ptr(),
            )
        };
        // With MPI_ERR_IN_STATUS, each completed request's own code is in its status.
        let in_status = rc != ffi::MPI_SUCCESS as c_int && is_err_in_status(rc);
        if rc != ffi::MPI_SUCCESS as c_int && !in_status {
            // Nothing is known about any request: each is tested on its own later.
            return Err(mpi_error(self.rank, "exchange (MPI_Testsome)", rc));
        }
        for origin in &s.origins {
            match *origin {
                Origin::Borrowed(i) => self.borrowed[i].polled = Polled::Pending,
                Origin::Slot(i) => {
                    if let Some(slot) = &mut self.slots[i] {
                        slot.polled = Polled::Pending;
                    }
                }
                Origin::Copied(_) => {}
            }
        }
        // MPI_UNDEFINED (no active request) cannot happen: completed requests are not in the
        // batch.
        let done = usize::try_from(outcount).unwrap_or(0).min(n);
        s.copied_done.clear();
        let mut send_error = None;
        for (j, &k) in s.indices[..done].iter().enumerate() {
            let Ok(k) = usize::try_from(k) else { continue };
            let Some(&origin) = s.origins.get(k) else {
                continue;
            };
            // Statuses are packed: the j-th completed request's is the j-th.
            let status = &s.statuses[j];
            let code = if in_status {
                status.MPI_ERROR
            } else {
                ffi::MPI_SUCCESS as c_int
            };
            match origin {
                Origin::Copied(i) => {
                    if code != ffi::MPI_SUCCESS as c_int && send_error.is_none() {
                        send_error = Some(code);
                    }
                    s.copied_done.push(i);
                }
                Origin::Borrowed(i) => {
                    let b = &mut self.borrowed[i];
                    // MPI freed the request and set the handle to MPI_REQUEST_NULL.
                    b.req = s.reqs[k];
                    b.polled = Polled::Done(if code != ffi::MPI_SUCCESS as c_int {
                        Err(code)
                    } else if matches!(b.op, Borrowed::Send { .. }) {
                        Ok(0)
                    } else {
                        received(status)
                    });
                }
                Origin::Slot(i) => {
                    if let Some(slot) = &mut self.slots[i] {
                        slot.req = s.reqs[k];
                        slot.polled = Polled::Done(if code != ffi::MPI_SUCCESS as c_int {
                            Err(code)
                        } else {
                            received(status)
                        });
                    }
                }
            }
        }
        // Remove from the back so that swap_remove never moves an index still to be removed.
        s.copied_done.sort_unstable_by(|a, b| b.cmp(a));
        for &i in &s.copied_done {
            self.send_reqs.swap_remove(i);
            let buf = self.send_bufs.swap_remove(i);
            self.inflight_bytes -= buf.len();
            self.recycle_any(buf);
        }
        match send_error {
            Some(code) => Err(mpi_error(self.rank, "send (MPI_Testsome)", code)),
            None => Ok(done),
        }
    }
}

/// Bytes a completed request received according to its status (0 for a send).
fn received(status: &ffi::MPI_Status) -> std::result::Result<usize, c_int> {
    let mut count: c_int = 0;
    // SAFETY: the status was filled by MPI_Testsome for a completed request.
    let rc = unsafe { ffi::MPI_Get_count(status, ffi::RSMPI_UINT8_T, &mut count) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    Ok(count.max(0) as usize)
}

/// Whether `rc` is MPI_ERR_IN_STATUS.
fn is_err_in_status(rc: c_int) -> bool {
    let mut class: c_int = 0;
    // SAFETY: out-pointer to a local.
    let ok = unsafe { ffi::MPI_Error_class(rc, &mut class) } == ffi::MPI_SUCCESS as c_int;
    ok && class == ffi::MPI_ERR_IN_STATUS as c_int
}

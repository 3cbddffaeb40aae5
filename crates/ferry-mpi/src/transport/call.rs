//! Thin wrappers around the raw MPI calls of the transport: each returns a ferry error naming
//! the rank, the operation and the MPI error string instead of an MPI return code.

use std::ffi::{c_char, c_int, c_void};

use ferry_core::error::{Error, ErrorKind, Result};
use mpi::ffi;

/// The text of an MPI error code.
fn error_string(code: c_int) -> String {
    let mut buf = [0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters as the standard requires.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return format!("MPI error code {code}");
    }
    let len = (len.max(0) as usize).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
    format!("{} (code {code})", String::from_utf8_lossy(&bytes))
}

/// The error of MPI call `op` that returned `code` on `rank`.
pub(super) fn mpi_error(rank: usize, op: &'static str, code: c_int) -> Error {
    Error::new(ErrorKind::Mpi, op)
        .on_rank(rank)
        .with_detail(error_string(code))
}

/// Turns an MPI return code into a result.
pub(super) fn check(rc: c_int, rank: usize, op: &'static str) -> Result<()> {
    if rc == ffi::MPI_SUCCESS as c_int {
        Ok(())
    } else {
        Err(mpi_error(rank, op, rc))
    }
}

/// A message MPI has matched (`MPI_Improbe`) and that must now be received (`MPI_Imrecv`).
pub(super) struct Matched {
    pub(super) message: ffi::MPI_Message,
    /// Length in bytes.
    pub(super) len: usize,
    /// Sender (world rank of the private communicator).
    pub(super) source: usize,
    /// MPI tag.
    pub(super) tag: i32,
}

/// Matches the next message from `source` with `tag` (or any, with `MPI_ANY_SOURCE` /
/// `MPI_ANY_TAG`) if one is there.
pub(super) fn improbe(
    comm: ffi::MPI_Comm,
    rank: usize,
    source: c_int,
    tag: c_int,
) -> Result<Option<Matched>> {
    let mut flag: c_int = 0;
    // SAFETY: a null message handle is a valid value for MPI to overwrite.
    let mut message = unsafe { ffi::RSMPI_MESSAGE_NULL };
    // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
    let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
    // SAFETY: out-pointers point to locals.
    let rc = unsafe { ffi::MPI_Improbe(source, tag, comm, &mut flag, &mut message, &mut status) };
    let peer_of = |e: Error| {
        if source >= 0 {
            e.with_peer(source as usize)
        } else {
            e
        }
    };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(peer_of(mpi_error(rank, "recv (MPI_Improbe)", rc)));
    }
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: status was filled by MPI_Improbe.
    let rc = unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
    if rc != ffi::MPI_SUCCESS as c_int || count < 0 || status.MPI_SOURCE < 0 {
        return Err(peer_of(mpi_error(rank, "recv (MPI_Get_count)", rc)));
    }
    Ok(Some(Matched {
        message,
        len: count as usize,
        source: status.MPI_SOURCE as usize,
        tag: status.MPI_TAG,
    }))
}

/// The sender and tag of the next message from `source` with `tag` (or any) if one is there,
/// without matching it (`MPI_Iprobe`).
pub(super) fn iprobe(
    comm: ffi::MPI_Comm,
    rank: usize,
    source: c_int,
    tag: c_int,
) -> Result<Option<(usize, i32)>> {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
    let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
    // SAFETY: out-pointers point to locals.
    let rc = unsafe { ffi::MPI_Iprobe(source, tag, comm, &mut flag, &mut status) };
    if rc != ffi::MPI_SUCCESS as c_int {
        let e = mpi_error(rank, "recv (MPI_Iprobe)", rc);
        return Err(if source >= 0 {
            e.with_peer(source as usize)
        } else {
            e
        });
    }
    if flag == 0 || status.MPI_SOURCE < 0 {
        return Ok(None);
    }
    Ok(Some((status.MPI_SOURCE as usize, status.MPI_TAG)))
}

/// Starts receiving a matched message into `ptr`.
///
/// # Safety
/// `ptr` must be valid for writes of `m.len` bytes until the returned request completes, and
/// nothing else may access that memory meanwhile.
pub(super) unsafe fn imrecv(
    m: &mut Matched,
    ptr: *mut u8,
    rank: usize,
) -> Result<ffi::MPI_Request> {
    // SAFETY: a null request is a valid value for MPI to overwrite.
    let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: the caller guarantees the buffer; the count is the probed length (< 2^31).
    let rc = unsafe {
        ffi::MPI_Imrecv(
            ptr.cast::<c_void>(),
            m.len as c_int,
            ffi::RSMPI_UINT8_T,
            &mut m.message,
            &mut req,
        )
    };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(mpi_error(rank, "recv (MPI_Imrecv)", rc).with_peer(m.source));
    }
    Ok(req)
}

/// Starts sending `data` to `peer` with `tag`.
///
/// # Safety
/// `data` must stay valid and unmodified until the returned request completes.
pub(super) unsafe fn isend(
    comm: ffi::MPI_Comm,
    data: &[u8],
    peer: usize,
    tag: i32,
    rank: usize,
) -> Result<ffi::MPI_Request> {
    // SAFETY: a null request is a valid value for MPI to overwrite.
    let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: the caller keeps `data` alive; callers checked that its length fits a C int.
    let rc = unsafe {
        ffi::MPI_Isend(
            data.as_ptr().cast::<c_void>(),
            data.len() as c_int,
            ffi::RSMPI_UINT8_T,
            peer as c_int,
            tag,
            comm,
            &mut req,
        )
    };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(mpi_error(rank, "send (MPI_Isend)", rc).with_peer(peer));
    }
    Ok(req)
}

/// Tests one request: `Ok(true)` once it completed (MPI then frees it), `Err` with the MPI
/// return code if the test failed (the request is then complete too: MPI no longer touches
/// its buffer).
pub(super) fn test(req: &mut ffi::MPI_Request) -> std::result::Result<bool, c_int> {
    let mut flag: c_int = 0;
    // SAFETY: the request is live (or null, which MPI_Test reports as complete).
    let rc = unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    Ok(flag != 0)
}

/// Posts a receive of exactly `len` bytes from `peer` with `tag` into `ptr`.
///
/// # Safety
/// `ptr` must be valid for writes of `len` bytes until the returned request completes, and
/// nothing else may access that memory meanwhile.
pub(super) unsafe fn irecv(
    comm: ffi::MPI_Comm,
    ptr: *mut u8,
    len: usize,
    peer: usize,
    tag: i32,
    rank: usize,
) -> Result<ffi::MPI_Request> {
    // SAFETY: a null request is a valid value for MPI to overwrite.
    let mut req = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: the caller guarantees the buffer; callers checked that `len` fits a C int.
    let rc = unsafe {
        ffi::MPI_Irecv(
            ptr.cast::<c_void>(),
            len as c_int,
            ffi::RSMPI_UINT8_T,
            peer as c_int,
            tag,
            comm,
            &mut req,
        )
    };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(mpi_error(rank, "recv (MPI_Irecv)", rc).with_peer(peer));
    }
    Ok(req)
}

/// Tests a posted receive: `Ok(Some(bytes received))` once it completed, `Err` with the MPI
/// return code if it failed (complete too; see [`is_truncation`]).
pub(super) fn test_count(req: &mut ffi::MPI_Request) -> std::result::Result<Option<usize>, c_int> {
    test_count_into(req, &mut new_status())
}

/// A status for [`test_count_into`].
#[inline]
pub(super) fn new_status() -> ffi::MPI_Status {
    // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
    unsafe { std::mem::zeroed() }
}

/// [`test_count`] with a status the caller keeps: a poll loop fills it once instead of on
/// every poll (MPI writes it only when the request completes).
#[inline]
pub(super) fn test_count_into(
    req: &mut ffi::MPI_Request,
    status: &mut ffi::MPI_Status,
) -> std::result::Result<Option<usize>, c_int> {
    let mut flag: c_int = 0;
    // SAFETY: the request is live; the status is the caller's.
    let rc = unsafe { ffi::MPI_Test(req, &mut flag, status) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: status was filled by MPI_Test for a completed receive.
    let rc = unsafe { ffi::MPI_Get_count(status, ffi::RSMPI_UINT8_T, &mut count) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    Ok(Some(count.max(0) as usize))
}

/// Whether an MPI error code says a message was longer than its receive buffer.
pub(super) fn is_truncation(rc: c_int) -> bool {
    let mut class: c_int = 0;
    // SAFETY: out-pointer to a local.
    let ok = unsafe { ffi::MPI_Error_class(rc, &mut class) } == ffi::MPI_SUCCESS as c_int;
    ok && class == ffi::MPI_ERR_TRUNCATE as c_int
}

/// Cancels a posted receive and waits until MPI is done with it: `Ok(None)` if it was
/// cancelled before a message matched it, `Ok(Some(bytes))` if a message had matched it and
/// was received, `Err` with the MPI return code if it failed.
pub(super) fn cancel_recv(req: &mut ffi::MPI_Request) -> std::result::Result<Option<usize>, c_int> {
    // SAFETY: the request is a live receive request.
    let rc = unsafe { ffi::MPI_Cancel(req) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    // SAFETY: MPI_Status is a plain C struct; zeroed is a valid value to be overwritten.
    let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
    // A cancelled receive, or one whose (at most EAGER_BYTES-long) message was already
    // matched, completes without help from another rank.
    // SAFETY: the request is live; the status is a local.
    let rc = unsafe { ffi::MPI_Wait(req, &mut status) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    let mut cancelled: c_int = 0;
    // SAFETY: status was filled by MPI_Wait.
    let rc = unsafe { ffi::MPI_Test_cancelled(&status, &mut cancelled) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    if cancelled != 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: status was filled by MPI_Wait for a completed receive.
    let rc = unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return Err(rc);
    }
    Ok(Some(count.max(0) as usize))
}

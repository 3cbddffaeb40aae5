//! The FFI boundary: the thread-local last error and the guard every entry point runs under.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferry_core::{Error, ErrorKind};

use crate::api::FerryStatus;

thread_local! {
    /// Status and message of the last failed call on this thread.
    static LAST: RefCell<(FerryStatus, CString)> = RefCell::new((FerryStatus::FERRY_OK, CString::default()));
}

/// The status code for an error kind.
pub fn status_of(kind: ErrorKind) -> FerryStatus {
    match kind {
        ErrorKind::PeerFailed => FerryStatus::FERRY_ERR_PEER_FAILED,
        ErrorKind::Timeout => FerryStatus::FERRY_ERR_TIMEOUT,
        ErrorKind::Protocol => FerryStatus::FERRY_ERR_PROTOCOL,
        ErrorKind::Config => FerryStatus::FERRY_ERR_CONFIG,
        ErrorKind::InvalidArgument => FerryStatus::FERRY_ERR_INVALID_ARGUMENT,
        ErrorKind::Io => FerryStatus::FERRY_ERR_IO,
        ErrorKind::ResourceExhausted => FerryStatus::FERRY_ERR_RESOURCE_EXHAUSTED,
        ErrorKind::Unsupported => FerryStatus::FERRY_ERR_UNSUPPORTED,
        ErrorKind::Mpi => FerryStatus::FERRY_ERR_MPI,
        ErrorKind::Revoked => FerryStatus::FERRY_ERR_REVOKED,
    }
}

/// Records `msg` as this thread's last error with `status`.
pub fn set_last(status: FerryStatus, msg: &str) {
    // An interior NUL cannot be represented in a C string; it is replaced, not dropped.
    let text = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; the report is then dropped
    // instead of panicking across the C boundary.
    let _ = LAST.try_with(|l| *l.borrow_mut() = (status, text));
}

/// Records a ferry error and returns its status.
pub fn fail(e: &Error) -> FerryStatus {
    let s = status_of(e.kind());
    set_last(s, &e.to_string());
    s
}

/// The status of the last failure on this thread.
pub fn last_status() -> FerryStatus {
    LAST.try_with(|l| l.borrow().0)
        .unwrap_or(FerryStatus::FERRY_ERR_INTERNAL)
}

/// Pointer to the last message; valid until the next failing call on this thread.
pub fn last_message() -> *const c_char {
    LAST.try_with(|l| l.borrow().1.as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Text of a caught panic payload.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs the body of a status-returning entry point: its error becomes the last error and a
/// negative status; a panic becomes `FERRY_ERR_INTERNAL` instead of unwinding into C.
pub fn guard(op: &str, f: impl FnOnce() -> ferry_core::Result<()>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => FerryStatus::FERRY_OK as i32,
        Ok(Err(e)) => fail(&e) as i32,
        Err(p) => {
            set_last(
                FerryStatus::FERRY_ERR_INTERNAL,
                &format!("{op}: internal error: {}", panic_text(&*p)),
            );
            FerryStatus::FERRY_ERR_INTERNAL as i32
        }
    }
}

/// An invalid-argument error for a null pointer.
pub fn null_arg(op: &'static str, what: &str) -> Error {
    Error::new(ErrorKind::InvalidArgument, op).with_detail(format!("{what} is NULL"))
}

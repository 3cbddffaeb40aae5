//! LAIK's API (`include/laik.h`) over ferry's data layer (I3).
//!
//! Handles are boxed Rust objects behind opaque C pointers. LAIK has one instance per process;
//! every handle keeps a pointer to it. Groups, spaces and partitioners live until the process
//! ends (LAIK programs keep referring to them after "releasing" them); partitionings,
//! containers, reservations, transitions and action sequences are freed by their free calls.
//! Failures are fatal, as in LAIK: [`run`] prints the error (rank, operation, cause) on stderr
//! and exits with status 1, so C never sees a half-done call, an abort or an unwinding panic.

mod alloc;
mod bytes;
mod core;
mod custom;
mod data;
mod debug;
mod index_space;
mod kvs;
mod layout;
mod layout_user;
mod logging;
mod part;
mod plan;
mod program;
mod query;
mod ranges;
mod reduce;
mod spaces;
mod world;

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferry_core::Result;

use crate::api::FerryStatus;
use crate::ffi::{panic_text, set_last};

/// Runs the body of a LAIK entry point; a failure or a caught panic ends the process (LAIK's
/// fatal error semantics) after reporting it.
pub(crate) fn run<R>(op: &'static str, f: impl FnOnce() -> Result<R>) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => die(op, FerryStatus::FERRY_ERR_INVALID_ARGUMENT, &e.to_string()),
        Err(p) => die(
            op,
            FerryStatus::FERRY_ERR_INTERNAL,
            &format!("internal error: {}", panic_text(&*p)),
        ),
    }
}

/// Reports a fatal error and exits with status 1 (C's `exit`: stdio buffers are flushed).
pub(crate) fn die(op: &str, status: FerryStatus, msg: &str) -> ! {
    set_last(status, msg);
    let rank = self::core::current_rank()
        .map(|r| format!("rank {r}: "))
        .unwrap_or_default();
    // Not eprintln!: a closed stderr must not turn the report into a panic.
    let _ = writeln!(std::io::stderr(), "LAIK error: {rank}{op}: {msg}");
    std::process::exit(1)
}

/// Borrows the object behind a LAIK handle; NULL is an error naming the operation.
pub(crate) fn obj<'a, T>(p: *mut T, op: &'static str, what: &str) -> Result<&'a mut T> {
    // SAFETY: LAIK handles are pointers this library returned (Box::into_raw) and the program
    // has not freed; LAIK calls are made from one thread.
    unsafe { p.as_mut() }.ok_or_else(|| crate::ffi::null_arg(op, what))
}

/// Writes an optional out-parameter.
pub(crate) fn out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null out-parameter for a value of type T (LAIK's API contract).
        unsafe { p.write(v) };
    }
}

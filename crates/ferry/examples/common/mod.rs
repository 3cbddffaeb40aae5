//! Small helpers shared by the example programs: C-style argument parsing and the error exit
//! convention (message on stderr, exit status 1, never a panic).
#![allow(dead_code)]

use std::io::Write;
use std::process::ExitCode;

/// C `atoi`/`atol`: optional leading whitespace and sign, then digits; anything else ends the
/// number; no digits gives 0 (examples.md conventions). Saturates instead of overflowing.
pub fn atoi(s: &str) -> i64 {
    let s = s.trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mut v: i64 = 0;
    for b in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg {
        -v
    } else {
        v
    }
}

/// Runs an example's body: flushes stdout, and turns an error into a message on stderr
/// (naming the program) and exit status 1.
pub fn main_with(name: &str, body: impl FnOnce() -> ferry::Result<()>) -> ExitCode {
    let r = body();
    let _ = std::io::stdout().flush();
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An error for a bad command line or problem size, reported like any other failure.
pub fn usage_error(detail: impl Into<String>) -> ferry::Error {
    ferry::Error::invalid("arguments", detail)
}

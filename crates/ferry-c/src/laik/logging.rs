//! LAIK's logging set-up calls (`core.h`): `laik_log_init`, `laik_log_init_loc`,
//! `laik_log_cleanup`, `laik_log_set_time` and `laik_log_inc`, and the prefix of every log
//! line they shape.
//!
//! The prefix is `LAIK LEVEL WHO` with `WHO` the process's rank (`rank N`), or before
//! `laik_init` the location given to `laik_log_init_loc` (`-` without one). The log counter
//! (`laik_log_inc`) and the seconds since the time base (`laik_log_set_time`) join the prefix
//! once the program uses them, as ` #COUNTER` and ` +SECONDSs`, so the lines of programs that
//! do not use them stay as short as before.

use std::ffi::{c_char, c_int, c_long, CStr};
use std::sync::Mutex;

use super::core::{current_rank, LaikInstance};
use super::run;

/// C's `struct timeval` (seconds and microseconds since the epoch) on the platforms ferry
/// builds for (LP64: both fields are `long`).
#[repr(C)]
pub struct Timeval {
    tv_sec: c_long,
    tv_usec: c_long,
}

/// Process-wide log state: LAIK keeps it outside the instance, since logging starts before
/// the instance exists.
struct LogState {
    /// `laik_log_inc` count; shown once non-zero.
    counter: Option<u64>,
    /// Time base (seconds since the epoch) from `laik_log_set_time`.
    base: Option<f64>,
    /// Location from `laik_log_init_loc`, naming the process before it has a rank.
    location: Option<String>,
}

static LOG: Mutex<LogState> = Mutex::new(LogState {
    counter: None,
    base: None,
    location: None,
});

fn state<R>(f: impl FnOnce(&mut LogState) -> R) -> R {
    // A poisoned lock only means a panic elsewhere while logging; the state stays usable.
    let mut g = LOG.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut g)
}

/// The prefix of a log line of `tag` (`debug`, `info`, ...), without the colon.
pub(crate) fn prefix(tag: &str) -> String {
    let who = match current_rank() {
        Some(r) => format!("rank {r}"),
        None => state(|s| s.location.clone()).unwrap_or_else(|| "-".into()),
    };
    let mut p = format!("LAIK {tag} {who}");
    let (counter, base) = state(|s| (s.counter, s.base));
    if let Some(c) = counter {
        p.push_str(&format!(" #{c}"));
    }
    if let Some(b) = base {
        p.push_str(&format!(" +{:.3}s", super::core::laik_wtime() - b));
    }
    p
}

/// Starts logging for instance `inst` as LAIK's instance set-up does: the threshold is read
/// again from `LAIK_LOG` (undoing `laik_set_loglevel`), and lines name the instance's rank.
#[no_mangle]
pub extern "C" fn laik_log_init(inst: *mut LaikInstance) {
    run("laik_log_init", || {
        let i = super::obj(inst, "laik_log_init", "instance")?;
        i.log_level = super::core::log_level_from_env();
        Ok(())
    })
}

/// Early logging before an instance exists: lines name the process by `mylocation` until
/// `laik_init` gives it a rank. NULL forgets the location.
#[no_mangle]
pub extern "C" fn laik_log_init_loc(mylocation: *mut c_char) {
    let loc = if mylocation.is_null() {
        None
    } else {
        // SAFETY: a NUL-terminated string from the program (LAIK's contract).
        Some(
            unsafe { CStr::from_ptr(mylocation) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    state(|s| s.location = loc);
}

/// Ends logging of instance `inst`: a message still being built (`laik_log_begin`) is written
/// rather than lost, and the counter, time base and early location are dropped, so later
/// lines carry the plain prefix.
#[no_mangle]
pub extern "C" fn laik_log_cleanup(inst: *mut LaikInstance) {
    run("laik_log_cleanup", || {
        super::obj(inst, "laik_log_cleanup", "instance")?;
        super::core::laik_log_flush_text();
        state(|s| {
            s.counter = None;
            s.base = None;
            s.location = None;
        });
        Ok(())
    })
}

/// Sets the time base of the log prefix: lines then show the seconds since `t` (NULL: since
/// now).
#[no_mangle]
pub extern "C" fn laik_log_set_time(t: *mut Timeval) {
    // SAFETY: NULL or a `struct timeval` from the program.
    let base = match unsafe { t.as_ref() } {
        Some(tv) => tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6,
        None => super::core::laik_wtime(),
    };
    state(|s| s.base = Some(base));
}

/// Increments the log counter shown in the prefix.
#[no_mangle]
pub extern "C" fn laik_log_inc() {
    state(|s| s.counter = Some(s.counter.unwrap_or(0) + 1));
}

/// The level name used in the prefix.
pub(crate) fn level_tag(level: c_int) -> &'static str {
    match level {
        1 => "debug",
        2 => "info",
        3 => "warning",
        4 => "error",
        _ => "panic",
    }
}

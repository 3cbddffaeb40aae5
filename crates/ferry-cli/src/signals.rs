//! Signals the launcher reacts to: SIGINT, SIGTERM and SIGHUP (end the job), SIGCHLD (a rank
//! ended), and SIGTSTP/SIGCONT (Ctrl-Z and `fg`: the ranks, which run in their own process
//! groups and so do not get the terminal's signals, are stopped and continued with it). They are blocked in every thread of the launcher and taken synchronously by the
//! main loop with `sigtimedwait`, so the launcher sleeps until something happens instead of
//! polling (it shares the cores with the ranks) and reacts to a dead rank at once.
//! Ranks start with an empty signal mask: the launcher clears it between fork and exec.

use std::time::Duration;

const WATCHED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGCHLD,
    libc::SIGTSTP,
    libc::SIGCONT,
];

fn watched_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in WATCHED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Blocks the watched signals in the calling thread and so in every thread it starts later.
/// Must be called before the launcher starts any thread.
pub fn block() -> std::io::Result<()> {
    let set = watched_set();
    // SAFETY: a valid set; the old mask is not needed.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// What woke the main loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// SIGINT, SIGTERM or SIGHUP: end the job.
    Stop(i32),
    /// SIGCHLD: some child changed state.
    Child,
    /// SIGTSTP (Ctrl-Z): stop the ranks, then the launcher.
    Suspend,
    /// SIGCONT: the launcher was continued; continue the ranks.
    Resume,
    /// Nothing within the timeout (or an interrupted wait).
    Timeout,
}

/// Waits up to `timeout` for one of the watched signals.
pub fn wait(timeout: Duration) -> Event {
    let set = watched_set();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timespec; no siginfo wanted.
    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    match sig {
        libc::SIGCHLD => Event::Child,
        libc::SIGTSTP => Event::Suspend,
        libc::SIGCONT => Event::Resume,
        s if s > 0 => Event::Stop(s),
        _ => Event::Timeout,
    }
}

/// Which watched signals are pending (blocked and not yet taken).
#[derive(Debug, Clone, Copy, Default)]
pub struct Pending {
    /// SIGINT, SIGTERM or SIGHUP.
    pub stop: bool,
    /// SIGCHLD.
    pub child: bool,
}

/// Looks at the pending signals without taking them (the main loop takes them later).
pub fn pending() -> Pending {
    // SAFETY: sigpending fills a set we own; sigismember reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        if libc::sigpending(&mut set) != 0 {
            return Pending::default();
        }
        let has = |sig| libc::sigismember(&set, sig) == 1;
        Pending {
            stop: has(libc::SIGINT) || has(libc::SIGTERM) || has(libc::SIGHUP),
            child: has(libc::SIGCHLD),
        }
    }
}

/// Takes a pending SIGCHLD, so that the next child exit shows as pending again.
pub fn take_child() {
    // SAFETY: a set holding SIGCHLD only, a zero timeout; no siginfo wanted.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
    }
}

/// Conventional name of a signal number, for messages.
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGCONT => "SIGCONT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "unknown signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(name(9), "SIGKILL");
        assert_eq!(name(15), "SIGTERM");
        assert_eq!(name(1000), "unknown signal");
    }
}

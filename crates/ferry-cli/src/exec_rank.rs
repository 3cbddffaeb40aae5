//! The first program every local rank runs: `ferry __exec-rank LAUNCHER_PID NOFILE CPU --
//! PROGRAM [ARGS...]` prepares the process and replaces itself with PROGRAM.
//!
//! Why not a `pre_exec` closure: a closure forces `fork`, which copies the launcher's address
//! space: its page tables and, by the time hundreds of ranks are started, the stacks of
//! hundreds of output and store threads. At 256 ranks those forks and the copy-on-write faults
//! after them were a third of the launcher's start-up time, growing with every rank started.
//! Without a closure the standard library starts the process with `posix_spawn` (a vfork-style
//! clone that shares the address space until exec), and the preparation runs here instead, in
//! the new process, at the cost of one extra exec of this small program.
//!
//! Preparation, as the closure did it: die with the launcher (`PR_SET_PDEATHSIG`, checked
//! against a launcher that died before it took effect), restore the soft limit on open files
//! the launcher raised for itself, and clear the signal mask the launcher blocks (the rank
//! must be ended by SIGTERM and stopped by Ctrl-Z), and bind it to its CPU (`bind`; `-`: not
//! bound) before the program runs. The process group is set by the spawn.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

/// The hidden first argument that selects this mode.
pub const ARG: &str = "__exec-rank";

/// Exit status when PROGRAM cannot be started (as a shell reports it).
const CANNOT_START: u8 = 127;

/// Builds the command that starts `program` as a rank through this mode.
pub fn command(
    exe: &std::path::Path,
    launcher_pid: i32,
    nofile: Option<libc::rlimit>,
    cpu: Option<usize>,
    program: &[String],
) -> Command {
    let mut c = Command::new(exe);
    let limit = match nofile {
        Some(l) => format!("{}:{}", l.rlim_cur, l.rlim_max),
        None => "-".to_string(),
    };
    c.arg(ARG)
        .arg(launcher_pid.to_string())
        .arg(limit)
        .arg(cpu.map_or_else(|| "-".to_string(), |c| c.to_string()))
        .arg("--")
        .args(program);
    c
}

/// Runs the mode with the arguments after [`ARG`]; returns only if PROGRAM could not be
/// started.
pub fn main(args: &[OsString]) -> ExitCode {
    match prepare_and_exec(args) {
        Ok(never) => match never {},
        Err(msg) => {
            let rank = std::env::var("FERRY_RANK")
                .map(|r| format!(" rank {r}"))
                .unwrap_or_default();
            eprintln!("ferry: cannot start{rank}: {msg}");
            ExitCode::from(CANNOT_START)
        }
    }
}

enum Never {}

fn prepare_and_exec(args: &[OsString]) -> Result<Never, String> {
    let usage = || format!("usage: ferry {ARG} LAUNCHER_PID NOFILE CPU -- PROGRAM [ARGS...]");
    let text = |i: usize| args.get(i).and_then(|a| a.to_str());
    let launcher_pid: i32 = text(0).and_then(|p| p.parse().ok()).ok_or_else(usage)?;
    let nofile = match text(1).ok_or_else(usage)? {
        "-" => None,
        l => {
            let (cur, max) = l.split_once(':').ok_or_else(usage)?;
            Some(libc::rlimit {
                rlim_cur: cur.parse().map_err(|_| usage())?,
                rlim_max: max.parse().map_err(|_| usage())?,
            })
        }
    };
    let cpu = match text(2).ok_or_else(usage)? {
        "-" => None,
        c => Some(
            c.parse::<usize>()
                .ok()
                .filter(|&c| c < rustix::process::CpuSet::MAX_CPU)
                .ok_or_else(usage)?,
        ),
    };
    if text(3) != Some("--") || args.len() < 5 {
        return Err(usage());
    }
    let program = &args[4];
    prepare(launcher_pid, nofile, None).map_err(|e| e.to_string())?;
    if let Some(c) = cpu {
        crate::bind::bind_self(c).map_err(|e| format!("cannot bind to CPU {c}: {e}"))?;
    }
    // `exec` also resets SIGPIPE, which the Rust runtime of this program ignores, to default.
    let err = Command::new(program).args(&args[5..]).exec();
    Err(format!("`{}`: {err}", program.to_string_lossy()))
}

/// The preparation of a rank process before its exec. Makes only async-signal-safe system
/// calls, so the launcher can also run it as a pre-exec closure after `fork`.
pub fn prepare(
    launcher_pid: i32,
    nofile: Option<libc::rlimit>,
    cpu: Option<usize>,
) -> std::io::Result<()> {
    // SAFETY: prctl, getppid, setrlimit and sigprocmask with valid arguments.
    unsafe {
        // Die with the launcher, even if it is SIGKILLed (no orphans).
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != launcher_pid {
            // The launcher died before prctl took effect.
            return Err(std::io::Error::other("launcher gone"));
        }
        if let Some(lim) = nofile {
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        // The launcher blocks the signals it waits for; the rank must not inherit that mask
        // (SIGTERM would not end it, Ctrl-Z would not stop it).
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    if let Some(c) = cpu {
        // No message added here: this may run between fork and exec, where allocating is not
        // safe.
        crate::bind::bind_self(c)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_arguments_are_refused() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        for bad in [
            os(&[]),
            os(&["x", "-", "-", "--", "true"]),
            os(&["1", "5", "-", "--", "true"]),
            os(&["1", "-", "x", "--", "true"]),
            os(&["1", "-", "1000000", "--", "true"]),
            os(&["1", "-", "--", "true"]),
            os(&["1", "-", "-", "true"]),
            os(&["1", "-", "-", "--"]),
        ] {
            let e = prepare_and_exec(&bad).err().unwrap();
            assert!(e.contains("usage"), "{bad:?}: {e}");
        }
    }
}

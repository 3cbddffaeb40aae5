//! Keeping what the ranks start from outliving the job (R1: no orphans).
//!
//! Each rank leads its own process group, and its children stay in it unless they leave on
//! purpose. The launcher keeps a rank's zombie unreaped until it has signalled the rank's
//! group, so that the group id cannot be reused in between ([`observe`] looks at a rank's
//! exit without reaping it). What covers which end:
//!
//! - A rank fails: its group is killed at once (its children go with it), the other groups
//!   when the job ends.
//! - The job ends: every group is ended (SIGTERM, then SIGKILL), and processes that left
//!   their group but were reparented to the launcher (it is a child subreaper, so orphans
//!   of the ranks come to it instead of init) are killed by [`sweep_strays`].
//! - The launcher is SIGKILLed: the ranks die by their parent-death signal; their groups
//!   are killed by the [`Guardian`], a small process forked at start that sees the launcher's
//!   end as end of file on a pipe.
//!
//! Not covered: a process that left its rank's group (setsid, setpgid) when the launcher is
//! SIGKILLed (the launcher held it as subreaper; it goes to init), and a group id reused by
//! an unrelated new group leader in the instant between the ranks' death by SIGKILL and the
//! guardian's kill (the ids of groups that still have members cannot be reused).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// The exit status of child `pid` if it has ended, without reaping it (its pid, and so its
/// process group id, stay reserved until it is reaped).
pub fn observe(pid: i32) -> std::io::Result<Option<ExitStatus>> {
    // SAFETY: waitid with a zeroed siginfo owned here; WNOWAIT leaves the child waitable.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if info.si_pid() == 0 {
            return Ok(None);
        }
        let status = info.si_status();
        Ok(Some(match info.si_code {
            libc::CLD_EXITED => ExitStatus::from_raw((status & 0xff) << 8),
            libc::CLD_DUMPED => ExitStatus::from_raw(status | 0x80),
            _ => ExitStatus::from_raw(status & 0x7f),
        }))
    }
}

/// Makes the launcher the reaper of its descendants' orphans (see the module documentation).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The parent pid and process group of `pid`, from `/proc/<pid>/stat`.
fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

/// Kills and reaps the launcher's children other than `keep` (orphans of the ranks that
/// came to the subreaper, with their groups), until none is left or `limit` passed; returns
/// how many were killed.
pub fn sweep_strays(keep: &[i32], limit: Duration) -> usize {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + limit;
    let mut killed = 0;
    loop {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return killed;
        };
        let strays: Vec<(i32, i32)> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| !keep.contains(pid))
            .filter_map(|pid| {
                let (ppid, pgrp) = parent_and_group(pid)?;
                (ppid == me).then_some((pid, pgrp))
            })
            .collect();
        if strays.is_empty() {
            return killed;
        }
        for &(pid, pgrp) in &strays {
            // SAFETY: kill(2) on our own child (a zombie keeps its pid reserved until the
            // waitpid below) and on the group it leads.
            unsafe {
                if pgrp == pid {
                    libc::kill(-pid, libc::SIGKILL);
                }
                libc::kill(pid, libc::SIGKILL);
            }
            killed += 1;
        }
        for &(pid, _) in &strays {
            loop {
                // SAFETY: waitpid on our own child.
                let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
                if rc != 0 || Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        if Instant::now() >= deadline {
            return killed;
        }
    }
}

/// A process that kills the ranks' process groups if the launcher dies without saying
/// goodbye (SIGKILL): the ranks themselves die by their parent-death signal, their children
/// would not. The launcher tells it each rank's group through a pipe; end of file without
/// the "done" word (0) means the launcher died.
pub struct Guardian {
    /// Write end of the pipe (close-on-exec, so no rank holds it open).
    fd: i32,
    pid: i32,
}

impl Guardian {
    /// Forks the guardian, able to remember `capacity` groups. Must be called while the
    /// launcher has one thread only (the child runs ordinary code after fork).
    pub fn start(capacity: usize) -> std::io::Result<Guardian> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills the array we own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Allocated before fork: the child needs no allocator.
        let mut groups: Vec<i32> = Vec::with_capacity(capacity);
        // SAFETY: fork in a single-threaded process; the child only runs `guard` and exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing the pipe we just made.
            unsafe {
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
            return Err(e);
        }
        if pid == 0 {
            // SAFETY: in the child: close the write end, then guard until the launcher ends.
            unsafe {
                libc::close(fds[1]);
                guard(fds[0], &mut groups)
            }
        }
        // SAFETY: the parent does not read.
        unsafe { libc::close(fds[0]) };
        Ok(Guardian { fd: fds[1], pid })
    }

    /// The guardian's pid (a child of the launcher that is not a rank).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Adds rank group `pgid` to those killed if the launcher dies.
    pub fn watch(&self, pgid: i32) {
        self.send(pgid);
    }

    fn send(&self, word: i32) {
        let bytes = word.to_ne_bytes();
        // SAFETY: writes 4 bytes from a local array to our pipe (atomic: under PIPE_BUF). A
        // dead guardian gives EPIPE (SIGPIPE is ignored in Rust programs): nothing to do.
        unsafe {
            libc::write(self.fd, bytes.as_ptr().cast(), bytes.len());
        }
    }

    /// The job ended and its groups were dealt with: the guardian leaves without killing.
    pub fn dismiss(self) {
        self.send(0);
        // Drop closes the pipe and reaps the guardian.
    }
}

impl Drop for Guardian {
    fn drop(&mut self) {
        // Without `dismiss`, end of file makes the guardian kill every group it knows.
        // SAFETY: closing our pipe end, then reaping our own child (it exits at once).
        unsafe {
            libc::close(self.fd);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The guardian's life: remember groups until end of file, then kill them, unless the
/// launcher said it is done. Never returns.
///
/// # Safety
/// Only in the child right after `fork`; `fd` is the pipe's read end.
unsafe fn guard(fd: i32, groups: &mut Vec<i32>) -> ! {
    // Terminal signals go to the launcher's foreground group, the guardian included: it
    // must outlive them to do its job if the launcher is then killed outright.
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
    ] {
        libc::signal(sig, libc::SIG_IGN);
    }
    libc::prctl(libc::PR_SET_NAME, c"ferry-guard".as_ptr(), 0, 0, 0);
    // Not holding the launcher's output open: whoever reads it sees its end at once.
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    if null >= 0 {
        for std_fd in 0..3 {
            libc::dup2(null, std_fd);
        }
        if null > 2 {
            libc::close(null);
        }
    }
    let mut buf = [0u8; 4096];
    let mut have = 0usize;
    loop {
        let n = libc::read(fd, buf[have..].as_mut_ptr().cast(), buf.len() - have);
        if n == 0 {
            break;
        }
        if n < 0 {
            if *libc::__errno_location() == libc::EINTR {
                continue;
            }
            break;
        }
        have += n as usize;
        let whole = have - have % 4;
        for word in buf[..whole].chunks_exact(4) {
            let g = i32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
            if g == 0 {
                libc::_exit(0);
            }
            if groups.len() < groups.capacity() {
                groups.push(g);
            }
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
    }
    for &g in groups.iter() {
        libc::kill(-g, libc::SIGKILL);
    }
    libc::_exit(0)
}

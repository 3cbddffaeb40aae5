//! Whether this host can hold a job of N ranks, checked before anything is started: a count
//! the kernel cannot hold would otherwise start ranks until fork fails, thousands of them,
//! each printing its own error (issue: `-n 100000` printed for 20 s).
//!
//! Every rank costs this host, whether it runs here or is started through `--remote-cmd`, a
//! local process (the rank or its remote command) and [`TASKS_PER_RANK`]` - 1` launcher
//! threads (two forwarding its output, one serving its store connection), and
//! [`FILES_PER_RANK`] of the launcher's descriptors for the whole job (two output pipes) plus
//! one while the rank talks to the rendezvous store. Those are compared with the room left
//! under the kernel's task limits (`kernel.pid_max`, `kernel.threads-max`, the cgroup's
//! `pids.max`, `RLIMIT_NPROC` for users other than root) and under the launcher's open-file
//! limit. A count beyond the room is refused. The ranks' own threads are unknown here, and
//! not every rank holds its store connection at the same time: when the ranks would use more
//! than half the tasks left, or their store connections might not all fit, the launcher
//! warns.

use std::path::PathBuf;

/// Tasks (processes and threads) one rank costs this host, not counting its own threads.
pub const TASKS_PER_RANK: u64 = 4;
/// Descriptors the launcher holds per rank for the whole job (its output pipes).
pub const FILES_PER_RANK: u64 = 2;
/// Descriptors the launcher needs besides those of the ranks: standard streams, the store
/// listener, the job's lock, the guardian's pipe, and those a fork holds for a moment.
const FILES_BASE: u64 = 16;

/// Room left under one limit: how many more tasks or files, and which limit it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Room {
    left: u64,
    what: String,
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Tasks in the whole system: the number after the slash in `/proc/loadavg`.
fn system_tasks() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

/// The `pids` cgroup directory of this process (v2 unified, or the v1 `pids` hierarchy).
fn pids_cgroup() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        let dir = if controllers.is_empty() {
            PathBuf::from("/sys/fs/cgroup").join(path)
        } else if controllers.split(',').any(|c| c == "pids") {
            PathBuf::from("/sys/fs/cgroup/pids").join(path)
        } else {
            continue;
        };
        if dir.join("pids.max").exists() {
            return Some(dir);
        }
    }
    None
}

/// Tasks of the real user id (what RLIMIT_NPROC counts): the `Threads:` of every process
/// whose real uid is ours.
fn user_tasks(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            n += field("Threads:").unwrap_or(1);
        }
    }
    n
}

fn rlimit(resource: libc::__rlimit_resource_t) -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid struct.
    (unsafe { libc::getrlimit(resource, &mut lim) } == 0).then_some(lim)
}

/// Room for more tasks under each limit that applies.
fn task_rooms() -> Vec<Room> {
    let mut rooms = Vec::new();
    if let Some(used) = system_tasks() {
        for (key, path) in [
            ("kernel.pid_max", "/proc/sys/kernel/pid_max"),
            ("kernel.threads-max", "/proc/sys/kernel/threads-max"),
        ] {
            if let Some(max) = read_u64(path) {
                rooms.push(Room {
                    left: max.saturating_sub(used),
                    what: format!("{key} is {max}, {used} tasks exist"),
                });
            }
        }
    }
    if let Some(dir) = pids_cgroup() {
        let max = std::fs::read_to_string(dir.join("pids.max")).ok();
        let max = max.and_then(|m| m.trim().parse::<u64>().ok()); // "max" = no limit
        let cur = read_u64(&dir.join("pids.current").to_string_lossy());
        if let (Some(max), Some(cur)) = (max, cur) {
            rooms.push(Room {
                left: max.saturating_sub(cur),
                what: format!("the cgroup allows {max} tasks, {cur} exist"),
            });
        }
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    // The kernel does not apply RLIMIT_NPROC to root.
    if uid != 0 {
        if let Some(lim) = rlimit(libc::RLIMIT_NPROC).filter(|l| l.rlim_cur != libc::RLIM_INFINITY)
        {
            let used = user_tasks(uid);
            rooms.push(Room {
                left: lim.rlim_cur.saturating_sub(used),
                what: format!("ulimit -u is {}, this user runs {used} tasks", lim.rlim_cur),
            });
        }
    }
    rooms
}

/// Room for the launcher's descriptors: the hard open-file limit (the launcher raises its
/// soft limit to it) minus a base.
fn file_room() -> Option<Room> {
    let lim = rlimit(libc::RLIMIT_NOFILE)?;
    if lim.rlim_max == libc::RLIM_INFINITY {
        return None;
    }
    Some(Room {
        left: lim.rlim_max.saturating_sub(FILES_BASE),
        what: format!("the launcher's open-file limit is {}", lim.rlim_max),
    })
}

/// What the check decided.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Why the job cannot run here (nothing was started).
    pub refuse: Option<String>,
    /// Things the user should know, the job runs anyway.
    pub warnings: Vec<String>,
}

/// Checks whether `ranks` ranks fit this host (see the module documentation).
pub fn check(ranks: usize) -> Verdict {
    judge(ranks as u64, &task_rooms(), file_room().as_ref())
}

/// Most processes Linux can have at all (`PID_MAX_LIMIT` on 64-bit): a bound that holds even
/// where the limits above cannot be read.
const PID_MAX_LIMIT: u64 = 1 << 22;

fn judge(ranks: u64, tasks: &[Room], files: Option<&Room>) -> Verdict {
    let mut v = Verdict::default();
    if ranks > PID_MAX_LIMIT {
        v.refuse = Some(format!(
            "{ranks} ranks do not fit on this host: Linux has at most {PID_MAX_LIMIT} processes"
        ));
        return v;
    }
    let need_tasks = ranks.saturating_mul(TASKS_PER_RANK);
    if let Some(tight) = tasks.iter().min_by_key(|r| r.left) {
        if need_tasks > tight.left {
            v.refuse = Some(format!(
                "{ranks} ranks do not fit on this host: they need {need_tasks} processes and \
                 threads here ({TASKS_PER_RANK} per rank: the rank and 3 launcher threads), but \
                 only {} more are possible ({}); use fewer ranks or more hosts",
                tight.left, tight.what
            ));
            return v;
        }
        if need_tasks.saturating_mul(2) > tight.left {
            v.warnings.push(format!(
                "{ranks} ranks use {need_tasks} of the {} processes and threads still possible \
                 on this host ({}); the ranks' own threads may not fit",
                tight.left, tight.what
            ));
        }
    }
    if let Some(room) = files {
        let need = ranks.saturating_mul(FILES_PER_RANK);
        if need > room.left {
            v.refuse = Some(format!(
                "{ranks} ranks do not fit on this host: the launcher needs {need} open files for \
                 their output pipes ({FILES_PER_RANK} per rank), but {}; raise it (ulimit -Hn) \
                 or use fewer ranks",
                room.what
            ));
        } else if need.saturating_add(ranks) > room.left {
            v.warnings.push(format!(
                "{ranks} ranks are close to the launcher's open-file limit ({}): ranks that \
                 reach the rendezvous store at the same moment may be refused",
                room.what
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room(left: u64) -> Room {
        Room {
            left,
            what: format!("limit with {left} left"),
        }
    }

    #[test]
    fn refuses_what_does_not_fit_and_warns_when_tight() {
        let tasks = [room(1000), room(40_000)];
        let v = judge(100_000, &tasks, None);
        let why = v.refuse.expect("refused");
        assert!(why.contains("100000 ranks"), "{why}");
        assert!(why.contains("limit with 1000 left"), "{why}");
        let v = judge(200, &tasks, None);
        assert!(v.refuse.is_none());
        assert_eq!(v.warnings.len(), 1, "{:?}", v.warnings);
        let v = judge(10, &tasks, Some(&room(100)));
        assert!(v.refuse.is_none() && v.warnings.is_empty());
        let v = judge(40, &tasks, Some(&room(100)));
        assert!(v.refuse.is_none() && v.warnings.len() == 1, "{v:?}");
        let v = judge(60, &tasks, Some(&room(100)));
        assert!(v.refuse.expect("files").contains("open files"));
        assert!(
            judge(u64::MAX, &[], None).refuse.is_some(),
            "no limits known"
        );
    }

    #[test]
    fn reads_this_hosts_limits() {
        assert!(system_tasks().is_some_and(|n| n > 0));
        assert!(!task_rooms().is_empty());
        assert!(check(1).refuse.is_none());
        assert!(check(usize::MAX / 8).refuse.is_some());
    }
}

//! Watching rank processes by pid: their state in `/proc`, waiting for them to stop or die,
//! and the pids that `t_fail` ranks print (shared by the launcher suites).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The state letter of process `pid` (`R`, `S`, `T`, `Z`, ...), if it exists.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesised command name, which may itself hold ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether process `pid` is dead: gone, or a zombie waiting for a parent that does not reap
/// (pid 1 in a container).
pub fn is_dead(pid: u32) -> bool {
    proc_state(pid).is_none_or(|c| c == 'Z' || c == 'X')
}

/// Waits up to `limit` for every pid to die; returns those still alive.
pub fn wait_dead(pids: &[u32], limit: Duration) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let alive: Vec<u32> = pids.iter().copied().filter(|&p| !is_dead(p)).collect();
        if alive.is_empty() || start.elapsed() > limit {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `limit` for every pid's state to satisfy `want`.
pub fn wait_state(pids: &[u32], want: impl Fn(char) -> bool, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if pids.iter().all(|&p| proc_state(p).is_some_and(&want)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The pids in lines `... pid <pid>` (what `t_fail` ranks print when they start).
pub fn pids_in(stdout: &str) -> Vec<u32> {
    stdout
        .lines()
        .filter_map(|l| {
            l.split_once(" pid ")
                .and_then(|(_, p)| p.trim().parse().ok())
        })
        .collect()
}

/// Spawns `cmd` (a job of `ranks` ranks that print their pids, stdout piped) and reads its
/// output until every rank's pid is known. Panics if the launcher ends before that.
pub fn spawn_with_pids(mut cmd: Command, ranks: usize) -> (Child, Vec<u32>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the launcher");
    let mut reader = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut pids = Vec::new();
    let mut line = String::new();
    while pids.len() < ranks {
        line.clear();
        assert!(
            reader
                .read_line(&mut line)
                .expect("read the launcher's output")
                > 0,
            "launcher ended early"
        );
        pids.extend(pids_in(&line));
    }
    (child, pids)
}

//! One line instead of N: when every rank fails the same way at start-up (a bad
//! configuration value, too little shared memory), each prints the same error line, and N
//! ranks would print N copies. The launcher prints it once, naming the ranks:
//! `ranks 0-15: t_alltoall: error: configure: ...`.
//!
//! How: the first line of a rank's stderr that looks like an error (contains "error", any
//! case) is held back for a moment, and identical lines held back from other ranks join it.
//! The group is written, as one line, once no new rank has joined it for [`QUIET`], at most
//! [`MAX_HOLD`] after its first line. Only exactly identical lines are merged (a line that
//! names its rank stays as it is), only the first such line of each rank is held, and the
//! thread forwarding that stderr waits until the group is written, so the rank's later
//! lines never overtake it. Lines are still written whole, under the output lock. Output
//! tagged with `--tag-output` is never merged (its readers expect one rank per line).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::forward::{Output, Sink};

/// A group is written once no rank joined it for this long.
pub const QUIET: Duration = Duration::from_millis(200);
/// A group is written at the latest this long after its first line (well under the time the
/// launcher waits for output at the end of the job).
pub const MAX_HOLD: Duration = Duration::from_millis(500);

/// `0-3,5,7-9`: the sorted ranks, runs as ranges.
pub fn rank_list(ranks: &[usize]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// Whether a line is a candidate for merging: it looks like an error.
pub fn looks_like_error(line: &[u8]) -> bool {
    line.windows(5).any(|w| w.eq_ignore_ascii_case(b"error"))
}

/// Lines held back, by text.
struct Group {
    line: Vec<u8>,
    ranks: Vec<usize>,
    first: Instant,
    last: Instant,
}

/// The merging of identical error lines (see the module documentation), shared by the
/// threads that forward the ranks' stderr.
#[derive(Default)]
pub struct Collapse {
    groups: Mutex<(u64, HashMap<u64, Group>)>,
    written: Condvar,
}

impl Collapse {
    /// Holds `line` (one whole line, newline included) of `rank` until its group is written,
    /// then returns. The caller has written everything the rank printed before it.
    pub fn hold(&self, output: &Output, rank: usize, line: &[u8]) {
        let Ok(mut guard) = self.groups.lock() else {
            output.write_lines(Sink::Stderr, line);
            return;
        };
        let now = Instant::now();
        let (next_id, groups) = &mut *guard;
        let id = match groups.iter_mut().find(|(_, g)| g.line == line) {
            Some((id, g)) => {
                g.ranks.push(rank);
                g.last = now;
                *id
            }
            None => {
                *next_id += 1;
                groups.insert(
                    *next_id,
                    Group {
                        line: line.to_vec(),
                        ranks: vec![rank],
                        first: now,
                        last: now,
                    },
                );
                *next_id
            }
        };
        loop {
            let Some(g) = guard.1.get(&id) else {
                return; // written by another rank's thread
            };
            let due = (g.last + QUIET).min(g.first + MAX_HOLD);
            let now = Instant::now();
            if now >= due {
                if let Some(g) = guard.1.remove(&id) {
                    output.write_lines(Sink::Stderr, &merged(&g));
                }
                self.written.notify_all();
                return;
            }
            guard = match self.written.wait_timeout(guard, due - now) {
                Ok((g, _)) => g,
                Err(_) => return,
            };
        }
    }
}

/// The line of a group: as printed when one rank printed it, else prefixed by the ranks.
fn merged(g: &Group) -> Vec<u8> {
    if g.ranks.len() == 1 {
        return g.line.clone();
    }
    let mut out = format!("ranks {}: ", rank_list(&g.ranks)).into_bytes();
    out.extend_from_slice(&g.line);
    out
}

/// Groups launcher messages `rank R <text>` whose text is the same: `ranks 0-3 <text>`.
/// Order: the groups in the order of their first message.
pub fn merge_messages(messages: Vec<(usize, String)>) -> Vec<String> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (rank, text) in messages {
        match groups.iter_mut().find(|(t, _)| *t == text) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((text, vec![rank])),
        }
    }
    groups
        .into_iter()
        .map(|(text, ranks)| match ranks.as_slice() {
            [one] => format!("rank {one} {text}"),
            _ => format!("ranks {} {text}", rank_list(&ranks)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn rank_lists() {
        assert_eq!(rank_list(&[3, 0, 1, 2, 5, 7, 8, 9]), "0-3,5,7-9");
        assert_eq!(rank_list(&[4]), "4");
        assert_eq!(rank_list(&[]), "");
    }

    #[test]
    fn recognises_error_lines() {
        assert!(looks_like_error(b"prog: error: configure: bad\n"));
        assert!(looks_like_error(b"Error: x\n"));
        assert!(!looks_like_error(b"rank 3 line 7\n"));
    }

    #[test]
    fn merges_launcher_messages() {
        let m = merge_messages(vec![
            (2, "was killed by signal 9 (SIGKILL)".into()),
            (0, "exited with code 1".into()),
            (3, "exited with code 1".into()),
            (1, "exited with code 1".into()),
        ]);
        assert_eq!(
            m,
            vec![
                "rank 2 was killed by signal 9 (SIGKILL)",
                "ranks 0-1,3 exited with code 1"
            ]
        );
    }

    #[test]
    fn identical_lines_from_many_ranks_become_one() {
        let output = Arc::new(Output::default());
        let collapse = Arc::new(Collapse::default());
        let start = Instant::now();
        let threads: Vec<_> = (0..8)
            .map(|r| {
                let (o, c) = (output.clone(), collapse.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5 * r as u64));
                    c.hold(&o, r, b"prog: error: bad value\n");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Written once; every holder returned within the limit.
        assert!(collapse.groups.lock().unwrap().1.is_empty());
        assert!(start.elapsed() < MAX_HOLD + Duration::from_millis(200));
    }
}

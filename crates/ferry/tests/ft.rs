//! Fault-tolerant communicators with real processes under `ferry run --keep-going` (issue 07):
//! - `ft_agree` survives one and two SIGKILLed ranks (rank 0 included) on tcp, shm and hybrid:
//!   every survivor prints the same `shrink` and `done` lines and exits 0;
//! - the failure and message modes (`t_ft`): CONT, NOP, BLANK, a rank killed during the
//!   agreement, REBUILD refused, ABORT ending every rank within a second naming the dead one.
//!
//! Needs `target/<profile>/ferry` and the examples (`cargo build --bins --examples`); without
//! them the tests fail under `CI=true` and say why they skip otherwise. The many-runs chaos
//! suite is `bench/chaos.py` (and the ignored test `chaos_suite` below).

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::procs::{built_tools, job, rank_pids};
use support::{run_limited, target_dir};

const BACKENDS: &[&str] = &["tcp", "shm", "hybrid"];

struct KillRun {
    stdout: Vec<(Instant, String)>,
    stderr: String,
    killed_at: Vec<Instant>,
}

/// Runs `ft_agree ROUNDS` on `n` ranks and SIGKILLs `victims[i]` `after[i]` after all ranks
/// run.
fn ft_agree_with_kills(
    test: &str,
    backend: &str,
    n: usize,
    rounds: u64,
    victims: &[usize],
    after: &[Duration],
) -> Option<KillRun> {
    let (ferry, ex) = built_tools(test, &["ft_agree"]).map(|(f, e)| (f, e[0].clone()))?;
    let mut cmd = job(&ferry, n, backend, true, &ex, &[&rounds.to_string()]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ferry");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let l2 = lines.clone();
    let t_out = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            l2.lock().unwrap().push((Instant::now(), line));
        }
    });
    let mut err = child.stderr.take().unwrap();
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let start = Instant::now();
    let mut pids = Vec::new();
    while start.elapsed() < Duration::from_secs(20) {
        pids = rank_pids(child.id());
        if pids.len() == n {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(pids.len(), n, "{backend}: not every rank started");
    let t0 = Instant::now();
    let mut killed_at = Vec::new();
    for (&v, &a) in victims.iter().zip(after) {
        if let Some(wait) = (t0 + a).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let pid = pids.iter().find(|(r, _)| *r == v).map(|p| p.1).unwrap();
        let ok = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{backend}: could not kill rank {v}");
        killed_at.push(Instant::now());
    }
    let limit = Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{backend}: ft_agree hung (victims {victims:?})");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    t_out.join().unwrap();
    let stderr = t_err.join().unwrap();
    let stdout = std::mem::take(&mut *lines.lock().unwrap());
    Some(KillRun {
        stdout,
        stderr,
        killed_at,
    })
}

/// The checks of issue 07 must-show 1 on one run; returns the time from the first kill to
/// the last survivor's first shrink line.
fn judge(backend: &str, n: usize, victims: &[usize], rounds: u64, run: &KillRun) -> Duration {
    let text: String = run.stdout.iter().map(|(_, l)| format!("{l}\n")).collect();
    let ctx = format!(
        "{backend} n={n} victims {victims:?}:\n{text}\n{}",
        run.stderr
    );
    let survivors: Vec<usize> = (0..n).filter(|r| !victims.contains(r)).collect();
    let body = |l: &str| l.split_once(": ").map(|(_, b)| b.to_string()).unwrap();
    let mut done = Vec::new();
    let mut shrinks: Vec<Vec<String>> = Vec::new();
    let mut last_shrink = None;
    for &r in &survivors {
        let mine: Vec<&(Instant, String)> = run
            .stdout
            .iter()
            .filter(|(_, l)| l.starts_with(&format!("rank {r}: ")))
            .collect();
        let d: Vec<String> = mine
            .iter()
            .filter(|(_, l)| l.contains(": done "))
            .map(|(_, l)| body(l))
            .collect();
        assert_eq!(d.len(), 1, "rank {r} prints one done line; {ctx}");
        done.push(d[0].clone());
        let s: Vec<&(Instant, String)> = mine
            .iter()
            .copied()
            .filter(|(_, l)| l.contains(": shrink "))
            .collect();
        if let Some((t, _)) = s.first() {
            last_shrink = Some(last_shrink.map_or(*t, |x: Instant| x.max(*t)));
        }
        shrinks.push(s.iter().map(|(_, l)| body(l)).collect());
    }
    assert!(
        done.windows(2).all(|w| w[0] == w[1]),
        "identical done lines; {ctx}"
    );
    assert!(
        shrinks.windows(2).all(|w| w[0] == w[1]),
        "identical shrink lines; {ctx}"
    );
    assert!(
        done[0].starts_with(&format!("done {rounds} rounds, size {}, ", survivors.len())),
        "final size; {ctx}"
    );
    let last = shrinks[0].last().expect("a shrink line");
    assert!(
        last.ends_with(&format!("survivors {survivors:?}")),
        "the last shrink leaves exactly the survivors; {ctx}"
    );
    assert!(
        !run.stderr.contains("exited with code") && !run.stderr.contains("ft_agree: error"),
        "no survivor fails; {ctx}"
    );
    last_shrink
        .unwrap()
        .saturating_duration_since(run.killed_at[0])
}

#[test]
fn ft_agree_without_failure_sums_every_round() {
    let test = "ft_agree_without_failure_sums_every_round";
    let Some((ferry, ex)) = built_tools(test, &["ft_agree"]).map(|(f, e)| (f, e[0].clone())) else {
        return;
    };
    for backend in BACKENDS {
        let (out, _) = run_limited(
            &mut job(&ferry, 4, backend, true, &ex, &["300"]),
            Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{backend}: {stdout}");
        // Round r sums r * (1 + 2 + 3 + 4).
        let sum: i64 = (1..=300).map(|r| 10 * r).sum();
        for r in 0..4 {
            let want = format!("rank {r}: done 300 rounds, size 4, checksum {sum}");
            assert!(stdout.contains(&want), "{backend}: {want}:\n{stdout}");
        }
    }
}

#[test]
fn ft_agree_survivors_agree_after_one_and_two_kills() {
    let test = "ft_agree_survivors_agree_after_one_and_two_kills";
    // (backend, ranks, victims, kill times): rank 0 among the victims on every backend.
    let ms = Duration::from_millis;
    let cases: &[(&str, usize, &[usize], &[Duration])] = &[
        ("tcp", 4, &[0], &[ms(300)]),
        ("shm", 4, &[2], &[ms(250)]),
        ("hybrid", 4, &[3], &[ms(350)]),
        ("tcp", 8, &[5, 0], &[ms(200), ms(500)]),
        ("shm", 8, &[0, 6], &[ms(300), ms(300)]),
        ("hybrid", 8, &[0, 4], &[ms(250), ms(400)]),
    ];
    for &(backend, n, victims, after) in cases {
        let Some(run) = ft_agree_with_kills(test, backend, n, 1000, victims, after) else {
            return;
        };
        let took = judge(backend, n, victims, 1000, &run);
        eprintln!("{backend} n={n} victims {victims:?}: kill to last shrink line {took:?}");
        assert!(
            took < Duration::from_secs(1),
            "{backend}: survivors shrank {took:?} after the kill"
        );
    }
}

fn t_ft(test: &str, backend: &str, scenario: &str) -> Option<(std::process::Output, Duration)> {
    let (ferry, ex) = built_tools(test, &["t_ft"]).map(|(f, e)| (f, e[0].clone()))?;
    Some(run_limited(
        &mut job(&ferry, 4, backend, true, &ex, &[scenario]),
        Duration::from_secs(60),
    ))
}

fn lines_with(stdout: &str, what: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_string)
        .collect()
}

#[test]
fn cont_mode_survivors_talk_and_a_blocked_receive_fails_at_once() {
    let test = "cont_mode_survivors_talk_and_a_blocked_receive_fails_at_once";
    for backend in BACKENDS {
        let Some((out, _)) = t_ft(test, backend, "cont") else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "{backend}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let recv = lines_with(&stdout, "rank 0: cont ok recv error after ");
        assert_eq!(recv.len(), 1, "{ctx}");
        // Rank 1 dies 300 ms after the receive is posted; the error follows at once.
        let ms: u64 = recv[0]["rank 0: cont ok recv error after ".len()..]
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap();
        assert!(ms < 300 + 500, "{ctx}");
        for r in [2, 3] {
            assert!(
                stdout.contains(&format!("rank {r}: cont ok p2p across the failure")),
                "{ctx}"
            );
        }
        for r in [0, 2, 3] {
            assert!(
                stdout.contains(&format!(
                    "rank {r}: cont ok shrink 1 size 3 members [0, 2, 3]"
                )),
                "{ctx}"
            );
        }
    }
}

#[test]
fn nop_mode_fails_everything_until_recovery() {
    let test = "nop_mode_fails_everything_until_recovery";
    for backend in BACKENDS {
        let Some((out, _)) = t_ft(test, backend, "nop") else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "{backend}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(lines_with(&stdout, "nop ok error after").len(), 3, "{ctx}");
        assert_eq!(
            lines_with(&stdout, "nop ok p2p after recover").len(),
            2,
            "{ctx}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("t_ft: error"),
            "{ctx}"
        );
    }
}

#[test]
fn blank_mode_keeps_the_size_and_refuses_the_gap_at_once() {
    let test = "blank_mode_keeps_the_size_and_refuses_the_gap_at_once";
    for backend in BACKENDS {
        let Some((out, _)) = t_ft(test, backend, "blank") else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "{backend}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for r in [0, 2, 3] {
            assert!(
                stdout.contains(&format!(
                    "rank {r}: blank ok size 4 live 3 refused: rank {r}: send (peer rank 1): \
                     invalid argument: invalid rank"
                )),
                "{ctx}"
            );
        }
    }
}

#[test]
fn a_rank_killed_during_the_agreement_is_left_out_by_every_survivor() {
    let test = "a_rank_killed_during_the_agreement_is_left_out_by_every_survivor";
    for backend in BACKENDS {
        let Some((out, _)) = t_ft(test, backend, "agree-kill") else {
            return;
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ctx = format!(
            "{backend}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for r in [0, 3] {
            assert!(
                stdout.contains(&format!(
                    "rank {r}: agree-kill ok value 5 failed-seen [1, 2] shrink 1 members [0, 3]"
                )),
                "{ctx}"
            );
        }
    }
}

#[test]
fn rebuild_is_refused_naming_the_respawn_issue() {
    let test = "rebuild_is_refused_naming_the_respawn_issue";
    let Some((out, _)) = t_ft(test, "shm", "rebuild") else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(
        lines_with(&stdout, "ferry run --respawn").len(),
        4,
        "{stdout}"
    );
}

#[test]
fn abort_mode_ends_every_rank_naming_the_dead_one_within_a_second() {
    let test = "abort_mode_ends_every_rank_naming_the_dead_one_within_a_second";
    for backend in BACKENDS {
        let Some((out, took)) = t_ft(test, backend, "abort") else {
            return;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{backend}: {stderr}");
        let aborts = lines_with(&stderr, "ferry: ABORT: ");
        assert_eq!(
            aborts.len(),
            3,
            "{backend}: every survivor aborts:\n{stderr}"
        );
        for a in &aborts {
            assert!(
                a.contains("(peer rank 1)") && a.contains("rank 1 failed"),
                "{backend}: {a}"
            );
        }
        assert!(
            stderr.contains("ranks 0,2-3 exited with code 70"),
            "{backend}: {stderr}"
        );
        // Start-up plus 300 ms until the kill, then the detection.
        assert!(
            took < Duration::from_millis(300 + 1000 + 700),
            "{backend}: {took:?}"
        );
    }
}

#[test]
#[ignore = "chaos: many runs per backend (bench/chaos.py), minutes"]
fn chaos_suite() {
    let root = target_dir().join("../..");
    let script = root.join("bench/chaos.py");
    let status = Command::new("python3")
        .arg(script)
        .args(["--runs", "5", "--rounds", "1000", "--target"])
        .arg(target_dir())
        .current_dir(&root)
        .status()
        .expect("python3 bench/chaos.py");
    assert!(status.success(), "chaos runs failed (see the table above)");
}

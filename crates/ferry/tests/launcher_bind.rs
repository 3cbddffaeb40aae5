//! `ferry run` binds the ranks it starts to CPUs (`general.bind`, `--bind`): one CPU each
//! when they do not outnumber the launcher's CPUs, none when they do or when binding is off,
//! and a `--respawn` replacement gets the dead rank's CPU.
//!
//! Every rank is a shell printing its rank and its `Cpus_allowed_list`; expectations come
//! from this test process's own mask (which the launcher inherits), so they hold on any
//! machine's core count.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;
use support::procs::text;
use support::{run_limited, skip_or_fail, target_dir};

/// Prints `RANK INCARNATION CPULIST`.
const SHOW: &str = "echo \"$FERRY_RANK ${FERRY_INCARNATION:-0} \
                    $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)\"";

fn cpu_list(text: &str) -> BTreeSet<usize> {
    let mut cpus = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => {
                cpus.insert(part.parse().unwrap());
            }
        }
    }
    cpus
}

/// The CPUs this test process (and so the launcher it starts) may use.
fn own_cpus() -> BTreeSet<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/self/status");
    cpu_list(line)
}

/// Runs `ferry run -n N ARGS -- sh -c SCRIPT` with `env`; returns every printed (rank,
/// incarnation, CPUs) line.
fn lines(
    n: usize,
    args: &[&str],
    env: &[(&str, &str)],
    script: &str,
) -> Option<Vec<(usize, u32, BTreeSet<usize>)>> {
    let ferry = target_dir().join("ferry");
    if !ferry.exists() {
        skip_or_fail(
            "launcher_bind",
            &format!(
                "{} not built (cargo build --release --bins)",
                ferry.display()
            ),
        );
        return None;
    }
    let mut cmd = Command::new(&ferry);
    cmd.env_remove("FERRY_GENERAL_BIND")
        .env_remove("FERRY_CONFIG")
        .envs(env.iter().copied())
        .args(["run", "-n", &n.to_string()])
        .args(args)
        .args(["--", "sh", "-c", script]);
    let (out, _) = run_limited(&mut cmd, Duration::from_secs(60));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{cmd:?}: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        text(&out.stderr)
    );
    let parsed = stdout
        .lines()
        .map(|line| {
            let mut f = line.splitn(3, ' ');
            match (f.next(), f.next(), f.next()) {
                (Some(r), Some(inc), Some(list)) => {
                    (r.parse().unwrap(), inc.parse().unwrap(), cpu_list(list))
                }
                _ => panic!("unexpected line `{line}` in {stdout}"),
            }
        })
        .collect();
    Some(parsed)
}

/// Each rank's CPUs as its first process printed them, indexed by rank.
fn masks(n: usize, args: &[&str], env: &[(&str, &str)]) -> Option<Vec<BTreeSet<usize>>> {
    let all = lines(n, args, env, SHOW)?;
    assert_eq!(all.len(), n, "one line per rank: {all:?}");
    let mut got = vec![BTreeSet::new(); n];
    for (r, _, m) in all {
        got[r] = m;
    }
    Some(got)
}

/// Each rank has one CPU of the launcher's, and no two ranks share one.
fn assert_bound_apart(got: &[BTreeSet<usize>], own: &BTreeSet<usize>) {
    let mut seen = BTreeSet::new();
    for (r, m) in got.iter().enumerate() {
        assert_eq!(m.len(), 1, "rank {r} is bound to one CPU: {got:?}");
        assert!(m.is_subset(own), "rank {r} within {own:?}: {got:?}");
        assert!(seen.insert(*m.first().unwrap()), "CPUs distinct: {got:?}");
    }
}

/// As many ranks as CPUs (at most 4): one distinct CPU each.
#[test]
fn ranks_that_fit_get_a_cpu_each() {
    let own = own_cpus();
    let n = own.len().min(4);
    let Some(got) = masks(n, &["--bind", "auto"], &[]) else {
        return;
    };
    assert_bound_apart(&got, &own);
}

/// One rank more than CPUs: every rank keeps the launcher's whole mask (as mpirun leaves an
/// oversubscribed job).
#[test]
fn ranks_that_outnumber_the_cpus_stay_unbound() {
    let own = own_cpus();
    let Some(got) = masks(own.len() + 1, &["--bind", "auto"], &[]) else {
        return;
    };
    for (r, m) in got.iter().enumerate() {
        assert_eq!(m, &own, "rank {r} unbound: {got:?}");
    }
}

/// Ranks are unbound by default and with `--bind none` or `FERRY_GENERAL_BIND=none`;
/// `FERRY_GENERAL_BIND=auto` binds; `--bind core` binds even an oversubscribed job, and the
/// flag wins over the variable.
#[test]
fn bind_mode_from_flag_and_configuration() {
    let own = own_cpus();
    if own.len() < 2 {
        // With one CPU bound and unbound masks are the same: nothing to tell apart.
        return skip_or_fail("bind_mode_from_flag_and_configuration", "needs 2 CPUs");
    }
    // Unbound by default; the flag wins over the variable.
    for (args, env) in [
        (&[][..], &[][..]),
        (
            &["--bind", "none"][..],
            &[("FERRY_GENERAL_BIND", "auto")][..],
        ),
        (&[][..], &[("FERRY_GENERAL_BIND", "none")][..]),
    ] {
        let Some(got) = masks(2, args, env) else {
            return;
        };
        for (r, m) in got.iter().enumerate() {
            assert_eq!(m, &own, "{args:?} {env:?}: rank {r} unbound: {got:?}");
        }
    }
    let Some(got) = masks(2, &[], &[("FERRY_GENERAL_BIND", "auto")]) else {
        return;
    };
    assert_bound_apart(&got, &own);
    let n = own.len() + 1;
    let Some(got) = masks(n, &["--bind", "core"], &[("FERRY_GENERAL_BIND", "none")]) else {
        return;
    };
    for (r, m) in got.iter().enumerate() {
        assert_eq!(m.len(), 1, "rank {r} bound: {got:?}");
        assert!(m.is_subset(&own), "rank {r}: {got:?}");
    }
    // The first CPUs' worth of ranks still get distinct ones.
    assert_bound_apart(&got[..own.len()], &own);
}

/// A replacement of a failed rank runs on the CPU the rank had.
#[test]
fn a_respawned_rank_gets_the_dead_ranks_cpu() {
    let own = own_cpus();
    if own.len() < 2 {
        // Two ranks are needed (the survivor outlives the failure) and one CPU cannot bind them.
        return skip_or_fail("a_respawned_rank_gets_the_dead_ranks_cpu", "needs 2 CPUs");
    }
    let n = 2;
    let last = n - 1;
    // The other ranks live until the replacement has run (a rank failing after every other
    // one ended is not replaced); the replacement leaves a file saying so.
    let marker = std::env::temp_dir().join(format!("ferry-bind-respawn-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "{SHOW}; if [ -n \"$FERRY_INCARNATION\" ]; then : > \"$MARK\"; \
         elif [ \"$FERRY_RANK\" = {last} ]; then exit 3; \
         else while [ ! -e \"$MARK\" ]; do sleep 0.02; done; fi"
    );
    let mark = marker.to_string_lossy().into_owned();
    let all = lines(
        n,
        &["--respawn", "1", "--bind", "auto"],
        &[("MARK", &mark)],
        &script,
    );
    let _ = std::fs::remove_file(&marker);
    let Some(all) = all else {
        return;
    };
    let of = |inc: u32| {
        all.iter()
            .find(|(r, i, _)| *r == last && *i == inc)
            .map(|(_, _, m)| m.clone())
            .unwrap_or_else(|| panic!("rank {last} incarnation {inc} printed: {all:?}"))
    };
    let (dead, replacement) = (of(0), of(1));
    assert_eq!(dead.len(), 1, "rank {last} bound: {all:?}");
    assert_eq!(
        replacement, dead,
        "the replacement took the dead rank's CPU: {all:?}"
    );
    let mut first: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for (r, i, m) in &all {
        if *i == 0 {
            first[*r] = m.clone();
        }
    }
    assert_bound_apart(&first, &own);
}

/// The launcher tells the ranks it starts how many CPUs it may use (`FERRY_LOCAL_CPUS`), so
/// that a job started under `taskset` on one CPU counts itself oversubscribed whatever the
/// host has (the ranks' own masks cannot tell: a bound rank's mask is one CPU as well).
#[test]
fn ranks_learn_how_many_cpus_the_launcher_may_use() {
    let ferry = target_dir().join("ferry");
    if !ferry.exists() {
        return skip_or_fail("ranks_learn_how_many_cpus", "ferry not built");
    }
    let own = own_cpus();
    let first = *own.first().expect("this process has a CPU");
    let counts = |taskset: bool| -> Vec<String> {
        let mut cmd = if taskset {
            let mut c = Command::new("taskset");
            c.args(["-c", &first.to_string()]).arg(&ferry);
            c
        } else {
            Command::new(&ferry)
        };
        cmd.env_remove("FERRY_GENERAL_BIND")
            .env_remove("FERRY_CONFIG")
            .env_remove("FERRY_LOCAL_CPUS")
            .args([
                "run",
                "-n",
                "2",
                "--",
                "sh",
                "-c",
                "echo \"$FERRY_LOCAL_CPUS\"",
            ]);
        let (out, _) = run_limited(&mut cmd, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "{cmd:?}: {:?}\n{}",
            out.status,
            text(&out.stderr)
        );
        text(&out.stdout).lines().map(str::to_string).collect()
    };
    let n = own.len().to_string();
    assert_eq!(counts(false), vec![n.clone(), n], "unrestricted launcher");
    if Command::new("taskset").arg("-V").output().is_err() {
        return skip_or_fail("ranks_learn_how_many_cpus", "taskset (util-linux) missing");
    }
    assert_eq!(
        counts(true),
        vec!["1", "1"],
        "launcher under taskset -c {first}"
    );
}

//! Multi-process tests of `ferry run` (R1, T5, T8): real processes started through the
//! launcher binary and the `t_*` example programs.
//!
//! They need `target/<profile>/ferry` and the examples (`cargo build --bins --examples`, as
//! `.ci/run` does before testing); without them each test says so and skips, or fails when
//! `CI=true`. Backend tests
//! run over every backend of tcp, shm and hybrid that the build provides.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use support::pids::{pids_in, wait_dead};
use support::procs::{built_tools, text};
use support::{run_limited, skip_or_fail};

/// Failure propagation with one failing rank: exit status, message, time, no survivors.
fn check_failure(mode: &str, expect_msg: &str, expect_code: i32) {
    let Some((ferry, ex)) = built_tools("launcher", &["t_fail"]) else {
        return;
    };
    // Long enough for every rank to print its pid first, even on a loaded machine.
    let delay_ms = 1000;
    let (out, elapsed) = run_limited(
        Command::new(&ferry)
            // A long grace period: the others must go on SIGTERM alone (a rank that cannot
            // see SIGTERM, e.g. with an inherited signal mask, would hold the job 30 s).
            .args(["run", "-n", "4", "--grace-ms", "30000", "--"])
            .arg(&ex[0])
            .args(["2", mode, &delay_ms.to_string()]),
        Duration::from_secs(50),
    );
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(expect_code), "stderr: {stderr}");
    assert!(stderr.contains(expect_msg), "stderr: {stderr}");
    // The others sleep 60 s: ending them is the launcher's doing. SIGTERM ends them at once;
    // the rest is slack for a loaded 2-core machine.
    assert!(
        elapsed < Duration::from_millis(delay_ms) + Duration::from_secs(6),
        "took {elapsed:?}"
    );
    let pids = pids_in(&stdout);
    assert_eq!(pids.len(), 4, "stdout: {stdout}");
    assert_eq!(wait_dead(&pids, Duration::from_secs(2)), Vec::<u32>::new());
}

#[test]
fn rank_exit_code_ends_the_job() {
    check_failure("exit3", "ferry: rank 2 exited with code 3", 3);
}

#[test]
fn rank_killed_by_signal_ends_the_job() {
    check_failure(
        "kill",
        "ferry: rank 2 was killed by signal 9 (SIGKILL)",
        137,
    );
}

#[test]
fn output_lines_stay_whole() {
    let Some((ferry, ex)) = built_tools("launcher", &["t_print_lines"]) else {
        return;
    };
    let (ranks, lines) = (8usize, 10_000usize);
    let (out, _) = run_limited(
        Command::new(&ferry)
            .args(["run", "-n", &ranks.to_string()])
            .arg(&ex[0])
            .arg(lines.to_string()),
        Duration::from_secs(50),
    );
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with('\n'));
    let pad = "abcdefghijklmnopqrstuvwxyz0123456789";
    let mut next = vec![0usize; ranks];
    let mut count = 0;
    for line in stdout.lines() {
        // Exactly what rank R printed as its line I, nothing more, nothing less.
        let mut words = line.splitn(5, ' ');
        let (Some("rank"), Some(r), Some("line"), Some(i)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            panic!("mangled line `{line}`");
        };
        let r: usize = r
            .parse()
            .unwrap_or_else(|_| panic!("mangled line `{line}`"));
        let i: usize = i
            .parse()
            .unwrap_or_else(|_| panic!("mangled line `{line}`"));
        let tail = &pad[..(i * 7 + r) % pad.len()];
        assert_eq!(line, format!("rank {r} line {i} {tail}"), "mangled line");
        assert_eq!(i, next[r], "rank {r}'s lines out of order or lost");
        next[r] += 1;
        count += 1;
    }
    assert_eq!(count, ranks * lines);
}

#[test]
fn ranks_get_their_environment_and_jobs_never_collide() {
    let Some((ferry, _)) = built_tools("launcher", &[]) else {
        return;
    };
    let script = "echo $FERRY_RANK $FERRY_SIZE $FERRY_JOB_ID $FERRY_RENDEZVOUS $FERRY_SECRET ${FERRY_BACKEND:-unset} $FERRY_LOCAL_SIZE";
    let job = |extra: &[&str]| {
        let (out, _) = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "3"])
                .args(extra)
                .args(["sh", "-c", script])
                .env_remove("FERRY_BACKEND"),
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "stderr: {}", text(&out.stderr));
        let mut lines: Vec<Vec<String>> = text(&out.stdout)
            .lines()
            .map(|l| l.split(' ').map(str::to_string).collect())
            .collect();
        lines.sort();
        lines
    };
    let a = job(&[]);
    let b = job(&["--backend", "tcp", "--job-name", "named-job"]);
    assert_eq!(a.len(), 3);
    for (r, l) in a.iter().enumerate() {
        assert_eq!(l[0], r.to_string());
        assert_eq!(l[1], "3");
        assert_eq!(
            l[2..5],
            a[0][2..5],
            "one job id, rendezvous and secret per job"
        );
        assert_eq!(
            l[5], "unset",
            "FERRY_BACKEND must stay unset without --backend"
        );
        assert_eq!(l[6], "3", "FERRY_LOCAL_SIZE: all ranks on this host");
    }
    assert_eq!(b[0][2], "named-job");
    assert_eq!(b[0][5], "tcp");
    assert_ne!(a[0][3], b[0][3], "rendezvous addresses of two jobs");
    assert_ne!(a[0][4], b[0][4], "secrets of two jobs");
    assert!(a[0][4].len() >= 32, "secret too short: {}", a[0][4]);
}

#[test]
fn missing_program_is_reported() {
    let Some((ferry, _)) = built_tools("launcher", &[]) else {
        return;
    };
    // (Elastic runs with --spares are tested in tests/elastic.rs.)
    let (out, _) = run_limited(
        Command::new(&ferry).args(["run", "-n", "2", "/nonexistent/program"]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("/nonexistent/program"));
}

/// The single backend has no peers: several processes of it would each print the whole job's
/// output as rank 0, so the launcher refuses such a job before starting anything, whether the
/// backend comes from `--backend` or from an inherited `FERRY_BACKEND`.
#[test]
fn single_backend_with_several_processes_is_refused() {
    let Some((ferry, _)) = built_tools("launcher", &[]) else {
        return;
    };
    let cases: [(&[&str], Option<&str>); 3] = [
        (&["-n", "2", "--backend", "single"], None),
        (&["-n", "3"], Some("single")),
        (&["-n", "1", "--spares", "1", "--backend", "single"], None),
    ];
    for (opts, inherited) in cases {
        let mut cmd = Command::new(&ferry);
        cmd.arg("run").args(opts).args(["--", "echo", "started"]);
        match inherited {
            Some(b) => cmd.env("FERRY_BACKEND", b),
            None => cmd.env_remove("FERRY_BACKEND"),
        };
        let (out, _) = run_limited(&mut cmd, Duration::from_secs(20));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{opts:?}: {stderr}");
        assert!(stderr.contains("single backend"), "{opts:?}: {stderr}");
        assert_eq!(text(&out.stdout), "", "{opts:?}: a rank was started");
    }
    let (out, _) = run_limited(
        Command::new(&ferry).args(["run", "-n", "1", "--backend", "single", "echo", "started"]),
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "started\n");
}

/// `--backend mpi` hands the job to MPI's launcher (MPI ranks take rank and size from MPI, so
/// ranks the launcher started itself would each be alone): a stand-in launcher (FERRY_MPIRUN)
/// shows the command line and environment it gets, options mpirun cannot carry out are refused
/// before anything starts, and with a real `mpirun` and examples built with the mpi backend
/// vsum prints what it prints on tcp.
#[test]
fn mpi_backend_is_handed_to_mpirun() {
    let Some((ferry, ex)) = built_tools("launcher", &["vsum"]) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ferry-mpirun-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("fake-mpirun");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"backend=$FERRY_BACKEND job=$FERRY_JOB_ID args=$*\"\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (out, _) = run_limited(
        Command::new(&ferry)
            .args(["run", "-n", "3", "--backend", "mpi", "--job-name", "mpijob"])
            .args(["prog", "-s", "1", ":", "-n", "2", "other"])
            .env("FERRY_MPIRUN", format!("{} --opt", fake.display())),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "backend=mpi job=mpijob args=--opt -n 3 prog -s 1 : -n 2 other\n"
    );
    for opt in [&["--spares", "1"][..], &["--keep-going"], &["--tag-output"]] {
        let (out, _) = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "2", "--backend", "mpi"])
                .args(opt)
                .arg("prog")
                .env("FERRY_MPIRUN", &fake),
            Duration::from_secs(20),
        );
        assert_eq!(out.status.code(), Some(2), "{opt:?}");
        assert!(text(&out.stderr).contains(opt[0]), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "", "{opt:?}: mpirun was started");
    }
    let (out, _) = run_limited(
        Command::new(&ferry)
            .args(["run", "-n", "2", "--backend", "mpi", "prog"])
            .env("FERRY_MPIRUN", dir.join("no-such-mpirun")),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("no-such-mpirun"));
    let _ = std::fs::remove_dir_all(&dir);

    // The real thing, where MPI is installed.
    let has_mpirun = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_mpirun {
        skip_or_fail("mpi_backend_is_handed_to_mpirun", "no mpirun on PATH");
        return;
    }
    let run = |backend: &str| {
        run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "3", "--backend", backend])
                .arg(&ex[0])
                .arg("100")
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
            Duration::from_secs(120),
        )
        .0
    };
    let mpi = run("mpi");
    if text(&mpi.stderr).contains("not available in this build") {
        skip_or_fail(
            "mpi_backend_is_handed_to_mpirun",
            "examples built without the mpi backend (--features ferry/mpi)",
        );
        return;
    }
    let tcp = run("tcp");
    assert!(mpi.status.success(), "{}", text(&mpi.stderr));
    assert!(tcp.status.success(), "{}", text(&tcp.stderr));
    let sorted = |b: &[u8]| {
        let mut l: Vec<String> = text(b).lines().map(str::to_string).collect();
        l.sort();
        l
    };
    assert_eq!(sorted(&mpi.stdout), sorted(&tcp.stdout));
    assert_eq!(sorted(&mpi.stdout).len(), 7, "{}", text(&mpi.stdout));
}

/// FERRY_LOG output of ranks reaches the user through the launcher's pipes: plain text, no
/// terminal colour codes (which would land in log files as escape sequences), and stdout
/// unchanged by it.
#[test]
fn rank_logs_are_plain_text_on_stderr() {
    let Some((ferry, ex)) = built_tools("launcher", &["vsum"]) else {
        return;
    };
    let run = |log: Option<&str>| {
        let mut c = Command::new(&ferry);
        c.args(["run", "-n", "2", "--backend", "tcp"])
            .arg(&ex[0])
            .arg("10");
        match log {
            Some(l) => c.env("FERRY_LOG", l),
            None => c.env_remove("FERRY_LOG"),
        };
        run_limited(&mut c, Duration::from_secs(60)).0
    };
    let logged = run(Some("debug"));
    let plain = run(None);
    assert!(logged.status.success(), "{}", text(&logged.stderr));
    let err = text(&logged.stderr);
    assert!(err.contains("DEBUG"), "no log lines: {err}");
    assert!(!err.contains('\u{1b}'), "escape codes in the log: {err:?}");
    let sorted = |b: &[u8]| {
        let mut l: Vec<String> = text(b).lines().map(str::to_string).collect();
        l.sort();
        l
    };
    assert_eq!(sorted(&logged.stdout), sorted(&plain.stdout));
}

#[test]
fn config_errors_name_the_key() {
    let Some((ferry, ex)) = built_tools("launcher", &["t_alltoall"]) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ferry-launcher-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (content, key) in [
        ("[tcp]\nconection_cap = 3\n", "conection_cap"),
        ("[general]\ntimeout_ms = \"soon\"\n", "timeout_ms"),
    ] {
        let file = dir.join("bad.toml");
        std::fs::write(&file, content).unwrap();
        let (out, _) = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "2"])
                .arg(&ex[0])
                .env("FERRY_CONFIG", &file),
            Duration::from_secs(30),
        );
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "bad config accepted: {content}");
        assert!(stderr.contains(key), "`{key}` not named in: {stderr}");
    }
    let (out, _) = run_limited(
        Command::new(&ferry)
            .args(["run", "-n", "2"])
            .arg(&ex[0])
            .env("FERRY_GENERAL_TIMEOUT_MS", "never"),
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("timeout_ms"),
        "{}",
        text(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The backends of tcp, shm and hybrid this build provides. A backend that exists but fails
/// its 2-rank probe is kept, so that the tests below fail loudly instead of skipping it.
fn available_backends(ferry: &PathBuf, alltoall: &PathBuf) -> Vec<&'static str> {
    let mut ok = Vec::new();
    for b in ["tcp", "shm", "hybrid"] {
        let (out, _) = run_limited(
            Command::new(ferry)
                .args(["run", "-n", "2", "--backend", b])
                .arg(alltoall)
                .args(["2", "10"]),
            Duration::from_secs(60),
        );
        let stderr = text(&out.stderr);
        if !out.status.success() && stderr.contains("is not available in this build") {
            eprintln!("skipping backend {b}: not in this build");
        } else {
            ok.push(b);
        }
    }
    ok
}

#[test]
fn alltoall_over_every_backend_with_few_file_descriptors() {
    let Some((ferry, ex)) = built_tools("launcher", &["t_alltoall"]) else {
        return;
    };
    for b in available_backends(&ferry, &ex[0]) {
        // 16 ranks, 64 descriptors per process (launcher included).
        let line = format!(
            "ulimit -n 64; exec '{}' run -n 16 --backend {b} '{}' 5 2000",
            ferry.display(),
            ex[0].display()
        );
        let (out, elapsed) = run_limited(
            Command::new("sh").args(["-c", &line]),
            Duration::from_secs(90),
        );
        assert!(
            out.status.success(),
            "{b}, 16 ranks, ulimit -n 64: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("alltoall ok: 16 ranks, 5 rounds"),
            "{}",
            text(&out.stdout)
        );
        eprintln!("{b}: 16 ranks all-to-all under ulimit -n 64 in {elapsed:?}");
        if b == "tcp" {
            // At most 2 open connections per rank: peers are served by evicting and
            // reconnecting (000 §4.3), still under 64 descriptors.
            let line = format!(
                "ulimit -n 64; FERRY_TCP_CONNECTION_CAP=2 exec '{}' run -n 16 --backend tcp '{}' 5 5000",
                ferry.display(),
                ex[0].display()
            );
            let (out, _) = run_limited(
                Command::new("sh").args(["-c", &line]),
                Duration::from_secs(90),
            );
            assert!(
                out.status.success(),
                "tcp with connection cap 2: {}",
                text(&out.stderr)
            );
            assert!(text(&out.stdout).contains("alltoall ok: 16 ranks"));
        }
    }
}

/// Whether an error line names rank `k` as the failed peer.
fn names_rank(line: &str, k: usize) -> bool {
    if line.contains(&format!("peer rank {k}")) || line.contains(&format!("rank {k} ")) {
        return true;
    }
    // Lists of pending ranks: "ranks [1]", "ranks [0, 1]".
    line.split("ranks [").skip(1).any(|rest| {
        rest.split(']')
            .next()
            .unwrap_or("")
            .split(',')
            .any(|r| r.trim() == k.to_string())
    })
}

#[test]
fn killed_rank_is_named_by_the_others() {
    let Some((ferry, ex)) = built_tools("launcher", &["t_alltoall"]) else {
        return;
    };
    let timeout_ms = 3000u64;
    for b in available_backends(&ferry, &ex[0]) {
        let (out, elapsed) = run_limited(
            Command::new(&ferry)
                .args(["run", "-n", "4", "--keep-going", "--backend", b])
                .arg(&ex[0])
                .args(["40", "1000", "1"])
                .env("FERRY_GENERAL_TIMEOUT_MS", timeout_ms.to_string()),
            Duration::from_secs(60),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(137), "{b}: {stderr}");
        assert!(
            stderr.contains("ferry: rank 1 was killed by signal 9 (SIGKILL)"),
            "{b}: {stderr}"
        );
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("t_alltoall: error"))
            .collect();
        assert_eq!(errors.len(), 3, "{b}: every survivor reports: {stderr}");
        for e in &errors {
            assert!(names_rank(e, 1), "{b}: error does not name rank 1: {e}");
        }
        // Detection within the configured timeout (plus start-up and load slack).
        assert!(
            elapsed < Duration::from_millis(timeout_ms) + Duration::from_secs(15),
            "{b}: took {elapsed:?}"
        );
    }
}

#[test]
fn hosts_are_reached_through_the_remote_command() {
    let Some((ferry, _)) = built_tools("launcher", &[]) else {
        return;
    };
    // A "remote" command that runs the rank locally through a second shell, as ssh would:
    // {qcmd} must survive that extra level of quoting, arguments with spaces included.
    // The secret reaches remote ranks through stdin: it must arrive whole (32 hex digits).
    let script = "echo rank=$FERRY_RANK node=$FERRY_NODE backend=$FERRY_BACKEND via=$VIA secret=${#FERRY_SECRET} local=$FERRY_LOCAL_SIZE arg=\"$1\"; [ $FERRY_RANK != 3 ] || exit 5";
    let run = |extra: &[&str]| {
        let (out, _) = run_limited(
            Command::new(&ferry)
                // --keep-going: rank 3's failure must not cut the others' lines short.
                .args(["run", "-n", "4", "--keep-going", "--hosts", "nodeA,nodeB"])
                .args(["--remote-cmd", "env VIA={host} sh -c {qcmd}"])
                .args(extra)
                .args(["--", "sh", "-c", script, "sh", "two words"])
                .env_remove("FERRY_BACKEND"),
            Duration::from_secs(30),
        );
        let mut lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
        lines.sort();
        (out, lines)
    };
    let (out, lines) = run(&[]);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ferry: rank 3 exited with code 5 on host nodeB"),
        "{}",
        text(&out.stderr)
    );
    let want = |placement: [&str; 4]| -> Vec<String> {
        placement
            .iter()
            .enumerate()
            .map(|(r, h)| {
                format!("rank={r} node={h} backend=hybrid via={h} secret=32 local=2 arg=two words")
            })
            .collect()
    };
    assert_eq!(lines, want(["nodeA", "nodeB", "nodeA", "nodeB"]));
    let (_, lines) = run(&["--block"]);
    assert_eq!(lines, want(["nodeA", "nodeA", "nodeB", "nodeB"]));
}

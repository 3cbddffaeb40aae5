//! `ferry run`: start the ranks, serve their rendezvous store, forward their output, watch
//! them, and end the job when a rank fails or the launcher is interrupted (R1, T8).

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_core::tcp_store::StoreServer;
use ferry_core::{BackendKind, Store};

use crate::ctl::{Registration, STATUS_KEY};
use crate::forward::{self, Output, Pipe, Tracker};
use crate::{remote, signals, RunArgs};

/// Poll interval while ending ranks after a failed start.
const TICK: Duration = Duration::from_millis(5);
/// Longest sleep of the main loop without a signal (a safety net: SIGCHLD wakes it anyway).
const IDLE: Duration = Duration::from_millis(500);
/// How long the launcher waits for the ranks' last output once every rank is gone (a rank's
/// own child may hold the pipes open).
const DRAIN: Duration = Duration::from_secs(1);

/// A reason `ferry run` could not run the job, with the exit status to report.
#[derive(Debug)]
pub struct Fatal {
    msg: String,
    code: u8,
}

impl Fatal {
    fn usage(msg: impl Into<String>) -> Fatal {
        Fatal {
            msg: msg.into(),
            code: 2,
        }
    }

    fn start(msg: impl Into<String>) -> Fatal {
        Fatal {
            msg: msg.into(),
            code: 127,
        }
    }

    /// Exit status of `ferry` for this error: 2 for usage errors, 127 when a rank could not be
    /// started, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        self.code
    }
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

/// One started rank.
struct Rank {
    child: Child,
    pid: i32,
    host: Option<String>,
    status: Option<ExitStatus>,
}

impl Rank {
    fn signal(&self, sig: i32) {
        if self.status.is_some() {
            // Reaped: the pid may belong to someone else by now.
            return;
        }
        // SAFETY: plain kill(2) calls on the rank's process group (its children too), or on
        // the rank alone if it left that group; errors (already gone) are harmless.
        unsafe {
            if libc::kill(-self.pid, sig) != 0 {
                libc::kill(self.pid, sig);
            }
        }
    }

    fn where_(&self) -> String {
        match &self.host {
            Some(h) => format!(" on host {h}"),
            None => String::new(),
        }
    }
}

/// How a rank ended, as told on stderr, and the exit status `ferry run` reports for it.
fn describe(rank: usize, status: ExitStatus) -> Option<(String, u8)> {
    if let Some(code) = status.code() {
        if code == 0 {
            return None;
        }
        return Some((
            format!("rank {rank} exited with code {code}"),
            (code & 0xff) as u8,
        ));
    }
    let sig = status.signal().unwrap_or(0);
    let core = if status.core_dumped() {
        ", core dumped"
    } else {
        ""
    };
    Some((
        format!(
            "rank {rank} was killed by signal {sig} ({}{core})",
            signals::name(sig)
        ),
        (128 + sig).clamp(1, 255) as u8,
    ))
}

fn random_hex(bytes: usize) -> Result<String, Fatal> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| Fatal {
            msg: format!("cannot read /dev/urandom for the job secret: {e}"),
            code: 1,
        })?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn check_job_name(name: &str) -> Result<(), Fatal> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Fatal::usage(format!(
            "--job-name `{name}`: use 1 to 64 letters, digits, '-', '_' or '.' (it names \
             shared-memory segments)"
        )))
    }
}

/// The soft limit on open files at start, restored in the ranks (the launcher raises its own
/// to the hard limit, since it holds two pipes and a store connection per rank).
fn raise_nofile() -> Option<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if lim.rlim_cur < lim.rlim_max && libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            return None;
        }
    }
    Some(lim)
}

/// Where the rendezvous store listens and the address ranks are told.
fn rendezvous_bind(args: &RunArgs, remote: bool) -> Result<(String, Option<String>), Fatal> {
    match (&args.rendezvous_addr, remote) {
        (Some(a), _) => {
            let bind = if a.parse::<std::net::IpAddr>().is_ok() {
                if a.contains(':') {
                    format!("[{a}]:0")
                } else {
                    format!("{a}:0")
                }
            } else {
                a.clone()
            };
            let ip_part = bind.rsplit_once(':').map(|(h, _)| h).unwrap_or(&bind);
            let unspecified = ip_part
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .map(|ip| ip.is_unspecified())
                .unwrap_or(false);
            let advertise = if unspecified {
                Some(ferry_core::launch::hostname())
            } else {
                Some(ip_part.to_string())
            };
            Ok((bind, advertise))
        }
        (None, true) => Ok((
            "0.0.0.0:0".to_string(),
            Some(ferry_core::launch::hostname()),
        )),
        (None, false) => Ok(("127.0.0.1:0".to_string(), None)),
    }
}

/// Runs the job; returns the exit status of `ferry run`.
pub fn run(args: RunArgs) -> Result<u8, Fatal> {
    let n = args.ranks;
    if n == 0 {
        return Err(Fatal::usage("-n must be at least 1"));
    }
    // Elastic jobs (F7): spares are started with the job and connected like every rank, but
    // the application world is the first `n` (FERRY_WORLD_SIZE); they join at a resize point.
    let spares = args.spares;
    let total = n
        .checked_add(spares)
        .ok_or_else(|| Fatal::usage("too many --spares"))?;
    let backend = match &args.backend {
        Some(b) => Some(b.parse::<BackendKind>().map_err(|_| {
            let known: Vec<&str> = BackendKind::ALL.iter().map(|k| k.name()).collect();
            Fatal::usage(format!(
                "--backend `{b}` is not a backend (known: {})",
                known.join(", ")
            ))
        })?),
        None => None,
    };
    if let Some(name) = &args.job_name {
        check_job_name(name)?;
    }
    let mut hosts = args.hosts.clone();
    if let Some(f) = &args.hostfile {
        hosts = remote::read_hostfile(f).map_err(Fatal::usage)?;
    }
    hosts.retain(|h| !h.trim().is_empty());
    remote::check_hosts(&hosts).map_err(Fatal::usage)?;
    let placement = remote::place(total, &hosts, args.block);
    let is_remote = !placement.is_empty();

    let secret = random_hex(16)?;
    let job_id = match &args.job_name {
        Some(name) => name.clone(),
        None => format!("f{}-{}", std::process::id(), random_hex(4)?),
    };

    // Before the store server and the output threads exist, so that they inherit the mask.
    signals::block().map_err(|e| Fatal {
        msg: format!("cannot block signals: {e}"),
        code: 1,
    })?;
    let nofile = raise_nofile();

    let (bind, advertise) = rendezvous_bind(&args, is_remote)?;
    let server = StoreServer::bind(&bind, &secret).map_err(|e| Fatal {
        msg: format!("cannot serve the rendezvous store: {e}"),
        code: 1,
    })?;
    let port = server.local_addr().port();
    let rendezvous = match advertise {
        Some(host) if host.contains(':') && !host.starts_with('[') => format!("[{host}]:{port}"),
        Some(host) => format!("{host}:{port}"),
        None => server.local_addr().to_string(),
    };

    // Named jobs can be inspected with `ferry ctl NAME status`.
    let _registration = match &args.job_name {
        Some(name) => {
            let mut local = server.local_addr();
            if local.ip().is_unspecified() {
                local.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            Some(
                Registration::create(name, &local.to_string(), &secret)
                    .map_err(|msg| Fatal { msg, code: 1 })?,
            )
        }
        None => None,
    };

    // Backend default for ranks on several hosts: shared memory alone cannot serve them.
    let distinct_hosts = {
        let mut h = placement.clone();
        h.sort();
        h.dedup();
        h.len()
    };
    let backend_env: Option<String> = match backend {
        Some(b) => Some(b.name().to_string()),
        None if distinct_hosts > 1 && std::env::var_os("FERRY_BACKEND").is_none() => {
            Some("hybrid".to_string())
        }
        None => None,
    };

    let output = Arc::new(Output::default());
    let tracker = Arc::new(Tracker::default());
    let mut ranks: Vec<Rank> = Vec::with_capacity(total);
    // `ferry ctl NAME remove` appends to this key; resize points read it (it must exist so
    // that readers need not wait for it).
    server
        .store()
        .set("elastic/remove", b"")
        .map_err(|e| Fatal {
            msg: format!("cannot prepare the job's store: {e}"),
            code: 1,
        })?;
    let launcher_pid = std::process::id() as i32;
    let shm_segment = shm_handoff(backend_env.as_deref(), total, is_remote);

    for r in 0..total {
        let mut env: Vec<(String, String)> = vec![
            ("FERRY_RANK".into(), r.to_string()),
            ("FERRY_SIZE".into(), total.to_string()),
            ("FERRY_JOB_ID".into(), job_id.clone()),
            ("FERRY_SECRET".into(), secret.clone()),
            ("FERRY_RENDEZVOUS".into(), rendezvous.clone()),
        ];
        if let Some(b) = &backend_env {
            env.push(("FERRY_BACKEND".into(), b.clone()));
        }
        if spares > 0 {
            env.push(("FERRY_WORLD_SIZE".into(), n.to_string()));
        }
        if let Some((_, var)) = &shm_segment {
            env.push(var.clone());
        }
        let host = placement.get(r).cloned();
        // How many ranks share this rank's host: waiting ranks yield their core when the host
        // is oversubscribed (general.yield_when_idle = auto).
        let local_size = match &host {
            None => total,
            Some(h) => placement.iter().filter(|p| *p == h).count(),
        };
        env.push(("FERRY_LOCAL_SIZE".into(), local_size.to_string()));
        let mut cmd = match &host {
            None => {
                let mut c = Command::new(&args.command[0]);
                c.args(&args.command[1..]);
                c.envs(env.iter().map(|(k, v)| (k, v)));
                c
            }
            Some(h) => {
                env.push(("FERRY_NODE".into(), h.clone()));
                // Remote tools do not carry our environment: pass on the user's FERRY_ and
                // LAIK_ settings explicitly, ours last so they win.
                let mut all: Vec<(String, String)> = std::env::vars()
                    .filter(|(k, _)| {
                        (k.starts_with("FERRY_") || k.starts_with("LAIK_") || k == "RUST_BACKTRACE")
                            && !env.iter().any(|(e, _)| e == k)
                    })
                    .collect();
                // The secret travels through the rank's stdin, not its arguments, which any
                // user of the remote host could read in the process list (T8).
                all.extend(env.iter().filter(|(k, _)| k != "FERRY_SECRET").cloned());
                let mut command = args.command.clone();
                if command[0].contains('/') {
                    if let Ok(abs) = std::fs::canonicalize(&command[0]) {
                        command[0] = abs.to_string_lossy().into_owned();
                    }
                }
                let line = remote::remote_command(
                    &args.remote_cmd,
                    h,
                    &all,
                    &command,
                    Some("FERRY_SECRET"),
                )
                .map_err(Fatal::usage)?;
                let mut c = Command::new("sh");
                c.arg("-c").arg(format!("exec {line}"));
                // The local wrapper (ip netns exec, ...) inherits these too, except the
                // secret, which only the rank's stdin carries.
                c.envs(
                    env.iter()
                        .filter(|(k, _)| k != "FERRY_SECRET")
                        .map(|(k, v)| (k, v)),
                );
                c.env_remove("FERRY_SECRET");
                c
            }
        };
        // Remote ranks read the secret from stdin, then see end of file like local ones.
        cmd.stdin(if host.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
        let restore = nofile;
        // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
        // system calls (prctl, getppid, setrlimit, sigprocmask).
        unsafe {
            cmd.pre_exec(move || {
                // Die with the launcher, even if it is SIGKILLed (no orphans).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != launcher_pid {
                    // The launcher died before prctl took effect.
                    return Err(std::io::Error::other("launcher gone"));
                }
                if let Some(lim) = restore {
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
                // The launcher blocks the signals it waits for; the rank must not inherit
                // that mask (SIGTERM would not end it, Ctrl-Z would not stop it).
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let msg = format!("cannot start rank {r} (`{}`): {e}", args.command[0]);
                end_all(&mut ranks, args.grace_ms);
                tracker.wait(DRAIN);
                return Err(Fatal::start(msg));
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            // A rank that died at once makes this fail (EPIPE); its exit status tells why.
            let _ = stdin.write_all(format!("{secret}\n").as_bytes());
        }
        let pid = child.id() as i32;
        let pipes = [
            child.stdout.take().map(Pipe::Out),
            child.stderr.take().map(Pipe::Err),
        ];
        ranks.push(Rank {
            child,
            pid,
            host,
            status: None,
        });
        for p in pipes.into_iter().flatten() {
            let tag = args.tag_output.then(|| format!("[{r}] "));
            if let Err(e) = forward::spawn(p, output.clone(), tracker.clone(), r, tag) {
                end_all(&mut ranks, args.grace_ms);
                return Err(Fatal {
                    msg: format!("cannot start output thread for rank {r}: {e}"),
                    code: 1,
                });
            }
        }
    }

    // Every rank holds the segment now; the launcher's descriptor would only keep it alive.
    drop(shm_segment);
    let code = supervise(&mut ranks, &args, &output, &*server.store());
    if !tracker.wait(DRAIN) {
        output.message(
            "ferry: some output may be missing: a rank's child process still holds its pipes",
        );
    }
    for line in &code.messages {
        output.message(&format!("ferry: {line}"));
    }
    drop(server);
    Ok(code.exit)
}

/// The segment of a local shared-memory job, made before any rank starts and inherited by the
/// ranks (its descriptor number in `FERRY_SEGMENT_FD`), so that it never has a name in /dev/shm
/// that a launcher killed during start-up or a start-up that times out could leave behind
/// (S4). None where the ranks do not run shm on this host, or where it cannot be made (the
/// ranks then meet through a name, as when started by hand, and report any error themselves).
fn shm_handoff(
    backend_env: Option<&str>,
    total: usize,
    is_remote: bool,
) -> Option<(std::os::fd::OwnedFd, (String, String))> {
    let inherited = std::env::var("FERRY_BACKEND").ok();
    let backend = backend_env.or(inherited.as_deref());
    let shm = match backend {
        Some(b) => b.parse::<BackendKind>().ok() == Some(BackendKind::Shm),
        None => total > 1,
    };
    if is_remote || !shm {
        return None;
    }
    let config = ferry_core::Config::from_env().ok()?;
    match ferry_shm::create_job_segment(&config, total) {
        Ok(fd) => {
            use std::os::fd::AsRawFd;
            let var = (
                ferry_shm::SHM_FD_VAR.to_string(),
                fd.as_raw_fd().to_string(),
            );
            Some((fd, var))
        }
        Err(e) => {
            tracing::debug!("launcher: no shm segment for the ranks: {e}");
            None
        }
    }
}

struct Outcome {
    exit: u8,
    messages: Vec<String>,
}

/// How long the launcher keeps collecting failures after the first one before it decides
/// which rank to blame and ends the job. Ranks that die together are seen in an order that
/// says little about which went first: a SIGKILLed rank becomes reapable only after its
/// sockets closed, so its peers may report its death and exit before it does.
const SETTLE: Duration = Duration::from_millis(150);

/// A failed rank, as seen by the supervisor.
struct Failure {
    signaled: bool,
    text: String,
    code: u8,
}

/// Watches the ranks until all are gone; ends the job after the first failure (unless
/// --keep-going) or on SIGINT/SIGTERM/SIGHUP.
fn supervise(ranks: &mut [Rank], args: &RunArgs, output: &Output, store: &dyn Store) -> Outcome {
    let local_host = ferry_core::launch::hostname();
    let mut states: Vec<String> = vec!["running".to_string(); ranks.len()];
    publish_status(store, ranks, &states, &local_host);
    let grace = Duration::from_millis(args.grace_ms);
    let mut messages = Vec::new();
    let mut exit: Option<u8> = None;
    // Failures seen before the blame was decided, and until when to keep collecting them.
    let mut pending: Vec<Failure> = Vec::new();
    let mut settle_until: Option<Instant> = None;
    // When the job is being ended: since when, and whether SIGKILL went out already.
    let mut ending: Option<(Instant, bool)> = None;
    let mut stop: Option<i32> = None;
    let mut ended_by_us = 0usize;
    loop {
        let mut running = 0;
        let mut changed = false;
        for (r, rank) in ranks.iter_mut().enumerate() {
            if rank.status.is_some() {
                continue;
            }
            match rank.child.try_wait() {
                Ok(Some(status)) => {
                    rank.status = Some(status);
                    changed = true;
                    let failure = describe(r, status);
                    states[r] = match &failure {
                        None => "done".to_string(),
                        Some(_) if ending.is_some() => "ended by ferry".to_string(),
                        Some((text, _)) => text.replacen(&format!("rank {r} "), "", 1),
                    };
                    if ending.is_some() {
                        ended_by_us += 1;
                        continue;
                    }
                    if let Some((text, code)) = failure {
                        let f = Failure {
                            signaled: status.signal().is_some(),
                            text: text + &rank.where_(),
                            code,
                        };
                        if exit.is_some() {
                            messages.push(f.text); // blame already decided (--keep-going)
                        } else {
                            settle_until.get_or_insert(Instant::now() + SETTLE);
                            pending.push(f);
                        }
                    }
                }
                Ok(None) => running += 1,
                Err(e) => {
                    // Cannot happen for our own child; treat as failed rather than loop forever.
                    messages.push(format!("rank {r}: cannot wait for its process: {e}"));
                    exit.get_or_insert(1);
                    rank.status = Some(ExitStatus::from_raw(1 << 8));
                }
            }
        }
        if changed {
            publish_status(store, ranks, &states, &local_host);
        }
        let settled = settle_until.is_some_and(|t| running == 0 || Instant::now() >= t);
        if settled && exit.is_none() {
            // A rank killed by a signal is the likelier cause (its peers typically exit with
            // an error about it): it is named first and gives the exit status.
            pending.sort_by_key(|f| !f.signaled);
            exit = pending.first().map(|f| f.code);
            messages.extend(pending.drain(..).map(|f| f.text));
        }
        if running == 0 {
            break;
        }
        if let Some(sig) = stop.take() {
            if ending.is_none() {
                output.message(&format!(
                    "ferry: received {}, ending {running} rank{}",
                    signals::name(sig),
                    if running == 1 { "" } else { "s" }
                ));
                // Failures still settling are reported; the interrupt gives the status.
                messages.extend(pending.drain(..).map(|f| f.text));
                exit.get_or_insert((128 + sig).clamp(1, 255) as u8);
                ending = Some((Instant::now(), false));
                ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
            } else if let Some((_, killed)) = ending.as_mut() {
                // A second interrupt: no more patience.
                *killed = true;
                ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
            }
        }
        if ending.is_none() && exit.is_some() && !args.keep_going {
            ending = Some((Instant::now(), false));
            ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
        }
        let mut sleep = IDLE;
        if exit.is_none() {
            if let Some(t) = settle_until {
                sleep = sleep.min(t.saturating_duration_since(Instant::now()));
            }
        }
        if let Some((since, killed)) = ending.as_mut() {
            let waited = since.elapsed();
            if !*killed && waited >= grace {
                *killed = true;
                ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
            } else if !*killed {
                sleep = sleep.min(grace - waited);
            }
        }
        match signals::wait(sleep) {
            signals::Event::Stop(sig) => stop = Some(sig),
            signals::Event::Suspend => {
                ranks.iter().for_each(|r| r.signal(libc::SIGTSTP));
                // SIGTSTP is blocked here, so stop ourselves the way the shell expects.
                // SAFETY: kill(2) on our own pid.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGSTOP);
                }
            }
            signals::Event::Resume => ranks.iter().for_each(|r| r.signal(libc::SIGCONT)),
            signals::Event::Child | signals::Event::Timeout => {}
        }
    }
    if ended_by_us > 0 {
        messages.push(format!(
            "ended {ended_by_us} remaining rank{}",
            if ended_by_us == 1 { "" } else { "s" }
        ));
    }
    Outcome {
        exit: exit.unwrap_or(0),
        messages,
    }
}

/// Publishes the process table for `ferry ctl NAME status`: one line per process,
/// `L<id>:<host>:<pid> rank <r> <state>`.
fn publish_status(store: &dyn Store, ranks: &[Rank], states: &[String], local_host: &str) {
    let mut table = String::new();
    for (r, (rank, state)) in ranks.iter().zip(states).enumerate() {
        let host = rank.host.as_deref().unwrap_or(local_host);
        table.push_str(&format!("L{r}:{host}:{} rank {r} {state}\n", rank.pid));
    }
    if let Err(e) = store.set(STATUS_KEY, table.as_bytes()) {
        tracing::warn!("cannot publish the job status: {e}");
    }
}

/// Ends the ranks started so far (start-up failed part way) and reaps them.
fn end_all(ranks: &mut [Rank], grace_ms: u64) {
    ranks.iter().for_each(|r| r.signal(libc::SIGTERM));
    let deadline = Instant::now() + Duration::from_millis(grace_ms);
    let mut killed = false;
    loop {
        let mut running = 0;
        for rank in ranks.iter_mut().filter(|r| r.status.is_none()) {
            match rank.child.try_wait() {
                Ok(Some(s)) => rank.status = Some(s),
                Ok(None) => running += 1,
                Err(_) => rank.status = Some(ExitStatus::from_raw(1 << 8)),
            }
        }
        if running == 0 {
            return;
        }
        if !killed && Instant::now() >= deadline {
            killed = true;
            ranks.iter().for_each(|r| r.signal(libc::SIGKILL));
        }
        std::thread::sleep(TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_exit_codes_and_signals() {
        assert!(describe(0, ExitStatus::from_raw(0)).is_none());
        let (t, c) = describe(2, ExitStatus::from_raw(3 << 8)).unwrap();
        assert_eq!((t.as_str(), c), ("rank 2 exited with code 3", 3));
        let (t, c) = describe(1, ExitStatus::from_raw(9)).unwrap();
        assert_eq!(
            (t.as_str(), c),
            ("rank 1 was killed by signal 9 (SIGKILL)", 137)
        );
    }

    #[test]
    fn job_names_and_secrets() {
        assert!(check_job_name("jac2d-run_1.a").is_ok());
        assert!(check_job_name("a/b").is_err());
        assert!(check_job_name("").is_err());
        let a = random_hex(16).unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, random_hex(16).unwrap());
    }
}

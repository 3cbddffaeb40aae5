//! `ferry run`: start the ranks, serve their rendezvous store, forward their output, watch
//! them, and end the job when a rank fails or the launcher is interrupted (R1, T8).

use std::fmt;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::Arc;

use crate::store_server::StoreServer;
use ferry_core::{BackendKind, Store};

use crate::collapse::Collapse;
use crate::ctl::{NameLock, Registration};
use crate::forward::{Output, Tracker};
use crate::guard::{self, Guardian};
use crate::spawn::Spawner;
use crate::supervise::{end_all, finish, supervise, Launch, Respawner};
use crate::{limits, mpmd, remote, signals, RunArgs};
use ferry_core::respawn::RESPAWN_VAR;

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
pub(crate) struct Rank {
    pub(crate) child: Child,
    pub(crate) pid: i32,
    pub(crate) host: Option<String>,
    /// How it ended, once seen. The rank is not reaped before the job ends (see `guard`).
    pub(crate) status: Option<ExitStatus>,
    pub(crate) reaped: bool,
    /// Replacements of this rank before this process (`--respawn`): 0 for the job's own.
    pub(crate) incarnation: u32,
}

impl Rank {
    /// Sends `sig` to the rank's process group: the rank and whatever it started.
    pub(crate) fn signal(&self, sig: i32) {
        if self.reaped {
            // The pid may belong to someone else by now.
            return;
        }
        // SAFETY: plain kill(2) calls on the rank's process group (its children too), or on
        // the rank alone if it left that group; errors (already gone) are harmless. The rank
        // is unreaped, so neither id can have been reused.
        unsafe {
            if libc::kill(-self.pid, sig) != 0 {
                libc::kill(self.pid, sig);
            }
        }
    }

    pub(crate) fn where_(&self) -> String {
        match &self.host {
            Some(h) => format!(" on host {h}"),
            None => String::new(),
        }
    }
}

/// How a rank ended, as told on stderr, and the exit status `ferry run` reports for it.
pub(crate) fn describe(rank: usize, status: ExitStatus) -> Option<(String, u8)> {
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
    if args.ranks == 0 {
        return Err(Fatal::usage("-n must be at least 1"));
    }
    // MPMD (`progA : -n 3 progB`): the job has the ranks of every application, in order.
    let apps = mpmd::split_apps(args.ranks, &args.command).map_err(Fatal::usage)?;
    let n: usize = apps.iter().map(|a| a.ranks).sum();
    if args.respawn > 0 && args.spares > 0 {
        return Err(Fatal::usage(
            "--respawn cannot be combined with --spares (elastic jobs and rebuilt \
             communicators do not mix)",
        ));
    }
    // Failed ranks are restarted instead of ending the job.
    let keep_going = args.keep_going || args.respawn > 0;
    if apps.len() > 1 && args.spares > 0 {
        return Err(Fatal::usage(
            "--spares cannot be combined with several applications (`:`)",
        ));
    }
    let app_of: Vec<usize> = apps
        .iter()
        .enumerate()
        .flat_map(|(k, a)| std::iter::repeat_n(k, a.ranks))
        .collect();
    let psets = mpmd::psets_value(&apps, &args.psets, n)
        .map_err(|e| Fatal::usage(format!("--pset: {e}")))?;
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
    // The single backend has no peers: N processes of it would each run alone as rank 0 and
    // print the whole job's output N times, so such a job is refused before anything starts.
    let chosen = backend.or_else(|| {
        std::env::var("FERRY_BACKEND")
            .ok()
            .and_then(|b| b.parse::<BackendKind>().ok())
    });
    if chosen == Some(BackendKind::Single) && total > 1 {
        return Err(Fatal::usage(format!(
            "the single backend runs one process, but this job has {total} (-n {n}{}); \
             use -n 1 or another backend (tcp, shm, hybrid, mpi)",
            if spares > 0 {
                format!(" and --spares {spares}")
            } else {
                String::new()
            }
        )));
    }
    if chosen == Some(BackendKind::Mpi) {
        let (msg, code) = crate::mpi_launch::exec(&args, &apps, spares);
        return Err(Fatal { msg, code });
    }
    // A name is claimed before anything is started, atomically (see `ctl`): of two launchers
    // given the same name at the same instant, one runs and the other starts nothing.
    let name_lock = match &args.job_name {
        Some(name) => {
            check_job_name(name)?;
            Some(NameLock::take(name).map_err(|msg| Fatal { msg, code: 1 })?)
        }
        None => None,
    };
    let mut hosts = args.hosts.clone();
    if let Some(f) = &args.hostfile {
        hosts = remote::read_hostfile(f).map_err(Fatal::usage)?;
    }
    hosts.retain(|h| !h.trim().is_empty());
    remote::check_hosts(&hosts).map_err(Fatal::usage)?;
    let placement = remote::place(total, &hosts, args.block);
    let is_remote = !placement.is_empty();
    // Before anything is started: a count this host cannot hold is refused (item: -n 100000).
    let verdict = limits::check(total);
    if let Some(why) = verdict.refuse {
        return Err(Fatal { msg: why, code: 1 });
    }
    for w in &verdict.warnings {
        eprintln!("ferry: warning: {w}");
    }

    // Ranks on other hosts are not bound (see `bind`).
    let cpus = if is_remote {
        None
    } else {
        crate::bind::for_job(args.bind.as_deref(), total).map_err(Fatal::usage)?
    };

    let secret = random_hex(16)?;
    let job_id = match &args.job_name {
        Some(name) => name.clone(),
        None => format!("f{}-{}", std::process::id(), random_hex(4)?),
    };

    // Forked while the launcher still has a single thread (see `guard`). It inherits the job
    // name's lock, so after a SIGKILLed launcher the name stays taken until the guardian has
    // ended the ranks' process groups.
    let guardian = Guardian::start(total + args.respawn as usize).map_err(|e| Fatal {
        msg: format!("cannot start the guardian process: {e}"),
        code: 1,
    })?;
    if let Err(e) = guard::become_subreaper() {
        tracing::warn!("cannot become a child subreaper: {e}");
    }
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
    let _registration = match (&args.job_name, name_lock) {
        (Some(name), Some(lock)) => {
            let mut local = server.local_addr();
            if local.ip().is_unspecified() {
                local.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            Some(
                Registration::create(lock, name, &local.to_string(), &secret)
                    .map_err(|msg| Fatal { msg, code: 1 })?,
            )
        }
        _ => None,
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
    // Identical start-up errors of many ranks are printed once (see `collapse`).
    let collapse = (total > 1 && !args.tag_output).then(|| Arc::new(Collapse::default()));
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
    let self_exe = std::env::current_exe().ok().filter(|p| p.is_file());
    let mut launch = Launch::new(total);
    let shm_segment = shm_handoff(backend_env.as_deref(), total, is_remote);

    let spawner = Spawner {
        args: &args,
        apps: &apps,
        app_of,
        world: n,
        total,
        job_id: job_id.clone(),
        secret: secret.clone(),
        rendezvous: rendezvous.clone(),
        backend_env: backend_env.clone(),
        psets: psets.clone(),
        placement: placement.clone(),
        self_exe,
        launcher_pid,
        nofile,
        output: output.clone(),
        tracker: tracker.clone(),
        collapse: collapse.clone(),
        guardian: &guardian,
        cpus,
    };
    // Every rank learns whether failed ranks are restarted (REBUILD needs it).
    let mut first_env: Vec<(String, String)> = Vec::new();
    if args.respawn > 0 {
        first_env.push((RESPAWN_VAR.into(), args.respawn.to_string()));
    }
    if let Some((_, var)) = &shm_segment {
        first_env.push(var.clone());
    }
    for r in 0..total {
        if launch.must_stop(&ranks, keep_going) {
            break;
        }
        match spawner.spawn(r, 0, &first_env) {
            Ok(rank) => ranks.push(rank),
            Err(e) => {
                ranks.extend(e.started);
                end_all(&mut ranks, args.grace_ms, &output, &tracker, guardian.pid());
                guardian.dismiss();
                return Err(Fatal {
                    msg: e.msg,
                    code: e.code,
                });
            }
        }
    }

    // Every rank holds the segment now; the launcher's descriptor would only keep it alive.
    drop(shm_segment);
    let respawn = Respawner::new(&spawner, args.respawn, ranks.len());
    let mut code = supervise(&mut ranks, &args, &output, &*server.store(), respawn);
    let epochs = code.epochs;
    let not_started = total.saturating_sub(ranks.len());
    ranks.append(&mut code.retired);
    if not_started > 0 {
        code.messages.push(format!(
            "{not_started} rank{} not started: {}",
            if not_started == 1 { " was" } else { "s were" },
            if launch.interrupted {
                "the launch was interrupted"
            } else {
                "a rank had failed during the launch"
            }
        ));
    }
    finish(&mut ranks, &output, &tracker, guardian.pid());
    drop(spawner);
    if !is_remote {
        // Every rank has ended: a name a rank made in /dev/shm (a hybrid node's segment) is
        // removed by the node's last rank to attach, so it stays only if ranks died while the
        // node was still gathering; nothing of the job can need it any more (S4).
        ferry_shm::remove_job_segments(&job_id);
    }
    guardian.dismiss();
    // Rebuilds meet in named segments, which their ranks remove once all attached: a rank
    // killed during a rebuild's start-up may leave one.
    for e in 1..=epochs {
        ferry_shm::remove_job_segments(&ferry_core::respawn::epoch_job(&job_id, e));
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

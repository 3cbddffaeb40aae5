//! Starting one rank's process: its environment, its command line (local, or through the
//! remote command), its output threads. Used for the job's ranks and for the replacements of
//! failed ones (`--respawn`).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::collapse::Collapse;
use crate::forward::{self, Output, Pipe, Tracker};
use crate::guard::Guardian;
use crate::run::Rank;
use crate::{exec_rank, mpmd, remote, RunArgs};

/// Why a rank could not be started, the exit status to report, and the rank itself if its
/// process runs (its output threads failed).
pub(crate) struct SpawnError {
    pub(crate) msg: String,
    pub(crate) code: u8,
    pub(crate) started: Option<Rank>,
}

/// What every rank of the job is started with.
pub(crate) struct Spawner<'a> {
    pub(crate) args: &'a RunArgs,
    pub(crate) apps: &'a [mpmd::App],
    /// Application of each rank (spares belong to none: 0).
    pub(crate) app_of: Vec<usize>,
    /// Ranks of the application world (`FERRY_WORLD_SIZE` with spares).
    pub(crate) world: usize,
    pub(crate) total: usize,
    pub(crate) job_id: String,
    pub(crate) secret: String,
    pub(crate) rendezvous: String,
    pub(crate) backend_env: Option<String>,
    pub(crate) psets: Option<String>,
    pub(crate) placement: Vec<String>,
    pub(crate) self_exe: Option<std::path::PathBuf>,
    pub(crate) launcher_pid: i32,
    pub(crate) nofile: Option<libc::rlimit>,
    pub(crate) output: Arc<Output>,
    pub(crate) tracker: Arc<Tracker>,
    pub(crate) collapse: Option<Arc<Collapse>>,
    pub(crate) guardian: &'a Guardian,
    /// The CPU of each local rank (`general.bind`), or `None`: ranks not bound.
    pub(crate) cpus: Option<Vec<usize>>,
}

impl Spawner<'_> {
    /// Starts rank `r` with the job's variables plus `extra`; `incarnation` counts the
    /// replacements of the rank (0: the job's own process).
    pub(crate) fn spawn(
        &self,
        r: usize,
        incarnation: u32,
        extra: &[(String, String)],
    ) -> Result<Rank, SpawnError> {
        let args = self.args;
        let mut env: Vec<(String, String)> = vec![
            ("FERRY_RANK".into(), r.to_string()),
            ("FERRY_SIZE".into(), self.total.to_string()),
            ("FERRY_JOB_ID".into(), self.job_id.clone()),
            ("FERRY_SECRET".into(), self.secret.clone()),
            ("FERRY_RENDEZVOUS".into(), self.rendezvous.clone()),
        ];
        if let Some(b) = &self.backend_env {
            env.push(("FERRY_BACKEND".into(), b.clone()));
        }
        if self.total > self.world {
            env.push(("FERRY_WORLD_SIZE".into(), self.world.to_string()));
        }
        env.extend(extra.iter().cloned());
        if let Some(p) = &self.psets {
            env.push((ferry_core::pset::PSETS_VAR.into(), p.clone()));
        }
        // Spares belong to no application until they join the world.
        let app = self.app_of.get(r).copied().unwrap_or(0);
        if self.apps.len() > 1 {
            env.push(("FERRY_APPNUM".into(), app.to_string()));
        }
        let user_command = &self.apps[app].command;
        let host = self.placement.get(r).cloned();
        // How many ranks share this rank's host: waiting ranks yield their core when the host
        // is oversubscribed (general.yield_when_idle = auto).
        let local_size = match &host {
            None => self.total,
            Some(h) => self.placement.iter().filter(|p| *p == h).count(),
        };
        env.push(("FERRY_LOCAL_SIZE".into(), local_size.to_string()));
        if host.is_none() {
            // The CPUs the job may use here: the ranks count them, not the host's, when they
            // decide whether they outnumber them (`taskset -c 0 ferry run -n 2` is
            // oversubscribed on any host).
            let cpus = crate::bind::usable_cpus().len();
            if cpus > 0 {
                env.push(("FERRY_LOCAL_CPUS".into(), cpus.to_string()));
            }
        }
        let usage = |msg: String| SpawnError {
            msg,
            code: 2,
            started: None,
        };
        // The rank's own command line and the environment the launcher adds.
        let (program, envs, remove_secret): (Vec<String>, Vec<(String, String)>, bool) = match &host
        {
            None => (user_command.clone(), env.clone(), false),
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
                // The secret travels through the rank's stdin, not its arguments, which
                // any user of the remote host could read in the process list (T8).
                all.extend(env.iter().filter(|(k, _)| k != "FERRY_SECRET").cloned());
                let mut command = user_command.clone();
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
                .map_err(usage)?;
                // The local wrapper (ip netns exec, ...) inherits these too, except the
                // secret, which only the rank's stdin carries.
                let envs = env
                    .iter()
                    .filter(|(k, _)| k != "FERRY_SECRET")
                    .cloned()
                    .collect();
                (
                    vec!["sh".into(), "-c".into(), format!("exec {line}")],
                    envs,
                    true,
                )
            }
        };
        // Only ranks on this host are bound; a remote command's wrapper would pass the mask
        // on to a local tool (ssh), not to the rank.
        let cpu = match (&host, &self.cpus) {
            (None, Some(cpus)) => cpus.get(r).copied(),
            _ => None,
        };
        if let Some(c) = cpu {
            if crate::bind::log_enabled() {
                eprintln!("ferry: rank {r} bound to CPU {c}");
            }
        }
        // Started through `ferry __exec-rank` (posix_spawn, no fork of the launcher; see
        // `exec_rank`), or with a pre-exec closure where this program cannot be found.
        let mut cmd = match &self.self_exe {
            Some(exe) => exec_rank::command(exe, self.launcher_pid, self.nofile, cpu, &program),
            None => {
                let mut c = Command::new(&program[0]);
                c.args(&program[1..]);
                let restore = self.nofile;
                let launcher_pid = self.launcher_pid;
                // SAFETY: the closure runs between fork and exec and only makes
                // async-signal-safe system calls (prctl, getppid, setrlimit, sigprocmask,
                // sched_setaffinity).
                unsafe {
                    c.pre_exec(move || exec_rank::prepare(launcher_pid, restore, cpu));
                }
                c
            }
        };
        cmd.envs(envs.iter().map(|(k, v)| (k, v)));
        if remove_secret {
            cmd.env_remove("FERRY_SECRET");
        }
        // Remote ranks read the secret from stdin, then see end of file like local ones.
        cmd.stdin(if host.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
        let mut child = cmd.spawn().map_err(|e| SpawnError {
            msg: format!("cannot start rank {r} (`{}`): {e}", user_command[0]),
            code: 127,
            started: None,
        })?;
        if let Some(mut stdin) = child.stdin.take() {
            // A rank that died at once makes this fail (EPIPE); its exit status tells why.
            let _ = stdin.write_all(format!("{}\n", self.secret).as_bytes());
        }
        let pid = child.id() as i32;
        self.guardian.watch(pid);
        let pipes = [
            child.stdout.take().map(Pipe::Out),
            child.stderr.take().map(Pipe::Err),
        ];
        let rank = Rank {
            child,
            pid,
            host,
            status: None,
            reaped: false,
            incarnation,
        };
        for p in pipes.into_iter().flatten() {
            let tag = args.tag_output.then(|| format!("[{r}] "));
            let spawned = forward::spawn(
                p,
                self.output.clone(),
                self.tracker.clone(),
                r,
                tag,
                self.collapse.clone(),
            );
            if let Err(e) = spawned {
                return Err(SpawnError {
                    msg: format!("cannot start output thread for rank {r}: {e}"),
                    code: 1,
                    started: Some(rank),
                });
            }
        }
        Ok(rank)
    }
}

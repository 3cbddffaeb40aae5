//! `ferry run --backend mpi`: the MPI backend takes rank and size from MPI itself, so ranks
//! that `ferry run` started on its own would each be a world of one. The launcher therefore
//! hands such a job to MPI's launcher (`mpirun`, or `FERRY_MPIRUN`), replacing itself with it:
//! signals (Ctrl-C), exit status and the ranks' clean-up are then mpirun's, as with a job
//! started by `mpirun` directly.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::mpmd::App;
use crate::RunArgs;

/// The variable naming MPI's launcher, with options if needed (split at whitespace), e.g.
/// `mpiexec` or `mpirun --mca btl self,vader`.
pub const MPIRUN_VAR: &str = "FERRY_MPIRUN";

/// Options of `ferry run` that mpirun cannot carry out for a job, by the name the user typed.
fn unsupported(args: &RunArgs, spares: usize) -> Vec<&'static str> {
    let mut out = Vec::new();
    if spares > 0 {
        out.push("--spares");
    }
    if !args.hosts.is_empty() {
        out.push("--hosts");
    }
    if args.hostfile.is_some() {
        out.push("--hostfile");
    }
    if args.respawn > 0 {
        out.push("--respawn");
    }
    if args.keep_going {
        out.push("--keep-going");
    }
    if !args.psets.is_empty() {
        out.push("--pset");
    }
    if args.tag_output {
        out.push("--tag-output");
    }
    if args.rendezvous_addr.is_some() {
        out.push("--rendezvous-addr");
    }
    out
}

/// mpirun's command line for the applications of the job (`-n K PROG ARGS : -n K2 ...`).
pub fn command(launcher: &str, apps: &[App]) -> Result<Command, String> {
    let mut words = launcher.split_whitespace();
    let program = words
        .next()
        .ok_or_else(|| format!("{MPIRUN_VAR} is empty; unset it to use `mpirun`"))?;
    let mut cmd = Command::new(program);
    cmd.args(words);
    for (k, app) in apps.iter().enumerate() {
        if k > 0 {
            cmd.arg(":");
        }
        cmd.arg("-n").arg(app.ranks.to_string()).args(&app.command);
    }
    Ok(cmd)
}

/// Replaces this process with mpirun running the job; returns only when that fails, with the
/// message and exit status for `ferry`.
pub fn exec(args: &RunArgs, apps: &[App], spares: usize) -> (String, u8) {
    let refused = unsupported(args, spares);
    if !refused.is_empty() {
        return (
            format!(
                "--backend mpi starts the job through mpirun, which has no equivalent of {}; \
                 use another backend for that",
                refused.join(", ")
            ),
            2,
        );
    }
    let launcher = std::env::var(MPIRUN_VAR).unwrap_or_else(|_| "mpirun".to_string());
    let mut cmd = match command(&launcher, apps) {
        Ok(c) => c,
        Err(msg) => return (msg, 2),
    };
    cmd.env("FERRY_BACKEND", "mpi");
    if let Some(name) = &args.job_name {
        cmd.env("FERRY_JOB_ID", name);
    }
    // `ferry run` starts any number of ranks on a host; Open MPI refuses more ranks than cores
    // unless told otherwise (other MPI implementations ignore the variable).
    if std::env::var_os("OMPI_MCA_rmaps_base_oversubscribe").is_none() {
        cmd.env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    }
    let e = cmd.exec();
    let first = launcher.split_whitespace().next().unwrap_or_default();
    if e.kind() == std::io::ErrorKind::NotFound {
        (
            format!(
                "--backend mpi starts the ranks with `{first}`, which was not found ({e}); \
                 install MPI or name its launcher in {MPIRUN_VAR}"
            ),
            127,
        )
    } else {
        (
            format!("cannot start `{first}` for --backend mpi: {e}"),
            126,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Command) -> Vec<String> {
        std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|s| s.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn applications_become_mpirun_contexts() {
        let apps = vec![
            App {
                ranks: 2,
                command: vec!["a".into(), "-x".into()],
            },
            App {
                ranks: 3,
                command: vec!["b".into()],
            },
        ];
        let cmd = command("mpiexec --mca btl self", &apps).unwrap();
        assert_eq!(
            words(&cmd),
            ["mpiexec", "--mca", "btl", "self", "-n", "2", "a", "-x", ":", "-n", "3", "b"]
        );
        assert!(command("  ", &apps).is_err());
    }
}

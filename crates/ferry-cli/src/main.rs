//! The `ferry` command (R1): `ferry run -n N [OPTIONS] [--] PROGRAM [ARGS...]` starts the ranks
//! of an SPMD job, serves their rendezvous store, forwards their output line by line and
//! propagates failure. See `docs/CONFIGURATION.md` for the variables it sets.
//!
//! The launcher never leaves ranks behind: they run in their own process groups, die with the
//! launcher (`PR_SET_PDEATHSIG`, set by `exec_rank`), and are ended (SIGTERM, then SIGKILL) when one of them fails
//! or when the launcher is interrupted; what they start goes with their groups, also when the
//! launcher is SIGKILLed (see `guard`).

mod bind;
mod collapse;
mod ctl;
mod exec_rank;
mod forward;
mod guard;
mod limits;
mod monitor;
mod monitor_plot;
mod mpi_launch;
mod mpmd;
mod remote;
mod run;
mod signals;
mod spawn;
mod store_server;
mod supervise;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command line of `ferry`.
#[derive(Debug, Parser)]
#[command(name = "ferry", version, about = "Launcher for ferry SPMD programs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start N ranks of PROGRAM and wait for them.
    Run(RunArgs),
    /// Control a job started with --job-name NAME.
    Ctl {
        /// The job's name.
        name: String,
        #[command(subcommand)]
        action: CtlAction,
    },
    /// Read, compare, export and draw communication records (FERRY_MONITOR).
    Monitor {
        #[command(subcommand)]
        action: monitor::Action,
    },
}

#[derive(Debug, Subcommand)]
enum CtlAction {
    /// Print the job's processes: location `L<id>:<host>:<pid>`, rank and state.
    Status,
    /// Remove the processes whose location matches PATTERN at the next resize point (rank 0,
    /// the master, is never removed).
    Remove {
        /// Extended regular expression over location strings.
        pattern: String,
    },
}

/// Options of `ferry run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub ranks: usize,

    /// Backend for every rank (sets FERRY_BACKEND): single, tcp, shm, hybrid, mpi. Without it
    /// an inherited FERRY_BACKEND is passed on, else the ranks choose (shared memory when all
    /// ranks are on this host). With mpi the job is handed to mpirun (or FERRY_MPIRUN).
    #[arg(long, value_name = "B")]
    pub backend: Option<String>,

    /// Job name (becomes FERRY_JOB_ID); a unique one is made up when absent.
    #[arg(long, value_name = "NAME")]
    pub job_name: Option<String>,

    /// Extra processes started with the job (FERRY_SIZE counts them, FERRY_WORLD_SIZE does
    /// not); they join the application world at its next resize point (F7).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub spares: usize,

    /// Start ranks on these hosts (comma separated) through --remote-cmd.
    #[arg(
        long,
        value_name = "H1,H2,...",
        value_delimiter = ',',
        conflicts_with = "hostfile"
    )]
    pub hosts: Vec<String>,

    /// File with one host per line, optionally `HOST slots=N` (`#` starts a comment), used
    /// like --hosts.
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,

    /// Place ranks on hosts in blocks (ranks 0..k on the first host, ...) instead of
    /// round-robin.
    #[arg(long)]
    pub block: bool,

    /// How to start a rank on a host. `{host}` is the host; `{cmd}` the rank's command as
    /// shell words (for wrappers that exec their arguments, e.g. `ip netns exec {host} {cmd}`);
    /// `{qcmd}` the same command quoted once more, for tools that hand a string to a remote
    /// shell (ssh). Run through `sh -c`.
    #[arg(
        long,
        value_name = "TEMPLATE",
        default_value = "ssh -o BatchMode=yes {host} {qcmd}"
    )]
    pub remote_cmd: String,

    /// Address the rendezvous store listens on when ranks run on other hosts: `IP` or
    /// `IP:PORT` (port 0 or none = ephemeral). Default: all interfaces, advertised by host name.
    #[arg(long, value_name = "ADDR")]
    pub rendezvous_addr: Option<String>,

    /// A failed rank does not end the others (for fault-tolerant programs that survive the
    /// loss of a peer); the exit status is still that of the first failed rank.
    #[arg(long)]
    pub keep_going: bool,

    /// Restart a failed rank (same rank number, new process with FERRY_INCARNATION set) up
    /// to K times per job, for programs that recover in REBUILD mode; implies --keep-going.
    /// The exit status is 0 when every rank's last process exits 0.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub respawn: u32,

    /// Bind each rank started on this host to a CPU of its own: auto (when the ranks do not
    /// outnumber the CPUs), core (always) or none. Default: `general.bind` (none).
    #[arg(long, value_name = "MODE")]
    pub bind: Option<String>,

    /// Prefix every forwarded line with `[R] `, R being the rank that printed it.
    #[arg(long)]
    pub tag_output: bool,

    /// Time ranks get between SIGTERM and SIGKILL when the job is ended, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub grace_ms: u64,

    /// Names a process set for the ranks (X2), e.g. `--pset left=0-1,3`; repeatable. Ranks
    /// count from 0 in the world of the job. Programs find sets through `ferry::session`
    /// (built in: `ferry://world`, `ferry://self`, and `ferry://app/K` per application).
    #[arg(long = "pset", value_name = "NAME=RANKS")]
    pub psets: Vec<String>,

    /// The program and its arguments. Several applications (MPMD, as with mpirun): `PROG
    /// [ARGS] : -n N PROG2 [ARGS] ...`; -n before the first is its count, the job has the sum.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]..."
    )]
    pub command: Vec<String>,
}

fn main() -> ExitCode {
    // Each local rank starts as `ferry __exec-rank ...` (see `exec_rank`), before anything else.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == exec_rank::ARG) {
        return exec_rank::main(&argv[2..]);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => match run::run(args) {
            Ok(code) => ExitCode::from(code),
            Err(msg) => {
                eprintln!("ferry: {msg}");
                ExitCode::from(msg.exit_code())
            }
        },
        Command::Monitor { action } => monitor::main(action),
        Command::Ctl { name, action } => {
            let result = match action {
                CtlAction::Status => ctl::status(&name),
                CtlAction::Remove { pattern } => ctl::remove(&name, &pattern),
            };
            match result {
                Ok(code) => ExitCode::from(code),
                Err(msg) => {
                    eprintln!("ferry: {msg}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

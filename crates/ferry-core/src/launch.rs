//! What a rank learns from its environment at start-up: backend, rank, size, and how to reach
//! the launcher's rendezvous store. Set by `ferry run` (R1), by hand (R2a/R2b) or derived from
//! `mpirun`/`srun` variables (R2c).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The backends selectable with `FERRY_BACKEND` (R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// One rank, no communication.
    Single,
    /// TCP sockets (seed 000).
    Tcp,
    /// Shared memory on one host (seed 001).
    Shm,
    /// Shared memory within a node, TCP between nodes.
    Hybrid,
    /// MPI (cargo feature `mpi`).
    Mpi,
}

impl BackendKind {
    /// Every backend, in the order of `FERRY_BACKEND` documentation.
    pub const ALL: [BackendKind; 5] = [
        BackendKind::Single,
        BackendKind::Tcp,
        BackendKind::Shm,
        BackendKind::Hybrid,
        BackendKind::Mpi,
    ];

    /// The `FERRY_BACKEND` name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Single => "single",
            BackendKind::Tcp => "tcp",
            BackendKind::Shm => "shm",
            BackendKind::Hybrid => "hybrid",
            BackendKind::Mpi => "mpi",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<BackendKind> {
        BackendKind::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "FERRY_BACKEND=`{s}` is not a backend (known: single, tcp, shm, hybrid, mpi)"
                ))
            })
    }
}

/// Start-up information from the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchInfo {
    /// `FERRY_BACKEND`.
    pub backend: Option<BackendKind>,
    /// `FERRY_RANK` (set by the launcher).
    pub rank: Option<usize>,
    /// `FERRY_SIZE`.
    pub size: Option<usize>,
    /// `FERRY_RENDEZVOUS`: `host:port` of the launcher's key-value store.
    pub rendezvous: Option<String>,
    /// `FERRY_JOB_ID`: unique name of this job (used for shared-memory names, rendezvous keys).
    pub job_id: Option<String>,
    /// `FERRY_SECRET`: per-job secret checked in every handshake (T8).
    pub secret: Option<String>,
    /// `FERRY_NODE`: overrides the host name as node identity (tests place ranks on "nodes").
    pub node: Option<String>,
}

impl LaunchInfo {
    /// Reads the process environment.
    pub fn from_env() -> Result<LaunchInfo> {
        let vars: Vec<(String, String)> = std::env::vars().collect();
        LaunchInfo::from_vars(&vars)
    }

    /// Reads `(name, value)` pairs; bad values are errors naming the variable.
    pub fn from_vars(vars: &[(String, String)]) -> Result<LaunchInfo> {
        let get = |name: &str| {
            vars.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let number = |name: &str| -> Result<Option<usize>> {
            match get(name) {
                None => Ok(None),
                Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                    Error::config(format!("{name}=`{v}` is not a non-negative integer"))
                }),
            }
        };
        let mut info = LaunchInfo {
            backend: get("FERRY_BACKEND").map(|b| b.parse()).transpose()?,
            rank: number("FERRY_RANK")?,
            size: number("FERRY_SIZE")?,
            rendezvous: get("FERRY_RENDEZVOUS"),
            job_id: get("FERRY_JOB_ID"),
            secret: get("FERRY_SECRET"),
            node: get("FERRY_NODE"),
        };
        // R2c: without `ferry run`, rank and size may come from `mpirun`/`srun` variables.
        crate::discovery::merge_into(&mut info, vars)?;
        if let (Some(r), Some(s)) = (info.rank, info.size) {
            if r >= s {
                return Err(Error::config(format!(
                    "FERRY_RANK={r} is not below FERRY_SIZE={s}"
                )));
            }
        }
        if info.size == Some(0) {
            return Err(Error::config("FERRY_SIZE=0: a job needs at least one rank"));
        }
        Ok(info)
    }

    /// This host's node identity: `FERRY_NODE`, else the host name.
    pub fn node_name(&self) -> String {
        if let Some(n) = &self.node {
            return n.clone();
        }
        hostname()
    }
}

/// The host name of this machine (empty on failure, which then only merges nodes).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_checks() {
        let i = LaunchInfo::from_vars(&vars(&[
            ("FERRY_BACKEND", "tcp"),
            ("FERRY_RANK", "1"),
            ("FERRY_SIZE", "4"),
        ]))
        .unwrap();
        assert_eq!(i.backend, Some(BackendKind::Tcp));
        assert_eq!(i.rank, Some(1));
        let e = LaunchInfo::from_vars(&vars(&[("FERRY_BACKEND", "udp")])).unwrap_err();
        assert!(e.to_string().contains("udp"));
        let e =
            LaunchInfo::from_vars(&vars(&[("FERRY_RANK", "4"), ("FERRY_SIZE", "4")])).unwrap_err();
        assert!(e.to_string().contains("FERRY_RANK"));
        assert!(LaunchInfo::from_vars(&vars(&[("FERRY_SIZE", "x")])).is_err());
    }
}

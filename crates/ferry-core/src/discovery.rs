//! Rank discovery under foreign launchers (R2c): a program started by Open MPI's `mpirun` or by
//! Slurm's `srun` with `FERRY_BACKEND=tcp|shm|hybrid` learns its rank, the job size, its node and
//! a job-unique id from the launcher's environment variables, without `ferry run`.
//!
//! The job id names the directory of the [`crate::file_store::FileStore`] through which such
//! ranks rendezvous (the launcher's own store, PMI/PMIx, is not used: ferry talks no PMI).
//!
//! Variables read (first match wins; Open MPI before Slurm because `mpirun` inside a Slurm
//! allocation inherits the allocation's `SLURM_*` variables):
//!
//! | launcher | rank | size | node | job id |
//! |---|---|---|---|---|
//! | Open MPI | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | host name | `OMPI_MCA_ess_base_jobid` (4.x), `OMPI_MCA_orte_ess_jobid` (older), `PMIX_NAMESPACE` (5.x), plus a hash of `OMPI_MCA_orte_hnp_uri` when set |
//! | Slurm (`srun`) | `SLURM_PROCID` | `SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS`/`SLURM_NPROCS` | `SLURMD_NODENAME` | `SLURM_JOB_ID` and `SLURM_STEP_ID` |
//!
//! Slurm is recognised only inside a job step (`SLURM_STEP_ID` set): a batch script itself has
//! `SLURM_PROCID=0` and `SLURM_NTASKS=N` too, and taking them would make it wait for N-1 ranks
//! that never come.
//!
//! The hash of `OMPI_MCA_orte_hnp_uri` (address and ephemeral port of this `mpirun`) is added
//! because Open MPI derives job ids from the `mpirun` process id, which repeats over time; a
//! directory left behind by a killed job must never be mistaken for the current one.

use crate::error::{Error, Result};
use crate::launch::LaunchInfo;

/// Which foreign launcher started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Open MPI's `mpirun`/`mpiexec` (ORTE in 4.x, PRRTE/PMIx in 5.x).
    OpenMpi,
    /// Slurm's `srun`.
    Slurm,
}

impl Launcher {
    /// Short name, used as the prefix of job ids.
    pub fn name(self) -> &'static str {
        match self {
            Launcher::OpenMpi => "ompi",
            Launcher::Slurm => "slurm",
        }
    }
}

/// What the launcher's environment says about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The launcher.
    pub launcher: Launcher,
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks.
    pub size: usize,
    /// Rank among the processes of this node, if the launcher says.
    pub local_rank: Option<usize>,
    /// Node name, if the launcher names it (else the host name is used).
    pub node: Option<String>,
    /// Job-unique id, safe as a file name: `[A-Za-z0-9._-]` only.
    pub job_id: String,
}

fn lookup<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
    vars.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.trim().is_empty())
}

fn number(vars: &[(String, String)], name: &str) -> Result<Option<usize>> {
    match lookup(vars, name) {
        None => Ok(None),
        Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
            Error::config(format!(
                "{name}=`{v}` (set by the launcher) is not a non-negative integer"
            ))
        }),
    }
}

/// Keeps `[A-Za-z0-9._-]` and replaces everything else by `_`, so that ids from the
/// environment are safe path components.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// FNV-1a, 64 bit: a stable hash (the same in every process) for job-id suffixes.
fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn open_mpi(vars: &[(String, String)]) -> Result<Option<Discovered>> {
    let (Some(rank), Some(size)) = (
        number(vars, "OMPI_COMM_WORLD_RANK")?,
        number(vars, "OMPI_COMM_WORLD_SIZE")?,
    ) else {
        return Ok(None);
    };
    let base = [
        "OMPI_MCA_ess_base_jobid",
        "OMPI_MCA_orte_ess_jobid",
        "PMIX_NAMESPACE",
    ]
    .iter()
    .find_map(|n| lookup(vars, n))
    .ok_or_else(|| {
        Error::config(
            "started by Open MPI (OMPI_COMM_WORLD_RANK is set) but no job id found in \
                 OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_ess_jobid or PMIX_NAMESPACE; set \
                 FERRY_JOB_ID to the same value in every rank",
        )
    })?;
    let mut job_id = format!("ompi-{}", sanitize(base));
    if let Some(uri) = lookup(vars, "OMPI_MCA_orte_hnp_uri") {
        job_id.push_str(&format!("-{:016x}", stable_hash(uri)));
    }
    Ok(Some(Discovered {
        launcher: Launcher::OpenMpi,
        rank,
        size,
        local_rank: number(vars, "OMPI_COMM_WORLD_LOCAL_RANK")?,
        node: None,
        job_id,
    }))
}

fn slurm(vars: &[(String, String)]) -> Result<Option<Discovered>> {
    let Some(step) = lookup(vars, "SLURM_STEP_ID").or_else(|| lookup(vars, "SLURM_STEPID")) else {
        return Ok(None);
    };
    let Some(rank) = number(vars, "SLURM_PROCID")? else {
        return Ok(None);
    };
    let size = match number(vars, "SLURM_STEP_NUM_TASKS")? {
        Some(n) => n,
        None => match number(vars, "SLURM_NTASKS")? {
            Some(n) => n,
            None => number(vars, "SLURM_NPROCS")?.ok_or_else(|| {
                Error::config(
                    "started by srun (SLURM_PROCID is set) but none of SLURM_STEP_NUM_TASKS, \
                     SLURM_NTASKS, SLURM_NPROCS gives the number of tasks",
                )
            })?,
        },
    };
    let job = lookup(vars, "SLURM_JOB_ID")
        .or_else(|| lookup(vars, "SLURM_JOBID"))
        .ok_or_else(|| {
            Error::config("started by srun (SLURM_PROCID is set) but SLURM_JOB_ID is not set")
        })?;
    Ok(Some(Discovered {
        launcher: Launcher::Slurm,
        rank,
        size,
        local_rank: number(vars, "SLURM_LOCALID")?,
        node: lookup(vars, "SLURMD_NODENAME").map(str::to_string),
        job_id: format!("slurm-{}.{}", sanitize(job), sanitize(step)),
    }))
}

/// Reads the launcher variables from `(name, value)` pairs. `Ok(None)`: no known launcher.
/// Errors name the variable that is malformed or inconsistent.
pub fn discover(vars: &[(String, String)]) -> Result<Option<Discovered>> {
    let found = match open_mpi(vars)? {
        Some(d) => Some(d),
        None => slurm(vars)?,
    };
    if let Some(d) = &found {
        if d.size == 0 || d.rank >= d.size {
            return Err(Error::config(format!(
                "the {} environment gives rank {} of {} ranks",
                d.launcher.name(),
                d.rank,
                d.size
            )));
        }
    }
    Ok(found)
}

/// Reads the launcher variables of this process.
pub fn discover_env() -> Result<Option<Discovered>> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    discover(&vars)
}

/// Fills what `FERRY_*` variables left open from the launcher's variables: rank and size when
/// `FERRY_RANK` is absent, the job id when `FERRY_JOB_ID` is absent, the node when `FERRY_NODE`
/// is absent. `FERRY_*` variables always win. Returns the launcher that was used, if any.
pub fn merge_into(info: &mut LaunchInfo, vars: &[(String, String)]) -> Result<Option<Launcher>> {
    if info.rank.is_some() {
        return Ok(None);
    }
    let Some(d) = discover(vars)? else {
        return Ok(None);
    };
    if let Some(size) = info.size {
        if size != d.size {
            return Err(Error::config(format!(
                "FERRY_SIZE={size} contradicts the {} job size {}",
                d.launcher.name(),
                d.size
            )));
        }
    }
    info.rank = Some(d.rank);
    info.size = Some(d.size);
    if info.job_id.is_none() {
        info.job_id = Some(d.job_id);
    }
    if info.node.is_none() {
        info.node = d.node;
    }
    Ok(Some(d.launcher))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    const OMPI: &[(&str, &str)] = &[
        ("OMPI_COMM_WORLD_RANK", "2"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
        ("OMPI_MCA_ess_base_jobid", "798687233"),
        ("OMPI_MCA_orte_hnp_uri", "798687232.0;tcp://192.0.2.2:44167"),
    ];

    #[test]
    fn open_mpi_variables() {
        let d = discover(&vars(OMPI)).unwrap().unwrap();
        assert_eq!(d.launcher, Launcher::OpenMpi);
        assert_eq!((d.rank, d.size, d.local_rank), (2, 4, Some(0)));
        assert!(d.job_id.starts_with("ompi-798687233-"), "{}", d.job_id);
        // Same mpirun: same id in every rank; another mpirun with the same job id: another id.
        let mut other = vars(OMPI);
        other[0].1 = "3".into();
        assert_eq!(discover(&other).unwrap().unwrap().job_id, d.job_id);
        other.push((
            "OMPI_MCA_orte_hnp_uri".into(),
            "1.0;tcp://192.0.2.2:1".into(),
        ));
        assert_ne!(discover(&other).unwrap().unwrap().job_id, d.job_id);
        // Open MPI 5 names the job only through PMIx.
        let v5 = vars(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMIX_NAMESPACE", "prterun-vm-1234@1"),
        ]);
        assert_eq!(
            discover(&v5).unwrap().unwrap().job_id,
            "ompi-prterun-vm-1234_1"
        );
    }

    #[test]
    fn slurm_variables_only_inside_a_step() {
        let mut v = vars(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_JOB_ID", "4242"),
            ("SLURMD_NODENAME", "n07"),
        ]);
        assert_eq!(discover(&v).unwrap(), None, "batch script is no task");
        v.push(("SLURM_STEP_ID".into(), "0".into()));
        v.push(("SLURM_STEP_NUM_TASKS".into(), "2".into()));
        v.push(("SLURM_LOCALID".into(), "1".into()));
        let d = discover(&v).unwrap().unwrap();
        assert_eq!(d.launcher, Launcher::Slurm);
        assert_eq!((d.rank, d.size, d.local_rank), (1, 2, Some(1)));
        assert_eq!(d.node.as_deref(), Some("n07"));
        assert_eq!(d.job_id, "slurm-4242.0");
    }

    #[test]
    fn open_mpi_wins_over_an_enclosing_slurm_allocation() {
        let mut v = vars(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "1"),
        ]);
        v.extend(vars(OMPI));
        assert_eq!(discover(&v).unwrap().unwrap().launcher, Launcher::OpenMpi);
    }

    #[test]
    fn bad_values_are_errors_naming_the_variable() {
        let e = discover(&vars(&[
            ("OMPI_COMM_WORLD_RANK", "x"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("OMPI_COMM_WORLD_RANK"), "{e}");
        let e = discover(&vars(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("PMIX_NAMESPACE", "x"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("rank 2 of 2"), "{e}");
        let e = discover(&vars(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("FERRY_JOB_ID"), "{e}");
        assert_eq!(discover(&[]).unwrap(), None);
    }

    #[test]
    fn merge_keeps_ferry_variables_first() {
        let v = vars(OMPI);
        let mut info = LaunchInfo::default();
        assert_eq!(merge_into(&mut info, &v).unwrap(), Some(Launcher::OpenMpi));
        assert_eq!((info.rank, info.size), (Some(2), Some(4)));
        assert!(info.job_id.as_deref().unwrap().starts_with("ompi-"));

        let mut set = LaunchInfo {
            rank: Some(0),
            size: Some(1),
            ..LaunchInfo::default()
        };
        assert_eq!(merge_into(&mut set, &v).unwrap(), None);
        assert_eq!(set.rank, Some(0));

        let mut named = LaunchInfo {
            job_id: Some("mine".into()),
            node: Some("a".into()),
            ..LaunchInfo::default()
        };
        merge_into(&mut named, &v).unwrap();
        assert_eq!(named.job_id.as_deref(), Some("mine"));
        assert_eq!(named.node.as_deref(), Some("a"));

        let mut wrong = LaunchInfo {
            size: Some(3),
            ..LaunchInfo::default()
        };
        assert!(merge_into(&mut wrong, &v).is_err());
    }
}

//! How many cores this process and its host have, and whether a node's ranks oversubscribe
//! them: the inputs of the `auto` choices of the wait policy.

/// Cores this process may run on (1 if unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Cores of this host that the job's ranks share: the online CPUs, capped by a cgroup (v2)
/// CPU quota, but not narrowed by this process's affinity mask. A launcher that binds each
/// rank to its own core (`mpirun`'s default) leaves every rank an affinity mask of one CPU,
/// which says nothing about how many ranks share the host's cores.
pub fn host_cores() -> usize {
    // SAFETY: sysconf only reads a system value.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let online = if online > 0 {
        online as usize
    } else {
        available_cores()
    };
    let quota = std::fs::read_to_string("/sys/fs/cgroup/cpu.max")
        .ok()
        .and_then(|text| cgroup_quota_cores(&text));
    quota.map_or(online, |q| q.min(online))
}

/// Whole cores a cgroup v2 `cpu.max` line (`"QUOTA PERIOD"` or `"max PERIOD"`) allows,
/// rounded up; `None` without a quota.
pub(super) fn cgroup_quota_cores(text: &str) -> Option<usize> {
    let mut parts = text.split_whitespace();
    let quota: u64 = parts.next()?.parse().ok()?;
    let period: u64 = parts.next()?.parse().ok()?;
    if period == 0 {
        return None;
    }
    Some(quota.div_ceil(period).max(1) as usize)
}

/// Whether `local_ranks` ranks of the job on a host with `host_cores` cores outnumber them
/// (then a waiting rank may hold the core the rank it waits for needs).
pub fn oversubscribed(local_ranks: usize, host_cores: usize) -> bool {
    local_ranks > host_cores
}

/// How many ranks of a job of `size` ranks run on this host: `FERRY_LOCAL_SIZE` (set by the
/// launcher), else Open MPI's or Slurm's local count, else `size` (all local, the launcher's
/// default placement).
pub fn local_ranks_hint(size: usize) -> usize {
    [
        "FERRY_LOCAL_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
    .filter(|&n| n >= 1)
    .unwrap_or(size)
}

//! How many cores this process and its host have, and whether a node's ranks oversubscribe
//! them: the inputs of the `auto` choices of the wait policy.

/// Cores this process may run on (1 if unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Cores of this host that the job's ranks share: the online CPUs, capped by a cgroup (v2)
/// CPU quota and by the CPUs `ferry run` was given (`FERRY_LOCAL_CPUS`), but not narrowed by
/// this process's affinity mask. A launcher that binds each
/// rank to its own core (`mpirun`'s default) leaves every rank an affinity mask of one CPU,
/// which says nothing about how many ranks share the host's cores.
pub fn host_cores() -> usize {
    let cores = host_cpu_count();
    job_cpus(std::env::var("FERRY_LOCAL_CPUS").ok().as_deref()).map_or(cores, |n| n.min(cores))
}

/// The CPUs the launcher found it may use on this host (`FERRY_LOCAL_CPUS`: its affinity mask
/// and cpuset, e.g. `taskset -c 0 ferry run ...` gives 1), if it said.
pub(super) fn job_cpus(value: Option<&str>) -> Option<usize> {
    value?.trim().parse::<usize>().ok().filter(|&n| n >= 1)
}

/// The online CPUs, capped by a cgroup (v2) CPU quota.
fn host_cpu_count() -> usize {
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

/// Whether this process may run on one CPU only (bound, e.g. by `ferry run` or mpirun).
pub fn bound_to_one_cpu() -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set, and sched_getaffinity writes at most
    // its size into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return false;
        }
        libc::CPU_COUNT(&set) == 1
    }
}

/// Narrows the calling thread's affinity mask to the first CPU it may run on and returns that
/// CPU: the thread then runs as a rank that `ferry run --bind` or mpirun bound to one CPU.
/// Checks of what such a rank decides use it; the rest of the process keeps its mask.
pub fn bind_thread_to_its_first_cpu() -> std::io::Result<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity writes at most its
    // size into it, and sched_setaffinity reads as much.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let first = (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .ok_or_else(|| std::io::Error::other("the affinity mask holds no CPU"))?;
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(first, &mut set);
        if libc::sched_setaffinity(0, size, &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(first)
    }
}

/// Whether a rank has its CPU to itself: it is bound to one CPU and its job's `local_ranks`
/// ranks do not outnumber the host's cores (were they to, another rank could be bound to the
/// same CPU). Such a rank never yields while spinning.
pub fn spins_alone(bound_to_one_cpu: bool, local_ranks: usize, host_cores: usize) -> bool {
    bound_to_one_cpu && !oversubscribed(local_ranks, host_cores)
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

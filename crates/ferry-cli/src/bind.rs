//! Binding the ranks `ferry run` starts on this host to cores (`general.bind`, off by default:
//! two jobs started at once would both take the first CPUs). Under `auto`, as mpirun does by
//! default, each rank gets one CPU of its own when the ranks do not outnumber the CPUs the
//! launcher may use, and stays unbound otherwise (bound ranks sharing a core would wait for
//! each other's time slices, where unbound ones are moved to whichever core is idle).
//!
//! The CPU is set by the rank's own process before it execs the program (`exec_rank`), so the
//! program never runs a single instruction on another core. A replacement of a failed rank
//! (`--respawn`) is started for the same rank number and so gets the dead rank's CPU.

use ferry_core::config::Bind;

/// The CPU of each rank the launcher starts on this host (indexed by rank), or `None` when the
/// ranks stay unbound. `cpus` are the CPUs the launcher may use, in the order ranks take them.
pub(crate) fn plan(mode: Bind, ranks: usize, cpus: &[usize]) -> Option<Vec<usize>> {
    if cpus.is_empty() || ranks == 0 {
        return None;
    }
    match mode {
        Bind::None => None,
        Bind::Auto if ranks > cpus.len() => None,
        // `core` binds even an oversubscribed job, ranks taking the CPUs in turn.
        Bind::Auto | Bind::Core => Some((0..ranks).map(|r| cpus[r % cpus.len()]).collect()),
    }
}

/// The mode a `--bind` flag names.
pub(crate) fn parse_mode(text: &str) -> Result<Bind, String> {
    match text {
        "auto" => Ok(Bind::Auto),
        "core" => Ok(Bind::Core),
        "none" => Ok(Bind::None),
        _ => Err(format!("--bind `{text}`: use auto, core or none")),
    }
}

/// The CPU of each rank of a job of `ranks` ranks on this host: the mode of `--bind`, else of
/// `general.bind`.
pub(crate) fn for_job(flag: Option<&str>, ranks: usize) -> Result<Option<Vec<usize>>, String> {
    let mode = match flag {
        Some(f) => parse_mode(f)?,
        None => {
            ferry_core::Config::from_env()
                .map_err(|e| format!("configuration: {e}"))?
                .general
                .bind
        }
    };
    Ok(plan(mode, ranks, &usable_cpus()))
}

/// Whether `FERRY_LOG` asks for debug output (the launcher then names each rank's CPU).
pub(crate) fn log_enabled() -> bool {
    std::env::var("FERRY_LOG").is_ok_and(|v| v.contains("debug") || v.contains("trace"))
}

/// The CPUs this launcher may use, ordered so that ranks fill distinct physical cores before
/// the second hardware thread of any core: its affinity mask, narrowed by the cgroup's cpuset
/// when one is readable (the mask normally already is; a cpuset changed after start is not).
pub(crate) fn usable_cpus() -> Vec<usize> {
    let Ok(mask) = rustix::process::sched_getaffinity(None) else {
        return Vec::new();
    };
    let mut cpus: Vec<usize> = (0..rustix::process::CpuSet::MAX_CPU)
        .filter(|&c| mask.is_set(c))
        .collect();
    if let Some(allowed) = cgroup_cpuset() {
        cpus.retain(|c| allowed.contains(c));
    }
    order_by_core(&cpus, |c| {
        let path = format!("/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list");
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| parse_cpu_list(&t))
            .and_then(|s| s.into_iter().min())
    })
}

/// `cpus` with every CPU that is the first hardware thread of its core (as `first_sibling`
/// tells, `None`: unknown, taken as its own core) before the others, each group in order.
fn order_by_core(cpus: &[usize], first_sibling: impl Fn(usize) -> Option<usize>) -> Vec<usize> {
    let (mut first, rest): (Vec<usize>, Vec<usize>) = cpus
        .iter()
        .partition(|&&c| first_sibling(c).is_none_or(|s| s == c));
    first.extend(rest);
    first
}

/// The effective cpuset of this process's cgroup (v2), if any.
fn cgroup_cpuset() -> Option<Vec<usize>> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let file = format!("/sys/fs/cgroup{}/cpuset.cpus.effective", path.trim_end());
    parse_cpu_list(&std::fs::read_to_string(file).ok()?)
}

/// Parses a kernel CPU list (`0-3,8,10-11`); `None` if it is empty or malformed.
fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Binds the calling process to `cpu`. A raw system call (async-signal-safe: it may run
/// between fork and exec).
pub(crate) fn bind_self(cpu: usize) -> std::io::Result<()> {
    if cpu >= rustix::process::CpuSet::MAX_CPU {
        // CpuSet::set would panic; an error value needs no allocation (see above).
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut set = rustix::process::CpuSet::new();
    set.set(cpu);
    rustix::process::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_binds_only_when_the_cpus_suffice() {
        assert_eq!(plan(Bind::Auto, 2, &[0, 1]), Some(vec![0, 1]));
        assert_eq!(plan(Bind::Auto, 2, &[4, 6, 7]), Some(vec![4, 6]));
        assert_eq!(plan(Bind::Auto, 1, &[3]), Some(vec![3]));
        assert_eq!(plan(Bind::Auto, 3, &[0, 1]), None);
        assert_eq!(plan(Bind::Auto, 2, &[]), None);
    }

    #[test]
    fn none_never_binds_and_core_always_does() {
        assert_eq!(plan(Bind::None, 2, &[0, 1]), None);
        assert_eq!(plan(Bind::Core, 2, &[0, 1]), Some(vec![0, 1]));
        assert_eq!(plan(Bind::Core, 5, &[0, 1]), Some(vec![0, 1, 0, 1, 0]));
        assert_eq!(plan(Bind::Core, 5, &[]), None);
    }

    #[test]
    fn ranks_fill_physical_cores_before_second_threads() {
        // Two cores with two threads each: 0/2 and 1/3 are siblings.
        let sib = |c: usize| Some(c % 2);
        assert_eq!(order_by_core(&[0, 1, 2, 3], sib), vec![0, 1, 2, 3]);
        // Siblings numbered next to each other: 0/1 and 2/3.
        let sib = |c: usize| Some(c & !1);
        assert_eq!(order_by_core(&[0, 1, 2, 3], sib), vec![0, 2, 1, 3]);
        // Unknown topology: every CPU its own core, order kept.
        assert_eq!(order_by_core(&[5, 2], |_| None), vec![5, 2]);
    }

    #[test]
    fn a_cpu_beyond_any_mask_is_an_error() {
        let e = bind_self(rustix::process::CpuSet::MAX_CPU).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn flag_values() {
        assert_eq!(parse_mode("core"), Ok(Bind::Core));
        assert_eq!(parse_mode("none"), Ok(Bind::None));
        assert_eq!(parse_mode("auto"), Ok(Bind::Auto));
        assert!(parse_mode("socket").is_err());
    }

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("\n"), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn this_process_has_usable_cpus() {
        let cpus = usable_cpus();
        assert!(!cpus.is_empty());
        let mut sorted = cpus.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), cpus.len(), "{cpus:?}");
    }
}

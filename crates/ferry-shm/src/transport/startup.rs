//! Start-up steps shared by every way a rank joins a segment: claiming its block, waiting for
//! the others, and the single-copy vote.

use super::*;

/// Asked while a rank waits for the others of the launcher's segment at start-up: an error
/// ends the wait with it. Whoever started the ranks may know that one ended before it
/// attached, which the segment cannot show (such a rank left no pid in it).
pub type StartupWatch<'a> = &'a dyn Fn() -> Option<Error>;

/// Claims rank block `r` for this process and publishes its probe word.
pub(super) fn attach_block(seg: &Segment, r: usize) -> Result<Box<u64>> {
    let pid = sys::my_pid() as u64;
    let in_process = !seg.shared;
    if !in_process {
        if let Err(old) = seg
            .pid(r)
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
        {
            return Err(Error::config(format!(
                "rank {r} of this shm job is already taken by process {old}"
            )));
        }
    } else {
        seg.pid(r).store(pid, Ordering::Release);
    }
    let probe = Box::new(0x5eed_0000_0000_0000u64 ^ ((r as u64) << 32) ^ pid);
    seg.probe_value(r).store(*probe, Ordering::Relaxed);
    seg.probe_addr(r)
        .store(&*probe as *const u64 as u64, Ordering::Relaxed);
    seg.state(r).store(STATE_ATTACHED, Ordering::Release);
    Ok(probe)
}

/// Counts this rank in `counter` and, if it completes the count of `n`, wakes the ranks that
/// sleep in [`wait_all`].
pub(super) fn arrive(
    seg: &Segment,
    n: usize,
    counter: fn(&Segment) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    let prev = counter(seg).fetch_add(1, Ordering::AcqRel);
    if prev + 1 >= n as u64 {
        seg.gather_bell().fetch_add(1, Ordering::Release);
        sys::futex_wake(seg.gather_bell());
    }
    prev
}

/// How many ranks' liveness one check of [`wait_all`] looks at. Each check reads `/proc`, so
/// checking every rank on every pass costs N^2 reads per interval across the job: at 128 ranks
/// on two cores that alone took seconds and delayed the ranks still starting.
const LIVENESS_BATCH: usize = 2;
/// Interval between two liveness checks of a waiting rank.
const LIVENESS_EVERY: Duration = Duration::from_millis(100);

/// Waits until `counter` reaches `n` (each rank counts itself with [`arrive`]), failing if a
/// rank that already attached died or the deadline passes.
///
/// The wait sleeps on the segment's gather bell, rung by the rank that completes the count.
/// A dead rank is found by a rotating check of [`LIVENESS_BATCH`] ranks per interval starting
/// after this rank (so the job as a whole covers every rank each interval); a launched job's
/// launcher also ends the job when a rank dies.
pub(super) fn wait_all(
    seg: &Segment,
    n: usize,
    counter: fn(&Segment) -> &std::sync::atomic::AtomicU64,
    deadline: Instant,
    what: &str,
    me: usize,
    watch: StartupWatch<'_>,
) -> Result<()> {
    let mut last_check = Instant::now();
    let mut next = (me + 1) % n.max(1);
    loop {
        let bell = seg.gather_bell().load(Ordering::Acquire);
        let got = counter(seg).load(Ordering::Acquire) as usize;
        if got >= n {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            let missing: Vec<usize> = (0..n)
                .filter(|&r| seg.state(r).load(Ordering::Acquire) == STATE_EMPTY)
                .collect();
            return Err(
                Error::new(ErrorKind::Timeout, "shm init").with_detail(format!(
                    "{what}: only {got} of {n} ranks arrived in time (missing ranks {missing:?})"
                )),
            );
        }
        if now.duration_since(last_check) >= LIVENESS_EVERY {
            last_check = now;
            // Ranks that never attached have no pid here; whoever started them may know.
            if let Some(e) = watch() {
                return Err(e);
            }
            for _ in 0..LIVENESS_BATCH.min(n) {
                let r = next;
                next = (next + 1) % n;
                let pid = seg.pid(r).load(Ordering::Acquire) as u32;
                if pid != 0 && !sys::pid_alive(pid) {
                    return Err(Error::new(ErrorKind::PeerFailed, "shm init")
                        .with_peer(r)
                        .with_detail(format!(
                            "{what}: rank {r} (pid {pid}) died during start-up"
                        )));
                }
            }
        }
        let nap = LIVENESS_EVERY.min(deadline.saturating_duration_since(now));
        sys::futex_wait(seg.gather_bell(), bell, nap);
    }
}

/// The ranks whose probe word rank `me` of `n` reads for the single-copy vote: its two ring
/// neighbours. What decides whether one process may read another (`ptrace_may_access`: the
/// two processes' credentials, the target being dumpable, a Yama scope) depends on classes of
/// processes, not on the pair: if any two ranks could not read each other, the classes differ
/// somewhere along the ring, so two neighbours on it differ and one of them fails its read.
/// Reading every rank instead cost `N - 1` system calls per rank, `N^2` across the job: at
/// 256 ranks on two loaded cores that was 0.5-1.3 s of the start-up.
pub(super) fn probe_targets(me: usize, n: usize) -> impl Iterator<Item = usize> {
    let next = (me + 1) % n.max(1);
    let prev = (me + n.max(1) - 1) % n.max(1);
    [next, prev]
        .into_iter()
        .enumerate()
        .filter(move |&(i, p)| p != me && !(i == 1 && p == next))
        .map(|(_, p)| p)
}

/// Decides, identically on every rank, whether single copy is used: each rank tries to read
/// the probe word of its ring neighbours ([`probe_targets`]) with `process_vm_readv` and votes;
/// single copy is on only if every read succeeded (ptrace restrictions can make this
/// asymmetric). Reported once, by the segment's rank 0.
pub(super) fn decide_single_copy(
    seg: &Segment,
    config: &Config,
    deadline: Instant,
    voters: &[usize],
) -> Result<bool> {
    let n = seg.layout.size;
    let mode = config.shm.single_copy;
    let mut first_failure: Option<String> = None;
    for &me in voters {
        let mut ok = mode != SingleCopy::Off;
        if ok {
            for p in probe_targets(me, n) {
                let pid = seg.pid(p).load(Ordering::Acquire) as u32;
                let addr = seg.probe_addr(p).load(Ordering::Acquire);
                let want = seg.probe_value(p).load(Ordering::Acquire);
                let mut got = [0u8; 8];
                match sys::cma_read(pid, addr, &mut got) {
                    Ok(()) if u64::from_ne_bytes(got) == want => {}
                    Ok(()) => {
                        ok = false;
                        first_failure.get_or_insert_with(|| {
                            format!("rank {me} read a wrong probe value from rank {p}")
                        });
                    }
                    Err(e) => {
                        ok = false;
                        first_failure.get_or_insert_with(|| {
                            format!("rank {me} cannot read rank {p} (pid {pid}): {e}")
                        });
                    }
                }
                if !ok {
                    break;
                }
            }
        }
        seg.cma_ok(me)
            .store(if ok { 1 } else { 2 }, Ordering::Release);
        arrive(seg, n, |s| s.probed());
    }
    wait_all(
        seg,
        n,
        |s| s.probed(),
        deadline,
        "single-copy probe",
        voters.first().copied().unwrap_or(0),
        &|| None,
    )?;
    let all_ok = (0..n).all(|r| seg.cma_ok(r).load(Ordering::Acquire) == 1);
    let reporter = voters.contains(&0);
    if mode == SingleCopy::Cma && !all_ok {
        return Err(
            Error::new(ErrorKind::Unsupported, "shm init").with_detail(format!(
                "shm.single_copy = \"cma\" but cross-memory attach is not permitted{}",
                first_failure.map(|f| format!(" ({f})")).unwrap_or_default()
            )),
        );
    }
    if reporter {
        match (mode, all_ok) {
            (SingleCopy::Off, _) => {
                tracing::info!("shm: single copy off by configuration; large messages use 2 copies")
            }
            (_, true) => tracing::info!("shm: single copy through process_vm_readv enabled"),
            (_, false) => tracing::warn!(
                "shm: cross-memory attach (process_vm_readv) not permitted{}; large messages use \
                 2 copies through the rings",
                first_failure.map(|f| format!(" ({f})")).unwrap_or_default()
            ),
        }
    }
    Ok(all_ok && mode != SingleCopy::Off)
}

#[cfg(test)]
mod tests {
    use super::probe_targets;

    #[test]
    fn the_vote_reads_each_ring_neighbour_and_no_more() {
        for n in 1..40usize {
            let mut read_by = vec![0usize; n];
            for me in 0..n {
                let t: Vec<usize> = probe_targets(me, n).collect();
                assert!(
                    t.len() <= 2 && t.iter().all(|&p| p < n && p != me),
                    "{n} {me} {t:?}"
                );
                // Every adjacent pair of the ring is checked in both directions.
                if n >= 2 {
                    assert!(t.contains(&((me + 1) % n)), "{n} {me} {t:?}");
                    assert!(t.contains(&((me + n - 1) % n)), "{n} {me} {t:?}");
                }
                for p in t {
                    read_by[p] += 1;
                }
            }
            assert!(
                read_by
                    .iter()
                    .all(|&k| k == usize::from(n >= 2) * n.min(3).saturating_sub(1)),
                "{n}: {read_by:?}"
            );
        }
    }
}

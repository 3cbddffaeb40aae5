//! Start-up steps shared by every way a rank joins a segment: claiming its block, waiting for
//! the others, and the single-copy vote.

use super::*;

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

/// Waits until `counter` reaches `n`, failing if a rank that already attached died or the
/// deadline passes.
pub(super) fn wait_all(
    seg: &Segment,
    n: usize,
    counter: fn(&Segment) -> &std::sync::atomic::AtomicU64,
    deadline: Instant,
    what: &str,
) -> Result<()> {
    let mut sleep = Duration::from_micros(50);
    let mut last_check = Instant::now();
    loop {
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
        if now.duration_since(last_check) > Duration::from_millis(50) {
            last_check = now;
            for r in 0..n {
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
        std::thread::sleep(sleep);
        sleep = (sleep * 2).min(Duration::from_millis(2));
    }
}

/// Decides, identically on every rank, whether single copy is used: each rank tries to read
/// every other rank's probe word with `process_vm_readv` and votes; single copy is on only if
/// every rank could read every other (ptrace restrictions can make this asymmetric). Reported
/// once, by the segment's rank 0.
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
            for p in (0..n).filter(|&p| p != me) {
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
        seg.probed().fetch_add(1, Ordering::AcqRel);
    }
    wait_all(seg, n, |s| s.probed(), deadline, "single-copy probe")?;
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

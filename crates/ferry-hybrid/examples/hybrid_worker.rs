//! A small multi-process worker for the hybrid backend's tests. Start N copies with
//! `FERRY_RANK`, `FERRY_SIZE`, `FERRY_JOB_ID` and `FERRY_NODE` (which ranks share a node); the
//! ranks rendezvous through the job's file store (`FERRY_STORE_DIR`, as under `srun`/`mpirun`
//! without the launcher).
//!
//! `hybrid_worker ITERS BYTES` prints the node map as `nodes [...]`, then sums a vector over
//! all ranks with a ring of exchanges (traffic within and across nodes) ITERS times, checks
//! every element and prints `rank R of N ok`. Exits 3 after printing `error: ...` when ferry
//! reports an error.

use ferry_core::file_store::FileStore;
use ferry_core::{Config, Error, ErrorKind, Exchange, LaunchInfo, MsgKey, Transport};
use ferry_hybrid::HybridTransport;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(3);
    }
}

fn arg(args: &[String], i: usize, default: usize) -> usize {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn run(args: &[String]) -> ferry_core::Result<()> {
    let config = Config::from_env()?;
    let launch = LaunchInfo::from_env()?;
    let (Some(size), Some(job)) = (launch.size, launch.job_id.as_deref()) else {
        return Err(Error::config(
            "hybrid_worker needs FERRY_SIZE and FERRY_JOB_ID",
        ));
    };
    let store = FileStore::for_job(job)?.remove_when_released_by(size);
    let mut t = HybridTransport::from_env(&config, &launch, &store)?;
    let nodes: Vec<usize> = (0..t.size()).map(|r| t.node_of(r)).collect();
    println!("nodes {nodes:?}");
    ring_allreduce(&mut t, arg(args, 0, 10), arg(args, 1, 64))?;
    t.finish()
}

fn ring_allreduce(t: &mut dyn Transport, iters: usize, bytes: usize) -> ferry_core::Result<()> {
    let (r, n) = (t.rank(), t.size());
    let elems = (bytes / 8).max(1);
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    for it in 0..iters {
        let mine = vec![(r as u64 + 1) * (it as u64 + 1); elems];
        let mut acc = mine.clone();
        let mut pass: Vec<u8> = mine.iter().flat_map(|x| x.to_le_bytes()).collect();
        for _ in 1..n {
            let mut got = Vec::new();
            let mut ex = Exchange::new();
            ex.send(right, MsgKey::user(it as u32), &pass);
            ex.recv(left, MsgKey::user(it as u32), &mut got);
            t.exchange(&mut ex)?;
            drop(ex);
            for (a, c) in acc.iter_mut().zip(got.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                *a += u64::from_le_bytes(b);
            }
            pass = got;
        }
        let want = (n as u64 * (n as u64 + 1) / 2) * (it as u64 + 1);
        if let Some(bad) = acc.iter().find(|&&a| a != want) {
            return Err(Error::new(ErrorKind::Protocol, "allreduce")
                .on_rank(r)
                .with_detail(format!("iteration {it}: got {bad}, want {want}")));
        }
    }
    println!("rank {r} of {n} ok");
    Ok(())
}

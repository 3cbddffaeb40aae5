//! t_alltoall: launcher test program (R1 with a real backend, T1/T5). Every rank sends a
//! distinct message to every other rank in each of ROUNDS rounds (one batched exchange per
//! round) and checks what it receives. Rank 0 prints `alltoall ok: N ranks, ROUNDS rounds,
//! backend B`. With `KILL_RANK`, that rank SIGKILLs itself in the middle of round ROUNDS/2,
//! and every other rank prints the error it gets (which must name the dead rank) and exits 1
//! after lingering for a second.
//! Usage: `t_alltoall [ROUNDS [BYTES [KILL_RANK]]]`.

use std::process::{Command, ExitCode};

use ferry::{Exchange, MsgKey};

/// How long a rank whose exchange failed stays before it leaves (see `run`).
const LINGER_MS: u64 = 1000;

fn payload(src: usize, dst: usize, round: usize, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|i| (src * 31 + dst * 7 + round * 13 + i) as u8)
        .collect()
}

fn run(rounds: usize, bytes: usize, kill_rank: Option<usize>) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let (rank, size) = (world.rank(), world.size());
    for round in 0..rounds {
        if Some(rank) == kill_rank && round == rounds / 2 {
            let _ = Command::new("kill")
                .args(["-KILL", &std::process::id().to_string()])
                .status();
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        let sends: Vec<Vec<u8>> = (0..size)
            .map(|dst| payload(rank, dst, round, bytes))
            .collect();
        let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); size];
        let mut ex = Exchange::new();
        let key = MsgKey::user(round as u32);
        for (dst, data) in sends.iter().enumerate() {
            if dst != rank {
                ex.send(dst, key, data);
            }
        }
        for (src, buf) in bufs.iter_mut().enumerate() {
            if src != rank {
                ex.recv(src, key, buf);
            }
        }
        if let Err(e) = world.transport().exchange(&mut ex) {
            // Stay in the job a moment before leaving: a rank that leaves at once makes its
            // peers fail on *it* (a cascade), hiding whether they detected the first failure
            // themselves, which is what this program shows.
            drop(ex);
            std::thread::sleep(std::time::Duration::from_millis(LINGER_MS));
            return Err(e);
        }
        drop(ex);
        for (src, buf) in bufs.iter().enumerate() {
            if src != rank && *buf != payload(src, rank, round, bytes) {
                return Err(ferry::Error::new(ferry::ErrorKind::Protocol, "t_alltoall")
                    .on_rank(rank)
                    .with_peer(src)
                    .with_detail(format!("wrong payload in round {round}")));
            }
        }
    }
    if rank == 0 {
        println!(
            "alltoall ok: {size} ranks, {rounds} rounds, backend {}",
            world.backend()
        );
    }
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let rounds = num(0, 20);
    let bytes = num(1, 1000);
    let kill_rank = args.get(2).and_then(|a| a.parse().ok());
    match run(rounds, bytes, kill_rank) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_alltoall: error: {e}");
            ExitCode::from(1)
        }
    }
}

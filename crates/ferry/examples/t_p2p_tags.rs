//! t_p2p_tags: launcher test program (bounded state, point-to-point tags). Every rank passes
//! two messages per iteration to its right neighbour, each iteration on a new tag, for ITERS
//! iterations, then as many again on the first tags (reused after the backend may have
//! retired their flows). Every message carries its iteration and place and is checked on
//! receipt. The transport's flow count is sampled every tenth of the run; the program prints
//! `rank R ok flows FIRST MAX LAST`, or the first wrong message and exits 1.
//! Usage: `t_p2p_tags [ITERS]` (default 20000).

use std::io::Write;
use std::process::ExitCode;

use ferry::{Exchange, MsgKey};

fn run(iters: u32) -> Result<String, String> {
    let mut world = ferry::init().map_err(|e| e.to_string())?;
    let (rank, size) = (world.rank(), world.size());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let total = 2 * iters;
    let mut flows = Vec::new();
    for i in 0..total {
        let key = MsgKey::user(i % iters);
        let first = (2 * i).to_le_bytes();
        let second = (2 * i + 1).to_le_bytes();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut ex = Exchange::new();
        ex.send(right, key, &first);
        ex.send(right, key, &second);
        ex.recv(left, key, &mut a);
        ex.recv(left, key, &mut b);
        world
            .transport()
            .exchange(&mut ex)
            .map_err(|e| e.to_string())?;
        drop(ex);
        if a != first || b != second {
            return Err(format!(
                "iteration {i} (tag {}): got {a:?} {b:?}, want {first:?} {second:?}",
                i % iters
            ));
        }
        if (i + 1) % (total / 10).max(1) == 0 {
            flows.push(world.transport().flow_count().unwrap_or(0));
        }
    }
    world.finish().map_err(|e| e.to_string())?;
    let first = flows.first().copied().unwrap_or(0);
    let max = flows.iter().copied().max().unwrap_or(0);
    let last = flows.last().copied().unwrap_or(0);
    Ok(format!("rank {rank} ok flows {first} {max} {last}"))
}

fn main() -> ExitCode {
    let iters: u32 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 20_000,
        Some(Ok(n)) if n > 0 => n,
        _ => {
            eprintln!("usage: t_p2p_tags [ITERS]");
            return ExitCode::from(2);
        }
    };
    match run(iters) {
        Ok(line) => {
            println!("{line}");
            let _ = std::io::stdout().flush();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("t_p2p_tags: error: {e}");
            ExitCode::from(1)
        }
    }
}

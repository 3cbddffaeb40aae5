//! t_monitor_insert: test program for communication monitoring (issue 09). In each of ITERS
//! iterations every rank sends a message of `64 + 8 * iteration` bytes to its right
//! neighbour, receives one from its left neighbour, and all ranks sum a value (allreduce);
//! a final gather to rank 0 ends the run. With INSERT_AT set, rank 0 sends one extra message
//! of 5000 bytes to its right neighbour in that iteration (which receives it), so that a run
//! checked against a recording without it has exactly one inserted message on each of the two
//! ranks. Rank 0 prints `t_monitor_insert ok: N ranks, ITERS iterations`.
//! Usage: `t_monitor_insert [ITERS [INSERT_AT]]`.

mod common;

use std::process::ExitCode;

use ferry::coll::{self, Group, ReduceOp};
use ferry::MsgKey;

fn run(iters: usize, insert_at: Option<usize>) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let (rank, size) = (world.rank(), world.size());
    let group = Group::world(size);
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let key = MsgKey::user(1);
    let mut buf = Vec::new();
    for i in 0..iters {
        let t = world.transport();
        if size > 1 {
            let data = vec![i as u8; 64 + 8 * i];
            if insert_at == Some(i) && rank == 0 {
                t.send(right, key, &[7u8; 5000])?;
            }
            t.send(right, key, &data)?;
            if insert_at == Some(i) && left == 0 {
                t.recv(left, key, &mut buf)?;
            }
            t.recv(left, key, &mut buf)?;
            if buf.len() != 64 + 8 * i {
                return Err(ferry::Error::invalid(
                    "t_monitor_insert",
                    format!("iteration {i}: {} bytes from rank {left}", buf.len()),
                )
                .on_rank(rank));
            }
        }
        let mut v = [rank as f64 + i as f64];
        coll::allreduce(t, &group, &mut v, &ReduceOp::Sum)?;
    }
    coll::gather(world.transport(), &group, 0, &(rank as u64).to_le_bytes())?;
    if rank == 0 {
        println!("t_monitor_insert ok: {size} ranks, {iters} iterations");
    }
    world.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let iters = args.first().and_then(|a| a.parse().ok()).unwrap_or(20);
    let insert_at = args.get(1).and_then(|a| a.parse().ok());
    common::main_with("t_monitor_insert", || run(iters, insert_at))
}

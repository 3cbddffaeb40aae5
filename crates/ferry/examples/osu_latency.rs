//! osu_latency: ping-pong latency between ranks 0 and 1, in the format of the OSU
//! micro-benchmarks (a `#` header, then `size latency_us` per line; half the round trip).
//!
//! Same methodology as OSU 5.x: for each size (1 B to 4 MiB in powers of two, or up to
//! `-m MAX`, or `-m MIN:MAX`), 1000 warm-up and 10000 timed round trips up to 8 KiB, 10 and
//! 100 above. `-i ITERS` / `-x WARMUP` override the counts. Extra ranks (if any) only wait.
//! Run: `ferry run -n 2 --backend tcp target/release/examples/osu_latency`.

mod osu_common;

use std::process::ExitCode;
use std::time::Instant;

use ferry::{Error, MsgKey, Transport};

const LARGE: usize = 8192;

type Args = osu_common::SizeArgs;

fn parse_args() -> Result<Args, String> {
    osu_common::parse("osu_latency", "", 1, |_, _| Ok(false))
}

fn run(args: &Args) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    if world.size() < 2 {
        return Err(Error::invalid("osu_latency", "needs at least 2 ranks").on_rank(rank));
    }
    if rank == 0 {
        println!(
            "# ferry osu_latency (OSU methodology), backend {}",
            world.backend()
        );
        println!("# Size          Latency (us)");
    }
    let t: &mut dyn Transport = world.transport();
    let key = MsgKey::user(1);
    let mut size = 1;
    while size < args.min {
        size *= 2;
    }
    let mut sbuf = vec![b'a'; args.max];
    let mut rbuf: Vec<u8> = Vec::with_capacity(args.max);
    while size <= args.max {
        let (iters, warmup) = if size > LARGE {
            (args.iters.unwrap_or(100), args.warmup.unwrap_or(10))
        } else {
            (args.iters.unwrap_or(10000), args.warmup.unwrap_or(1000))
        };
        sbuf[..size].fill(b'a');
        let mut start = Instant::now();
        for i in 0..iters + warmup {
            if i == warmup {
                start = Instant::now();
            }
            match rank {
                0 => {
                    t.send(1, key, &sbuf[..size])?;
                    t.recv(1, key, &mut rbuf)?;
                }
                1 => {
                    t.recv(0, key, &mut rbuf)?;
                    t.send(0, key, &sbuf[..size])?;
                }
                _ => {}
            }
        }
        let elapsed = start.elapsed();
        if rank == 0 {
            if rbuf.len() != size {
                return Err(Error::new(ferry::ErrorKind::Protocol, "osu_latency")
                    .on_rank(0)
                    .with_detail(format!("reply of {} bytes to {size}", rbuf.len())));
            }
            let us = elapsed.as_secs_f64() * 1e6 / (2.0 * iters as f64);
            println!("{size:<10}{us:>18.2}");
        }
        size *= 2;
    }
    world.finish()
}

fn main() -> ExitCode {
    osu_common::main("osu_latency", parse_args, run)
}

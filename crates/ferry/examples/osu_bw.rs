//! osu_bw: streaming bandwidth from rank 0 to rank 1, in the format of the OSU
//! micro-benchmarks (a `#` header, then `size MB/s` per line, MB = 10^6 bytes).
//!
//! Same methodology as OSU 5.x: per iteration rank 0 hands a window of 64 messages to the
//! transport at once (one batched exchange) and waits for a 4-byte acknowledgement; rank 1
//! receives the window (batched exchanges over a bounded set of buffers, below) and
//! acknowledges. 10 warm-up + 100 timed iterations up to 8 KiB, 2 + 20 above.
//!
//! The receiver's buffers: OSU's `osu_bw` posts the 64 `MPI_Irecv` of a window into one
//! buffer, so its receiver's working set is one message (1 MiB stays in L2). One exchange
//! cannot hold 64 mutable borrows of one buffer in safe Rust, and 64 distinct buffers make a
//! 64 MiB working set at 1 MiB, which measures the DRAM copy rate rather than the transport.
//! So rank 1 uses a pool of `RECV_SET / size` buffers (at least 1, at most the window) and
//! receives the window as consecutive exchanges of that many receives, reusing the pool:
//! up to 16 KiB the whole window is still one exchange with every receive posted before the
//! data arrives, as in OSU; from 32 KiB on the working set stays at 1 MiB (one message at
//! 1 MiB and above, exactly OSU's), and the sender's later messages arrive before their
//! receives are posted, which the transport must handle without losing its single copy.
//! (64 distinct buffers gave 4-12 GB/s at 1 MiB, one buffer 15-20 GB/s, Open MPI 15-21.) Rank 0 always streams the
//! whole window as one exchange. Sizes 1 B to 4 MiB, or `-m [MIN:]MAX`; `-i`/`-x`/`-w WINDOW`
//! override. Run: `ferry run -n 2 --backend shm target/release/examples/osu_bw`.

mod osu_common;

use std::process::ExitCode;
use std::time::Instant;

use ferry::{Error, Exchange, MsgKey, Transport};

const LARGE: usize = 8192;
/// Bytes of distinct receive buffers one exchange of the receiver may cover (half of one
/// core's L2 here, the other half holds the source); see the module comment.
const RECV_SET: usize = 1 << 20;

struct Args {
    min: usize,
    max: usize,
    iters: Option<usize>,
    warmup: Option<usize>,
    window: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut window = 64;
    let sizes = osu_common::parse("osu_bw", " [-w WINDOW]", 1, |flag, value| {
        if flag != "-w" {
            return Ok(false);
        }
        window = value()?.parse().map_err(|e| format!("-w: {e}"))?;
        Ok(true)
    })?;
    Ok(Args {
        min: sizes.min,
        max: sizes.max,
        iters: sizes.iters,
        warmup: sizes.warmup,
        window: window.max(1),
    })
}

fn run(args: &Args) -> ferry::Result<()> {
    let mut world = ferry::init()?;
    let rank = world.rank();
    if world.size() < 2 {
        return Err(Error::invalid("osu_bw", "needs at least 2 ranks").on_rank(rank));
    }
    if rank == 0 {
        println!(
            "# ferry osu_bw (OSU methodology, window {}), backend {}",
            args.window,
            world.backend()
        );
        println!("# Size      Bandwidth (MB/s)");
    }
    let t: &mut dyn Transport = world.transport();
    let data = MsgKey::user(2);
    let ack = MsgKey::user(3);
    let mut size = 1;
    while size < args.min {
        size *= 2;
    }
    let sbuf = vec![b'a'; args.max];
    // The receiver's buffer pool (see the module comment); pages are touched only when used.
    let pool_len = args.window.min((RECV_SET / size).max(1));
    let mut rbufs: Vec<Vec<u8>> = if rank == 1 {
        (0..pool_len).map(|_| vec![0u8; args.max]).collect()
    } else {
        Vec::new()
    };
    let mut ackbuf = [0u8; 4];
    while size <= args.max {
        let (iters, warmup) = if size > LARGE {
            (args.iters.unwrap_or(20), args.warmup.unwrap_or(2))
        } else {
            (args.iters.unwrap_or(100), args.warmup.unwrap_or(10))
        };
        let mut start = Instant::now();
        for i in 0..iters + warmup {
            if i == warmup {
                start = Instant::now();
            }
            match rank {
                0 => {
                    let mut ex = Exchange::new();
                    for _ in 0..args.window {
                        ex.send(1, data, &sbuf[..size]);
                    }
                    t.exchange(&mut ex)?;
                    drop(ex);
                    let mut ex = Exchange::new();
                    ex.recv_into(1, ack, &mut ackbuf);
                    t.exchange(&mut ex)?;
                }
                1 => {
                    let batch = args.window.min((RECV_SET / size).max(1));
                    let mut left = args.window;
                    while left > 0 {
                        let mut ex = Exchange::new();
                        for b in rbufs.iter_mut().take(batch.min(left)) {
                            ex.recv_into(0, data, &mut b[..size]);
                        }
                        t.exchange(&mut ex)?;
                        left -= batch.min(left);
                    }
                    t.send(0, ack, &ackbuf)?;
                }
                _ => {}
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if rank == 0 {
            let mbps = (size * args.window * iters) as f64 / 1e6 / secs;
            println!("{size:<10}{mbps:>18.2}");
        }
        size *= 2;
    }
    world.finish()
}

fn main() -> ExitCode {
    osu_common::main("osu_bw", parse_args, run)
}

//! osu_bw: streaming bandwidth from rank 0 to rank 1, in the format of the OSU
//! micro-benchmarks (a `#` header, then `size MB/s` per line, MB = 10^6 bytes).
//!
//! Same methodology as OSU 5.x: per iteration rank 0 hands a window of 64 messages to the
//! transport at once (one batched exchange) and waits for a 4-byte acknowledgement; rank 1
//! receives the window into one buffer, as OSU does, and acknowledges. 10 warm-up + 100 timed
//! iterations up to 8 KiB, 2 + 20 above.
//!
//! Why the receiver posts its receives one after another: OSU's `osu_bw` posts the 64
//! `MPI_Irecv` of a window into the same buffer, so its receiver's working set is one message
//! (1 MiB stays in L2). One exchange cannot hold 64 mutable borrows of one buffer in safe
//! Rust, and 64 distinct buffers make a 64 MiB working set at 1 MiB, which measures the DRAM
//! copy rate rather than the transport. So rank 1 receives the window as 64 consecutive
//! one-receive exchanges into a single buffer while rank 0 streams it as one exchange: the
//! same bytes through the same cache-resident buffer as OSU, and messages may still arrive
//! before their receive is posted, which the transport must handle without losing speed. Sizes 1 B to 4 MiB, or `-m [MIN:]MAX`; `-i`/`-x`/`-w WINDOW`
//! override. Run: `ferry run -n 2 --backend shm target/release/examples/osu_bw`.

use std::process::ExitCode;
use std::time::Instant;

use ferry::{Error, Exchange, MsgKey, Transport};

const LARGE: usize = 8192;

struct Args {
    min: usize,
    max: usize,
    iters: Option<usize>,
    warmup: Option<usize>,
    window: usize,
}

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mult)
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        min: 1,
        max: 1 << 22,
        iters: None,
        warmup: None,
        window: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "-m" => {
                let v = value()?;
                match v.split_once(':') {
                    Some((lo, hi)) => {
                        a.min = parse_size(lo).ok_or(format!("bad size `{lo}`"))?;
                        a.max = parse_size(hi).ok_or(format!("bad size `{hi}`"))?;
                    }
                    None => a.max = parse_size(&v).ok_or(format!("bad size `{v}`"))?,
                }
            }
            "-i" => a.iters = Some(value()?.parse().map_err(|e| format!("-i: {e}"))?),
            "-x" => a.warmup = Some(value()?.parse().map_err(|e| format!("-x: {e}"))?),
            "-w" => a.window = value()?.parse().map_err(|e| format!("-w: {e}"))?,
            "-h" | "--help" => {
                return Err(
                    "usage: osu_bw [-m [MIN:]MAX] [-i ITERS] [-x WARMUP] [-w WINDOW]".into(),
                )
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    a.min = a.min.max(1);
    a.window = a.window.max(1);
    Ok(a)
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
    // One receive buffer for the whole window, as in OSU (see the module comment).
    let mut rbuf: Vec<u8> = if rank == 1 {
        vec![0u8; args.max]
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
                    for _ in 0..args.window {
                        let mut ex = Exchange::new();
                        ex.recv_into(0, data, &mut rbuf[..size]);
                        t.exchange(&mut ex)?;
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
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("osu_bw: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu_bw: {e}");
            ExitCode::FAILURE
        }
    }
}

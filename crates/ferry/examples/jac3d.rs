//! jac3d: 3d Jacobi, 7-point stencil, with grid partitioning and shrinking (examples.md §7;
//! D2, D4, D5, D6, D7).
//!
//! Usage: `jac3d [options] [size [maxiter]]`, defaults 200 and 50. Options (second character
//! counts; `-x`, `-i`, `-c` consume the next argument): `-n` halo without corners, `-g` grid
//! partitioner with automatic block counts, `-x <X>` grid with X blocks in x, `-p` profiling
//! into `jac3d_profiling.txt`, `-s` final value sum, `-r` reservation, `-e` precomputed
//! transitions, `-a` precomputed action sequences, `-i <iter>` shrink every <iter> iterations,
//! `-c <count>` remove the first <count> processes at each shrink (default 1), `-l` an
//! application-supplied lexicographic layout, `-h` usage.

mod common;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::coll::Group;
use ferry::data::{
    ActionSeq, Container, DataFlow, Instance, LayoutOrder, Partitioner, Partitioning, ReduceOp,
    Space, Transition,
};
use ferry::Transport;

const USAGE: &str = "Usage: jac3d [options] [<side> [<maxiter>]]

Options:
 -n        : use halo partitioner without corners
 -g        : use grid partitioning with automatic block size
 -x <xblk> : use grid partitioning with given x block length
 -p        : write profiling data to 'jac3d_profiling.txt'
 -s        : print value sum at end (warning: sum done at master)
 -r        : reserve memory for both partitionings before the loop
 -e        : pre-calculate transitions
 -a        : pre-calculate action sequences
 -i <iter> : shrink the world every <iter> iterations (0: never)
 -c <cnt>  : remove the first <cnt> processes at each shrink (default 1)
 -l        : use an application-provided lexicographic layout
 -h        : print this help text and exit
";

#[derive(Default, Clone, Copy)]
struct Opts {
    no_corners: bool,
    grid: bool,
    xblocks: i64,
    profile: bool,
    print_sum: bool,
    reserve: bool,
    transitions: bool,
    actions: bool,
    shrink_every: i64,
    shrink_count: i64,
    own_layout: bool,
    size: i64,
    maxiter: i64,
}

fn main() -> ExitCode {
    let mut args = common::CmdLine::from_env();
    let mut o = Opts {
        shrink_count: 1,
        ..Opts::default()
    };
    while let Some(letter) = args.option() {
        match letter {
            Some(b'n') => o.no_corners = true,
            Some(b'g') => o.grid = true,
            Some(b'x') => {
                o.xblocks = args.value().map_or(0, common::atoi);
                o.grid = true;
            }
            Some(b'p') => o.profile = true,
            Some(b's') => o.print_sum = true,
            Some(b'r') => o.reserve = true,
            Some(b'e') => o.transitions = true,
            Some(b'a') => o.actions = true,
            Some(b'i') => o.shrink_every = args.value().map_or(0, common::atoi),
            Some(b'c') => o.shrink_count = args.value().map_or(0, common::atoi),
            Some(b'l') => o.own_layout = true,
            Some(b'h') => return common::usage(USAGE),
            _ => {}
        }
    }
    o.size = args.pos(0);
    o.maxiter = args.pos(1);
    common::main_with("jac3d", || run(o))
}

/// Grid block counts (x, y, z) for `p` tasks (examples.md §7): the first candidate of
/// strictly lowest cost, x outer, y inner.
fn grid_dims(p: usize, xfixed: i64) -> (usize, usize, usize) {
    let xs: Vec<usize> = if xfixed >= 1 && xfixed as usize <= p {
        vec![xfixed as usize]
    } else {
        (1..=p).collect()
    };
    let mut best = 3 * p as i64;
    let mut dims = (1, 1, p.max(1));
    for &x in &xs {
        for y in 1..=p {
            let z = (p as f64 / x as f64 / y as f64) as usize;
            if z == 0 || x * y * z > p {
                continue;
            }
            let (xi, yi, zi) = (x as i64, y as i64, z as i64);
            let cost =
                (yi - xi).abs() + (zi - xi).abs() + (zi - yi).abs() + 2 * (p as i64 - xi * yi * zi);
            if cost < best {
                best = cost;
                dims = (x, y, z);
            }
        }
    }
    dims
}

/// A container with the precomputed write->read switch bound to it (`-e`/`-a`).
struct Buf {
    c: Container<f64>,
    to_read: Option<ActionSeq<f64>>,
}

/// Everything that depends on the current world group.
struct Parts {
    group: Group,
    write: Partitioning,
    read: Partitioning,
    all: Partitioning,
    sum: Container<f64>,
    grid: Option<(usize, usize, usize)>,
}

fn make_parts(
    t: &mut dyn Transport,
    inst: &mut Instance,
    space: &Space,
    group: Group,
    o: &Opts,
) -> ferry::Result<Parts> {
    let grid = o.grid.then(|| grid_dims(group.size(), o.xblocks));
    let part = match grid {
        Some((x, y, z)) => Partitioner::Grid { blocks: [x, y, z] },
        None => Partitioner::Bisection,
    };
    let write = Partitioning::new(space, &group, &part)?;
    let halo = if o.no_corners {
        Partitioner::Halo { depth: 1 }
    } else {
        Partitioner::CornerHalo { depth: 1 }
    };
    let read = Partitioning::derived(space, &halo, &write)?;
    let sspace = Space::new1(1)?;
    let all = Partitioning::new(&sspace, &group, &Partitioner::All)?;
    let mut sum = Container::<f64>::new(inst, "sum", &sspace);
    sum.switch_to(t, &all, DataFlow::None, None)?;
    Ok(Parts {
        group,
        write,
        read,
        all,
        sum,
        grid,
    })
}

fn bind_switches(
    rd: &mut Buf,
    wr: &mut Buf,
    p: &Parts,
    rank: usize,
    o: &Opts,
) -> ferry::Result<()> {
    for b in [&mut *rd, &mut *wr] {
        b.to_read = None;
        // Write and read partitionings share one placement: the switch only moves halos.
        b.c.share_layout(&p.write, &p.read)?;
        if o.reserve {
            b.c.reserve(&[&p.write, &p.read])?;
        }
    }
    if o.transitions || o.actions {
        let shared = Arc::new(Transition::new(
            &p.write,
            &p.read,
            rank,
            DataFlow::Preserve,
            false,
        )?);
        for b in [rd, wr] {
            b.to_read = Some(if o.actions {
                b.c.bind(Arc::new(Transition::new(
                    &p.write,
                    &p.read,
                    rank,
                    DataFlow::Preserve,
                    false,
                )?))?
            } else {
                b.c.bind(shared.clone())?
            });
        }
    }
    Ok(())
}

/// Boundary planes in the spec's order (later ones overwrite earlier ones at edges).
fn set_boundary(c: &mut Container<f64>, size: i64) -> ferry::Result<()> {
    if c.num_mappings() == 0 {
        return Ok(());
    }
    let own = c.my_ranges()[0];
    let m = c.mapping_mut(0)?;
    let (f, t, st, b) = (own.from(), own.to(), m.strides, m.range.from());
    let planes = [
        (2, 0, -20.0),
        (2, size - 1, 15.0),
        (1, 0, -5.0),
        (1, size - 1, 10.0),
        (0, 0, -10.0),
        (0, size - 1, 5.0),
    ];
    for (d, at, v) in planes {
        if at < f[d] || at >= t[d] {
            continue;
        }
        let (mut lo, mut hi) = (f, t);
        lo[d] = at;
        hi[d] = at + 1;
        let n = (hi[0] - lo[0]) as usize;
        for z in lo[2]..hi[2] {
            for y in lo[1]..hi[1] {
                let off = (lo[0] - b[0]) as usize * st[0]
                    + (y - b[1]) as usize * st[1]
                    + (z - b[2]) as usize * st[2];
                if st[0] == 1 {
                    m.data[off..off + n].fill(v);
                } else {
                    for k in 0..n {
                        m.data[off + k * st[0]] = v;
                    }
                }
            }
        }
    }
    Ok(())
}

fn allreduce(t: &mut dyn Transport, p: &mut Parts, v: f64) -> ferry::Result<f64> {
    p.sum.fill(v);
    p.sum
        .switch_to(t, &p.all, DataFlow::Preserve, Some(&ReduceOp::Sum))?;
    Ok(p.sum.local_data()[0])
}

/// One Jacobi sweep over this rank's interior cells; returns the residuum contribution
/// (z outer, y middle, x inner) if asked for.
fn sweep(
    rd: &Container<f64>,
    wr: &mut Container<f64>,
    size: i64,
    with_res: bool,
) -> ferry::Result<f64> {
    let mut res = 0.0f64;
    if wr.num_mappings() == 0 {
        return Ok(res);
    }
    let own = wr.my_ranges()[0];
    let r = rd.mapping(0)?;
    let w = wr.mapping_mut(0)?;
    if r.strides[0] != 1 || w.strides[0] != 1 {
        return Err(ferry::Error::invalid(
            "jac3d",
            "the stencil needs unit x strides",
        ));
    }
    let (wf, wt, wb) = (own.from(), own.to(), w.range.from());
    let rf = r.range.from();
    let (rsy, rsz) = (r.strides[1], r.strides[2]);
    let (wsy, wsz) = (w.strides[1], w.strides[2]);
    let lo = [wf[0].max(1), wf[1].max(1), wf[2].max(1)];
    let hi = [
        wt[0].min(size - 1),
        wt[1].min(size - 1),
        wt[2].min(size - 1),
    ];
    if lo[0] >= hi[0] {
        return Ok(res);
    }
    let n = (hi[0] - lo[0]) as usize;
    let sixth = 1.0 / 6.0;
    for z in lo[2]..hi[2] {
        for y in lo[1]..hi[1] {
            let rc =
                (z - rf[2]) as usize * rsz + (y - rf[1]) as usize * rsy + (lo[0] - rf[0]) as usize;
            let zm = &r.data[rc - rsz..rc - rsz + n];
            let zp = &r.data[rc + rsz..rc + rsz + n];
            let ym = &r.data[rc - rsy..rc - rsy + n];
            let yp = &r.data[rc + rsy..rc + rsy + n];
            let mid = &r.data[rc - 1..rc + n + 1];
            let wc =
                (z - wb[2]) as usize * wsz + (y - wb[1]) as usize * wsy + (lo[0] - wb[0]) as usize;
            let out = &mut w.data[wc..wc + n];
            if with_res {
                for k in 0..n {
                    let vs = zm[k] + zp[k] + ym[k] + yp[k] + mid[k] + mid[k + 2];
                    let nv = sixth * vs;
                    out[k] = nv;
                    let d = mid[k + 1] - nv;
                    res += d * d;
                }
            } else {
                for k in 0..n {
                    let vs = zm[k] + zp[k] + ym[k] + yp[k] + mid[k] + mid[k + 2];
                    out[k] = sixth * vs;
                }
            }
        }
    }
    Ok(res)
}

fn run(o: Opts) -> ferry::Result<()> {
    let size = if o.size <= 0 { 200 } else { o.size };
    let maxiter = if o.maxiter <= 0 { 50 } else { o.maxiter };
    if size > 1 << 16 {
        return Err(common::usage_error(format!(
            "side length {size} is too large"
        )));
    }
    let mut world = ferry::init()?;
    let (rank, nprocs) = (world.rank(), world.size());
    let mut inst = world.data_instance()?;
    let t = world.transport();
    let space = Space::new3(size as u64, size as u64, size as u64)?;
    let wg = inst.world().clone();
    let mut parts = make_parts(t, &mut inst, &space, wg, &o)?;
    if rank == 0 {
        let mut h = format!(
            "{size} x {size} x {size} cells (mem {:.1} MB), running {maxiter} iterations with {nprocs} tasks",
            0.000016 * size as f64 * size as f64 * size as f64
        );
        if let Some((x, y, z)) = parts.grid {
            h.push_str(&format!(" (grid {z} x {y} x {x})"));
        }
        if o.no_corners {
            h.push_str(" (halo without corners)");
        }
        if o.shrink_every > 0 {
            h.push_str(&format!(
                " (shrink every {} iterations by {})",
                o.shrink_every, o.shrink_count
            ));
        }
        println!("{h}");
    }
    let start = Instant::now();
    let mut rd = Buf {
        c: Container::new(&mut inst, "data1", &space),
        to_read: None,
    };
    let mut wr = Buf {
        c: Container::new(&mut inst, "data2", &space),
        to_read: None,
    };
    if o.own_layout {
        // The application's own lexicographic layout (x fastest), handed to ferry.
        let lex = LayoutOrder::Custom(Arc::new(|r| {
            let (ex, ey) = (r.extent(0) as usize, r.extent(1) as usize);
            [1, ex, ex * ey]
        }));
        rd.c.set_layout_order(lex.clone())?;
        wr.c.set_layout_order(lex)?;
    }
    rd.c.switch_to(t, &parts.write, DataFlow::None, None)?;
    wr.c.switch_to(t, &parts.write, DataFlow::None, None)?;
    bind_switches(&mut rd, &mut wr, &parts, rank, &o)?;

    if rd.c.num_mappings() > 0 {
        let own = rd.c.my_ranges()[0];
        let m = rd.c.mapping_mut(0)?;
        let (f, tt, st, b) = (own.from(), own.to(), m.strides, m.range.from());
        for z in f[2]..tt[2] {
            for y in f[1]..tt[1] {
                for x in f[0]..tt[0] {
                    let off = (x - b[0]) as usize * st[0]
                        + (y - b[1]) as usize * st[1]
                        + (z - b[2]) as usize * st[2];
                    m.data[off] = ((x + y + z) & 6) as f64;
                }
            }
        }
    }
    set_boundary(&mut rd.c, size)?;

    let mut comm_time = Duration::ZERO;
    let mut next_shrink = o.shrink_every;
    let mut member = true;
    let mut iter = 0i64;
    while iter < maxiter {
        let c0 = Instant::now();
        match rd.to_read.as_mut() {
            Some(seq) => rd.c.run(t, seq, None)?,
            None => rd.c.switch_to(t, &parts.read, DataFlow::Preserve, None)?,
        }
        wr.c.switch_to(t, &parts.write, DataFlow::None, None)?;
        comm_time += c0.elapsed();
        set_boundary(&mut wr.c, size)?;
        let with_res = iter % 10 == 0;
        let res = sweep(&rd.c, &mut wr.c, size, with_res)?;
        std::mem::swap(&mut rd, &mut wr);
        if with_res {
            let c0 = Instant::now();
            let res = allreduce(t, &mut parts, res)?;
            comm_time += c0.elapsed();
            if parts.group.index_of(rank) == Some(0) {
                println!("Residuum after {:2} iters: {res:.6}", iter + 1);
            }
            if res < 0.001 {
                break;
            }
        }
        if o.shrink_every > 0 && iter == next_shrink && parts.group.size() as i64 > o.shrink_count {
            next_shrink += o.shrink_every;
            let removed: Vec<usize> = (0..o.shrink_count.max(0) as usize).collect();
            let smaller = inst.shrink(&parts.group, &removed)?;
            let new_parts = make_parts(t, &mut inst, &space, smaller, &o)?;
            rd.c.switch_to(t, &new_parts.write, DataFlow::Preserve, None)?;
            parts = new_parts;
            if parts.group.index_of(rank).is_none() {
                member = false;
                iter += 1;
                break;
            }
            wr.c.switch_to(t, &parts.write, DataFlow::None, None)?;
            bind_switches(&mut rd, &mut wr, &parts, rank, &o)?;
        }
        iter += 1;
    }

    if member && o.print_sum {
        let master = Partitioning::new(&space, &parts.group, &Partitioner::Master)?;
        rd.c.switch_to(t, &master, DataFlow::Preserve, None)?;
        if parts.group.index_of(rank) == Some(0) {
            let m = rd.c.mapping(0)?;
            let st = m.strides;
            let mut s = 0.0f64;
            for z in 0..size as usize {
                for y in 0..size as usize {
                    for x in 0..size as usize {
                        s += m.data[x * st[0] + y * st[1] + z * st[2]];
                    }
                }
            }
            println!("Global value sum after {iter} iterations: {s:.6}");
        }
    }
    if o.profile {
        write_profile(rank, iter, start.elapsed(), comm_time)?;
    }
    inst.finalize(world.transport())?;
    world.finish()
}

/// `-p`: one line per rank appended to `jac3d_profiling.txt` (total and switch time).
fn write_profile(rank: usize, iters: i64, total: Duration, comm: Duration) -> ferry::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open("jac3d_profiling.txt")
        .map_err(|e| ferry::Error::io("profiling file jac3d_profiling.txt", e))?;
    writeln!(
        f,
        "rank {rank}: {iters} iterations, total {:.6} s, switches and reductions {:.6} s",
        total.as_secs_f64(),
        comm.as_secs_f64()
    )
    .map_err(|e| ferry::Error::io("profiling file jac3d_profiling.txt", e))
}

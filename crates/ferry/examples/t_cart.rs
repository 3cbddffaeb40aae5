//! t_cart: test program of Cartesian topologies (X6, X7). Usage: `t_cart D0 D1 P0 P1`: the ranks
//! form a `D0 x D1` grid, dimension `d` periodic when `Pd` is 1 (D0 x D1 must be the job's
//! size). Every rank
//! 1. gathers its neighbours' ranks with a neighbour allgather and prints
//!    `cart R (X,Y): A B C D` (dimension 0 behind, ahead, dimension 1 behind, ahead; `-` where
//!    the grid ends), and checks `cart_shift` gives the same ranks;
//! 2. sends each neighbour `100 * R + slot` with a neighbour all-to-all and checks that what
//!    arrives behind was sent ahead and vice versa;
//! 3. sums the ranks with an allreduce on the grid (the chain of neighbours) and rank 0
//!    prints `cart sum S`.

use std::process::ExitCode;

use ferry::prelude::*;

fn fail(what: String) -> ferry::Error {
    ferry::Error::new(ferry::ErrorKind::Protocol, "t_cart").with_detail(what)
}

fn run() -> ferry::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or(0))
        .collect();
    let [d0, d1, p0, p1] = args[..] else {
        return Err(ferry::Error::invalid("t_cart", "usage: t_cart D0 D1 P0 P1"));
    };
    let mut comm = Comm::init()?;
    comm.set_cartesian(&[d0, d1], &[p0 == 1, p1 == 1])?;
    let me = comm.rank();
    let xy = comm.cart_coords()?;
    let got = comm.neighbor_allgather(&[me as u32])?;
    let mut shifts = Vec::new();
    for d in 0..2 {
        let (behind, ahead) = comm.cart_shift(d, 1)?;
        shifts.extend([behind, ahead]);
    }
    let mut line = format!("cart {me} ({},{}):", xy[0], xy[1]);
    for (slot, (g, s)) in got.iter().zip(&shifts).enumerate() {
        let from = g.as_ref().and_then(|v| v.first()).map(|&r| r as usize);
        if from != *s {
            return Err(fail(format!("slot {slot}: got {from:?}, shift says {s:?}")));
        }
        line += &from.map_or(" -".to_string(), |r| format!(" {r}"));
    }
    println!("{line}");
    let parts: Vec<Vec<u32>> = (0..4).map(|s| vec![100 * me as u32 + s]).collect();
    let back = comm.neighbor_alltoall(&parts)?;
    for (slot, (b, s)) in back.iter().zip(&shifts).enumerate() {
        let want = s.map(|r| vec![100 * r as u32 + (slot ^ 1) as u32]);
        if *b != want {
            return Err(fail(format!(
                "all-to-all slot {slot}: {b:?}, want {want:?}"
            )));
        }
    }
    let sum = comm.allreduce_value(me as u64, Op::Sum)?;
    if me == 0 {
        println!("cart sum {sum}");
    }
    comm.finish()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_cart: error: {e}");
            ExitCode::from(1)
        }
    }
}

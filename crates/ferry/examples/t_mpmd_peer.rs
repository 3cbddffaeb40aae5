//! t_mpmd_peer: the second program of the MPMD sessions test (X2, X4), started beside
//! t_sessions: `ferry run -n 2 t_sessions : -n 3 t_mpmd_peer`. Every rank prints the sets it
//! sees (`peer W: N sets: ...`), joins the world communicator that t_sessions makes (session
//! 0, tag `world`) for an allreduce, then allreduces within its own application's set and
//! prints `peer W: ferry://app/K rank R of S, sum of world ranks X`.
//! Usage: `t_mpmd_peer`.

use std::process::ExitCode;

use ferry::coll::ReduceOp;
use ferry::session::Session;

fn run() -> ferry::Result<()> {
    let mut s = Session::init()?;
    let w = s.world_rank();
    let mut line = format!("peer {w}: {} sets:", s.num_psets());
    for n in 0..s.num_psets() {
        let name = s.pset_name(n)?;
        line += &format!(" {name}({})", s.pset_size(&name)?);
    }
    println!("{line}");
    let world = s.group_from_pset("ferry://world")?;
    let cw = s.comm_from_group(&world, "world")?;
    let mut sum = [w as u64];
    cw.allreduce(&mut sum, &ReduceOp::Sum)?;
    let app = s.app_pset().ok_or_else(|| {
        ferry::Error::config("t_mpmd_peer runs as a later application of an MPMD launch")
    })?;
    let g = s.group_from_pset(&app)?;
    let c = s.comm_from_group(&g, "app")?;
    let mut mine = [w as u64];
    c.allreduce(&mut mine, &ReduceOp::Sum)?;
    println!(
        "peer {w}: {app} rank {} of {}, sum of world ranks {}",
        c.rank(),
        c.size(),
        mine[0]
    );
    drop((c, cw));
    s.finalize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("t_mpmd_peer: error: {e}");
            ExitCode::from(1)
        }
    }
}

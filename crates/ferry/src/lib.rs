//! ferry: communication and data distribution for SPMD programs.
//!
//! # Quick start
//!
//! A program holds one [`Comm`]: its rank's transport (over the backend chosen at run time,
//! `FERRY_BACKEND`), the group it talks over and the data layer. Ranks, roots, sources and
//! destinations are indices in the communicator, as in MPI. Started alone, a program is rank 0
//! of 1; under `ferry run -n 4 PROGRAM` each of the four processes gets its rank. Code that
//! should also run over a session's communicator ([`session::SessionComm`]) or a
//! fault-tolerant one ([`ft::Communicator`]) is written against the [`Communicator`] trait,
//! which all three implement.
//!
//! ```
//! use ferry::prelude::*;
//!
//! fn main() -> ferry::Result<()> {
//!     let mut comm = Comm::init()?;
//!     let (rank, size) = (comm.rank(), comm.size());
//!     // Collectives are methods on typed slices, in place.
//!     let mut x = [rank as f64 + 1.0, 1.0];
//!     comm.allreduce(&mut x, Op::Sum)?;
//!     assert_eq!(x, [(size * (size + 1) / 2) as f64, size as f64]);
//!     let biggest = comm.allreduce_value(rank as u64, Op::Max)?;
//!     assert_eq!(biggest, size as u64 - 1);
//!     comm.finish()
//! }
//! ```
//!
//! Point-to-point messages and the gather family, shown on an in-process job of four ranks
//! (threads over the in-memory backend, [`run_threads`]); the same body runs unchanged under
//! `ferry run`:
//!
//! ```
//! use ferry::prelude::*;
//!
//! let sums = ferry::run_threads(4, |mut comm: Comm| {
//!     let (rank, size) = (comm.rank(), comm.size());
//!     // A ring shift: send right, receive from the left, progressed together.
//!     let right = (rank + 1) % size;
//!     let left = (rank + size - 1) % size;
//!     let mut got = [0i32; 3];
//!     comm.sendrecv_into(&[rank as i32; 3], right, &mut got, left, 7)?;
//!     assert_eq!(got, [left as i32; 3]);
//!     // Plain send and receive, typed.
//!     if rank == 0 {
//!         comm.send(&[1.5f64, 2.5], 1, 0)?;
//!     } else if rank == 1 {
//!         assert_eq!(comm.recv_vec::<f64>(0, 0)?, vec![1.5, 2.5]);
//!     }
//!     // Into-buffer collectives reuse the caller's buffers (no allocation per call).
//!     let mut all = vec![0u32; size];
//!     comm.allgather_into(&[rank as u32 * 10], &mut all)?;
//!     assert_eq!(all, [0, 10, 20, 30]);
//!     let mut mine = [0u32];
//!     comm.scatter_into(&all, &mut mine, 0)?;
//!     assert_eq!(mine[0], rank as u32 * 10);
//!     let root = comm.broadcast_value(if rank == 2 { 42u8 } else { 0 }, 2)?;
//!     assert_eq!(root, 42);
//!     comm.barrier()?;
//!     let total = comm.allreduce_value(rank as i64, Op::Sum)?;
//!     comm.finish()?;
//!     Ok(total)
//! })?;
//! assert_eq!(sums, [6, 6, 6, 6]);
//! # Ok::<(), ferry::Error>(())
//! ```
//!
//! The data layer (index spaces, partitionings, containers switched between them):
//!
//! ```
//! use ferry::prelude::*;
//!
//! let totals = ferry::run_threads(3, |mut comm: Comm| {
//!     let space = Space::new1(12)?;
//!     let block = comm.partitioning(&space, &Partitioner::block())?;
//!     let master = comm.partitioning(&space, &Partitioner::Master)?;
//!     let mut a = comm.container::<f64>("a", &space);
//!     comm.switch(&mut a, &master, DataFlow::None)?;
//!     a.local_data_mut().iter_mut().enumerate().for_each(|(i, v)| *v = i as f64);
//!     comm.switch(&mut a, &block, DataFlow::Preserve)?; // rank r now holds 4 of the values
//!     let mine: f64 = a.local_data().iter().sum();
//!     let total = comm.allreduce_value(mine, Op::Sum)?;
//!     comm.finish()?;
//!     Ok(total)
//! })?;
//! assert_eq!(totals, [66.0; 3]);
//! # Ok::<(), ferry::Error>(())
//! ```
//!
//! # Layers
//! Below [`Comm`], [`init`] returns the [`World`] (the transport, [`World::transport`]);
//! collectives over any group live in [`coll`], the LAIK-style data layer in [`data`].
//! See docs/ARCHITECTURE.md: `ferry-proto` (sans-I/O protocol core) -> `ferry-core`
//! (transport trait, errors, config) -> backends (`ferry-tcp`, `ferry-shm`, ...) ->
//! `ferry-coll` (collectives) -> `ferry-data` (data layer) -> this facade.

pub mod bootstrap;
pub mod comm;
pub mod communicator;
pub mod prelude;
pub mod resize;
mod respawn;
pub mod retain;
pub mod session;
mod world;

pub use comm::{run_threads, Comm, PersistentColl};
pub use communicator::Communicator;
pub use ferry_coll as coll;
pub use ferry_core::{
    config, error, launch, stats, store, transport, BackendKind, Config, Error, ErrorKind,
    Exchange, LaunchInfo, MsgKey, MsgKind, Result, Stats, Transport,
};
pub use ferry_data as data;
/// Fault-tolerant communicators (failure modes, revoke, agreement, shrink): see
/// [`ferry_ft::Communicator`] and [`World::into_transport`].
pub use ferry_ft as ft;
pub use ferry_monitor as monitor;
/// Opt-in allocator (`#[global_allocator]`) that puts large allocations into node-shared
/// memory, so the shared-memory backend receives large messages from them with one `memcpy`
/// (like `MPI_Alloc_mem` with XPMEM); see `docs/PERFORMANCE.md`.
pub use ferry_shm::SharedHeap;
pub use world::{init, init_with, World};

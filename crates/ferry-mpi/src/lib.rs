//! ferry's MPI backend (`FERRY_BACKEND=mpi`, R3): the ferry [`Transport`] over nonblocking MPI
//! point-to-point calls, for jobs started with `mpirun`/`srun` on machines where MPI is the
//! fastest or the only sanctioned way to communicate.
//!
//! The backend is compiled only with the cargo feature `mpi` (the `ferry` crate's `mpi` feature
//! turns it on), because it needs an MPI installation and libclang at build time; without the
//! feature this crate holds only the MPI-independent [`tags`] mapping, so that
//! `cargo build --workspace` works on machines without MPI.
//!
//! How ferry's operations map to MPI (see [`MpiTransport`] for details):
//! - a batched [`Exchange`] becomes `MPI_Isend` for every send and a posted `MPI_Irecv` of
//!   [`EAGER_BYTES`] for every receive, matched by MPI as the message arrives: messages of
//!   that length or more travel as a first part announcing their length and a rest (so
//!   messages of unknown length need neither a probe nor a size exchange; keys too large for
//!   an MPI tag are matched with `MPI_Improbe` + `MPI_Imrecv`), progressed with
//!   `MPI_Test`/`MPI_Testsome`. Inside `exchange()`, `send()` and `recv()`
//!   MPI works on the caller's memory (no copy: sends leave from the caller's buffer, receives
//!   land in its `Vec` or slice); a rank waiting there takes messages nobody asked for yet
//!   into backend memory, so that a send never waits for an unrelated receive (M3, T1).
//!   `progress_exchange()` only lends MPI backend buffers (see [`MpiTransport`]);
//! - message keys become MPI tags as described in [`tags`]; serial order within a flow is MPI's
//!   non-overtaking rule;
//! - ferry communicates on `MPI_COMM_WORLD` itself when it initialised MPI (the program has no
//!   MPI traffic of its own; no communicator is created, which in Open MPI would leave a
//!   nonblocking-collective progress callback on every poll), and on private duplicates of
//!   it when the program initialised MPI first or `FERRY_MPI_DUP_COMM=1` (see
//!   [`MpiTransport::init`]);
//! - every MPI call returns its error code (`MPI_ERRORS_RETURN` is set on ferry's
//!   communicators), and a failing call becomes a ferry [`ErrorKind::Mpi`]
//!   error naming rank, operation, peer and the MPI error string — never an abort;
//! - collectives and reductions are **not** mapped to native MPI collectives: ferry's
//!   collectives are generic over [`Transport`] and run their own deterministic algorithms on
//!   top of this backend, so a reduction adds its terms in the same order whatever the backend,
//!   and printed results are identical to the tcp/shm/single runs (the equivalent of LAIK's
//!   `LAIK_MPI_REDUCE=0`). The only collective MPI calls are made at start-up (node discovery
//!   with `MPI_Allgather` of processor names, or `MPI_Comm_split_type` and `MPI_Allgather` of
//!   integers on duplicates, where order cannot matter) and at shutdown.
//!
//! [`Transport`]: ferry_core::Transport
//! [`Exchange`]: ferry_core::Exchange
//! [`ErrorKind::Mpi`]: ferry_core::ErrorKind::Mpi

pub mod tags;

#[cfg(feature = "mpi")]
mod transport;

#[cfg(feature = "mpi")]
pub use transport::{MpiTransport, EAGER_BYTES, MAX_EARLY_BYTES, MAX_INFLIGHT_SEND_BYTES};

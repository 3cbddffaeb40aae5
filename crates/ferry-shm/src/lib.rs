//! ferry's shared-memory backend (seed 001; S1-S4, R2b).
//!
//! - [`ShmTransport`]: every rank of the job on one host. Per ordered pair of ranks a bounded
//!   lock-free single-producer single-consumer ring carries small messages inline; large ones
//!   stream through it pipelined, in chunks that the receiver copies out while the sender
//!   copies in the next ones (`shm.pipeline`), or, when the host's cores are oversubscribed,
//!   move with one copy through cross-memory attach (`process_vm_readv`), with the chunked
//!   2-copy path as the fallback when the kernel does not permit it (`shm.single_copy`).
//!   Waiting spins briefly, then sleeps on a futex doorbell.
//! - the node-local part of the hybrid backend (`ferry-hybrid`, S2):
//!   [`ShmTransport::join_node`] joins one node's segment under global rank numbers.
//!
//! Start-up (R2b, 001 §4.2): with the launcher, the segment is named after `FERRY_JOB_ID` and
//! ranks come from `FERRY_RANK`; started by hand (`FERRY_BACKEND=shm FERRY_SIZE=N`), ranks race
//! on an atomic counter in a segment named after `FERRY_SHM_JOB` (default `default`).
//!
//! Shared containers (S3): [`ShmTransport`] offers node-shared memory (anonymous memory
//! files that peers map through `/proc`) so the data layer keeps containers where a peer copies
//! straight from the owner's memory; see `shared_alloc.rs`.
//!
//! No leftovers (S4): the segment's name is removed as soon as every rank has attached, so the
//! memory disappears with the last process, however it ends. See `segment.rs`.

mod flows;
mod handoff;
mod heap;
mod heap_map;
mod ring;
mod segment;
mod shared_alloc;
#[cfg(test)]
mod sim;
mod sys;
mod transport;

pub use handoff::{create_job_segment, SHM_FD_VAR};
pub use heap::SharedHeap;
pub use segment::{remove_job_segments, segment_name};
pub use transport::{ShmTransport, StartupWatch, DEFAULT_JOB};

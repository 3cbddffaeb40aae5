//! ferry: communication and data distribution for SPMD programs.
//!
//! A program calls [`init`] once; it returns the [`World`]: this rank's view of the job, over
//! the backend chosen at run time (`FERRY_BACKEND`, R3). Point-to-point messages and batched
//! exchanges go through [`World::transport`]; collectives live in [`coll`]; the LAIK-style data
//! layer (index spaces, partitionings, containers) in [`data`].
//!
//! Layers (see docs/ARCHITECTURE.md): `ferry-proto` (sans-I/O protocol core) ->
//! `ferry-core` (transport trait, errors, config) -> backends (`ferry-tcp`, `ferry-shm`, ...)
//! -> `ferry-coll` (collectives) -> `ferry-data` (data layer) -> this facade.

pub mod bootstrap;
pub mod resize;
mod world;

pub use ferry_coll as coll;
pub use ferry_core::{
    config, error, launch, stats, store, transport, BackendKind, Config, Error, ErrorKind,
    Exchange, LaunchInfo, MsgKey, MsgKind, Result, Stats, Transport,
};
pub use ferry_data as data;
/// Fault-tolerant communicators (failure modes, revoke, agreement, shrink): see
/// [`ferry_ft::Communicator`] and [`World::into_transport`].
pub use ferry_ft as ft;
pub use world::{init, init_with, World};

//! ferry-core: the contract between ferry's layers.
//!
//! - [`transport`]: the [`Transport`] trait every backend implements (M1, M3) and the batched
//!   [`Exchange`] with its polling-then-blocking driver;
//! - [`error`]: errors as values that name rank, operation, peer and cause (T5, F2);
//! - [`config`]: the TOML configuration with environment overrides (R4);
//! - [`launch`]: what a rank learns from its environment (R1, R2, R3);
//! - [`store`]: key-value stores used for rendezvous (bootstrap) and small shared state;
//! - [`stats`]: per-rank communication statistics (T7);
//! - [`shared`]: node-shared memory a backend may offer the data layer (S3);
//! - [`single`] and [`mem`]: the one-rank backend and the threads-as-ranks test backend.
//!
//! This crate never aborts the process and never panics on I/O, peer or user errors.

pub mod config;
pub mod discovery;
pub mod element;
pub mod error;
pub mod file_store;
pub mod launch;
pub mod mem;
pub mod pset;
pub mod respawn;
pub mod shared;
pub mod single;
pub mod stats;
pub mod store;
pub mod transport;

pub use config::Config;
pub use element::Element;
pub use error::{Error, ErrorKind, Result};
pub use ferry_proto::{MsgKey, MsgKind};
pub use launch::{BackendKind, LaunchInfo};
pub use shared::{RegionId, SharedMemory, SharedRegion};
pub use stats::Stats;
pub use store::Store;
pub use transport::{
    Exchange, OpState, PrepareError, RecvBuf, RecvOp, RetiredFlows, SendOp, Transport, WaitPolicy,
};

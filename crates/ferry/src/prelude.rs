//! The names most programs need, for `use ferry::prelude::*;`.

pub use crate::comm::{run_threads, Comm};
pub use crate::communicator::Communicator;
pub use ferry_coll::{CollOptions, ReduceOp};
pub use ferry_core::{Element, Error, ErrorKind, Result};
pub use ferry_data::{Container, DataFlow, Partitioner, Partitioning, Space};

/// Short name of [`ReduceOp`]: `Op::Sum`, `Op::Max`, ...
pub use ferry_coll::ReduceOp as Op;

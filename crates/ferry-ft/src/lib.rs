//! Fault-tolerant communicators (F1-F5, issue 07): a group of world ranks plus a generation
//! plus a failure mode (seed 002's ABORT, BLANK, SHRINK, REBUILD) and a message mode (NOP,
//! CONT), with ULFM's revoke, agreement and shrink as the consistency tools, and an optional
//! all-or-nothing rule for collectives.
//!
//! ```
//! use ferry_ft::{Communicator, FailureMode, MessageMode, Options};
//! // Four ranks as threads over the in-memory backend; a real job passes the transport of
//! // `ferry::init()?.into_transport()`.
//! let sums = ferry_core::mem::MemTransport::run(4, |transport| {
//!     let opts = Options::new(FailureMode::Shrink, MessageMode::Cont).all_or_nothing(true);
//!     let mut comm = Communicator::new(Box::new(transport), opts)?;
//!     let mut sum = [comm.world_rank() as i64];
//!     while let Err(e) = comm.allreduce(&mut sum, &ferry_coll::ReduceOp::Sum) {
//!         eprintln!("{e}");
//!         comm.revoke()?;
//!         comm = comm.shrink()?;
//!         sum = [comm.world_rank() as i64];
//!     }
//!     comm.finish()?;
//!     Ok::<i64, ferry_core::Error>(sum[0])
//! });
//! for s in sums {
//!     assert_eq!(s.unwrap(), 6);
//! }
//! ```
//!
//! Failure detection has no central manager: each backend reports the peers it finds dead
//! (connection loss and liveness probes on tcp, pidfds on shm), and the rank that sees a
//! failure floods a notice to the members (`ferry_proto::ft::Flood`), so ranks that never
//! talked to the dead one learn it too. See `docs/FAULT-TOLERANCE.md` for the model.
//!
//! A process can hold several communicators ([`Communicator::dup`], [`Communicator::split`]),
//! each with its own modes, generation, revoke and agreements: a notice of a death reaches
//! every communicator that contains the dead rank and no other, and a revoke only its own
//! communicator.

mod buddy;
mod comm;
mod create;
pub mod data;
mod engine;
pub mod rebuild;
pub mod recover;
mod wire;

pub use comm::Communicator;
pub use engine::FT_GENERATION_BASE;
pub use rebuild::{Joined, Respawn};
pub use recover::{Recoverable, Restored};

/// What happens to a communicator when one of its members fails (seed 002 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// The job ends: every rank that learns of the failure exits non-zero naming the failed
    /// rank (the default, as in MPI).
    Abort,
    /// The communicator keeps its size after recovery; the dead rank is a gap that every
    /// operation refuses at once ("invalid rank"); [`Communicator::live_size`] counts the rest.
    Blank,
    /// Recovery compacts the communicator over the survivors in their old relative order;
    /// ranks change, so programs re-read theirs.
    Shrink,
    /// New processes replace the dead ones, with the same rank numbers; the size stays. Needs
    /// a launcher that restarts failed ranks (`ferry run --respawn K`, see [`rebuild`]).
    Rebuild,
}

/// What operations do between a failure and the recovery (seed 002 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageMode {
    /// Every operation on the communicator fails until it is recovered.
    Nop,
    /// Operations that do not involve a failed rank go on; those that do fail naming it.
    Cont,
}

/// How a communicator behaves under failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Failure mode.
    pub failure: FailureMode,
    /// Message mode.
    pub message: MessageMode,
    /// Every collective either succeeds on every surviving member or fails on every one (F5):
    /// the collective is followed by an agreement on "every member succeeded".
    pub all_or_nothing: bool,
}

impl Default for Options {
    /// ABORT, CONT, collectives not all-or-nothing.
    fn default() -> Options {
        Options {
            failure: FailureMode::Abort,
            message: MessageMode::Cont,
            all_or_nothing: false,
        }
    }
}

impl Options {
    /// The given modes, collectives not all-or-nothing.
    pub fn new(failure: FailureMode, message: MessageMode) -> Options {
        Options {
            failure,
            message,
            all_or_nothing: false,
        }
    }

    /// Sets the all-or-nothing rule for collectives.
    pub fn all_or_nothing(mut self, on: bool) -> Options {
        self.all_or_nothing = on;
        self
    }

    /// Reads `FERRY_FT_MODE` (`abort`, `blank`, `shrink`, `rebuild`) over `default`'s failure
    /// mode; an unknown value is a configuration error naming it.
    pub fn from_env(default: Options) -> ferry_core::Result<Options> {
        let Ok(v) = std::env::var("FERRY_FT_MODE") else {
            return Ok(default);
        };
        let failure = match v.to_ascii_lowercase().as_str() {
            "abort" => FailureMode::Abort,
            "blank" => FailureMode::Blank,
            "shrink" => FailureMode::Shrink,
            "rebuild" => FailureMode::Rebuild,
            _ => {
                return Err(ferry_core::Error::config(format!(
                    "FERRY_FT_MODE=`{v}`: expected abort, blank, shrink or rebuild"
                )))
            }
        };
        Ok(Options { failure, ..default })
    }
}

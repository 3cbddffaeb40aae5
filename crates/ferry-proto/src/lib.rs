//! ferry's protocol core: everything about messages that can be decided without I/O.
//!
//! This crate never opens a socket, never reads a clock and never blocks: time, when it matters,
//! is an argument. That keeps it property-testable and fuzzable (see `tests/` and `fuzz/`).
//!
//! - [`ident`]: message identifiers (M2, seed 000 §4.5.4): a flow is
//!   (communicator generation, kind, source, destination, tag); each message of a flow carries a
//!   serial number so that out-of-order arrivals are matched to the right receive.
//! - [`matching`]: the receive side of M2: posted receives and a bounded store of early arrivals.
//! - [`frame`] and [`handshake`]: the TCP backend's wire format (T1, T4, T8), strict decoders.
//! - [`endpoint`]: the TCP backend's whole protocol state (outbox, inbox, pulls, connection
//!   phases, close handshake, goodbye, timers) as a state machine driven by events and time.
//! - [`tcp_protocol`]: the TCP backend's protocol decisions (which request carries a message,
//!   which frames may travel in which direction, how answers are addressed).
//! - [`ft`]: fault tolerance (F4): agreement on a value and on the failed ranks, and reliable
//!   broadcast (revoke, failure notices), with a seeded simulation in `tests/ft_sim.rs`.

pub mod endpoint;
pub mod fasthash;
pub mod frame;
pub mod ft;
pub mod handshake;
pub mod ident;
pub mod matching;
pub mod tcp_protocol;

pub use ident::{FifoFlows, FlowTable, MsgKey, MsgKind};
pub use matching::{Arrival, EarlyArrivals, MatchError};

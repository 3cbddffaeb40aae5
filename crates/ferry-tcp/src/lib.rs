//! ferry's TCP backend (seed 000): messages between ranks over TCP sockets, with bounded
//! buffers everywhere and no central component.
//!
//! [`TcpTransport`] implements [`ferry_core::Transport`]:
//! - T1: bounded inbox (`tcp.inbox_messages`, `tcp.inbox_bytes`) and outbox (`tcp.outbox_bytes`)
//!   with the ADD/TRY/GET requests of 000 §4.4: a full receiver refuses and later pulls;
//! - T2: lazily opened connections, capped (`tcp.connection_cap`), least recently used idle
//!   connection closed first, with a close handshake that never loses a frame;
//! - T3: fair service of the listening socket and all connections (level-triggered epoll,
//!   rotating order, bounded work per socket per pass);
//! - T4: non-blocking sockets, `TCP_NODELAY`, many frames (header and payload) per `writev`,
//!   large payloads read straight into the posted receive buffer;
//! - T5: a peer whose connection breaks without an orderly `Bye`, or that cannot be reached within
//!   `tcp.connect_timeout_ms`, fails the operations that need it with an error naming rank,
//!   operation, peer and cause; everything else waits as long as the peers are alive (optionally bounded by `general.operation_timeout_ms`);
//! - T7: per-peer statistics plus connection, eviction, refusal and GET counters;
//! - T8: a per-job secret in the connection handshake; strangers, garbage and truncated frames
//!   cost the offending connection only.
//!
//! The protocol itself is `ferry_proto::endpoint`, a sans-I/O state machine that a seeded
//! simulation drives through drops, kills and full inboxes; this crate is its I/O driver
//! (sockets, epoll, clock, the program's buffers). The wire format lives in
//! `ferry_proto::frame` and `ferry_proto::handshake` (property-tested and fuzzable). This crate
//! never panics on input from peers or the network.

mod limits;
mod link;
mod poller;
mod spare;
mod transport;

pub use transport::TcpTransport;

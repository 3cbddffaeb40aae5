//! Errors as values (T5, F2): every failure names the rank it happened on, the operation, the
//! peer when there is one, and the cause as a `source()` chain.

use std::borrow::Cow;
use std::fmt;

/// Result type of every communicating call in ferry.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely, so that callers can decide how to react without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A peer died, closed its connection or is unreachable.
    PeerFailed,
    /// An operation did not complete within its configured timeout.
    Timeout,
    /// A peer sent something that violates the protocol (malformed or truncated frame, bad
    /// handshake, wrong secret).
    Protocol,
    /// Configuration file or environment is wrong.
    Config,
    /// The caller passed an invalid argument (rank out of range, size mismatch, ...).
    InvalidArgument,
    /// An operating-system call failed locally.
    Io,
    /// A bounded resource is exhausted (back-pressure, not failure).
    ResourceExhausted,
    /// The operation is not available on this backend or platform.
    Unsupported,
    /// The MPI library reported an error.
    Mpi,
    /// The communicator was revoked or shrunk underneath the operation.
    Revoked,
}

impl ErrorKind {
    fn describe(self) -> &'static str {
        match self {
            ErrorKind::PeerFailed => "peer failed",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Protocol => "protocol violation",
            ErrorKind::Config => "configuration error",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Io => "I/O error",
            ErrorKind::ResourceExhausted => "resource exhausted",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Mpi => "MPI error",
            ErrorKind::Revoked => "communicator revoked",
        }
    }
}

/// A ferry error: kind, the operation, on which rank, with which peer, and why.
///
/// Displayed as `rank 2: recv from rank 3: peer failed: connection reset by peer`, with the
/// detail and the `source()` chain after the kind.
pub struct Error {
    kind: ErrorKind,
    op: Cow<'static, str>,
    rank: Option<usize>,
    peer: Option<usize>,
    detail: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` raised by operation `op` (e.g. `"recv"`, `"allreduce"`).
    pub fn new(kind: ErrorKind, op: impl Into<Cow<'static, str>>) -> Error {
        Error {
            kind,
            op: op.into(),
            rank: None,
            peer: None,
            detail: None,
            source: None,
        }
    }

    /// Sets the rank the error happened on.
    pub fn on_rank(mut self, rank: usize) -> Error {
        self.rank = Some(rank);
        self
    }

    /// Sets the rank the operation talked to.
    pub fn with_peer(mut self, peer: usize) -> Error {
        self.peer = Some(peer);
        self
    }

    /// Adds a human-readable detail (what was expected, which limit, ...).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.detail = Some(detail.into());
        self
    }

    /// Chains the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.source = Some(Box::new(source));
        self
    }

    /// Wraps this error as the cause of a higher-level operation on the same rank, keeping the
    /// kind (so a collective that failed because a peer died is still a peer failure).
    pub fn context(self, op: impl Into<Cow<'static, str>>) -> Error {
        let kind = self.kind;
        let rank = self.rank;
        let peer = self.peer;
        Error {
            kind,
            op: op.into(),
            rank,
            peer,
            detail: None,
            source: Some(Box::new(self)),
        }
    }

    /// Fills in the rank if the lower layer did not know it.
    pub fn or_rank(mut self, rank: usize) -> Error {
        if self.rank.is_none() {
            self.rank = Some(rank);
        }
        self
    }

    /// The coarse kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The operation that failed.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// The rank the error happened on, if known.
    pub fn rank(&self) -> Option<usize> {
        self.rank
    }

    /// The peer rank involved, if any.
    pub fn peer(&self) -> Option<usize> {
        self.peer
    }

    /// Whether the error means a peer is gone or unreachable (timeouts count: a silent peer is
    /// presumed dead, seed 000 §5.3.2).
    pub fn is_peer_failure(&self) -> bool {
        matches!(self.kind, ErrorKind::PeerFailed | ErrorKind::Timeout)
    }

    /// Whether retrying the same operation later can succeed (back-pressure, transient timeouts).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::ResourceExhausted | ErrorKind::Timeout)
    }

    /// Shorthand for an I/O error of `op` on `rank` with `peer`.
    pub fn io(op: impl Into<Cow<'static, str>>, err: std::io::Error) -> Error {
        let kind = match err.kind() {
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::NotConnected => ErrorKind::PeerFailed,
            std::io::ErrorKind::TimedOut => ErrorKind::Timeout,
            _ => ErrorKind::Io,
        };
        Error::new(kind, op).with_source(err)
    }

    /// Shorthand for an invalid-argument error.
    pub fn invalid(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, op).with_detail(detail)
    }

    /// Shorthand for a configuration error.
    pub fn config(detail: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, "configure").with_detail(detail)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(rank) = self.rank {
            write!(f, "rank {rank}: ")?;
        }
        write!(f, "{}", self.op)?;
        if let Some(peer) = self.peer {
            write!(f, " (peer rank {peer})")?;
        }
        write!(f, ": {}", self.kind.describe())?;
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        // The chain is printed inline so that a single `{}` tells the whole story, as the
        // launcher and the examples print errors with `{}`.
        let mut cause = self
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static));
        while let Some(err) = cause {
            write!(f, ": {err}")?;
            cause = if err.is::<Error>() {
                // A nested ferry Error already printed its own chain.
                None
            } else {
                err.source()
            };
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_rank_op_peer_and_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
        let e = Error::io("recv", io).on_rank(2).with_peer(3);
        assert_eq!(e.kind(), ErrorKind::PeerFailed);
        assert!(e.is_peer_failure());
        assert_eq!(
            e.to_string(),
            "rank 2: recv (peer rank 3): peer failed: connection reset"
        );
        let outer = e.context("allreduce");
        assert_eq!(outer.kind(), ErrorKind::PeerFailed);
        assert_eq!(
            outer.to_string(),
            "rank 2: allreduce (peer rank 3): peer failed: rank 2: recv (peer rank 3): peer failed: connection reset"
        );
        assert!(std::error::Error::source(&outer).is_some());
    }
}

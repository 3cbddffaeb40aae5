//! [`Communicator`]: what every communicator of ferry offers, so that code written once runs
//! over any of them.
//!
//! ferry has three communicator types, each for its own way of starting: [`crate::Comm`]
//! (the world, or a group of it, with the data layer), [`crate::session::SessionComm`]
//! (made from a process set of a session, X3) and [`crate::ft::Communicator`] (fault
//! tolerant: failure modes, revoke, agreement, shrink). They keep their own extra methods;
//! this trait is their common part, with [`crate::Comm`]'s signatures: typed
//! point-to-point, barrier, broadcast and all-reduce, ranks being indices in the
//! communicator.
//!
//! ```
//! use ferry::prelude::*;
//!
//! /// A ring shift and a sum, for any communicator.
//! fn ring_sum<C: Communicator>(c: &mut C) -> ferry::Result<i64> {
//!     let (me, n) = (c.rank(), c.size());
//!     c.send_value(me as i64, (me + 1) % n, 7)?;
//!     let left: i64 = c.recv_value((me + n - 1) % n, 7)?;
//!     c.allreduce_value(left, Op::Sum)
//! }
//!
//! let sums = ferry::run_threads(3, |mut comm| ring_sum(&mut comm))?;
//! assert_eq!(sums, vec![3, 3, 3]);
//! # Ok::<(), ferry::Error>(())
//! ```

use ferry_coll::ReduceOp;
use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Error, ErrorKind, Result};

use crate::session::SessionComm;
use crate::Comm;

/// The operations every ferry communicator offers (see the [module](self) docs). Ranks,
/// sources, destinations and roots are indices in the communicator; every member calls the
/// collectives in the same order.
pub trait Communicator {
    /// This process's index in the communicator.
    fn rank(&self) -> usize;

    /// Number of members.
    fn size(&self) -> usize;

    /// Sends `data` to member `dest` with `tag`; returns when `data` may be reused.
    fn send<T: Element>(&mut self, data: &[T], dest: usize, tag: u32) -> Result<()>;

    /// Receives the next message of member `src` with `tag` into `buf`; the message must have
    /// exactly `buf.len()` elements (another length is an error naming both).
    fn recv_into<T: Element>(&mut self, buf: &mut [T], src: usize, tag: u32) -> Result<()>;

    /// Blocks until every member has entered the barrier.
    fn barrier(&mut self) -> Result<()>;

    /// Copies member `root`'s `data` into every member's `data` (same length everywhere).
    fn broadcast<T: Element>(&mut self, data: &mut [T], root: usize) -> Result<()>;

    /// Combines every member's `data` element-wise with `op`; every member gets the result.
    fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp<T>) -> Result<()>;

    /// Sends one value (see [`Communicator::send`]).
    fn send_value<T: Element>(&mut self, value: T, dest: usize, tag: u32) -> Result<()> {
        self.send(std::slice::from_ref(&value), dest, tag)
    }

    /// Receives one value (see [`Communicator::recv_into`]).
    fn recv_value<T: Element>(&mut self, src: usize, tag: u32) -> Result<T> {
        let mut v = [T::default()];
        self.recv_into(&mut v, src, tag)?;
        Ok(v[0])
    }

    /// The root's `value` on every member.
    fn broadcast_value<T: Element>(&mut self, value: T, root: usize) -> Result<T> {
        let mut v = [value];
        self.broadcast(&mut v, root)?;
        Ok(v[0])
    }

    /// `value` combined over all members with `op`.
    fn allreduce_value<T: Element>(&mut self, value: T, op: ReduceOp<T>) -> Result<T> {
        let mut v = [value];
        self.allreduce(&mut v, op)?;
        Ok(v[0])
    }
}

impl Communicator for Comm {
    fn rank(&self) -> usize {
        Comm::rank(self)
    }
    fn size(&self) -> usize {
        Comm::size(self)
    }
    fn send<T: Element>(&mut self, data: &[T], dest: usize, tag: u32) -> Result<()> {
        Comm::send(self, data, dest, tag)
    }
    fn recv_into<T: Element>(&mut self, buf: &mut [T], src: usize, tag: u32) -> Result<()> {
        Comm::recv_into(self, buf, src, tag)
    }
    fn barrier(&mut self) -> Result<()> {
        Comm::barrier(self)
    }
    fn broadcast<T: Element>(&mut self, data: &mut [T], root: usize) -> Result<()> {
        Comm::broadcast(self, data, root)
    }
    fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp<T>) -> Result<()> {
        Comm::allreduce(self, data, op)
    }
}

/// Copies a received message into `buf`, or says which lengths differ.
fn fill<T: Element>(buf: &mut [T], got: &[u8], rank: usize, src: usize) -> Result<()> {
    let dst = as_bytes_mut(buf);
    if dst.len() != got.len() {
        return Err(Error::new(ErrorKind::InvalidArgument, "recv")
            .on_rank(rank)
            .with_detail(format!(
                "message of {} bytes from member {src} into a buffer of {} bytes",
                got.len(),
                dst.len()
            )));
    }
    dst.copy_from_slice(got);
    Ok(())
}

impl Communicator for SessionComm {
    fn rank(&self) -> usize {
        SessionComm::rank(self)
    }
    fn size(&self) -> usize {
        SessionComm::size(self)
    }
    fn send<T: Element>(&mut self, data: &[T], dest: usize, tag: u32) -> Result<()> {
        SessionComm::send(self, dest, tag, as_bytes(data))
    }
    fn recv_into<T: Element>(&mut self, buf: &mut [T], src: usize, tag: u32) -> Result<()> {
        let mut got = Vec::new();
        SessionComm::recv(self, src, tag, &mut got)?;
        fill(buf, &got, SessionComm::rank(self), src)
    }
    fn barrier(&mut self) -> Result<()> {
        SessionComm::barrier(self)
    }
    fn broadcast<T: Element>(&mut self, data: &mut [T], root: usize) -> Result<()> {
        SessionComm::broadcast(self, root, data)
    }
    fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp<T>) -> Result<()> {
        SessionComm::allreduce(self, data, &op)
    }
}

impl Communicator for ferry_ft::Communicator {
    fn rank(&self) -> usize {
        ferry_ft::Communicator::rank(self)
    }
    fn size(&self) -> usize {
        ferry_ft::Communicator::size(self)
    }
    fn send<T: Element>(&mut self, data: &[T], dest: usize, tag: u32) -> Result<()> {
        ferry_ft::Communicator::send(self, dest, tag, as_bytes(data))
    }
    fn recv_into<T: Element>(&mut self, buf: &mut [T], src: usize, tag: u32) -> Result<()> {
        let mut got = Vec::new();
        ferry_ft::Communicator::recv(self, src, tag, &mut got)?;
        fill(buf, &got, ferry_ft::Communicator::world_rank(self), src)
    }
    fn barrier(&mut self) -> Result<()> {
        ferry_ft::Communicator::barrier(self)
    }
    fn broadcast<T: Element>(&mut self, data: &mut [T], root: usize) -> Result<()> {
        // The fault-tolerant broadcast moves bytes of the root's length.
        let mut bytes = as_bytes(data).to_vec();
        ferry_ft::Communicator::broadcast(self, root, &mut bytes)?;
        let me = ferry_ft::Communicator::world_rank(self);
        fill(data, &bytes, me, root)
    }
    fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp<T>) -> Result<()> {
        ferry_ft::Communicator::allreduce(self, data, &op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::mem::MemTransport;
    use ferry_ft::{FailureMode, MessageMode, Options};

    /// The same generic code over two communicator types: a ring shift of typed values, a
    /// broadcast from the last member, an all-reduce and a barrier.
    fn exercise<C: Communicator>(c: &mut C) -> Result<(i64, [u32; 2], f64)> {
        let (me, n) = (c.rank(), c.size());
        c.send(&[me as i64, 10], (me + 1) % n, 3)?;
        let mut got = [0i64; 2];
        c.recv_into(&mut got, (me + n - 1) % n, 3)?;
        let mut b = if me == n - 1 { [7u32, 9] } else { [0, 0] };
        c.broadcast(&mut b, n - 1)?;
        let s = c.allreduce_value(me as f64 + 0.5, ReduceOp::Sum)?;
        c.barrier()?;
        Ok((got[0] + got[1], b, s))
    }

    fn expected(n: usize) -> Vec<(i64, [u32; 2], f64)> {
        let total = (0..n).map(|r| r as f64 + 0.5).sum();
        (0..n)
            .map(|me| (((me + n - 1) % n) as i64 + 10, [7, 9], total))
            .collect()
    }

    #[test]
    fn generic_code_runs_over_comm() {
        let got = crate::run_threads(4, |mut c| exercise(&mut c)).unwrap();
        assert_eq!(got, expected(4));
    }

    #[test]
    fn generic_code_runs_over_the_fault_tolerant_communicator() {
        let got: Vec<_> = MemTransport::run(4, |t| {
            let opts = Options::new(FailureMode::Shrink, MessageMode::Cont);
            let mut c = ferry_ft::Communicator::new(Box::new(t), opts)?;
            let r = exercise(&mut c)?;
            c.finish()?;
            Ok::<_, Error>(r)
        })
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
        assert_eq!(got, expected(4));
    }

    #[test]
    fn a_message_of_another_length_is_an_error_naming_both() {
        let got = crate::run_threads(2, |mut c| {
            if Communicator::rank(&c) == 0 {
                Communicator::send(&mut c, &[1u8, 2, 3], 1, 1)?;
                Ok(String::new())
            } else {
                let mut buf = [0u8; 2];
                let e = Communicator::recv_into(&mut c, &mut buf, 0, 1).unwrap_err();
                Ok(e.to_string())
            }
        })
        .unwrap();
        // Comm's own recv_into checks the length in the transport; its message names both.
        assert!(got[1].contains('3') && got[1].contains('2'), "{}", got[1]);
    }
}

//! Collectives of a [`Comm`] on typed slices.
//!
//! Barrier, broadcast and the reductions are `ferry-coll`'s (algorithm chosen by size, same
//! bits on every backend; the `_with` variants take [`CollOptions`], e.g. the strict
//! rank-ordered fold). The gather family with equal block sizes — gather, allgather, scatter,
//! all-to-all — runs here as one batched exchange per call, one message per pair of members
//! that have something to say to each other, written straight into the caller's buffer and
//! reusing the communicator's operation vectors: no allocation per call. Blocks of different
//! sizes, or many ranks, call `ferry-coll`'s byte-level versions through [`Comm::transport`].
//!
//! On a communicator with a Cartesian topology the gather family (all-to-all aside) runs
//! `ferry-coll`'s chain algorithms instead, so it reaches only the grid's chain (`topo.rs`).
//!
//! Messages of the typed gather family carry kind COLLECTIVE, the group's generation, and a
//! tag with bit 24 set (above every tag `ferry-coll` uses: sequence < 256 in bits 16-23,
//! kind in 8-15, phase in 0-7), then this communicator's own sequence number and the kind.

use ferry_coll::{CollOptions, ReduceOp};
use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Error, MsgKey, MsgKind, Result};

use super::Comm;

/// Tag bit that keeps the typed gather family apart from `ferry-coll`'s tags.
const TYPED_BIT: u32 = 1 << 24;
/// Sequence numbers wrap here; flows keep FIFO order, so reuse after a window is safe.
const SEQ_WINDOW: u32 = 256;

#[derive(Clone, Copy)]
#[repr(u32)]
enum Kind {
    Gather = 1,
    Allgather = 2,
    Scatter = 3,
    Alltoall = 4,
}

impl Comm {
    /// Names the collective and this rank in an error from below.
    fn coll_err(&self, name: &'static str) -> impl Fn(Error) -> Error {
        let rank = self.world.rank();
        move |e: Error| {
            if e.op() == name {
                e.or_rank(rank)
            } else {
                e.context(name).or_rank(rank)
            }
        }
    }

    /// Blocks until every member has entered the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        ferry_coll::barrier(self.world.transport(), &self.group)
    }

    /// Copies the root's `data` into every member's `data` (all members pass the same length).
    pub fn broadcast<T: Element>(&mut self, data: &mut [T], root: usize) -> Result<()> {
        ferry_coll::broadcast_slice(self.world.transport(), &self.group, root, data)
    }

    /// The root's `value` on every member (other members' `value` is ignored).
    pub fn broadcast_value<T: Element>(&mut self, value: T, root: usize) -> Result<T> {
        let mut v = [value];
        self.broadcast(&mut v, root)?;
        Ok(v[0])
    }

    /// Combines every member's `data` element-wise with `op`; the result lands in the root's
    /// `data`, the others' `data` is unchanged.
    pub fn reduce<T: Element>(
        &mut self,
        data: &mut [T],
        root: usize,
        op: ReduceOp<T>,
    ) -> Result<()> {
        self.reduce_with(data, root, op, &CollOptions::default())
    }

    /// [`Comm::reduce`] with options (algorithm, combination order).
    pub fn reduce_with<T: Element>(
        &mut self,
        data: &mut [T],
        root: usize,
        op: ReduceOp<T>,
        opts: &CollOptions,
    ) -> Result<()> {
        ferry_coll::reduce_with(self.world.transport(), &self.group, root, data, &op, opts)
    }

    /// Combines every member's `data` element-wise with `op` and leaves the result, the same
    /// bits on every member, in every member's `data`.
    pub fn allreduce<T: Element>(&mut self, data: &mut [T], op: ReduceOp<T>) -> Result<()> {
        self.allreduce_with(data, op, &CollOptions::default())
    }

    /// [`Comm::allreduce`] with options (algorithm, combination order).
    pub fn allreduce_with<T: Element>(
        &mut self,
        data: &mut [T],
        op: ReduceOp<T>,
        opts: &CollOptions,
    ) -> Result<()> {
        ferry_coll::allreduce_with(self.world.transport(), &self.group, data, &op, opts)
    }

    /// [`Comm::allreduce`] of `send` into `recv` (same length); `send` is left unchanged.
    pub fn allreduce_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp<T>,
    ) -> Result<()> {
        if send.len() != recv.len() {
            return Err(Error::invalid(
                "allreduce",
                format!(
                    "send buffer of {} elements, receive buffer of {}",
                    send.len(),
                    recv.len()
                ),
            )
            .on_rank(self.world.rank()));
        }
        recv.copy_from_slice(send);
        self.allreduce(recv, op)
    }

    /// Allreduce of one value.
    pub fn allreduce_value<T: Element>(&mut self, value: T, op: ReduceOp<T>) -> Result<T> {
        self.allreduce_value_with(value, op, &CollOptions::default())
    }

    /// [`Comm::allreduce_value`] with options; with [`CollOptions::rank_ordered`] the strict
    /// left fold `((v0 op v1) op v2) ...` in rank order, the same bits as the data layer's
    /// reductions.
    pub fn allreduce_value_with<T: Element>(
        &mut self,
        value: T,
        op: ReduceOp<T>,
        opts: &CollOptions,
    ) -> Result<T> {
        let mut v = [value];
        self.allreduce_with(&mut v, op, opts)?;
        Ok(v[0])
    }

    /// The key of the next typed gather-family collective.
    fn typed_key(&mut self, kind: Kind) -> MsgKey {
        let seq = self.seq % SEQ_WINDOW;
        self.seq = self.seq.wrapping_add(1);
        MsgKey::new(
            self.group.generation(),
            MsgKind::COLLECTIVE,
            TYPED_BIT | (seq << 16) | ((kind as u32) << 8),
        )
    }

    /// `n * block` elements, or an error naming the collective when that overflows or `len`
    /// differs.
    fn check_len(&self, name: &'static str, what: &str, len: usize, block: usize) -> Result<()> {
        let n = self.group.size();
        match n.checked_mul(block) {
            Some(want) if want == len => Ok(()),
            _ => Err(Error::invalid(
                name,
                format!(
                    "{what} has {len} elements; a communicator of {n} with blocks of {block} \
                     needs {n} x {block}"
                ),
            )
            .on_rank(self.world.rank())),
        }
    }

    /// Collects every member's `send` (same length everywhere) at the root: on the root,
    /// `recv` gets member `i`'s block at `i * send.len()` and must hold `size() * send.len()`
    /// elements; elsewhere `recv` is not touched (pass `&mut []`).
    pub fn gather_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        const NAME: &str = "gather";
        let root_rank = self.member(root, NAME)?;
        let k = send.len();
        if self.on_chain() {
            if self.me == root {
                self.check_len(NAME, "the root's receive buffer", recv.len(), k)?;
            }
            return self
                .chain_gather_into(send, recv, root)
                .map_err(self.coll_err(NAME));
        }
        let key = self.typed_key(Kind::Gather);
        let me = self.me;
        let res = if me == root {
            self.check_len(NAME, "the root's receive buffer", recv.len(), k)?;
            let ranks = self.group.members();
            let t = self.world.transport();
            Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
                for (i, block) in blocks_mut(recv, k, ranks.len()).enumerate() {
                    if i == me {
                        block.copy_from_slice(send);
                    } else {
                        ex.recv_into(ranks[i], key, as_bytes_mut(block));
                    }
                }
            })
        } else {
            self.world.transport().send(root_rank, key, as_bytes(send))
        };
        res.map_err(self.coll_err(NAME))
    }

    /// Every member gets every member's `send` (same length everywhere): member `i`'s block at
    /// `i * send.len()` of `recv`, which holds `size() * send.len()` elements.
    pub fn allgather_into<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        const NAME: &str = "allgather";
        let k = send.len();
        self.check_len(NAME, "the receive buffer", recv.len(), k)?;
        if self.on_chain() {
            return self
                .chain_allgather_into(send, recv)
                .map_err(self.coll_err(NAME));
        }
        let key = self.typed_key(Kind::Allgather);
        let me = self.me;
        let ranks = self.group.members();
        let t = self.world.transport();
        Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
            for (i, block) in blocks_mut(recv, k, ranks.len()).enumerate() {
                if i == me {
                    block.copy_from_slice(send);
                } else {
                    ex.send(ranks[i], key, as_bytes(send));
                    ex.recv_into(ranks[i], key, as_bytes_mut(block));
                }
            }
        })
        .map_err(self.coll_err(NAME))
    }

    /// The root hands block `i` of `send` (`size() * recv.len()` elements) to member `i`;
    /// every member gets its block in `recv`. Non-roots' `send` is not read (pass `&[]`).
    pub fn scatter_into<T: Element>(
        &mut self,
        send: &[T],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        const NAME: &str = "scatter";
        let root_rank = self.member(root, NAME)?;
        let k = recv.len();
        if self.on_chain() {
            if self.me == root {
                self.check_len(NAME, "the root's send buffer", send.len(), k)?;
            }
            return self
                .chain_scatter_into(send, recv, root)
                .map_err(self.coll_err(NAME));
        }
        let key = self.typed_key(Kind::Scatter);
        let me = self.me;
        let res = if me == root {
            self.check_len(NAME, "the root's send buffer", send.len(), k)?;
            let ranks = self.group.members();
            let t = self.world.transport();
            Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
                for (i, block) in blocks(send, k, ranks.len()).enumerate() {
                    if i == me {
                        recv.copy_from_slice(block);
                    } else {
                        ex.send(ranks[i], key, as_bytes(block));
                    }
                }
            })
        } else {
            let t = self.world.transport();
            Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
                ex.recv_into(root_rank, key, as_bytes_mut(recv))
            })
        };
        res.map_err(self.coll_err(NAME))
    }

    /// Member `i` sends block `j` of its `send` to member `j` and receives member `j`'s block
    /// `i` at block `j` of `recv`. Both hold `size()` blocks of the same length.
    pub fn alltoall_into<T: Element>(&mut self, send: &[T], recv: &mut [T]) -> Result<()> {
        const NAME: &str = "alltoall";
        let n = self.group.size();
        if send.len() != recv.len() || !send.len().is_multiple_of(n) {
            return Err(Error::invalid(
                NAME,
                format!(
                    "send buffer of {} and receive buffer of {} elements; both must hold {n} \
                     blocks of the same length",
                    send.len(),
                    recv.len()
                ),
            )
            .on_rank(self.world.rank()));
        }
        let k = send.len() / n;
        let key = self.typed_key(Kind::Alltoall);
        let me = self.me;
        let ranks = self.group.members();
        let t = self.world.transport();
        Comm::run_exchange(t, &mut self.sends, &mut self.recvs, |ex| {
            for (i, (out, inb)) in blocks(send, k, n).zip(blocks_mut(recv, k, n)).enumerate() {
                if i == me {
                    inb.copy_from_slice(out);
                } else {
                    ex.send(ranks[i], key, as_bytes(out));
                    ex.recv_into(ranks[i], key, as_bytes_mut(inb));
                }
            }
        })
        .map_err(self.coll_err(NAME))
    }

    /// [`Comm::gather_into`] into a new vector: `Some` on the root, `None` elsewhere.
    pub fn gather<T: Element>(&mut self, send: &[T], root: usize) -> Result<Option<Vec<T>>> {
        if root == self.me {
            let mut out = vec![T::default(); send.len().saturating_mul(self.size())];
            self.gather_into(send, &mut out, root)?;
            Ok(Some(out))
        } else {
            self.gather_into(send, &mut [], root)?;
            Ok(None)
        }
    }

    /// [`Comm::allgather_into`] into a new vector.
    pub fn allgather<T: Element>(&mut self, send: &[T]) -> Result<Vec<T>> {
        let mut out = vec![T::default(); send.len().saturating_mul(self.size())];
        self.allgather_into(send, &mut out)?;
        Ok(out)
    }

    /// [`Comm::alltoall_into`] into a new vector.
    pub fn alltoall<T: Element>(&mut self, send: &[T]) -> Result<Vec<T>> {
        let mut out = vec![T::default(); send.len()];
        self.alltoall_into(send, &mut out)?;
        Ok(out)
    }
}

/// `n` consecutive blocks of `k` elements (empty blocks when `k` is 0).
fn blocks<T>(s: &[T], k: usize, n: usize) -> impl Iterator<Item = &[T]> {
    (0..n).map(move |i| &s[i * k..(i + 1) * k])
}

/// `n` consecutive mutable blocks of `k` elements (empty blocks when `k` is 0).
fn blocks_mut<T>(s: &mut [T], k: usize, n: usize) -> impl Iterator<Item = &mut [T]> {
    let mut rest = s;
    (0..n).map(move |_| {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(k);
        rest = tail;
        head
    })
}

//! Node-aware (hierarchical) reductions: reduce inside each node first, combine across node
//! leaders, then broadcast inside each node (M4, S2, X7). Pays off on the `hybrid` backend,
//! where a node-local message costs a fraction of a network message.
//!
//! Fold order: each node's members are reduced with the binomial tree (group order inside the
//! node); leaders are ordered by their group index and combined by the inter-node algorithm.
//! When every node holds a contiguous range of group indices (the launcher's usual block
//! placement), the overall order is group order with the parenthesisation
//! `(node 0 block) (node 1 block) ...`; otherwise the order follows the node grouping, which
//! is deterministic but only correct for commutative operators, and `select.rs` uses the
//! hierarchy then only for those.

use ferry_core::element::{as_bytes, as_bytes_mut};
use ferry_core::{Element, Result, Transport};

use crate::comm::{Buf, Ctx};
use crate::op::ReduceOp;
use crate::{rdouble, ring, tree};

/// Phase offsets of the three steps.
const LOCAL: u8 = 16;
const LEADERS: u8 = 32;
const BACK: u8 = 48;

/// Messages larger than this use bandwidth-oriented algorithms inside the hierarchy.
const LARGE: usize = 64 * 1024;

/// How the participants spread over nodes.
#[derive(Debug)]
pub(crate) struct Layout {
    /// World ranks of my node's participants, in group order.
    pub local: Vec<usize>,
    /// My index in `local`.
    pub my_local: usize,
    /// World ranks of the node leaders (first participant of each node), in group order.
    pub leaders: Vec<usize>,
    /// Whether every node holds a contiguous range of group indices.
    pub contiguous: bool,
    /// Number of participants per node, nodes in order of their first member.
    pub counts: Vec<usize>,
}

impl Layout {
    /// Computes the layout of `c`'s participants from the transport's node map.
    pub fn of(t: &dyn Transport, c: &Ctx<'_>) -> Layout {
        let nodes: Vec<usize> = c.ranks.iter().map(|&r| t.node_of(r)).collect();
        let mine = nodes[c.me];
        let local: Vec<usize> = c
            .ranks
            .iter()
            .zip(&nodes)
            .filter(|(_, &n)| n == mine)
            .map(|(&r, _)| r)
            .collect();
        let my_local = local.iter().position(|&r| r == c.ranks[c.me]).unwrap_or(0);
        let mut seen: Vec<usize> = Vec::new();
        let mut counts: Vec<usize> = Vec::new();
        let mut leaders = Vec::new();
        let mut contiguous = true;
        for (i, &n) in nodes.iter().enumerate() {
            match seen.iter().position(|&s| s == n) {
                None => {
                    seen.push(n);
                    counts.push(1);
                    leaders.push(c.ranks[i]);
                }
                Some(k) => {
                    counts[k] += 1;
                    if nodes[i - 1] != n {
                        contiguous = false;
                    }
                }
            }
        }
        Layout {
            local,
            my_local,
            leaders,
            contiguous,
            counts,
        }
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.leaders.len()
    }

    fn leader_index(&self) -> Option<usize> {
        if self.my_local == 0 {
            self.leaders.iter().position(|&r| r == self.local[0])
        } else {
            None
        }
    }
}

/// Node-aware allreduce.
pub(crate) fn allreduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    lay: &Layout,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    let local = c.sub(&lay.local, lay.my_local, LOCAL);
    tree::reduce_to_zero_in_place(t, &local, data, op)?;
    if let Some(li) = lay.leader_index() {
        let leaders = c.sub(&lay.leaders, li, LEADERS);
        // Between leaders: the flat choice's algorithms (select.rs), by size.
        if std::mem::size_of_val(data) >= crate::select::HALVING_MIN_BYTES {
            rdouble::allreduce_halving(t, &leaders, data, op)?;
        } else {
            rdouble::allreduce(t, &leaders, data, op)?;
        }
    }
    let back = c.sub(&lay.local, lay.my_local, BACK);
    if std::mem::size_of_val(data) >= LARGE {
        ring::broadcast(
            t,
            &back,
            0,
            &mut Buf::Slice(as_bytes_mut(data)),
            ring::DEFAULT_SEGMENT,
        )
    } else {
        tree::broadcast(t, &back, 0, &mut Buf::Slice(as_bytes_mut(data)))
    }
}

/// Node-aware reduce to `root`: reduce inside nodes, reduce across leaders to the first
/// leader, then one message to the root if it is not that leader. Non-roots' `data` is left
/// unchanged.
pub(crate) fn reduce<T: Element>(
    t: &mut dyn Transport,
    c: &Ctx<'_>,
    lay: &Layout,
    root: usize,
    data: &mut [T],
    op: &ReduceOp<T>,
) -> Result<()> {
    let mut mine = data.to_vec();
    let local = c.sub(&lay.local, lay.my_local, LOCAL);
    tree::reduce_to_zero_in_place(t, &local, &mut mine, op)?;
    let first = lay.leaders[0];
    let me_world = c.ranks[c.me];
    let root_world = c.ranks[root];
    if let Some(li) = lay.leader_index() {
        let leaders = c.sub(&lay.leaders, li, LEADERS);
        tree::reduce_to_zero_in_place(t, &leaders, &mut mine, op)?;
    }
    let back = c.phase(BACK);
    if me_world == first {
        if root_world == first {
            data.copy_from_slice(&mine);
        } else {
            back.send(t, root, as_bytes(&mine))?;
        }
    } else if me_world == root_world {
        let from = c.ranks.iter().position(|&r| r == first).unwrap_or(0);
        back.recv_into(t, from, as_bytes_mut(data))?;
    }
    Ok(())
}

//! Setting a [`Persistent`] up: the three constructors check their inputs once, fix the
//! algorithm and this rank's schedule, and meet every schedule peer once with a descriptor of
//! the operation (see the parent module's doc).

use std::mem::ManuallyDrop;

use ferry_core::{Element, Error, ErrorKind, Exchange, MsgKey, MsgKind, Result, Transport};

use super::raw::RawBuf;
use super::schedule::{self, Shape};
use super::{Persistent, PersistentKind, State, DATA_TAG, DEFAULT_SEGMENT, HELLO_TAG};
use crate::op::ReduceOp;
use crate::select::{BCAST_PIPELINE_MIN_BYTES, LINEAR_MAX_P};
use crate::{Algorithm, CollOptions, Group, ReduceOrder};

/// Validated inputs common to the three constructors: this rank, and its index in the group.
#[derive(Clone, Copy)]
struct Init {
    rank: usize,
    me: usize,
}

fn check_group(t: &dyn Transport, group: &Group, name: &'static str) -> Result<Init> {
    let me = crate::member_index(t, group, name)?;
    Ok(Init { rank: t.rank(), me })
}

fn check_root(i: Init, group: &Group, root: usize, name: &'static str) -> Result<()> {
    if root >= group.size() {
        return Err(Error::invalid(
            name,
            format!(
                "root index {root} out of range for a group of {}",
                group.size()
            ),
        )
        .on_rank(i.rank));
    }
    Ok(())
}

/// Checks `group` and `root` of a rooted persistent collective and fixes its algorithm: Auto
/// keeps to the chain on a group whose topology asks for it (X7) and is `auto` otherwise; an
/// algorithm asked for must be one of `offered`.
fn rooted(
    t: &dyn Transport,
    group: &Group,
    root: usize,
    name: &'static str,
    asked: Algorithm,
    auto: Algorithm,
    offered: &[Algorithm],
) -> Result<(Init, Algorithm)> {
    let i = check_group(t, group, name)?;
    check_root(i, group, root, name)?;
    let alg = match asked {
        Algorithm::Auto if on_chain(group) => Algorithm::Chain,
        Algorithm::Auto => auto,
        a if offered.contains(&a) => a,
        a => {
            let names: Vec<&str> = offered.iter().map(|o| o.name()).collect();
            let offered = format!("auto, {}", names.join(", "));
            return Err(unavailable(a, name, i.rank, &offered));
        }
    };
    Ok((i, alg))
}

fn unavailable(alg: Algorithm, name: &'static str, rank: usize, offered: &str) -> Error {
    Error::invalid(
        name,
        format!(
            "algorithm `{}` is not available for a persistent {name} (one of {offered})",
            alg.name()
        ),
    )
    .on_rank(rank)
}

/// Whether the group's topology asks the automatic choice to keep to the chain (X7).
fn on_chain(g: &Group) -> bool {
    g.size() > 2 && g.topology().is_some_and(|t| t.follows_group_order())
}

fn segment(opts: &CollOptions) -> usize {
    if opts.segment_bytes == 0 {
        DEFAULT_SEGMENT
    } else {
        opts.segment_bytes
    }
}

impl<T: Element> Persistent<T> {
    /// A persistent broadcast of `data` from group index `root` over `group`, whose generation
    /// this collective uses alone. Every member passes a buffer of the same length (checked at
    /// init against its schedule peers); the root's contents at each start reach every member.
    /// Algorithms: Auto (the choice of [`crate::broadcast`]), Linear, BinomialTree, Chain,
    /// Pipeline.
    pub fn broadcast(
        t: &mut dyn Transport,
        group: Group,
        root: usize,
        data: Vec<T>,
        opts: &CollOptions,
    ) -> Result<Persistent<T>> {
        let p = group.size();
        let len = std::mem::size_of_val(data.as_slice());
        let auto = if p <= 2 {
            Algorithm::Linear
        } else if len >= BCAST_PIPELINE_MIN_BYTES {
            Algorithm::Pipeline
        } else {
            Algorithm::BinomialTree
        };
        let offered = [
            Algorithm::Linear,
            Algorithm::BinomialTree,
            Algorithm::Chain,
            Algorithm::Pipeline,
        ];
        let (i, alg) = rooted(t, &group, root, "broadcast", opts.algorithm, auto, &offered)?;
        let shape = schedule::broadcast(alg, p, i.me, root, len, segment(opts));
        Persistent::assemble(
            t,
            PersistentKind::Broadcast,
            group,
            i,
            root,
            alg,
            shape,
            data,
            None,
        )
    }

    /// A persistent gather of every member's `block` (the same length everywhere) at group
    /// index `root`: after each wait the root's [`Persistent::output`] holds member `i`'s
    /// block at `i * block.len()`. Algorithms: Auto (the choice of [`crate::gather`]), Linear,
    /// BinomialTree, Chain.
    pub fn gather(
        t: &mut dyn Transport,
        group: Group,
        root: usize,
        block: Vec<T>,
        opts: &CollOptions,
    ) -> Result<Persistent<T>> {
        const NAME: &str = "gather";
        let p = group.size();
        let auto = if p <= LINEAR_MAX_P {
            Algorithm::Linear
        } else {
            Algorithm::BinomialTree
        };
        let offered = [Algorithm::Linear, Algorithm::BinomialTree, Algorithm::Chain];
        let (i, alg) = rooted(t, &group, root, NAME, opts.algorithm, auto, &offered)?;
        if block.len().checked_mul(p).is_none() {
            return Err(Error::invalid(
                NAME,
                format!("{p} blocks of {} elements overflow", block.len()),
            )
            .on_rank(i.rank));
        }
        let shape = schedule::gather(alg, p, i.me, root, block.len(), std::mem::size_of::<T>());
        Persistent::assemble(
            t,
            PersistentKind::Gather,
            group,
            i,
            root,
            alg,
            shape,
            block,
            None,
        )
    }

    /// A persistent allreduce of `data` with `op`: after each wait every member's
    /// [`Persistent::data`] holds the combination of every member's data at the start, the
    /// same bits everywhere. Algorithms: Auto (BinomialTree, or Chain on a Cartesian group or
    /// when [`ReduceOrder::RankOrderedFold`] is asked for), BinomialTree (the parenthesisation
    /// of [`crate::allreduce_with`]'s binomial tree), Chain (the strict rank-ordered left fold).
    pub fn allreduce(
        t: &mut dyn Transport,
        group: Group,
        data: Vec<T>,
        op: ReduceOp<T>,
        opts: &CollOptions,
    ) -> Result<Persistent<T>> {
        const NAME: &str = "allreduce";
        let i = check_group(t, &group, NAME)?;
        op.check(NAME).map_err(|e| e.on_rank(i.rank))?;
        let ordered = opts.order == ReduceOrder::RankOrderedFold;
        let alg = match opts.algorithm {
            Algorithm::Auto if ordered || on_chain(&group) => Algorithm::Chain,
            Algorithm::Auto => Algorithm::BinomialTree,
            Algorithm::BinomialTree if ordered => {
                return Err(Error::invalid(
                    NAME,
                    "the binomial tree does not give the rank-ordered fold; use chain",
                )
                .on_rank(i.rank))
            }
            a @ (Algorithm::BinomialTree | Algorithm::Chain) => a,
            a => return Err(unavailable(a, NAME, i.rank, "auto, binomial, chain")),
        };
        let shape = schedule::allreduce(
            alg,
            group.size(),
            i.me,
            data.len(),
            std::mem::size_of::<T>(),
        );
        Persistent::assemble(
            t,
            PersistentKind::Allreduce,
            group,
            i,
            0,
            alg,
            shape,
            data,
            Some(op),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        t: &mut dyn Transport,
        kind: PersistentKind,
        group: Group,
        i: Init,
        root: usize,
        algorithm: Algorithm,
        shape: Shape,
        data: Vec<T>,
        op: Option<ReduceOp<T>>,
    ) -> Result<Persistent<T>> {
        let (rank, me) = (i.rank, i.me);
        let name = kind.name();
        let alloc = |n: usize| -> Result<RawBuf<T>> {
            RawBuf::zeroed(n).ok_or_else(|| {
                Error::new(ErrorKind::ResourceExhausted, name)
                    .with_detail(format!("cannot allocate a staging buffer of {n} elements"))
                    .on_rank(rank)
            })
        };
        let stage = alloc(shape.stage_elems)?;
        let rotated = kind == PersistentKind::Gather && me == root && shape.rot != 0;
        let out = alloc(if rotated { shape.stage_elems } else { 0 })?;
        let key = MsgKey::new(group.generation(), MsgKind::COLLECTIVE, DATA_TAG);
        let mut pc = Persistent {
            kind,
            group: ManuallyDrop::new(group),
            rank,
            me,
            root,
            algorithm,
            key,
            shape,
            data: RawBuf::from_vec(data),
            stage,
            out,
            op,
            state: State::Idle,
            sends: Vec::new(),
            recvs: Vec::new(),
            starts: 0,
        };
        pc.hello(t)?;
        Ok(pc)
    }

    /// This collective's descriptor: kind, algorithm, root, group size, element size and
    /// count, as every member must have it.
    fn descriptor(&self) -> [u8; 26] {
        let mut d = [0u8; 26];
        d[0] = self.kind as u8;
        d[1] = Algorithm::ALL
            .iter()
            .position(|&a| a == self.algorithm)
            .unwrap_or(0) as u8;
        d[2..6].copy_from_slice(&(self.root as u32).to_le_bytes());
        d[6..10].copy_from_slice(&(self.group.size() as u32).to_le_bytes());
        d[10..18].copy_from_slice(&(std::mem::size_of::<T>() as u64).to_le_bytes());
        d[18..26].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
        d
    }

    fn describe(d: &[u8; 26]) -> String {
        let kind = PersistentKind::from_u8(d[0]).map_or("an unknown operation", |k| k.name());
        let alg = Algorithm::ALL.get(d[1] as usize).map_or("?", |a| a.name());
        let u32_at = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[i..i + 8]);
            u64::from_le_bytes(b)
        };
        format!(
            "{kind} ({alg}) from root {} over {} members, {} elements of {} bytes",
            u32_at(2),
            u32_at(6),
            u64_at(18),
            u64_at(10)
        )
    }

    /// Meets every peer of the schedule once (descriptors both ways): opens the connections
    /// the starts use and catches members that initialised something else.
    fn hello(&mut self, t: &mut dyn Transport) -> Result<()> {
        let mut peers: Vec<usize> = self
            .shape
            .steps
            .iter()
            .flat_map(|s| s.recvs.iter().chain(&s.sends).map(|x| x.peer))
            .collect();
        peers.sort_unstable();
        peers.dedup();
        let mine = self.descriptor();
        let mut theirs = vec![[0u8; 26]; peers.len()];
        let key = MsgKey::new(self.group.generation(), MsgKind::COLLECTIVE, HELLO_TAG);
        let members = self.group.members();
        let mut ex = Exchange::new();
        for &p in &peers {
            ex.send(members[p], key, &mine);
        }
        for (&p, buf) in peers.iter().zip(theirs.iter_mut()) {
            ex.recv_into(members[p], key, buf);
        }
        let name = self.kind.name();
        let rank = self.rank;
        t.exchange(&mut ex)
            .map_err(|e| e.context(name).or_rank(rank))?;
        drop(ex);
        for (&p, d) in peers.iter().zip(&theirs) {
            if *d != mine {
                return Err(Error::invalid(
                    name,
                    format!(
                        "persistent collectives do not match: rank {} initialised a {}, this \
                         rank a {}",
                        members[p],
                        Persistent::<T>::describe(d),
                        Persistent::<T>::describe(&mine)
                    ),
                )
                .with_peer(members[p])
                .on_rank(rank));
            }
        }
        Ok(())
    }
}

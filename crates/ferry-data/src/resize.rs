//! Resize points: where a program lets the world change (D7, F7; LAIK's
//! `laik_allow_world_resize`, examples.md §0.3, interface.md "Elastic runs").
//!
//! How an elastic job is laid out: `ferry run -n N --spares S` starts N+S processes and the
//! transport connects all of them (so links exist for everybody), but it sets
//! `FERRY_WORLD_SIZE=N`: the application world starts as transport ranks `0..N`, and ranks
//! `N..N+S` are spares. A spare calls [`Elastic::join_world`] (through the program's start-up)
//! and waits there until the master (rank 0) admits it at a resize point or releases it when
//! the job ends ([`Elastic::release_spares`], called by `World::finish`).
//!
//! A resize point ([`Elastic::allow_world_resize`]) is collective over the current world. The
//! master asks its [`ResizeSource`] for the removal requests (under the launcher: what
//! `ferry ctl NAME remove PATTERN` left in the job's store; transport ranks, which are also the
//! ids of the location strings `L<id>:<host>:<pid>`), computes the new member list (old members minus the requested ones,
//! never itself, plus every spare not admitted yet) and sends the decision to every old member
//! and every waiting spare. On a change every process gets the same new group (fresh generation
//! `RESIZE_GENERATION_BASE + epoch`), the epoch goes up by one; removed processes see
//! [`Resized::my_index`] `None` and stop; joiners return from [`Elastic::join_world`] with the
//! phase of the resize point. Without requests and spares nothing changes and the epoch stays.
//!
//! Decisions where the spec is silent: all spares are settled at the first resize point that
//! changes the world (admitted, or told to stop if a removal pattern names them), so later
//! points only remove; the master is never removed; removal requests naming processes that
//! are not members are ignored.

use std::time::{Duration, Instant};

use ferry_coll::Group;
use ferry_core::{Error, Exchange, MsgKey, MsgKind, Result, RetiredFlows, Transport};

/// Generation of the world group after the `e`-th change is this base plus `e`; apart from the
/// collective layer's generation 0 and the data layer's groups (`DATA_GENERATION_BASE` up).
pub const RESIZE_GENERATION_BASE: u32 = 1 << 30;

/// The message key of resize decisions (master -> member or spare).
const DECISION: MsgKey = MsgKey::new(RESIZE_GENERATION_BASE - 1, MsgKind::CONTROL, 0x5253_5a00);

/// Largest world we encode in a decision (bounds the message and the decoder).
const MAX_MEMBERS: usize = 1 << 20;

/// How often a spare waiting for admission asks its [`ResizeSource`] whether the job is
/// still there.
const SPARE_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Where resize decisions get their input from outside the job's ranks (the launcher's control
/// channel, implemented by the facade).
pub trait ResizeSource {
    /// Ids (transport ranks) of the processes requested for removal so far. Asked by the
    /// master at every resize point.
    fn removal_requests(&mut self) -> Result<Vec<usize>>;

    /// Asked every few seconds by a spare waiting for admission: an error ends the wait (the
    /// launcher, and with it the job, is gone).
    fn check_alive(&mut self) -> Result<()>;
}

/// A [`ResizeSource`] without a control channel: nobody requests removals and the job never
/// goes away underneath (embedding, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoControl;

impl ResizeSource for NoControl {
    fn removal_requests(&mut self) -> Result<Vec<usize>> {
        Ok(Vec::new())
    }

    fn check_alive(&mut self) -> Result<()> {
        Ok(())
    }
}

/// One process's state of an elastic job: how many transport ranks form the initial world and
/// whether the master settled the spares already (admitted or released them).
#[derive(Debug, Clone)]
pub struct Elastic {
    initial: usize,
    spares_settled: bool,
}

/// The world after a resize point.
#[derive(Debug)]
pub struct Resized {
    /// The (possibly new) world group.
    pub group: Group,
    /// This process's index in `group`; `None` if it was removed (or never admitted) and must
    /// stop.
    pub my_index: Option<usize>,
    /// Number of world changes so far (LAIK's epoch).
    pub epoch: u32,
    /// Whether the world changed at this point (partitionings must then be re-created).
    pub changed: bool,
    /// The world before this point (equal to `group` if nothing changed). A joiner describes
    /// its containers as empty parts of partitionings over it, so that the first switch to a
    /// partitioning of `group` moves the data from the old holders (D7 migration).
    pub previous: Group,
}

impl Elastic {
    /// The elastic state of a job whose initial application world is transport ranks
    /// `0..initial` of `t` (`None`: every transport rank, no spares). Fails unless
    /// `1 <= initial <= t.size()`.
    pub fn new(t: &dyn Transport, initial: Option<usize>) -> Result<Elastic> {
        let n = initial.unwrap_or(t.size());
        if n == 0 || n > t.size() {
            return Err(Error::config(format!(
                "an initial world of {n} processes must be between 1 and the {} started",
                t.size()
            ))
            .on_rank(t.rank()));
        }
        Ok(Elastic {
            initial: n,
            spares_settled: false,
        })
    }

    /// The state of a job without spares: every transport rank is in the initial world.
    pub fn fixed(t: &dyn Transport) -> Elastic {
        Elastic {
            initial: t.size(),
            spares_settled: false,
        }
    }

    /// Size of the initial application world.
    pub fn initial_world_size(&self) -> usize {
        self.initial
    }

    /// Start of an elastic program: members of the initial world return at once (epoch 0, phase
    /// 0); a spare waits until the master admits it at a resize point (returns that point's world,
    /// epoch and phase) or releases it at the end of the job (`my_index` `None`).
    pub fn join_world(
        &self,
        t: &mut dyn Transport,
        source: &mut dyn ResizeSource,
    ) -> Result<(Resized, i64)> {
        let n = self.initial;
        let rank = t.rank();
        if rank < n {
            return Ok((
                Resized {
                    group: Group::world(n),
                    my_index: Some(rank),
                    epoch: 0,
                    changed: false,
                    previous: Group::world(n),
                },
                0,
            ));
        }
        let buf = wait_as_spare(t, source)?;
        let (epoch, phase, group, previous) =
            decode(&buf).map_err(|e| e.on_rank(rank).with_peer(0))?;
        let my_index = group.index_of(rank);
        tracing::debug!(
            rank,
            epoch,
            phase,
            admitted = my_index.is_some(),
            "spare decided"
        );
        Ok((
            Resized {
                group,
                my_index,
                epoch,
                changed: true,
                previous,
            },
            phase,
        ))
    }
}

/// A spare's wait for the master's decision. Not bounded by a timeout (a job may reach its
/// first resize point late), but by the job: the wait ends with an error once `source` says the
/// launcher is gone (and the launcher's end kills the process anyway).
fn wait_as_spare(t: &mut dyn Transport, source: &mut dyn ResizeSource) -> Result<Vec<u8>> {
    let rank = t.rank();
    let mut buf = Vec::new();
    let mut ex = Exchange::new();
    ex.recv(0, DECISION, &mut buf);
    let mut last_check = Instant::now();
    let waited = loop {
        match t.progress_exchange(&mut ex) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
        if let Err(e) = t.wait_for_input(Duration::from_millis(20)) {
            break Err(e);
        }
        if last_check.elapsed() >= SPARE_CHECK_EVERY {
            last_check = Instant::now();
            if let Err(e) = source.check_alive() {
                break Err(e
                    .or_rank(rank)
                    .context("spare waiting for admission: the launcher is gone"));
            }
        }
    };
    if let Err(e) = waited {
        // The receive may be offered to rank 0 (a single-copy write into `buf`): withdraw it.
        t.abandon_exchange(&mut ex, &e);
        return Err(e);
    }
    drop(ex);
    Ok(buf)
}

fn put_group(v: &mut Vec<u8>, group: &Group) {
    v.extend_from_slice(&group.generation().to_le_bytes());
    v.extend_from_slice(&(group.size() as u32).to_le_bytes());
    for &m in group.members() {
        v.extend_from_slice(&(m as u32).to_le_bytes());
    }
}

/// Decision wire format (little endian): epoch u32, phase i64, then the new and the previous
/// group, each as generation u32, member count u32, members u32 each.
fn encode(epoch: u32, phase: i64, group: &Group, previous: &Group) -> Vec<u8> {
    let mut v = Vec::with_capacity(28 + 4 * (group.size() + previous.size()));
    v.extend_from_slice(&epoch.to_le_bytes());
    v.extend_from_slice(&phase.to_le_bytes());
    put_group(&mut v, group);
    put_group(&mut v, previous);
    v
}

fn decode(b: &[u8]) -> Result<(u32, i64, Group, Group)> {
    let bad = || Error::invalid("resize decision", format!("malformed ({} bytes)", b.len()));
    let u32_at = |o: usize| -> Result<u32> {
        b.get(o..o + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(bad)
    };
    let epoch = u32_at(0)?;
    let phase = b
        .get(4..12)
        .and_then(|s| s.try_into().ok())
        .map(i64::from_le_bytes)
        .ok_or_else(bad)?;
    let group_at = |o: usize| -> Result<(Group, usize)> {
        let generation = u32_at(o)?;
        let count = u32_at(o + 4)? as usize;
        if count > MAX_MEMBERS || b.len() < o + 8 + 4 * count {
            return Err(bad());
        }
        let members = (0..count)
            .map(|i| u32_at(o + 8 + 4 * i).map(|m| m as usize))
            .collect::<Result<Vec<_>>>()?;
        let g = if members.is_empty() {
            Group::world(0)
        } else {
            Group::new(members, generation)?
        };
        Ok((g, o + 8 + 4 * count))
    };
    let (group, next) = group_at(12)?;
    let (previous, end) = group_at(next)?;
    if end != b.len() {
        return Err(bad());
    }
    Ok((epoch, phase, group, previous))
}

/// Parses a comma/whitespace separated id list, ignoring anything that is not a number.
pub fn parse_ids(text: &str) -> Vec<usize> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The master's decision: new member list (or `None` for no change).
fn decide(
    world: &Group,
    pending_spares: &[usize],
    removals: &[usize],
    master: usize,
) -> Option<Vec<usize>> {
    let mut members: Vec<usize> = world
        .members()
        .iter()
        .copied()
        .filter(|m| *m == master || !removals.contains(m))
        .collect();
    members.extend(pending_spares.iter().filter(|s| !removals.contains(s)));
    if members == world.members() && pending_spares.is_empty() {
        None
    } else {
        Some(members)
    }
}

/// Spares the master has not settled yet.
fn pending_spares(elastic: &Elastic, t: &dyn Transport, world: &Group) -> Vec<usize> {
    if elastic.spares_settled {
        return Vec::new();
    }
    (elastic.initial..t.size())
        .filter(|s| world.index_of(*s).is_none())
        .collect()
}

impl Elastic {
    /// A resize point at `phase` for the members of `world` (collective over `world`; rank 0
    /// must be its master, index 0). `epoch` is the epoch of `world`. See the module docs.
    pub fn allow_world_resize(
        &mut self,
        t: &mut dyn Transport,
        source: &mut dyn ResizeSource,
        world: &Group,
        epoch: u32,
        phase: i64,
    ) -> Result<Resized> {
        let rank = t.rank();
        let ctx = |e: Error| {
            e.or_rank(rank)
                .context(format!("resize point of phase {phase}"))
        };
        let master = world.member(0);
        let msg = if rank == master {
            let spares = pending_spares(self, t, world);
            let removals = source
                .removal_requests()
                .map_err(|e| ctx(e.context("reading removal requests")))?;
            let (new_epoch, group) = match decide(world, &spares, &removals, master) {
                None => (epoch, world.clone()),
                Some(members) => {
                    let e = epoch.wrapping_add(1);
                    let g =
                        Group::new(members, RESIZE_GENERATION_BASE.wrapping_add(e)).map_err(ctx)?;
                    (e, g)
                }
            };
            let msg = encode(new_epoch, phase, &group, world);
            let mut ex = Exchange::new();
            for &m in world.members().iter().chain(spares.iter()) {
                if m != master {
                    ex.send(m, DECISION, &msg);
                }
            }
            t.exchange(&mut ex).map_err(ctx)?;
            drop(ex);
            if new_epoch != epoch {
                self.spares_settled = true;
            }
            msg
        } else {
            let mut buf = Vec::new();
            t.recv(master, DECISION, &mut buf).map_err(ctx)?;
            buf
        };
        let (new_epoch, _, group, _) = decode(&msg).map_err(|e| ctx(e.with_peer(master)))?;
        let changed = new_epoch != epoch;
        if changed && new_epoch >= 3 {
            // The world two epochs back ended at the previous resize point, and the switches
            // that migrated its data ran before this one: its flows carry nothing any more.
            // (Epoch 0's world is generation 0, shared with everything else, and stays.)
            t.retire_flows(RetiredFlows::Generation(
                RESIZE_GENERATION_BASE.wrapping_add(new_epoch - 2),
            ));
        }
        tracing::debug!(
            rank,
            phase,
            epoch = new_epoch,
            changed,
            size = group.size(),
            "resize point"
        );
        Ok(Resized {
            my_index: group.index_of(rank),
            group,
            epoch: new_epoch,
            changed,
            previous: world.clone(),
        })
    }

    /// Called by the master when the job ends: tells every spare never admitted that it will
    /// not be (it returns from [`Elastic::join_world`] with no index and ends cleanly). No-op
    /// elsewhere and after the first call.
    pub fn release_spares(&mut self, t: &mut dyn Transport) -> Result<()> {
        if t.rank() != 0 || std::mem::replace(&mut self.spares_settled, true) {
            return Ok(());
        }
        let n = self.initial;
        if n >= t.size() {
            return Ok(());
        }
        let msg = encode(0, 0, &Group::world(0), &Group::world(n));
        let mut ex = Exchange::new();
        for s in n..t.size() {
            ex.send(s, DECISION, &msg);
        }
        t.exchange(&mut ex)
            .map_err(|e| e.or_rank(0).context("releasing the spares"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::mem::MemTransport;

    #[test]
    fn resize_point_keeps_the_world_without_requests() {
        let out = MemTransport::run(3, |mut t| {
            let mut el = Elastic::new(&t, None).unwrap();
            let g = Group::world(3);
            let r = el
                .allow_world_resize(&mut t, &mut NoControl, &g, 0, 1)
                .unwrap();
            let r2 = el
                .allow_world_resize(&mut t, &mut NoControl, &r.group, r.epoch, 2)
                .unwrap();
            (r2.my_index, r2.group.size(), r2.epoch, r2.changed)
        });
        for (i, o) in out.into_iter().enumerate() {
            assert_eq!(o, (Some(i), 3, 0, false));
        }
    }

    /// A source that requests the removal of rank 1 and counts how often it was asked.
    struct RemoveOne(usize);

    impl ResizeSource for RemoveOne {
        fn removal_requests(&mut self) -> Result<Vec<usize>> {
            self.0 += 1;
            Ok(vec![1])
        }
        fn check_alive(&mut self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_source_removes_members_and_spares_join_at_the_phase() {
        // Ranks 0-2 form the world, rank 3 is a spare; the master's source removes rank 1.
        let out = MemTransport::run(4, |mut t| {
            let mut el = Elastic::new(&t, Some(3)).unwrap();
            let mut src = RemoveOne(0);
            let (start, phase) = el.join_world(&mut t, &mut src).unwrap();
            let r = if t.rank() < 3 {
                assert_eq!(phase, 0);
                el.allow_world_resize(&mut t, &mut src, &start.group, 0, 5)
                    .unwrap()
            } else {
                assert_eq!(phase, 5);
                start
            };
            el.release_spares(&mut t).unwrap();
            (r.group.members().to_vec(), r.my_index, r.epoch, src.0)
        });
        assert_eq!(out[0], (vec![0, 2, 3], Some(0), 1, 1));
        assert_eq!(out[1], (vec![0, 2, 3], None, 1, 0));
        assert_eq!(out[2], (vec![0, 2, 3], Some(1), 1, 0));
        assert_eq!(out[3], (vec![0, 2, 3], Some(2), 1, 0));
    }

    /// Removes the last member of a world of ranks `0..self.0` at every resize point.
    struct RemoveLast(usize);

    impl ResizeSource for RemoveLast {
        fn removal_requests(&mut self) -> Result<Vec<usize>> {
            self.0 -= 1;
            Ok(vec![self.0])
        }
        fn check_alive(&mut self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn worlds_of_ended_epochs_retire_their_flows() {
        // 12 ranks; each resize point removes the last member, and the new world runs a
        // collective (flows of its generation). Rank 0 sees 10 epochs go by: only the flows of
        // the last two worlds (and the decisions') may stay.
        let out = MemTransport::run(12, |mut t| {
            let mut el = Elastic::new(&t, None).unwrap();
            let mut world = Group::world(12);
            let mut epoch = 0;
            let mut flows = Vec::new();
            let mut source = RemoveLast(12);
            for phase in 1..=10 {
                let r = el
                    .allow_world_resize(&mut t, &mut source, &world, epoch, phase)
                    .unwrap();
                if r.my_index.is_none() {
                    break;
                }
                let mut v = [1u64];
                ferry_coll::allreduce(&mut t, &r.group, &mut v, &ferry_coll::ReduceOp::Sum)
                    .unwrap();
                assert_eq!(v[0], r.group.size() as u64);
                (world, epoch) = (r.group, r.epoch);
                flows.push(t.flow_count().unwrap());
            }
            flows
        });
        let flows = &out[0];
        assert_eq!(flows.len(), 10);
        assert!(
            flows[9] <= flows[2],
            "rank 0's flow table grew with every epoch: {flows:?}"
        );
    }

    #[test]
    fn decisions_remove_members_but_never_the_master_and_admit_spares() {
        let g = Group::world(3);
        assert_eq!(decide(&g, &[], &[], 0), None);
        assert_eq!(decide(&g, &[], &[0, 1], 0), Some(vec![0, 2]));
        assert_eq!(decide(&g, &[3, 4], &[4], 0), Some(vec![0, 1, 2, 3]));
        assert_eq!(decide(&g, &[3], &[9], 0), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_ids("1,2, 5\n,x"), vec![1, 2, 5]);
    }

    #[test]
    fn decisions_round_trip_and_malformed_ones_are_errors() {
        let g = Group::new(vec![0, 2, 3], RESIZE_GENERATION_BASE + 1).unwrap();
        let old = Group::world(3);
        let (e, p, g2, o2) = decode(&encode(1, 7, &g, &old)).unwrap();
        assert_eq!((o2.members(), o2.generation()), (old.members(), 0));
        assert_eq!(
            (e, p, g2.members(), g2.generation()),
            (1, 7, g.members(), g.generation())
        );
        assert!(decode(&[1, 2, 3]).is_err());
        let mut m = encode(1, 7, &g, &old);
        m.pop();
        assert!(decode(&m).is_err());
    }
}

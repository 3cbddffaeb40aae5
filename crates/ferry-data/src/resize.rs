//! Resize points: where a program lets the world change (D7, F7; LAIK's
//! `laik_allow_world_resize`, examples.md §0.3, interface.md "Elastic runs").
//!
//! How an elastic job is laid out: `ferry run -n N --spares S` starts N+S processes and the
//! transport connects all of them (so links exist for everybody), but it sets
//! `FERRY_WORLD_SIZE=N`: the application world starts as transport ranks `0..N`, and ranks
//! `N..N+S` are spares. A spare calls [`join_world`] (through the program's start-up) and waits
//! there until the master (rank 0) admits it at a resize point or releases it when the job
//! ends ([`release_spares`], called by `World::finish`).
//!
//! A resize point ([`allow_world_resize`]) is collective over the current world. The master
//! reads the removal requests that `ferry ctl NAME remove PATTERN` left in the launcher's store
//! (key [`REMOVE_KEY`]: transport ranks, which are also the ids of the location strings
//! `L<id>:<host>:<pid>`), computes the new member list (old members minus the requested ones,
//! never itself, plus every spare not admitted yet) and sends the decision to every old member
//! and every waiting spare. On a change every process gets the same new group (fresh generation
//! `RESIZE_GENERATION_BASE + epoch`), the epoch goes up by one; removed processes see
//! [`Resized::my_index`] `None` and stop; joiners return from [`join_world`] with the phase of
//! the resize point. Without requests and spares nothing changes and the epoch stays.
//!
//! Decisions where the spec is silent: all spares are settled at the first resize point that
//! changes the world (admitted, or told to stop if a removal pattern names them), so later
//! points only remove; the master is never removed; removal requests naming processes that
//! are not members are ignored.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferry_coll::Group;
use ferry_core::store::TcpStoreClient;
use ferry_core::{Error, Exchange, LaunchInfo, Result, Store, Transport};
use ferry_proto::{MsgKey, MsgKind};

/// Store key in which `ferry ctl NAME remove` accumulates the ids (transport ranks) of the
/// processes to remove, separated by commas.
pub const REMOVE_KEY: &str = "elastic/remove";

/// Generation of the world group after the `e`-th change is this base plus `e`; apart from the
/// collective layer's generation 0 and the data layer's groups (`DATA_GENERATION_BASE` up).
pub const RESIZE_GENERATION_BASE: u32 = 1 << 30;

/// The message key of resize decisions (master -> member or spare).
const DECISION: MsgKey = MsgKey::new(RESIZE_GENERATION_BASE - 1, MsgKind::CONTROL, 0x5253_5a00);

/// Largest world we encode in a decision (bounds the message and the decoder).
const MAX_MEMBERS: usize = 1 << 20;

/// Whether the master settled the spares already (admitted or released them).
static SPARES_SETTLED: AtomicBool = AtomicBool::new(false);

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

/// Size of the initial application world: `FERRY_WORLD_SIZE` if the launcher set it (elastic
/// jobs with spares), else every transport rank.
pub fn initial_world_size(t: &dyn Transport) -> Result<usize> {
    match std::env::var("FERRY_WORLD_SIZE") {
        Ok(v) => {
            let n: usize = v.trim().parse().map_err(|_| {
                Error::config(format!("FERRY_WORLD_SIZE=`{v}` is not a number")).on_rank(t.rank())
            })?;
            if n == 0 || n > t.size() {
                return Err(Error::config(format!(
                    "FERRY_WORLD_SIZE={n} must be between 1 and the {} started processes",
                    t.size()
                ))
                .on_rank(t.rank()));
            }
            Ok(n)
        }
        Err(_) => Ok(t.size()),
    }
}

/// Start of an elastic program: members of the initial world return at once (epoch 0, phase
/// 0); a spare waits until the master admits it at a resize point (returns that point's world,
/// epoch and phase) or releases it at the end of the job (`my_index` `None`).
pub fn join_world(t: &mut dyn Transport) -> Result<(Resized, i64)> {
    let n = initial_world_size(t)?;
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
    let buf = wait_as_spare(t)?;
    let (epoch, phase, group, previous) = decode(&buf).map_err(|e| e.on_rank(rank).with_peer(0))?;
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

/// A spare's wait for the master's decision. Not bounded by `general.timeout_ms` (a job may
/// reach its first resize point late), but by the launcher: the wait ends with an error once
/// the launcher's store stops answering, and the launcher's end kills the process anyway.
fn wait_as_spare(t: &mut dyn Transport) -> Result<Vec<u8>> {
    let rank = t.rank();
    let launch = LaunchInfo::from_env()?;
    let mut buf = Vec::new();
    let mut ex = Exchange::new();
    ex.recv(0, DECISION, &mut buf);
    let mut last_check = Instant::now();
    loop {
        if t.progress_exchange(&mut ex)? {
            break;
        }
        t.wait_for_input(Duration::from_millis(20))?;
        if last_check.elapsed() >= Duration::from_secs(5) {
            last_check = Instant::now();
            if let (Some(addr), Some(secret)) = (&launch.rendezvous, &launch.secret) {
                TcpStoreClient::connect(addr, secret, Duration::from_secs(5)).map_err(|e| {
                    e.on_rank(rank)
                        .context("spare waiting for admission: the launcher is gone")
                })?;
            }
        }
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

/// Ids requested for removal so far (empty without a launcher store).
fn removal_requests(rank: usize) -> Result<Vec<usize>> {
    let launch = LaunchInfo::from_env()?;
    let (Some(addr), Some(secret)) = (&launch.rendezvous, &launch.secret) else {
        return Ok(Vec::new());
    };
    let store = TcpStoreClient::connect(addr, secret, Duration::from_secs(5)).map_err(|e| {
        e.on_rank(rank)
            .context("resize point: reading removal requests")
    })?;
    // The launcher creates the key (empty) before starting the ranks.
    let text = match store.get(REMOVE_KEY, Duration::from_millis(200)) {
        Ok(v) => v,
        Err(e) if e.kind() == ferry_core::ErrorKind::Timeout => Vec::new(),
        Err(e) => {
            return Err(e
                .on_rank(rank)
                .context("resize point: reading removal requests"))
        }
    };
    Ok(parse_ids(&String::from_utf8_lossy(&text)))
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
fn pending_spares(t: &dyn Transport, world: &Group) -> Result<Vec<usize>> {
    if SPARES_SETTLED.load(Ordering::Acquire) {
        return Ok(Vec::new());
    }
    let n = initial_world_size(t)?;
    Ok((n..t.size())
        .filter(|s| world.index_of(*s).is_none())
        .collect())
}

/// A resize point at `phase` for the members of `world` (collective over `world`; rank 0
/// must be its master, index 0). `epoch` is the epoch of `world`. See the module docs.
pub fn allow_world_resize(
    t: &mut dyn Transport,
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
        let spares = pending_spares(t, world).map_err(ctx)?;
        let removals = removal_requests(rank).map_err(ctx)?;
        let (new_epoch, group) = match decide(world, &spares, &removals, master) {
            None => (epoch, world.clone()),
            Some(members) => {
                let e = epoch.wrapping_add(1);
                let g = Group::new(members, RESIZE_GENERATION_BASE.wrapping_add(e)).map_err(ctx)?;
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
            SPARES_SETTLED.store(true, Ordering::Release);
        }
        msg
    } else {
        let mut buf = Vec::new();
        t.recv(master, DECISION, &mut buf).map_err(ctx)?;
        buf
    };
    let (new_epoch, _, group, _) = decode(&msg).map_err(|e| ctx(e.with_peer(master)))?;
    let changed = new_epoch != epoch;
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

/// Called by the master when the job ends: tells every spare never admitted that it will not
/// be (it returns from [`join_world`] with no index and ends cleanly). No-op elsewhere.
pub fn release_spares(t: &mut dyn Transport) -> Result<()> {
    if t.rank() != 0 || SPARES_SETTLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let n = initial_world_size(t)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::mem::MemTransport;

    #[test]
    fn resize_point_keeps_the_world_without_requests() {
        let out = MemTransport::run(3, |mut t| {
            let g = Group::world(3);
            let r = allow_world_resize(&mut t, &g, 0, 1).unwrap();
            let r2 = allow_world_resize(&mut t, &r.group, r.epoch, 2).unwrap();
            (r2.my_index, r2.group.size(), r2.epoch, r2.changed)
        });
        for (i, o) in out.into_iter().enumerate() {
            assert_eq!(o, (Some(i), 3, 0, false));
        }
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

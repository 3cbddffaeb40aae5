//! Sessions (X1, X3, X4; seed 004): communication without a world.
//!
//! A [`Session`] is local: creating one involves no other process. A process may hold several,
//! finalizing one leaves the others working, and a new one may be created after all were
//! finalized. From a session a program lists the process sets (X2, [`ferry_core::pset`]:
//! `ferry://world`, `ferry://self`, sets named at launch, one per MPMD application), makes a
//! [`SessionGroup`] from a set, and a [`SessionComm`] from a group and a string tag; making the
//! communicator is collective over the group's members only, there is no parent communicator.
//!
//! Isolation (X4): every communicator has a context derived from its session's number in this
//! process, its tag, how many communicators that session made with that tag before, and its
//! members. The context is the generation of every message key it uses, so communicators of
//! different sessions or tags never match each other's messages. A communicator reaches only
//! its members: ranks of another application of an MPMD launch are out of range (an error
//! naming the communicator) unless a set spans both applications.
//!
//! All sessions of a process share one transport, built by the first session from the
//! environment like [`crate::init`]'s. It lives until the process exits (its orderly shutdown
//! runs then, or at [`shutdown`]), so that a session created after all others were finalized
//! finds the same connections. A process uses either sessions or [`crate::init`], not both.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ferry_coll::{self as coll, Cartesian, Graph, Group, ReduceOp, Topology};
use ferry_core::pset::ProcessSets;
use ferry_core::{
    Config, Element, Error, ErrorKind, LaunchInfo, MsgKey, MsgKind, Result, RetiredFlows, Transport,
};

/// What every session of the process shares: the transport and the process sets.
struct Runtime {
    transport: Mutex<Box<dyn Transport>>,
    sets: ProcessSets,
    rank: usize,
    /// Sessions created by this process so far: the next one's number.
    sessions: AtomicU32,
    print_stats: bool,
}

/// The process's runtime: built by the first session, never rebuilt (see the module doc).
static RUNTIME: Mutex<Option<Arc<Runtime>>> = Mutex::new(None);
/// Set by [`shutdown`]: the transport is closed for good.
static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

fn poisoned(op: &'static str) -> Error {
    Error::new(ErrorKind::Io, op).with_detail("ferry's session state was poisoned by a panic")
}

impl Runtime {
    fn lock(&self, op: &'static str) -> Result<MutexGuard<'_, Box<dyn Transport>>> {
        self.transport
            .lock()
            .map_err(|_| poisoned(op).on_rank(self.rank))
    }
}

type Parts = (Box<dyn Transport>, ProcessSets, bool);

fn runtime(make: impl FnOnce() -> Result<Parts>) -> Result<Arc<Runtime>> {
    if SHUT_DOWN.load(Ordering::Acquire) {
        return Err(
            Error::new(ErrorKind::InvalidArgument, "session init").with_detail(
                "ferry::session::shutdown() was called: this process has no transport any more",
            ),
        );
    }
    let mut slot = RUNTIME.lock().map_err(|_| poisoned("session init"))?;
    if let Some(rt) = slot.as_ref() {
        return Ok(rt.clone());
    }
    let (transport, sets, print_stats) = make()?;
    let rt = Arc::new(Runtime {
        rank: transport.rank(),
        transport: Mutex::new(transport),
        sets,
        sessions: AtomicU32::new(0),
        print_stats,
    });
    *slot = Some(rt.clone());
    register_exit_hook();
    Ok(rt)
}

/// Finishes the transport when the process exits: peers see an orderly goodbye, not a lost
/// connection.
fn register_exit_hook() {
    extern "C" fn at_exit() {
        // A panic must not unwind into libc.
        let _ = std::panic::catch_unwind(|| {
            // The process ends: close the transport even if sessions were leaked (exit()).
            let _ = close(true);
        });
    }
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a function without arguments that never unwinds (catch_unwind).
        unsafe {
            libc::atexit(at_exit);
        }
    });
}

/// Closes this process's transport in order (waits until peers no longer need anything from
/// it) and prints statistics when `FERRY_STATS=1`. Runs by itself at process exit; call it
/// earlier to leave the job sooner. Fails if a session is still alive; afterwards no session
/// can be created in this process.
pub fn shutdown() -> Result<()> {
    close(false)
}

fn close(at_exit: bool) -> Result<()> {
    let mut slot = RUNTIME.lock().map_err(|_| poisoned("session shutdown"))?;
    let Some(rt) = slot.as_ref() else {
        SHUT_DOWN.store(true, Ordering::Release);
        return Ok(());
    };
    if Arc::strong_count(rt) > 1 && !at_exit {
        return Err(Error::new(ErrorKind::InvalidArgument, "session shutdown")
            .on_rank(rt.rank)
            .with_detail("sessions or their communicators are still alive; finalize them first"));
    }
    let rt = slot.take().ok_or_else(|| poisoned("session shutdown"))?;
    SHUT_DOWN.store(true, Ordering::Release);
    let mut t = if at_exit {
        // A thread still blocked in an operation holds the transport: leave it as it is
        // rather than wait at exit.
        match rt.transport.try_lock() {
            Ok(t) => t,
            Err(_) => return Ok(()),
        }
    } else {
        rt.lock("session shutdown")?
    };
    let result = t.finish();
    if rt.print_stats {
        eprint!("{}", t.stats());
    }
    result
}

/// One session of this process (X1).
pub struct Session {
    rt: Arc<Runtime>,
    number: u32,
    alive: Arc<AtomicBool>,
    /// Communicators made per tag so far (part of each one's context).
    made: HashMap<String, u32>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("number", &self.number)
            .field("rank", &self.rt.rank)
            .finish()
    }
}

impl Session {
    /// Creates a session. The first one in the process builds the transport from the
    /// environment (`FERRY_BACKEND`, the launcher's variables) and reads the process sets
    /// (`FERRY_PSETS`, or Open MPI's application contexts); later ones share them.
    pub fn init() -> Result<Session> {
        let rt = runtime(|| {
            crate::world::init_logging();
            let config = Config::from_env()?;
            let launch = LaunchInfo::from_env()?;
            let transport = crate::world::build_transport(&config, &launch)?;
            let vars: Vec<(String, String)> = std::env::vars().collect();
            let sets = ProcessSets::from_vars(&vars, transport.rank(), transport.size())
                .map_err(|e| e.or_rank(transport.rank()))?;
            Ok((transport, sets, crate::world::stats_wanted(&config)))
        })?;
        Ok(Session::over(rt))
    }

    fn over(rt: Arc<Runtime>) -> Session {
        let number = rt.sessions.fetch_add(1, Ordering::Relaxed);
        Session {
            rt,
            number,
            alive: Arc::new(AtomicBool::new(true)),
            made: HashMap::new(),
        }
    }

    /// This process's rank in `ferry://world`.
    pub fn world_rank(&self) -> usize {
        self.rt.rank
    }

    /// Number of process sets this process sees.
    pub fn num_psets(&self) -> usize {
        self.rt.sets.len()
    }

    /// The name of process set `n` (0-based); out of range is an error.
    pub fn pset_name(&self, n: usize) -> Result<String> {
        self.rt.sets.name(n).map(str::to_string)
    }

    /// The set of this rank's application (`ferry://app/K`) when the job was launched with
    /// several (`ferry run ... : ...`, `mpirun ... : ...`), else None.
    pub fn app_pset(&self) -> Option<String> {
        self.rt.sets.my_app().map(str::to_string)
    }

    /// The number of ranks in the process set `name`; an unknown name is an error.
    pub fn pset_size(&self, name: &str) -> Result<usize> {
        self.rt.sets.size_of(name)
    }

    /// The group of the process set `name` (X3), in ascending world-rank order.
    pub fn group_from_pset(&self, name: &str) -> Result<SessionGroup> {
        self.check_alive("group from process set")?;
        Ok(SessionGroup {
            set: name.to_string(),
            members: self.rt.sets.ranks(name)?.to_vec(),
            me: self.rt.rank,
        })
    }

    /// A communicator over `group` named by `tag` (X3). Collective over the group's members
    /// only: each calls it with the same tag, in the same order relative to its other
    /// communicators of this session. Fails on a rank that is not in the group.
    pub fn comm_from_group(&mut self, group: &SessionGroup, tag: &str) -> Result<SessionComm> {
        self.check_alive("communicator from group")?;
        let Some(my_index) = group.rank() else {
            return Err(Error::invalid(
                "communicator from group",
                format!(
                    "rank {} is not in the group of process set `{}`",
                    self.rt.rank, group.set
                ),
            )
            .on_rank(self.rt.rank));
        };
        let nth = self.made.entry(tag.to_string()).or_insert(0);
        let context = context_id(self.number, tag, *nth, &group.members);
        *nth += 1;
        let comm = SessionComm {
            rt: self.rt.clone(),
            alive: self.alive.clone(),
            name: format!("`{tag}` over {}", group.set),
            coll: Group::new(group.members.clone(), context)?,
            members: group.members.clone(),
            my_index,
            context,
        };
        // Everyone of the group has made it before anyone uses it.
        comm.barrier()?;
        Ok(comm)
    }

    /// Ends this session: its communicators fail from now on; other sessions keep working.
    pub fn finalize(self) -> Result<()> {
        self.alive.store(false, Ordering::Release);
        Ok(())
    }

    fn check_alive(&self, op: &'static str) -> Result<()> {
        if self.alive.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::invalid(op, "the session was finalized").on_rank(self.rt.rank))
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::Release);
    }
}

/// The context of a communicator: FNV-1a over the session number, the tag, the count of earlier
/// communicators of that tag in the session and the members; the top bit set keeps it apart
/// from the small generations the data layer counts up.
fn context_id(session: u32, tag: &str, nth: u32, members: &[usize]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    eat(&session.to_le_bytes());
    eat(&(tag.len() as u64).to_le_bytes());
    eat(tag.as_bytes());
    eat(&nth.to_le_bytes());
    for &m in members {
        eat(&(m as u64).to_le_bytes());
    }
    h | 0x8000_0000
}

/// The ranks of a process set, as a group (X3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionGroup {
    set: String,
    members: Vec<usize>,
    me: usize,
}

impl SessionGroup {
    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// This process's index in the group, if it is a member.
    pub fn rank(&self) -> Option<usize> {
        self.members.iter().position(|&m| m == self.me)
    }

    /// World ranks of the members, ascending.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// The process set the group was made from.
    pub fn pset(&self) -> &str {
        &self.set
    }
}

/// A communicator made from a group and a tag (X3): point-to-point messages and collectives
/// among the group's members, addressed by their index in the group.
pub struct SessionComm {
    rt: Arc<Runtime>,
    alive: Arc<AtomicBool>,
    name: String,
    coll: Group,
    members: Vec<usize>,
    my_index: usize,
    context: u32,
}

impl std::fmt::Debug for SessionComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionComm")
            .field("name", &self.name)
            .field("rank", &self.my_index)
            .field("size", &self.members.len())
            .finish()
    }
}

impl Drop for SessionComm {
    /// Retires the communicator's flows (bounded flow tables, M2): its context is never
    /// handed out again in this process, and a program that creates and drops communicators
    /// in a loop would otherwise keep a flow per peer, tag and kind of every one of them.
    /// Like every retirement this promises that this member received what it was sent on
    /// the communicator; peers retire at their own pace.
    fn drop(&mut self) {
        // A poisoned transport (a panic while it was in use) has nothing left to keep small.
        if let Ok(mut t) = self.rt.transport.lock() {
            t.retire_flows(RetiredFlows::Generation(self.context));
        }
    }
}

impl SessionComm {
    /// This process's index in the communicator.
    pub fn rank(&self) -> usize {
        self.my_index
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The context every message of this communicator carries (its messages match only
    /// messages with the same context).
    pub fn context(&self) -> u32 {
        self.context
    }

    /// The world rank of member `index`, or an error naming the communicator: a rank outside
    /// it (another MPMD application, say) cannot be reached through it.
    fn world_rank(&self, index: usize, op: &'static str) -> Result<usize> {
        if !self.alive.load(Ordering::Acquire) {
            return Err(Error::invalid(
                op,
                format!("communicator {}: its session was finalized", self.name),
            )
            .on_rank(self.rt.rank));
        }
        self.members.get(index).copied().ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "rank {index} is not in communicator {} of {} ranks (ranks outside it are \
                     reached only through a process set that spans both)",
                    self.name,
                    self.members.len()
                ),
            )
            .on_rank(self.rt.rank)
        })
    }

    fn key(&self, tag: u32) -> MsgKey {
        MsgKey::new(self.context, MsgKind::USER, tag)
    }

    /// Sends `data` to member `dest` with `tag`.
    pub fn send(&self, dest: usize, tag: u32, data: &[u8]) -> Result<()> {
        let to = self.world_rank(dest, "send")?;
        self.rt.lock("send")?.send(to, self.key(tag), data)
    }

    /// Receives the next message with `tag` from member `src` into `buf` (resized to it).
    pub fn recv(&self, src: usize, tag: u32, buf: &mut Vec<u8>) -> Result<()> {
        let from = self.world_rank(src, "recv")?;
        self.rt.lock("recv")?.recv(from, self.key(tag), buf)
    }

    /// Blocks until every member has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.world_rank(self.my_index, "barrier")?;
        coll::barrier(&mut **self.rt.lock("barrier")?, &self.coll)
    }

    /// Combines `data` element-wise over all members with `op`; every member gets the result.
    pub fn allreduce<T: Element>(&self, data: &mut [T], op: &ReduceOp<T>) -> Result<()> {
        self.world_rank(self.my_index, "allreduce")?;
        coll::allreduce(&mut **self.rt.lock("allreduce")?, &self.coll, data, op)
    }

    /// Lays the members out on a Cartesian grid (row-major, no reordering; X6). Local, like
    /// [`crate::Comm::set_cartesian`]: every member declares the same grid before its next
    /// collective, which then runs along the grid's chain (X7).
    pub fn set_cartesian(&mut self, dims: &[usize], periods: &[bool]) -> Result<()> {
        let rank = self.rt.rank;
        let cart = Cartesian::new(dims, periods).map_err(|e| e.or_rank(rank))?;
        self.coll = self
            .coll
            .clone()
            .with_topology(Topology::Cartesian(cart))
            .map_err(|e| e.or_rank(rank))?;
        Ok(())
    }

    /// Gives this member the edges of a distributed graph (X6): it receives from `sources` and
    /// sends to `destinations` (members of this communicator) in the neighbour collectives.
    /// Local, like [`crate::Comm::set_graph`]; the members' edges must agree.
    pub fn set_graph(&mut self, sources: Vec<usize>, destinations: Vec<usize>) -> Result<()> {
        let rank = self.rt.rank;
        let graph = Graph::new(sources, destinations).map_err(|e| e.or_rank(rank))?;
        self.coll = self
            .coll
            .clone()
            .with_topology(Topology::Graph(graph))
            .map_err(|e| e.or_rank(rank))?;
        Ok(())
    }

    /// The topology declared with [`SessionComm::set_cartesian`] or
    /// [`SessionComm::set_graph`], if any.
    pub fn topology(&self) -> Option<&Topology> {
        self.coll.topology()
    }

    fn grid(&self, op: &'static str) -> Result<&Cartesian> {
        match self.coll.topology() {
            Some(Topology::Cartesian(c)) => Ok(c),
            _ => Err(
                Error::invalid(op, "the communicator has no Cartesian topology")
                    .on_rank(self.rt.rank),
            ),
        }
    }

    /// This member's coordinates on the grid.
    pub fn cart_coords(&self) -> Result<Vec<usize>> {
        self.grid("cart coords")?
            .coords(self.my_index)
            .map_err(|e| e.on_rank(self.rt.rank))
    }

    /// `(source, destination)` members for a shift by `disp` along dimension `dim` (as
    /// `MPI_Cart_shift`); `None` past the edge of a non-periodic dimension.
    pub fn cart_shift(&self, dim: usize, disp: isize) -> Result<(Option<usize>, Option<usize>)> {
        self.grid("cart shift")?
            .shift(self.my_index, dim, disp)
            .map_err(|e| e.on_rank(self.rt.rank))
    }

    /// Sends `send` to every neighbour and returns what each sent, per source slot (grid:
    /// dimension 0 behind, ahead, dimension 1 behind, ...; `None` where the grid ends).
    pub fn neighbor_allgather(&self, send: &[u8]) -> Result<Vec<Option<Vec<u8>>>> {
        self.world_rank(self.my_index, "neighbor allgather")?;
        coll::neighbor_allgather(&mut **self.rt.lock("neighbor allgather")?, &self.coll, send)
    }

    /// Sends `parts[k]` to the `k`-th destination slot and returns what each source sent
    /// along its edge to this member, per source slot (`None` where the slot has no member).
    pub fn neighbor_alltoall(&self, parts: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>> {
        self.world_rank(self.my_index, "neighbor alltoall")?;
        coll::neighbor_alltoall(&mut **self.rt.lock("neighbor alltoall")?, &self.coll, parts)
    }

    /// Copies member `root`'s `data` to every member (all pass slices of the same length).
    pub fn broadcast<T: Element>(&self, root: usize, data: &mut [T]) -> Result<()> {
        self.world_rank(root, "broadcast")?;
        coll::broadcast_slice(&mut **self.rt.lock("broadcast")?, &self.coll, root, data)
    }
}

#[cfg(test)]
#[path = "../tests/support/threads.rs"]
mod threads;

#[cfg(test)]
mod tests {
    use super::*;

    /// A session over `t`, as [`Session::init`] makes one over the transport it builds, but
    /// with a runtime of its own (the process-wide one cannot hold ranks that are threads).
    fn session_over(t: Box<dyn Transport>) -> Session {
        let (rank, size) = (t.rank(), t.size());
        Session::over(Arc::new(Runtime {
            rank,
            sets: ProcessSets::from_vars(&[], rank, size).expect("process sets"),
            transport: Mutex::new(t),
            sessions: AtomicU32::new(0),
            print_stats: false,
        }))
    }

    /// 2,000 communicators made from `ferry://world` and dropped one after another, each
    /// used for a collective and a point-to-point message, keep every rank's flow table
    /// flat (without retirement on drop it grows by several flows per communicator).
    #[test]
    fn dropped_session_communicators_retire_their_flows() {
        for backend in threads::BACKENDS {
            let samples = threads::on_threads(backend, 4, "sesscomm", |t| {
                let mut s = session_over(t);
                let world = s.group_from_pset("ferry://world").expect("world group");
                let mut flows = Vec::new();
                for i in 0..2_000u32 {
                    let c = s.comm_from_group(&world, "loop").expect("communicator");
                    let mut v = [1u32];
                    c.allreduce(&mut v, &ReduceOp::Sum).expect("allreduce");
                    assert_eq!(v[0], 4);
                    let (n, r) = (c.size(), c.rank());
                    let mut got = Vec::new();
                    c.send((r + 1) % n, 3, &i.to_le_bytes()).expect("send");
                    c.recv((r + n - 1) % n, 3, &mut got).expect("recv");
                    assert_eq!(got, i.to_le_bytes());
                    drop(c);
                    if (i + 1) % 200 == 0 {
                        flows.push(s.rt.lock("test").unwrap().flow_count().unwrap());
                    }
                }
                let rt = s.rt.clone();
                drop(s);
                rt.lock("test").unwrap().finish().expect("finish");
                flows
            });
            for (rank, f) in samples.iter().enumerate() {
                threads::assert_flat_flows(&format!("{backend}, rank {rank}"), f, 8);
            }
        }
    }

    #[test]
    fn contexts_differ_by_session_tag_order_and_members() {
        let base = context_id(0, "a", 0, &[0, 1]);
        assert!(base & 0x8000_0000 != 0);
        for other in [
            context_id(1, "a", 0, &[0, 1]),
            context_id(0, "b", 0, &[0, 1]),
            context_id(0, "a", 1, &[0, 1]),
            context_id(0, "a", 0, &[0, 2]),
            context_id(0, "", 0, &[0, 1]),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base, context_id(0, "a", 0, &[0, 1]));
    }
}

//! Resize points of elastic jobs (D7, F7; LAIK's `laik_allow_world_resize`, interface.md
//! "Elastic runs"): the part that talks to the outside world.
//!
//! The decisions and their messages are the data layer's ([`ferry_data::resize`], no I/O);
//! this module supplies what they need from the process's environment: the size of the
//! initial world (`FERRY_WORLD_SIZE`, set by `ferry run --spares`), the removal requests that
//! `ferry ctl NAME remove PATTERN` leaves in the launcher's store (key [`REMOVE_KEY`]), and
//! whether the launcher is still there while a spare waits. A program gets a [`Resizer`] from
//! [`crate::World::resizer`]; the world keeps the job's elastic state, so that
//! `World::finish` releases spares that were never admitted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_core::store::TcpStoreClient;
use ferry_core::{Error, ErrorKind, LaunchInfo, Result, Store, Transport};
use ferry_data::resize::{Elastic, ResizeSource};

pub use ferry_data::resize::{parse_ids, Resized, RESIZE_GENERATION_BASE};
use ferry_data::Group;

/// Store key in which `ferry ctl NAME remove` accumulates the ids (transport ranks) of the
/// processes to remove, separated by commas.
pub const REMOVE_KEY: &str = "elastic/remove";

/// How long a resize point tries to reach the launcher's store.
const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// The launcher's control channel: its rendezvous store (`FERRY_RENDEZVOUS`, `FERRY_SECRET`).
/// Without a launcher nobody requests removals and nothing is checked.
#[derive(Debug, Clone)]
pub struct LauncherControl {
    store: Option<(String, String)>,
}

impl LauncherControl {
    /// The control channel named by `launch` (none if it names no rendezvous).
    pub fn new(launch: &LaunchInfo) -> LauncherControl {
        LauncherControl {
            store: launch.rendezvous.clone().zip(launch.secret.clone()),
        }
    }

    fn connect(&self) -> Result<Option<TcpStoreClient>> {
        self.store
            .as_ref()
            .map(|(addr, secret)| TcpStoreClient::connect(addr, secret, STORE_TIMEOUT))
            .transpose()
    }
}

impl ResizeSource for LauncherControl {
    fn removal_requests(&mut self) -> Result<Vec<usize>> {
        let Some(store) = self.connect()? else {
            return Ok(Vec::new());
        };
        // The launcher creates the key (empty) before starting the ranks.
        let text = match store.get(REMOVE_KEY, Duration::from_millis(200)) {
            Ok(v) => v,
            Err(e) if e.kind() == ErrorKind::Timeout => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(parse_ids(&String::from_utf8_lossy(&text)))
    }

    fn check_alive(&mut self) -> Result<()> {
        // A fresh connection: refused once the launcher is gone.
        self.connect().map(|_| ())
    }
}

/// Size of the initial application world from `FERRY_WORLD_SIZE` (None: not an elastic job).
pub(crate) fn world_size_from_env() -> Result<Option<usize>> {
    match std::env::var("FERRY_WORLD_SIZE") {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| Error::config(format!("FERRY_WORLD_SIZE=`{v}` is not a number"))),
        Err(_) => Ok(None),
    }
}

/// The elastic state of a world from its transport and `FERRY_WORLD_SIZE`.
pub(crate) fn elastic_for(t: &dyn Transport, world_size: Option<usize>) -> Result<Elastic> {
    Elastic::new(t, world_size).map_err(|e| e.context("FERRY_WORLD_SIZE"))
}

/// Resize points of one process's world (see the module docs). Cheap to create; every copy
/// shares the world's elastic state.
pub struct Resizer {
    elastic: Arc<Mutex<Elastic>>,
    source: Box<dyn ResizeSource + Send>,
}

impl Resizer {
    pub(crate) fn new(elastic: Arc<Mutex<Elastic>>, source: Box<dyn ResizeSource + Send>) -> Self {
        Resizer { elastic, source }
    }

    fn lock<'a>(
        elastic: &'a Mutex<Elastic>,
        op: &'static str,
    ) -> Result<std::sync::MutexGuard<'a, Elastic>> {
        elastic.lock().map_err(|_| {
            Error::new(ErrorKind::Io, op).with_detail("elastic state poisoned by a panic")
        })
    }

    /// Start of an elastic program: members of the initial world return at once (epoch 0,
    /// phase 0); a spare waits until the master admits it at a resize point (returns that
    /// point's world, epoch and phase) or releases it at the end of the job (`my_index`
    /// `None`).
    pub fn join_world(&mut self, t: &mut dyn Transport) -> Result<(Resized, i64)> {
        let state = Self::lock(&self.elastic, "join world")?.clone();
        state.join_world(t, &mut *self.source)
    }

    /// A resize point at `phase` for the members of `world` (collective over `world`; rank 0
    /// must be its master). `epoch` is the epoch of `world`.
    pub fn allow_world_resize(
        &mut self,
        t: &mut dyn Transport,
        world: &Group,
        epoch: u32,
        phase: i64,
    ) -> Result<Resized> {
        let mut state = Self::lock(&self.elastic, "resize point")?;
        state.allow_world_resize(t, &mut *self.source, world, epoch, phase)
    }
}

//! Start-up: pick the backend from the environment and build this rank's [`World`].

use std::sync::{Arc, Mutex};

use ferry_core::single::SingleTransport;
use ferry_core::{BackendKind, Config, Error, LaunchInfo, Result, Transport};
use ferry_data::resize::Elastic;

use crate::resize::{LauncherControl, Resizer};

/// This rank's view of the job: the transport plus the configuration it was built with.
pub struct World {
    transport: Box<dyn Transport>,
    config: Config,
    print_stats: bool,
    finished: bool,
    /// Elastic jobs: the initial world and whether the spares were settled, shared with the
    /// program's [`Resizer`]s.
    elastic: Arc<Mutex<Elastic>>,
    control: LauncherControl,
    layout_generic: bool,
    /// How this process was started (REBUILD builds transports of later epochs from it).
    launch: LaunchInfo,
    /// A replacement process (`ferry run --respawn`): where it joined the job.
    ft_join: Option<ferry_ft::Joined>,
}

/// Initialises ferry from the environment (`FERRY_BACKEND`, `FERRY_CONFIG`, launcher variables)
/// and sets up logging from `FERRY_LOG`.
pub fn init() -> Result<World> {
    init_logging();
    let config = Config::from_env()?;
    let launch = LaunchInfo::from_env()?;
    init_with(config, launch)
}

/// Initialises ferry with explicit configuration and launch information.
pub fn init_with(config: Config, launch: LaunchInfo) -> Result<World> {
    // A replacement of a failed rank (`ferry run --respawn`) joins the job's rebuild.
    let incarnation = crate::respawn::incarnation()?;
    if incarnation > 0 {
        let (transport, joined) = crate::respawn::join(&config, &launch, incarnation)?;
        let mut world = world_over(transport, config, &launch)?;
        world.ft_join = Some(joined);
        return Ok(world);
    }
    let transport = build_transport(&config, &launch)?;
    world_over(transport, config, &launch)
}

/// This process's transport over the backend the launch chooses (also the sessions' runtime).
pub(crate) fn build_transport(config: &Config, launch: &LaunchInfo) -> Result<Box<dyn Transport>> {
    let kind = choose_backend(launch);
    let transport: Box<dyn Transport> = match kind {
        BackendKind::Single => Box::new(SingleTransport::new()),
        // TCP (seed 000): the launcher's store for rendezvous (R1), else the address list of
        // the configuration file (R2a).
        BackendKind::Tcp => Box::new(tcp_transport(config, launch)?),
        // Shared memory (S1, R2b): launcher variables or a hand start with FERRY_SIZE.
        BackendKind::Shm => {
            let watch = start_watch(launch, None);
            Box::new(ferry_shm::ShmTransport::from_env_watched(
                config,
                launch,
                &|| watch.as_ref().and_then(|w| w.failed()),
            )?)
        }
        // Shared memory within a node, TCP between nodes (S2); needs the launcher's store.
        BackendKind::Hybrid => {
            let store = crate::bootstrap::connect_store(launch)?.ok_or_else(|| {
                Error::config("the hybrid backend needs the launcher's store (FERRY_RENDEZVOUS)")
            })?;
            let store = watched(launch, store);
            Box::new(ferry_hybrid::HybridTransport::from_env(
                config, launch, &*store,
            )?)
        }
        // MPI backend (R3): rank and size come from MPI itself, not from LaunchInfo.
        #[cfg(feature = "mpi")]
        BackendKind::Mpi => Box::new(ferry_mpi::MpiTransport::init_for(config, launch)?),
        #[cfg(not(feature = "mpi"))]
        BackendKind::Mpi => return Err(Error::new(ferry_core::ErrorKind::Unsupported, "init")
            .with_detail(
                "backend `mpi` is not available in this build (build with --features ferry/mpi)",
            )),
    };
    // FERRY_MONITOR=record:DIR|check:DIR wraps the backend; unset, nothing is wrapped.
    let transport = ferry_monitor::install(transport)?;
    Ok(transport)
}

/// Whether `FERRY_STATS=1` (or `general.stats`) asks for statistics at exit.
pub(crate) fn stats_wanted(config: &Config) -> bool {
    config.general.stats
        || std::env::var("FERRY_STATS")
            .map(|v| v == "1")
            .unwrap_or(false)
}

fn world_over(transport: Box<dyn Transport>, config: Config, launch: &LaunchInfo) -> Result<World> {
    let print_stats = stats_wanted(&config);
    let with_rank = |e: Error| e.or_rank(transport.rank());
    let world_size = crate::resize::world_size_from_env().map_err(with_rank)?;
    let elastic = crate::resize::elastic_for(&*transport, world_size).map_err(with_rank)?;
    Ok(World {
        elastic: Arc::new(Mutex::new(elastic)),
        control: LauncherControl::new(launch),
        layout_generic: std::env::var_os("FERRY_LAYOUT_GENERIC").is_some(),
        launch: launch.clone(),
        ft_join: None,
        transport,
        config,
        print_stats,
        finished: false,
    })
}

/// Builds the TCP backend: from the launcher's rendezvous store when `FERRY_RENDEZVOUS` is set,
/// otherwise from `tcp.addresses` in the configuration file (each process takes the rank of
/// the first address it can bind).
fn tcp_transport(config: &Config, launch: &LaunchInfo) -> Result<ferry_tcp::TcpTransport> {
    if let Some(store) = crate::bootstrap::connect_store(launch)? {
        let (Some(rank), Some(size)) = (launch.rank, launch.size) else {
            return Err(Error::config(
                "FERRY_RENDEZVOUS is set but FERRY_RANK or FERRY_SIZE is not",
            ));
        };
        let secret = launch.secret.as_deref().unwrap_or_default();
        let store = watched(launch, store);
        let store: Arc<dyn ferry_core::Store> = if size <= crate::bootstrap::MAX_BUNDLED_RANKS {
            Arc::new(crate::bootstrap::AddressBundle::new(store, rank, size))
        } else {
            store
        };
        return ferry_tcp::TcpTransport::from_store(rank, size, &*store, config, secret);
    }
    let t = ferry_tcp::TcpTransport::from_address_list(config)?;
    if let Some(n) = launch.size {
        if n != t.size() {
            return Err(Error::config(format!(
                "FERRY_SIZE={n} but tcp.addresses lists {} ranks",
                t.size()
            )));
        }
    }
    Ok(t)
}

/// The launcher's watch over the start-up of a job `ferry run` started (rank and size known,
/// a store to read its table from); `None` otherwise.
fn start_watch(
    launch: &LaunchInfo,
    store: Option<Arc<dyn ferry_core::Store>>,
) -> Option<Arc<crate::bootstrap::LauncherWatch>> {
    launch.rendezvous.as_ref()?;
    let (rank, size) = (launch.rank?, launch.size?);
    Some(Arc::new(crate::bootstrap::LauncherWatch::new(
        launch, rank, size, store,
    )))
}

/// `store` giving up long waits when the launcher reports a rank failed during start-up.
fn watched(launch: &LaunchInfo, store: Arc<dyn ferry_core::Store>) -> Arc<dyn ferry_core::Store> {
    match start_watch(launch, Some(store.clone())) {
        Some(w) => Arc::new(crate::bootstrap::WatchedStore::new(store, w)),
        None => store,
    }
}

/// The backend to use: `FERRY_BACKEND` if set; otherwise, with more than one rank, shared
/// memory when the launcher started every rank on this host, and `single` for one rank.
fn choose_backend(launch: &LaunchInfo) -> BackendKind {
    if let Some(b) = launch.backend {
        return b;
    }
    match launch.size {
        Some(n) if n > 1 => BackendKind::Shm,
        _ => BackendKind::Single,
    }
}

pub(crate) fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let Ok(filter) = std::env::var("FERRY_LOG") else {
        return;
    };
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("ferry: FERRY_LOG=`{filter}` is not a valid filter ({e}); using `ferry=debug`");
        EnvFilter::new("ferry=debug")
    });
    // Colour codes only for a terminal: under `ferry run`, mpirun or `2>file` they would end
    // up as escape sequences in the forwarded lines and log files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // A second init (e.g. two worlds in one test process) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

impl World {
    /// Wraps an already built transport (tests, embedding).
    pub fn from_transport(transport: Box<dyn Transport>, config: Config) -> World {
        World {
            elastic: Arc::new(Mutex::new(Elastic::fixed(&*transport))),
            control: LauncherControl::new(&LaunchInfo::default()),
            layout_generic: false,
            launch: LaunchInfo::default(),
            ft_join: None,
            transport,
            config,
            print_stats: false,
            finished: false,
        }
    }

    /// The data layer for this rank over the whole job (`FERRY_LAYOUT_GENERIC`, any value,
    /// forces its element-wise pack/unpack paths; results are identical). With
    /// `data.shared_containers` and a backend that shares memory, its containers live in
    /// node-shared memory (S3).
    pub fn data_instance(&self) -> Result<ferry_data::Instance> {
        let mut inst = ferry_data::Instance::for_transport(&*self.transport)?;
        inst.set_generic_layout(self.layout_generic);
        if self.config.data.shared_containers {
            inst.set_shared_memory(self.transport.shared_memory());
        }
        inst.set_share_min_bytes(self.config.data.shared_min_bytes);
        Ok(inst)
    }

    /// Resize points of an elastic job (`ferry run --spares`, `ferry ctl NAME remove`), see
    /// [`crate::resize`].
    pub fn resizer(&self) -> Resizer {
        Resizer::new(self.elastic.clone(), Box::new(self.control.clone()))
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.transport.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.transport.size()
    }

    /// Name of the backend in use.
    pub fn backend(&self) -> &'static str {
        self.transport.name()
    }

    /// The transport, for point-to-point messages, exchanges and collectives.
    pub fn transport(&mut self) -> &mut dyn Transport {
        &mut *self.transport
    }

    /// Hands the transport over, e.g. to a fault-tolerant communicator
    /// ([`ferry_ft::Communicator::new`]), which from then on owns it and shuts it down. The
    /// world is spent: nothing of it is finished here (spares of an elastic job are not
    /// released; elastic jobs and fault-tolerant communicators do not mix yet).
    pub fn into_transport(mut self) -> Box<dyn Transport> {
        self.finished = true;
        std::mem::replace(&mut self.transport, Box::new(SingleTransport::new()))
    }

    /// Hands the transport over to a fault-tolerant communicator with modes `opts`. REBUILD
    /// works in jobs started with `ferry run --respawn K` (the launcher restarts failed ranks;
    /// in a replacement process the communicator is the rebuilt one, see
    /// [`ferry_ft::Communicator::is_replacement`]) and is refused otherwise; the other modes
    /// are [`ferry_ft::Communicator::new`]'s.
    pub fn ft_communicator(mut self, opts: ferry_ft::Options) -> Result<ferry_ft::Communicator> {
        let joined = self.ft_join.take();
        let rebuild = opts.failure == ferry_ft::FailureMode::Rebuild
            && (joined.is_some() || crate::respawn::available(&self.launch));
        if !rebuild {
            return ferry_ft::Communicator::new(self.into_transport(), opts);
        }
        let service = crate::respawn::service(&self.config, &self.launch, joined)
            .map_err(|e| e.or_rank(self.rank()))?;
        ferry_ft::Communicator::with_respawn(self.into_transport(), opts, service)
    }

    /// The configuration this world was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Orderly shutdown: waits until peers no longer need anything from this rank, prints
    /// statistics if asked to (`FERRY_STATS=1`).
    pub fn finish(mut self) -> Result<()> {
        self.finish_inner()
    }

    fn finish_inner(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        // Elastic jobs: spares never admitted at a resize point end cleanly with the job.
        let released = match self.elastic.lock() {
            Ok(mut e) => e.release_spares(&mut *self.transport),
            Err(_) => Err(Error::new(ferry_core::ErrorKind::Io, "finish")
                .with_detail("elastic state poisoned by a panic")),
        };
        let result = released.and(self.transport.finish());
        if self.print_stats {
            eprint!("{}", self.transport.stats());
        }
        result
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Err(e) = self.finish_inner() {
            tracing::warn!("shutdown: {e}");
        }
    }
}

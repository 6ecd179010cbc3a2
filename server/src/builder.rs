//! The server as a library: a map, then a builder with defaults for everything else.
//!
//! ```no_run
//! # async fn run() -> Result<(), expel_server::ServerError> {
//! use expel_server::{Map, PlayerId, Server};
//! let server = Server::builder(Map::arena()?)
//!     .addr("127.0.0.1:27960".parse().unwrap())
//!     .max_players(16)
//!     .start()
//!     .await?;
//! println!("listening on {}, certificate {}", server.addr, server.fingerprint);
//! let token = server.token(PlayerId(7), std::time::Duration::from_secs(3600));
//! # let _ = token;
//! server.shutdown("done").await;
//! # Ok(()) }
//! ```

use crate::{start, AgonesConfig, Identity, Limits, Server, ServerConfig, ServerError};
use expel_core::{CollisionModel, MapData, MoveConfig, Sim};
use expel_protocol::server::{GameRules, ServerSettings};
use rand::RngCore;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// The embedded default map, `maps/arena.map`.
const ARENA: &str = include_str!("../../maps/arena.map");

/// A map the server plays: its file's bytes (sent to clients that lack them) and the
/// collision model built from them.
#[derive(Clone)]
pub struct Map {
    name: String,
    bytes: Arc<Vec<u8>>,
    model: Arc<CollisionModel>,
    data: MapData,
}

impl Map {
    /// The arena shipped with Expel (what `expel serve` plays without a map).
    pub fn arena() -> Result<Map, ServerError> {
        Map::from_bytes("arena", ARENA.as_bytes().to_vec())
    }

    /// A map file's bytes, in any format Expel reads (`.map`, Quake 1, 2 and 3 BSP),
    /// named `name` for the clients.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> Result<Map, ServerError> {
        let name = name.into();
        let data = MapData::parse_any(&bytes).map_err(|source| ServerError::Map {
            name: name.clone(),
            source,
        })?;
        let model = Arc::new(CollisionModel::build(&data));
        Ok(Map::from_parts(name, Arc::new(bytes), model, data))
    }

    /// The map file at `path`, named by its file stem.
    pub fn open(path: &Path) -> Result<Map, ServerError> {
        let bytes = std::fs::read(path).map_err(|source| ServerError::ReadMap {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .file_stem()
            .map_or("map".into(), |s| s.to_string_lossy().into_owned());
        Map::from_bytes(name, bytes)
    }

    /// A map whose model was built (or read from a cache) elsewhere, from `bytes`.
    pub fn from_parts(
        name: impl Into<String>,
        bytes: Arc<Vec<u8>>,
        model: Arc<CollisionModel>,
        data: MapData,
    ) -> Map {
        Map {
            name: name.into(),
            bytes,
            model,
            data,
        }
    }

    /// Its name, as clients see it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The simulation of this map with `movement`, logging what in the map could not be
    /// used as written.
    pub fn sim(&self, movement: MoveConfig) -> Result<Sim, ServerError> {
        let movement = movement.validate().map_err(ServerError::Movement)?;
        let (sim, warnings) = Sim::from_map(self.model.clone(), &self.data, movement);
        for w in &warnings {
            tracing::warn!(map = %self.name, "{w}");
        }
        Ok(sim)
    }
}

/// How a server is made: [`Server::builder`], then what differs from the defaults, then
/// [`Builder::start`].
pub struct Builder {
    map: Map,
    movement: MoveConfig,
    settings: ServerSettings,
    secret: Option<Vec<u8>>,
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
    operator_token: Option<String>,
    identity: Option<Identity>,
    limits: Limits,
    agones: Option<AgonesConfig>,
    io_threads: Option<usize>,
    rules: Option<Box<dyn GameRules>>,
    web: Option<crate::WebConfig>,
    record: Option<crate::RecordConfig>,
}

impl Server {
    /// A server of `map` with the defaults: a free port on loopback, no operator
    /// endpoint, a fresh self-signed certificate and secret (mint tokens with
    /// [`Server::token`]), `expel serve`'s play settings ([`ServerSettings::new`]) and a
    /// thread for each core.
    pub fn builder(map: Map) -> Builder {
        let mut settings = ServerSettings::new(map.name.clone(), map.bytes.clone(), Vec::new());
        settings.threads = cores();
        Builder {
            map,
            movement: MoveConfig::default(),
            settings,
            secret: None,
            addr: ([127, 0, 0, 1], 0).into(),
            metrics: None,
            operator_token: None,
            identity: None,
            limits: Limits::default(),
            agones: None,
            io_threads: None,
            rules: None,
            web: None,
            record: None,
        }
    }
}

impl Builder {
    /// Where QUIC listens (port 0 picks one).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Serves the operator's endpoint (live view, metrics, health) at `addr`; off
    /// loopback it needs [`Builder::operator_token`].
    pub fn metrics(mut self, addr: SocketAddr) -> Self {
        self.metrics = Some(addr);
        self
    }

    /// Opens the browser's door at `web.addr`: WebTransport sessions beside the QUIC
    /// clients, and the page that plays through them.
    pub fn web(mut self, web: crate::WebConfig) -> Self {
        self.web = Some(web);
        self
    }

    /// The bearer token the operator's endpoint asks for.
    pub fn operator_token(mut self, token: impl Into<String>) -> Self {
        self.operator_token = Some(token.into());
        self
    }

    /// The TLS certificate and key (default: a fresh self-signed one).
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// The connect-token secret (default: 32 random bytes).
    pub fn secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Simulation ticks per second (default 60).
    pub fn tick_rate(mut self, rate: u32) -> Self {
        self.movement.tick_rate = rate;
        self
    }

    /// The movement settings whole (speeds, gravity, hulls; the tick rate among them).
    pub fn movement(mut self, movement: MoveConfig) -> Self {
        self.movement = movement;
        self
    }

    /// Most players at once (default 64).
    pub fn max_players(mut self, n: usize) -> Self {
        self.settings.max_players = n;
        self
    }

    /// Records the match to files for `expel replay` (default: nothing kept). Recording
    /// needs the server to move the players (the default).
    pub fn record(mut self, record: crate::RecordConfig) -> Self {
        self.record = Some(record);
        self
    }

    /// The game's rules, run in each tick (default: movement alone).
    pub fn rules(mut self, rules: impl GameRules + 'static) -> Self {
        self.rules = Some(Box::new(rules));
        self
    }

    /// The rules already boxed (a mode picked at run time).
    pub fn boxed_rules(mut self, rules: Option<Box<dyn GameRules>>) -> Self {
        self.rules = rules;
        self
    }

    /// I/O threads, each with a socket of its own on the port (default: one per core on
    /// Linux, at most [`crate::MAX_IO_THREADS`]; one elsewhere).
    pub fn io_threads(mut self, n: usize) -> Self {
        self.io_threads = Some(n);
        self
    }

    /// Bounds on connections not yet joined.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Reports to an Agones SDK sidecar.
    pub fn agones(mut self, agones: Option<AgonesConfig>) -> Self {
        self.agones = agones;
        self
    }

    /// Any other play setting (rates, interest, timeouts, who moves the players...).
    pub fn settings(mut self, change: impl FnOnce(&mut ServerSettings)) -> Self {
        change(&mut self.settings);
        self
    }

    /// Builds the simulation, binds the sockets and starts the server's threads.
    pub async fn start(self) -> Result<Server, ServerError> {
        let sim = Arc::new(self.map.sim(self.movement.clone())?);
        let secret = self.secret.unwrap_or_else(|| {
            let mut raw = vec![0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut raw);
            raw
        });
        let identity = match self.identity {
            Some(i) => i,
            None => Identity::self_signed()?,
        };
        // Out of range, the sockets' binding refuses it.
        let io_threads = match self.io_threads {
            Some(n) => n,
            None if cfg!(target_os = "linux") => cores().min(crate::MAX_IO_THREADS),
            None => 1,
        };
        let cfg = ServerConfig {
            addr: self.addr,
            metrics: self.metrics,
            operator_token: self.operator_token,
            identity,
            limits: self.limits,
            settings: ServerSettings {
                secret,
                ..self.settings
            },
            agones: self.agones,
            io_threads,
            rules: self.rules,
            web: self.web,
            record: self.record,
        };
        start(sim, cfg).await
    }
}

/// The cores this process may run on (taskset and cgroups count).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

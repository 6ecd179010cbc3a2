//! Bot swarms for load tests: many real clients in one process, each playing through the
//! client library's embedded API, some of them cheating; what they saw summed up in a
//! [`SwarmReport`], with the server's own figures read from its HTTP endpoint.
//!
//! The behaviours and cheats are pure ([`driver`], [`CheatKind::cheats`], [`cheats`]);
//! [`swarm`] is the async part (one task per bot on the caller's runtime, handshakes
//! bounded); [`metrics`] reads the server's Prometheus text; [`flood`] is an input flood
//! for the attack tests and the flood bench.

pub mod cheats;
pub mod flood;
mod light;
pub mod metrics;
mod run;

pub use cheats::{run_cheating, CheatState, CheatTamper, Cheats};
use expel_client::{
    connect, Backoff, ConnectOptions, LinkConditioner, Session, Trust, RECONNECT_CAP,
    RECONNECT_FIRST,
};
use expel_shared::movement::buttons;
use expel_shared::{MoveCommand, PlayerState, Sim};
use glam::DVec3;
pub use metrics::{http_get, tick_quantile, Operator, Scrape};
use rand::{Rng, SeedableRng};
pub use run::{percentile, run, Recorder, RunOptions, RunReport, Script};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How a bot moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Runs forward, turning to a random heading every second and a half, and at once
    /// when a second's running got it nowhere.
    Wander,
    /// Strafe-jumps: forward and sideways at once, view swinging, jumping on landing.
    Strafe,
    /// Walks between a low and a high spawn point, over whatever stairs and ramps join
    /// them.
    Stairs,
    /// Runs into walls and slides along them, jumping now and then.
    Walls,
    /// The four above, by bot.
    Mixed,
}

impl Behavior {
    /// Every behaviour, as the command line names them.
    pub const NAMES: [(&'static str, Behavior); 5] = [
        ("wander", Behavior::Wander),
        ("strafe", Behavior::Strafe),
        ("stairs", Behavior::Stairs),
        ("walls", Behavior::Walls),
        ("mixed", Behavior::Mixed),
    ];

    /// By name.
    pub fn parse(s: &str) -> Option<Behavior> {
        Self::NAMES.iter().find(|(n, _)| *n == s).map(|(_, b)| *b)
    }
}

/// A cheat a bot can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheatKind {
    /// Moves through walls.
    Noclip,
    /// Jumps 300 units once.
    Teleport,
    /// Moves twice as fast.
    Speed,
    /// Rises into the air.
    Fly,
    /// A clock 25 % fast (a speedhack on the command stream).
    Timing,
}

impl CheatKind {
    /// Every cheat, as the command line names them.
    pub const ALL: [(&'static str, CheatKind); 5] = [
        ("noclip", CheatKind::Noclip),
        ("teleport", CheatKind::Teleport),
        ("speed", CheatKind::Speed),
        ("fly", CheatKind::Fly),
        ("timing", CheatKind::Timing),
    ];

    /// By name.
    pub fn parse(s: &str) -> Option<CheatKind> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, k)| *k)
    }

    /// The name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("", |(n, _)| n)
    }

    /// The client cheats, starting after `after_ticks` of honest play.
    pub fn cheats(self, after_ticks: u64) -> Cheats {
        let c = Cheats {
            after_ticks,
            ..Cheats::default()
        };
        match self {
            CheatKind::Noclip => Cheats { noclip: true, ..c },
            CheatKind::Teleport => Cheats {
                teleport: Some(DVec3::new(0.0, 300.0, 0.0)),
                ..c
            },
            CheatKind::Speed => Cheats { speed: 2.0, ..c },
            CheatKind::Fly => Cheats { fly: 120.0, ..c },
            CheatKind::Timing => Cheats {
                clock_factor: 1.25,
                ..c
            },
        }
    }
}

/// A bot's command source for `behavior` (bot number `n`, seeded by `seed`).
pub fn driver(
    behavior: Behavior,
    n: u32,
    seed: u64,
    sim: &Sim,
) -> impl FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand> + Send + 'static {
    let behavior = match behavior {
        Behavior::Mixed => [
            Behavior::Wander,
            Behavior::Strafe,
            Behavior::Stairs,
            Behavior::Walls,
        ][n as usize % 4],
        b => b,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ u64::from(n) << 20);
    let mut yaw: f64 = rng.gen_range(0.0..360.0);
    // Stairs: a low and a high spawn point (floors apart in height), a different pair
    // for each bot so they do not all queue for one staircase.
    let mut spawns: Vec<DVec3> = sim.spawns().to_vec();
    spawns.sort_by(|a, b| a.z.total_cmp(&b.z));
    let half = (spawns.len() / 2).max(1);
    let ends = match (
        spawns.get(n as usize % half),
        spawns.len().checked_sub(1 + n as usize % half),
    ) {
        (Some(a), Some(b)) => [*a, spawns[b]],
        _ => [DVec3::ZERO; 2],
    };
    let mut goal = 1usize;
    let mut last_pos: Option<(u64, DVec3)> = None;
    move |tick, state| {
        let on_ground = state.is_some_and(|s| s.on_ground());
        let at = state.map(|s| s.origin());
        // Once a second: has the bot got anywhere? (a corner, a crowd)
        let here = at.unwrap_or(DVec3::ZERO);
        let stuck = match last_pos {
            Some((t, p)) if tick >= t + 60 => {
                last_pos = Some((tick, here));
                (here - p).length() < 32.0
            }
            None => {
                last_pos = Some((tick, here));
                false
            }
            _ => false,
        };
        let cmd = match behavior {
            Behavior::Wander | Behavior::Mixed => {
                if tick % 90 == 0 || stuck {
                    yaw = rng.gen_range(0.0..360.0);
                }
                MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
            }
            Behavior::Strafe => {
                // The view swings ±20° over a second while forward and side are held.
                let swing = 20.0 * libm::sin(tick as f64 * std::f64::consts::TAU / 60.0);
                if tick % 240 == 0 || stuck {
                    yaw = rng.gen_range(0.0..360.0);
                }
                let side = if (tick / 60) % 2 == 0 { 1.0 } else { -1.0 };
                let mut c = MoveCommand::new(1.0, side, 0.0, yaw + swing, 0.0);
                if on_ground && tick % 2 == 0 {
                    c.buttons |= buttons::JUMP;
                }
                c
            }
            Behavior::Stairs => {
                let to = ends[goal] - here;
                if to.truncate().length() < 48.0 {
                    goal ^= 1;
                }
                // Stuck: a random detour for a second.
                if stuck {
                    yaw = rng.gen_range(0.0..360.0);
                } else if tick % 120 > 60 {
                    yaw = libm::atan2(to.y, to.x).to_degrees();
                }
                MoveCommand::new(1.0, 0.0, 0.0, yaw, 0.0)
            }
            Behavior::Walls => {
                // Hold one heading for four seconds (into a wall, then along it).
                if tick % 240 == 0 {
                    yaw = rng.gen_range(0.0..360.0);
                }
                let mut c = MoveCommand::new(1.0, 0.4, 0.0, yaw, 0.0);
                if on_ground && tick % 97 == 0 {
                    c.buttons |= buttons::JUMP;
                }
                c
            }
        };
        Some(cmd)
    }
}

/// A map one bot fetched, with its simulation, for the others to reuse.
type KnownMap = (Arc<Vec<u8>>, Arc<Sim>);

/// A swarm's settings.
#[derive(Clone, Debug)]
pub struct SwarmOptions {
    /// The server.
    pub server: SocketAddr,
    /// How to trust it.
    pub trust: Trust,
    /// One connect token per bot.
    pub tokens: Vec<String>,
    /// Seconds each bot plays.
    pub seconds: f64,
    /// How honest bots move (cheaters move the same way).
    pub behavior: Behavior,
    /// The cheats: the first `cheaters` bots per kind run that kind.
    pub cheats: Vec<CheatKind>,
    /// Cheaters per kind.
    pub cheaters: usize,
    /// Datagram conditions for every bot.
    pub link: LinkConditioner,
    /// Handshakes in flight at once.
    pub concurrent_connects: usize,
    /// Seconds of honest play before a cheater starts cheating.
    pub cheat_after: f64,
    /// Whether a bot whose server went away (killed, restarting, shutting down) connects
    /// again, with jittered capped backoff, until its time is up; its report is then its
    /// last session's.
    pub reconnect: bool,
    /// Ticks each bot stays ahead of the server beyond the path's delay (a jittery link
    /// needs more for its commands to arrive in time).
    pub buffer_ticks: f64,
    /// Light bots: no prediction, honest scripted inputs, snapshots decoded and
    /// acknowledged (see [`RunOptions::light`]); a thousand fit in one core, so the server
    /// can be measured alone. For an authoritative server, and honest bots only.
    pub light: bool,
}

/// Bots that share one socket: their datagrams come in through one receive call and
/// one task, where a socket each cost the bots' core more than the server's. Few enough
/// that a burst of snapshots, one for each, fits the socket's receive buffer.
const BOTS_PER_SOCKET: usize = 50;

/// Seed of the bots' behaviours.
const BEHAVIOUR_SEED: u64 = 0x6b6f7473;

/// One attempt to join: a bounded number of handshakes at once; the first bot to join
/// keeps the map and its simulation for the rest to reuse.
async fn join(
    gate: &Semaphore,
    shared_map: &tokio::sync::Mutex<Option<KnownMap>>,
    addr: SocketAddr,
    trust: &Trust,
    token: &str,
) -> Result<Session, expel_client::ClientError> {
    let _permit = gate.acquire().await;
    let mut known = shared_map.lock().await;
    let c = ConnectOptions {
        token: token.to_string(),
        trust: trust.clone(),
        have_map: known.as_ref().map(|k| k.0.clone()),
        sim: known.as_ref().map(|k| k.1.clone()),
        server_name: None,
    };
    if known.is_some() {
        drop(known);
        return connect(addr, &c).await;
    }
    let j = connect(addr, &c).await;
    if let Ok(j) = &j {
        *known = Some((j.map.clone(), j.sim.clone()));
    }
    j
}

/// One bot's outcome.
#[derive(Clone, Debug)]
pub struct BotOutcome {
    /// Bot number.
    pub n: u32,
    /// Its player id, once it joined.
    pub player: Option<u32>,
    /// The cheat it ran, if any.
    pub cheat: Option<CheatKind>,
    /// Why it could not connect or play.
    pub error: Option<String>,
    /// What it measured.
    pub report: Option<RunReport>,
    /// Seconds of play before its cheat began, if it did.
    pub cheating_after: Option<f64>,
    /// Each time its session was lost and it joined again: seconds from the loss to
    /// playing again.
    pub reconnects: Vec<f64>,
}

impl BotOutcome {
    /// Bot `n` before it has done anything.
    pub(crate) fn new(n: u32, cheat: Option<CheatKind>) -> BotOutcome {
        BotOutcome {
            n,
            player: None,
            cheat,
            error: None,
            report: None,
            cheating_after: None,
            reconnects: Vec::new(),
        }
    }

    /// Bot `n`, which never played: `error` says why.
    pub(crate) fn failed(n: u32, error: String) -> BotOutcome {
        BotOutcome {
            error: Some(error),
            ..BotOutcome::new(n, None)
        }
    }
}

/// Live counts for a progress line.
#[derive(Debug, Default)]
pub struct SwarmProgress {
    /// Bots connected.
    pub connected: AtomicU64,
    /// Bots that could not connect.
    pub failed: AtomicU64,
    /// Bots done.
    pub finished: AtomicU64,
}

/// Runs the swarm: every bot connects (a bounded number of handshakes at once), plays for
/// the duration and says goodbye. Returns each bot's outcome, in bot order.
pub async fn swarm(opts: SwarmOptions, progress: Arc<SwarmProgress>) -> Vec<BotOutcome> {
    if opts.light && opts.cheats.is_empty() && !opts.reconnect && !opts.link.active() {
        // On a worker, where the runtime's I/O driver runs too: awaited on the caller's
        // thread (`block_on`), every datagram that woke it was a hand-over between two
        // threads on the bots' one core (70,000 context switches a second at 1,000).
        let n = opts.tokens.len();
        return match tokio::spawn(light::swarm(opts, progress)).await {
            Ok(outcomes) => outcomes,
            Err(e) => (0..n as u32)
                .map(|n| BotOutcome::failed(n, format!("bot task failed: {e}")))
                .collect(),
        };
    }
    let gate = Arc::new(Semaphore::new(opts.concurrent_connects.max(1)));
    let shared_map: Arc<tokio::sync::Mutex<Option<KnownMap>>> = Arc::default();
    let mut tasks = Vec::with_capacity(opts.tokens.len());
    let mut kinds = opts
        .cheats
        .iter()
        .flat_map(|k| std::iter::repeat_n(*k, opts.cheaters));
    for (n, token) in opts.tokens.iter().enumerate() {
        let n = n as u32;
        let cheat = kinds.next();
        let (gate, progress, shared_map) = (gate.clone(), progress.clone(), shared_map.clone());
        let (addr, trust, token) = (opts.server, opts.trust.clone(), token.clone());
        let o = opts.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = BotOutcome::new(n, cheat);
            let deadline = Instant::now() + Duration::from_secs_f64(o.seconds.max(0.0));
            let mut backoff = Backoff::new(RECONNECT_FIRST, RECONNECT_CAP, u64::from(n) + 1);
            // When the last session was lost (to time the reconnect).
            let mut lost_at: Option<Instant> = None;
            loop {
                let joined = match join(&gate, &shared_map, addr, &trust, &token).await {
                    Ok(j) => j,
                    Err(e) => {
                        let now = Instant::now();
                        if o.reconnect && e.is_transient() && now < deadline {
                            let wait = backoff.next_delay().min(deadline - now);
                            tokio::time::sleep(wait).await;
                            continue;
                        }
                        if out.player.is_none() {
                            progress.failed.fetch_add(1, Relaxed);
                        }
                        out.error = Some(e.to_string());
                        break;
                    }
                };
                backoff.reset();
                if let Some(t) = lost_at.take() {
                    out.reconnects.push(t.elapsed().as_secs_f64());
                }
                if out.player.is_none() {
                    progress.connected.fetch_add(1, Relaxed);
                }
                out.player = Some(joined.welcome.player_id);
                let rate = joined.welcome.tick_rate() as f64;
                // A cheater plays where its cheat shows: a noclip cheater runs at walls (in
                // the open it cheats nothing, and a wanderer turns away from a wall within
                // a second), the others keep moving in the open (a mixed crowd's stair
                // climbers and wall huggers stand still for long stretches).
                let behavior = match (cheat, o.behavior) {
                    (Some(CheatKind::Noclip), Behavior::Mixed) => Behavior::Walls,
                    (Some(_), Behavior::Mixed) => Behavior::Wander,
                    (_, b) => b,
                };
                let d = driver(behavior, n, BEHAVIOUR_SEED, &joined.sim);
                let run_opts = RunOptions {
                    seconds: deadline
                        .saturating_duration_since(Instant::now())
                        .as_secs_f64(),
                    link: o.link,
                    seed: u64::from(n) + 1 + ((out.reconnects.len() as u64) << 32),
                    buffer_ticks: o.buffer_ticks,
                    light: o.light,
                };
                let cheats =
                    cheat.map_or_else(Cheats::default, |k| k.cheats((o.cheat_after * rate) as u64));
                match run_cheating(joined, d, run_opts, cheats).await {
                    Ok((r, began)) => {
                        let again = o.reconnect && r.lost && Instant::now() < deadline;
                        out.report = Some(r);
                        out.cheating_after = out.cheating_after.or(began);
                        if again {
                            lost_at = Some(Instant::now());
                            let left = deadline.saturating_duration_since(Instant::now());
                            tokio::time::sleep(backoff.next_delay().min(left)).await;
                            continue;
                        }
                    }
                    Err(e) => out.error = Some(e.to_string()),
                }
                break;
            }
            progress.finished.fetch_add(1, Relaxed);
            out
        }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for (n, t) in tasks.into_iter().enumerate() {
        outcomes.push(
            t.await
                .unwrap_or_else(|e| BotOutcome::failed(n as u32, format!("bot task failed: {e}"))),
        );
    }
    outcomes
}

/// One point of the run's timeline (for the chart).
#[derive(Clone, Debug, Serialize)]
pub struct TimelinePoint {
    /// Seconds since the start.
    pub t: f64,
    /// Players on the server.
    pub players: f64,
    /// Longest tick of the last seconds, ms.
    pub tick_ms_max: f64,
    /// 99th percentile tick over the last interval, ms.
    pub tick_ms_p99: Option<f64>,
    /// Server bytes sent per second, all players.
    pub down_bytes_per_s: f64,
    /// Server bytes received per second, all players.
    pub up_bytes_per_s: f64,
}

/// The server's figures over the run, from readings of its metrics.
#[derive(Clone, Debug, Default)]
pub struct ServerFigures {
    /// The readings, oldest first.
    pub scrapes: Vec<Scrape>,
}

impl ServerFigures {
    /// Tick time quantile over the whole run, ms (never above the longest tick, which
    /// interpolation within a wide bucket could otherwise claim).
    pub fn tick_ms(&self, q: f64) -> Option<f64> {
        let (a, b) = (self.scrapes.first()?, self.scrapes.last()?);
        let v = tick_quantile(a, b, q)? * 1000.0;
        Some(self.tick_ms_max().map_or(v, |m| v.min(m)))
    }

    /// The longest tick seen, ms: the largest recent maximum the server reported, and at
    /// least the lower bound of the highest histogram bucket that filled during the run
    /// (a reading that failed cannot hide a long tick).
    pub fn tick_ms_max(&self) -> Option<f64> {
        let (a, b) = (self.scrapes.first()?, self.scrapes.last()?);
        if self.scrapes.len() < 2 {
            return None;
        }
        let reported = self.scrapes.iter().map(|s| s.tick_max).fold(0.0, f64::max);
        // Non-cumulative counts per bucket over the run; the highest that grew.
        let mut floor = 0.0;
        let mut below = (0.0, 0.0); // (bound, cumulative increase) of the bucket before
        for (le, c) in &b.buckets {
            let before = a.buckets.iter().find(|(l, _)| l == le).map_or(0.0, |x| x.1);
            let grew = c - before;
            if grew > below.1 {
                floor = below.0;
            }
            below = (if le.is_finite() { *le } else { below.0 }, grew);
        }
        Some(reported.max(floor) * 1000.0)
    }

    /// The server's CPU use over the run, percent of one core.
    pub fn cpu_percent(&self) -> Option<f64> {
        let (a, b) = (self.scrapes.first()?, self.scrapes.last()?);
        let dt = b.at - a.at;
        (dt > 0.0).then_some(())?;
        Some((b.cpu? - a.cpu?) / dt * 100.0)
    }

    /// The server's CPU per player-second while every player it held at its peak was on
    /// it, ms: the CPU used over the readings' intervals that begin and end at the peak,
    /// over the player-seconds in them. The steady cost of a crowd, without the joins
    /// and leaves that bracket a run (handshakes and map transfers, then an idle tail),
    /// which [`ServerFigures::cpu_percent`] spreads over the whole run.
    pub fn cpu_ms_per_player_s(&self) -> Option<f64> {
        let peak = self.scrapes.iter().map(|s| s.players).fold(0.0, f64::max);
        let (mut cpu, mut player_s) = (0.0, 0.0);
        for w in self.scrapes.windows(2) {
            if peak > 0.0 && w[0].players == peak && w[1].players == peak {
                cpu += w[1].cpu? - w[0].cpu?;
                player_s += peak * (w[1].at - w[0].at);
            }
        }
        (player_s > 0.0).then(|| cpu / player_s * 1000.0)
    }

    /// Point by point.
    pub fn timeline(&self) -> Vec<TimelinePoint> {
        self.scrapes
            .windows(2)
            .map(|w| {
                let dt = (w[1].at - w[0].at).max(1e-9);
                TimelinePoint {
                    t: w[1].at,
                    players: w[1].players,
                    tick_ms_max: w[1].tick_max * 1000.0,
                    tick_ms_p99: tick_quantile(&w[0], &w[1], 0.99).map(|s| s * 1000.0),
                    down_bytes_per_s: (w[1].bytes_out - w[0].bytes_out) / dt,
                    up_bytes_per_s: (w[1].bytes_in - w[0].bytes_in) / dt,
                }
            })
            .collect()
    }
}

/// Reads the server's metrics every `every` until `stop` is set; the readings so far. A
/// reading that fails (a loaded server answering late) is skipped; with no reading at
/// all, the first error.
pub async fn watch_server(
    http: Operator,
    every: Duration,
    stop: Arc<tokio::sync::Notify>,
) -> Result<ServerFigures, String> {
    let started = Instant::now();
    let mut figures = ServerFigures::default();
    let mut ticker = tokio::time::interval(every);
    let mut first_error = None;
    let mut read = |figures: &mut ServerFigures, text: Result<String, String>| match text {
        Ok(t) => figures
            .scrapes
            .push(Scrape::parse(&t, started.elapsed().as_secs_f64())),
        Err(e) => {
            tracing::debug!(error = %e, "metrics reading skipped");
            first_error.get_or_insert(e);
        }
    };
    loop {
        tokio::select! {
            _ = ticker.tick() => read(&mut figures, http_get(&http, "/metrics").await),
            _ = stop.notified() => {
                read(&mut figures, http_get(&http, "/metrics").await);
                break;
            }
        }
    }
    match (figures.scrapes.len(), first_error) {
        (0, Some(e)) => Err(e),
        _ => Ok(figures),
    }
}

/// What the server's refusal says when its load, not its maximum, keeps a bot out.
const FULL_FOR_LOAD: &str = "full for its load";

/// The report of a swarm run (field names are a contract).
#[derive(Clone, Debug, Serialize)]
pub struct SwarmReport {
    /// Bots that joined.
    pub connected: u64,
    /// Bots that could not join.
    pub failed: u64,
    /// Of those, the bots the server refused for its load: at the hello because its
    /// load was full (its capacity, not its maximum of players), or at the door, before
    /// the handshake, which also sheds joins past those it lets be under way at once.
    pub refused_for_load: u64,
    /// Joined bots whose session ended early, not by a kick (connection lost, shutdown).
    pub disconnected: u64,
    /// Bots the server kicked.
    pub kicked: u64,
    /// Round trip, ms, over every bot's samples.
    pub rtt_ms_p50: f64,
    /// Round trip, 99th percentile.
    pub rtt_ms_p99: f64,
    /// Snapshots received per second, per bot (mean).
    pub snapshots_per_s: f64,
    /// Bytes received per second, per bot (mean, all of QUIC).
    pub down_bytes_per_s: f64,
    /// Bytes sent per second, per bot (mean).
    pub up_bytes_per_s: f64,
    /// UDP datagrams received per second, per bot (mean).
    pub down_datagrams_per_s: f64,
    /// UDP datagrams sent per second, per bot (mean).
    pub up_datagrams_per_s: f64,
    /// The protocol's bytes received per second, per bot (mean): snapshots without
    /// QUIC's headers, tags and acknowledgements.
    pub down_payload_bytes_per_s: f64,
    /// Honest bots' corrections per minute of play.
    pub corrections_per_min_honest: f64,
    /// Honest corrections the server's contact with other players and missing commands
    /// do not explain.
    pub unexplained_corrections: u64,
    /// Cheaters' corrections per minute of play.
    pub corrections_per_min_cheaters: f64,
    /// Cheaters whose cheat began.
    pub cheats_attempted: u64,
    /// Cheaters the server flagged or kicked.
    pub cheaters_detected: u64,
    /// Honest bots the server flagged.
    pub honest_flagged: u64,
    /// Server tick time, median over the run, ms (from its metrics).
    pub server_tick_ms_p50: Option<f64>,
    /// Server tick time, 99th percentile, ms.
    pub server_tick_ms_p99: Option<f64>,
    /// Longest server tick, ms.
    pub server_tick_ms_max: Option<f64>,
    /// Server CPU, percent of one core.
    pub server_cpu_percent: Option<f64>,
    /// Server CPU per player-second while every player was on, ms.
    pub server_cpu_ms_per_player_s: Option<f64>,
    /// Bots that ran each cheat, and how many of them were detected.
    pub cheaters: BTreeMap<String, (u64, u64)>,
    /// Why bots failed (the first few distinct reasons).
    pub errors: Vec<String>,
    /// Times a bot lost its server and joined again (`--reconnect`).
    pub reconnects: u64,
    /// Longest time from losing the server to playing again, seconds.
    pub reconnect_s_max: Option<f64>,
    /// The server's figures second by second.
    pub timeline: Vec<TimelinePoint>,
}

/// Parses `/players.json`: flagged player ids.
pub fn flagged_players(json: &str) -> Result<Vec<u32>, String> {
    #[derive(serde::Deserialize)]
    struct Flagged {
        players: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        id: u32,
    }
    let f: Flagged = serde_json::from_str(json).map_err(|e| format!("players.json: {e}"))?;
    Ok(f.players.into_iter().map(|e| e.id).collect())
}

/// Sums the bots' outcomes and the server's figures into the report. `flagged`: player ids
/// the server flagged (from `/players.json`), if it could be read.
pub fn summarize(
    outcomes: &[BotOutcome],
    server: Option<&ServerFigures>,
    flagged: &[u32],
) -> SwarmReport {
    let mut rtt = Vec::new();
    let (mut snaps, mut down, mut up, mut played) = (0.0, 0.0, 0.0, 0u64);
    let (mut down_dg, mut up_dg, mut payload) = (0.0, 0.0, 0.0);
    let (mut honest_corr, mut honest_min, mut cheat_corr, mut cheat_min) = (0u64, 0.0, 0u64, 0.0);
    let mut r = SwarmReport {
        connected: 0,
        failed: 0,
        refused_for_load: 0,
        disconnected: 0,
        kicked: 0,
        rtt_ms_p50: 0.0,
        rtt_ms_p99: 0.0,
        snapshots_per_s: 0.0,
        down_bytes_per_s: 0.0,
        up_bytes_per_s: 0.0,
        down_datagrams_per_s: 0.0,
        up_datagrams_per_s: 0.0,
        down_payload_bytes_per_s: 0.0,
        corrections_per_min_honest: 0.0,
        unexplained_corrections: 0,
        corrections_per_min_cheaters: 0.0,
        cheats_attempted: 0,
        cheaters_detected: 0,
        honest_flagged: 0,
        server_tick_ms_p50: server.and_then(|s| s.tick_ms(0.5)),
        server_tick_ms_p99: server.and_then(|s| s.tick_ms(0.99)),
        server_tick_ms_max: server.and_then(|s| s.tick_ms_max()),
        server_cpu_percent: server.and_then(|s| s.cpu_percent()),
        server_cpu_ms_per_player_s: server.and_then(|s| s.cpu_ms_per_player_s()),
        cheaters: BTreeMap::new(),
        errors: Vec::new(),
        timeline: server.map(|s| s.timeline()).unwrap_or_default(),
        reconnects: 0,
        reconnect_s_max: None,
    };
    for o in outcomes {
        if let Some(e) = &o.error {
            if r.errors.len() < 8 && !r.errors.contains(e) {
                r.errors.push(e.clone());
            }
        }
        for t in &o.reconnects {
            r.reconnects += 1;
            r.reconnect_s_max = Some(r.reconnect_s_max.map_or(*t, |m: f64| m.max(*t)));
        }
        let Some(player) = o.player else {
            r.failed += 1;
            if o.error
                .as_deref()
                .is_some_and(|e| e.contains(FULL_FOR_LOAD))
            {
                r.refused_for_load += 1;
            }
            continue;
        };
        r.connected += 1;
        let flagged = flagged.contains(&player);
        let Some(rep) = &o.report else {
            r.disconnected += 1;
            continue;
        };
        if rep.kicked {
            r.kicked += 1;
        } else if rep.ended_by_server.is_some() {
            r.disconnected += 1;
        }
        rtt.extend_from_slice(&rep.rtt_ms);
        let secs = rep.ended_after.max(1e-9);
        snaps += rep.stats.predict.snapshots as f64 / secs;
        down += rep.down_bytes_per_s;
        up += rep.up_bytes_per_s;
        down_dg += rep.down_datagrams_per_s;
        up_dg += rep.up_datagrams_per_s;
        payload += rep.down_payload_bytes_per_s;
        played += 1;
        match o.cheat {
            None => {
                honest_corr += rep.stats.predict.corrections;
                honest_min += secs / 60.0;
                r.unexplained_corrections += rep.stats.unexplained_corrections;
                r.honest_flagged += flagged as u64;
            }
            Some(k) => {
                cheat_corr += rep.stats.predict.corrections;
                cheat_min += secs / 60.0;
                let began = k == CheatKind::Timing || o.cheating_after.is_some();
                let detected = flagged || rep.kicked;
                r.cheats_attempted += began as u64;
                r.cheaters_detected += detected as u64;
                let e = r.cheaters.entry(k.name().to_string()).or_default();
                e.0 += 1;
                e.1 += detected as u64;
            }
        }
    }
    r.rtt_ms_p50 = percentile(&mut rtt, 0.5);
    r.rtt_ms_p99 = percentile(&mut rtt, 0.99);
    if played > 0 {
        let n = played as f64;
        (r.snapshots_per_s, r.down_bytes_per_s, r.up_bytes_per_s) = (snaps / n, down / n, up / n);
        (r.down_datagrams_per_s, r.up_datagrams_per_s) = (down_dg / n, up_dg / n);
        r.down_payload_bytes_per_s = payload / n;
    }
    if honest_min > 0.0 {
        r.corrections_per_min_honest = honest_corr as f64 / honest_min;
    }
    if cheat_min > 0.0 {
        r.corrections_per_min_cheaters = cheat_corr as f64 / cheat_min;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(counts: &[(f64, f64)]) -> Scrape {
        Scrape {
            buckets: counts.to_vec(),
            ..Scrape::default()
        }
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_of_the_rank() {
        let a = scrape(&[(0.001, 10.0), (0.002, 10.0), (f64::INFINITY, 10.0)]);
        // 100 more ticks: 50 up to 1 ms, 50 between 1 and 2 ms.
        let b = scrape(&[(0.001, 60.0), (0.002, 110.0), (f64::INFINITY, 110.0)]);
        assert_eq!(tick_quantile(&a, &b, 0.5), Some(0.001));
        let p75 = tick_quantile(&a, &b, 0.75).unwrap();
        assert!((p75 - 0.0015).abs() < 1e-12, "{p75}");
        assert_eq!(tick_quantile(&a, &a, 0.5), None, "no ticks, no quantile");
    }

    /// Only the intervals with every player on count: the joins before, and the idle
    /// tail after, neither add CPU nor player-seconds.
    #[test]
    fn cpu_per_player_second_counts_the_time_everyone_was_on() {
        let at = |at: f64, players: f64, cpu: f64| Scrape {
            at,
            players,
            cpu: Some(cpu),
            ..Scrape::default()
        };
        let f = ServerFigures {
            // Joins cost 2 s of CPU in the first second; then 100 players at half a core
            // for 4 s; then the tail.
            scrapes: vec![
                at(0.0, 0.0, 0.0),
                at(1.0, 100.0, 2.0),
                at(3.0, 100.0, 3.0),
                at(5.0, 100.0, 4.0),
                at(6.0, 0.0, 4.1),
            ],
        };
        let per = f.cpu_ms_per_player_s().unwrap();
        assert!((per - 5.0).abs() < 1e-12, "{per}");
        assert!((f.cpu_percent().unwrap() - 4.1 / 6.0 * 100.0).abs() < 1e-9);
        // Never everyone on for a whole interval: no figure.
        let f = ServerFigures {
            scrapes: vec![at(0.0, 0.0, 0.0), at(1.0, 100.0, 2.0)],
        };
        assert_eq!(f.cpu_ms_per_player_s(), None);
    }

    #[test]
    fn the_longest_tick_bounds_the_quantiles_and_survives_a_missed_reading() {
        let a = scrape(&[(0.001, 0.0), (0.05, 0.0), (f64::INFINITY, 0.0)]);
        let mut b = scrape(&[(0.001, 90.0), (0.05, 100.0), (f64::INFINITY, 100.0)]);
        b.tick_max = 0.004;
        let f = ServerFigures {
            scrapes: vec![a.clone(), b.clone()],
        };
        // Interpolation alone would put p99 near 45 ms; the longest tick was 4 ms.
        assert_eq!(f.tick_ms_max(), Some(4.0));
        assert_eq!(f.tick_ms(0.99), Some(4.0));
        // The reading that saw the long tick failed: the histogram still shows a tick
        // above 1 ms.
        b.tick_max = 0.0;
        let f = ServerFigures {
            scrapes: vec![a, b],
        };
        assert_eq!(f.tick_ms_max(), Some(1.0));
    }

    #[test]
    fn the_exposition_is_read_by_name() {
        let text = "# HELP x y\nexpel_players 7\nexpel_tick_duration_seconds_bucket{le=\"0.001\"} 3\nexpel_tick_duration_seconds_bucket{le=\"+Inf\"} 4\nexpel_tick_duration_max_seconds 0.0042\nprocess_cpu_seconds_total 1.5\n";
        let s = Scrape::parse(text, 1.0);
        assert_eq!(s.players, 7.0);
        assert_eq!(s.buckets, vec![(0.001, 3.0), (f64::INFINITY, 4.0)]);
        assert_eq!((s.tick_max, s.cpu), (0.0042, Some(1.5)));
    }
}

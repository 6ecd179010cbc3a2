//! Bot swarms for load tests: many real clients in one process, each playing through the
//! client library's embedded API, some of them cheating; what they saw summed up in a
//! [`SwarmReport`], with the server's own figures read from its HTTP endpoint.
//!
//! The behaviours and cheats are pure ([`driver`], [`CheatKind::cheats`], [`cheats`]);
//! [`swarm`] is the async part (one task per bot on the caller's runtime, handshakes
//! bounded); [`metrics`] reads the server's Prometheus text; [`flood`] is an input flood
//! for the attack tests and the flood bench.

pub use expel_testkit::cheats;
pub mod flood;
mod light;
pub mod metrics;
mod report;
mod run;
mod shots;
mod sight;

pub use cheats::{CheatState, CheatTamper, Cheats};
use expel_client::{
    connect, Backoff, ConnectOptions, Impairment, Session, Trust, RECONNECT_CAP, RECONNECT_FIRST,
};
use expel_core::movement::buttons;
use expel_core::{MoveCommand, PlayerState, Sim};
use glam::DVec3;
pub use metrics::{http_get, tick_quantile, Operator, Scrape};
use rand::{Rng, SeedableRng};
pub use report::{
    flagged_players, summarize, watch_server, ServerFigures, SwarmReport, TimelinePoint,
};
pub use run::{percentile, run, run_cheating, Gunner, Recorder, RunOptions, RunReport, Script};
use serde::Serialize;
pub use shots::ShotRecord;
pub use sight::{Sight, SightFigures};
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
    /// Claims to have drawn the others 150 to 400 ms further back than it did (shoots
    /// where they were).
    Backtrack,
    /// Shoots at players it was never shown, their places leaked to it by the swarm.
    Wallshot,
    /// Pulls the gun's trigger every other tick, faster than it fires.
    Rapidfire,
    /// Leaves every other tick's command out (to be judged by looser rules).
    Gaps,
}

impl CheatKind {
    /// Every cheat, as the command line names them.
    pub const ALL: [(&'static str, CheatKind); 9] = [
        ("noclip", CheatKind::Noclip),
        ("teleport", CheatKind::Teleport),
        ("speed", CheatKind::Speed),
        ("fly", CheatKind::Fly),
        ("timing", CheatKind::Timing),
        ("backtrack", CheatKind::Backtrack),
        ("wallshot", CheatKind::Wallshot),
        ("rapidfire", CheatKind::Rapidfire),
        ("gaps", CheatKind::Gaps),
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
            CheatKind::Backtrack => Cheats {
                backtrack: true,
                ..c
            },
            CheatKind::Wallshot => Cheats {
                wallshot: true,
                ..c
            },
            CheatKind::Rapidfire => Cheats {
                rapidfire: true,
                ..c
            },
            CheatKind::Gaps => Cheats { gaps: true, ..c },
        }
    }

    /// Whether it is a cheat of shooting (the bot shoots, whatever `--fire` says).
    pub fn shoots(self) -> bool {
        matches!(
            self,
            CheatKind::Backtrack | CheatKind::Wallshot | CheatKind::Rapidfire
        )
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
    pub link: Impairment,
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
    /// Bots shoot (deathmatch's buttons; see [`Gunner`]).
    pub fire: bool,
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
        have_map: known.as_ref().map(|k| k.0.clone()),
        sim: known.as_ref().map(|k| k.1.clone()),
        ..ConnectOptions::new(token.to_string(), trust.clone())
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
                out.player = Some(joined.welcome.player.0);
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
                    fire: o.fire,
                    cheats: Cheats::default(),
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

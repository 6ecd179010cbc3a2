//! Headless play on a [`Session`]: a scripted player ([`run`], [`Script`]) and what it
//! measured ([`Recorder`], [`RunReport`]): a harness, not part of the client library's
//! API. `expel connect`, the bots and the tests use it.

use expel_client::{ClientError, End, Impairment, Session, Status, TransportStats};
use expel_core::{MoveCommand, PlayerId, PlayerState, Sim};
use expel_protocol::client::ClientStats;
use glam::DVec3;
use std::time::{Duration, Instant};

/// What a headless run measured: the session's own figures, and the transport's.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// What the session measured (ticks, prediction, snapshots lost, the last state, ...).
    pub stats: ClientStats,
    /// Round-trip time samples, milliseconds (one per update that took a snapshot).
    pub rtt_ms: Vec<f64>,
    /// Bytes received per second (UDP, all of QUIC).
    pub down_bytes_per_s: f64,
    /// Bytes sent per second.
    pub up_bytes_per_s: f64,
    /// UDP datagrams received per second (snapshots, and packets of QUIC's own).
    pub down_datagrams_per_s: f64,
    /// UDP datagrams sent per second.
    pub up_datagrams_per_s: f64,
    /// The protocol's datagram bytes received per second (snapshots: what QUIC carries,
    /// not its headers, tags and acknowledgements).
    pub down_payload_bytes_per_s: f64,
    /// Why the server ended the session, if it did (kick or shutdown).
    pub ended_by_server: Option<String>,
    /// Whether the server kicked this client.
    pub kicked: bool,
    /// Whether the session ended because the server went away or shut down (connecting
    /// again may work).
    pub lost: bool,
    /// Units between where the server first and last held this player.
    pub moved: f64,
    /// Snapshots taken per second while it was followed.
    pub snapshots_per_s: f64,
    /// Seconds from the start until the session ended.
    pub ended_after: f64,
    /// Gun shots fired (a predicting bot that shoots; see [`crate::ShotRecord`]).
    pub shots: u64,
    /// Of those, hits it saw on its own screen.
    pub hits_seen: u64,
    /// Of those, hits the server confirmed.
    pub hits_confirmed: u64,
    /// Hits the server confirmed that it saw miss.
    pub hits_confirmed_unseen: u64,
    /// What it drew at the edges (a predicting bot; see [`crate::Sight`]).
    pub sight: crate::SightFigures,
}

impl RunReport {
    /// The `p`-th percentile of the RTT samples (milliseconds).
    pub fn rtt_percentile(&self, p: f64) -> f64 {
        percentile(&mut self.rtt_ms.clone(), p)
    }

    /// The one-line JSON summary `expel connect` and the play example print.
    pub fn summary_line(&self) -> String {
        serde_json::json!({
            "ticks": self.stats.ticks,
            "snapshots": self.stats.predict.snapshots,
            "snapshots_per_s": self.snapshots_per_s,
            "corrections": self.stats.predict.corrections,
            "unexplained_corrections": self.stats.unexplained_corrections,
            "max_correction": self.stats.predict.max_correction,
            "snapshots_lost": self.stats.snapshots_lost,
            "inputs_missed": self.stats.inputs_missed,
            "moved": self.moved,
            "rtt_ms_p50": self.rtt_percentile(0.5),
            "rtt_ms_p99": self.rtt_percentile(0.99),
            "down_bytes_per_s": self.down_bytes_per_s,
            "up_bytes_per_s": self.up_bytes_per_s,
        })
        .to_string()
    }
}

/// Follows a session for its report: a round-trip sample per snapshot taken, and where
/// the server first held our player.
pub struct Recorder {
    rtt_ms: Vec<f64>,
    /// Snapshots taken when it started, and since.
    began_with: u64,
    snapshots: u64,
    /// The protocol's bytes received when it started.
    payload_in: u64,
    first: Option<PlayerState>,
}

impl Recorder {
    /// Starts following `s`.
    pub fn new(s: &Session) -> Recorder {
        Recorder::of(s.diagnostics().stats)
    }

    /// Starts following a protocol machine whose stats are `st` (a shell of its own).
    pub fn of(st: &ClientStats) -> Recorder {
        Recorder {
            rtt_ms: Vec::new(),
            began_with: st.predict.snapshots,
            snapshots: st.predict.snapshots,
            payload_in: st.bytes_in,
            first: st.final_state,
        }
    }

    /// Takes what the last [`Session::update`] brought.
    pub fn update(&mut self, s: &Session) {
        let d = s.diagnostics();
        self.take(d.stats, d.transport.rtt);
    }

    /// Takes what the machine's last update brought, when the transport's round trip is
    /// `rtt`.
    pub fn take(&mut self, st: &ClientStats, rtt: Duration) {
        if st.predict.snapshots > self.snapshots {
            self.snapshots = st.predict.snapshots;
            self.rtt_ms.push(rtt.as_secs_f64() * 1000.0);
        }
        if self.first.is_none() {
            self.first = st.final_state;
        }
    }

    /// The report of the session since `started`, when the transport stood at `t0`.
    pub fn finish(self, s: &Session, started: Instant, t0: &TransportStats) -> RunReport {
        let d = s.diagnostics();
        self.report(d.stats, s.status(), started, t0, &d.transport)
    }

    /// [`Recorder::finish`] from the machine's stats and status and the transport's
    /// stats then (`t`) and when it started (`t0`).
    pub fn report(
        self,
        st: &ClientStats,
        status: &Status,
        started: Instant,
        t0: &TransportStats,
        t: &TransportStats,
    ) -> RunReport {
        let st = st.clone();
        let ended_after = started.elapsed().as_secs_f64();
        let secs = ended_after.max(1e-9);
        let (ended_by_server, kicked, lost) = match status {
            Status::Ended(e) => (
                e.by_server().then(|| e.reason().to_string()),
                matches!(e, End::Kicked { .. }),
                e.worth_reconnecting(),
            ),
            _ => (None, false, false),
        };
        RunReport {
            rtt_ms: self.rtt_ms,
            down_bytes_per_s: t.bytes_in.saturating_sub(t0.bytes_in) as f64 / secs,
            up_bytes_per_s: t.bytes_out.saturating_sub(t0.bytes_out) as f64 / secs,
            down_datagrams_per_s: t.datagrams_in.saturating_sub(t0.datagrams_in) as f64 / secs,
            up_datagrams_per_s: t.datagrams_out.saturating_sub(t0.datagrams_out) as f64 / secs,
            down_payload_bytes_per_s: (st.bytes_in - self.payload_in) as f64 / secs,
            ended_by_server,
            kicked,
            lost,
            snapshots_per_s: (st.predict.snapshots - self.began_with) as f64 / secs,
            moved: match (self.first, st.final_state) {
                (Some(a), Some(b)) => (b.origin() - a.origin()).length(),
                _ => 0.0,
            },
            ended_after,
            shots: 0,
            hits_seen: 0,
            hits_confirmed: 0,
            hits_confirmed_unseen: 0,
            sight: Default::default(),
            stats: st,
        }
    }
}

/// The `p`-th percentile (0..=1, nearest rank) of `v`, sorting it; 0 when empty.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// How to run headless.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Stop after this many seconds.
    pub seconds: f64,
    /// Datagram conditions.
    pub link: Impairment,
    /// Ticks the client stays ahead of the server beyond the path's delay.
    pub buffer_ticks: f64,
    /// Seed of the conditioner's randomness.
    pub seed: u64,
    /// Plays light: commands and snapshots, no prediction (load tests).
    pub light: bool,
    /// Shoots (deathmatch's buttons): at the nearest player it sees, or, playing light
    /// (it decodes no other players), along its heading.
    pub fire: bool,
    /// The cheats it runs (the shooting ones are its gunner's and its views').
    pub cheats: crate::Cheats,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seconds: 10.0,
            link: Impairment::default(),
            buffer_ticks: 2.0,
            seed: 1,
            light: false,
            fire: false,
            cheats: crate::Cheats::default(),
        }
    }
}

/// How long before its run ends a shooting bot stops counting its shots: the server's
/// answer to a shot takes a round trip and the view's delay (a second covers a 600 ms
/// round trip through the link conditioner with room to spare).
const CONFIRM_WAIT: Duration = Duration::from_secs(1);

/// How long after its client's clock settles a shooting bot holds fire.
const SETTLE_HOLD: Duration = Duration::from_secs(1);

/// A bot's trigger finger: deathmatch's buttons added to its driver's commands, aimed at
/// a target when it has one.
#[derive(Clone, Debug, Default)]
pub struct Gunner {
    /// Bot number: spreads the rockets' turns.
    n: u32,
    /// Where the nearest player it sees stands, if any.
    target: Option<DVec3>,
    /// Its shooting cheats, from tick `start + cheats.after_ticks` on.
    cheats: crate::Cheats,
    start: Option<u64>,
    /// Holds fire (a predicting bot, until a second after its client's clock settled:
    /// see [`ClientMachine::settled`]), as a player does the moment the game appears.
    ///
    /// [`ClientMachine::settled`]: expel_protocol::client::ClientMachine::settled
    pub holding: bool,
}

/// How far a bot looks for someone to shoot, units.
const SIGHT: f64 = 2048.0;

impl Gunner {
    /// Bot `n`'s.
    pub fn new(n: u32) -> Gunner {
        Gunner {
            n,
            ..Gunner::default()
        }
    }

    /// The gunner cheating as `cheats` says (wallshot, rapidfire).
    pub fn with_cheats(mut self, cheats: crate::Cheats) -> Gunner {
        self.cheats = cheats;
        self
    }

    /// A wallshot cheat's look, a wallhack's: the nearest player it cannot see, where it
    /// was shown them (`shown`) or where the swarm leaked them (`leaked`, by player),
    /// through whatever is between. Within sight, a player behind a wall first; one it
    /// was never shown next.
    pub fn look_leaked(
        &mut self,
        sim: &Sim,
        me: Option<(PlayerId, DVec3)>,
        shown: &std::collections::BTreeMap<PlayerId, DVec3>,
        leaked: &std::collections::BTreeMap<PlayerId, DVec3>,
    ) {
        use expel_modes::deathmatch::EYE_HEIGHT;
        self.target = None;
        let Some((id, at)) = me else {
            return;
        };
        let eye = at + DVec3::Z * EYE_HEIGHT;
        let mut s = expel_core::TraceScratch::new();
        let hull = expel_core::Hull::point();
        let mut behind = |o: &DVec3| {
            let t = sim
                .map()
                .trace(&hull, eye, *o, expel_core::Contents::SOLID, &mut s);
            t.sweep.fraction < 1.0
        };
        let nearest = |places: &mut dyn Iterator<Item = DVec3>| {
            places
                .filter(|o| o.distance(at) < SIGHT)
                .min_by(|a, b| a.distance(at).total_cmp(&b.distance(at)))
        };
        let hidden = (shown.iter()).filter(|(p, o)| **p != id && behind(o));
        self.target = nearest(&mut hidden.map(|(_, o)| *o)).or_else(|| {
            let unshown = (leaked.iter()).filter(|(p, _)| **p != id && !shown.contains_key(p));
            nearest(&mut unshown.map(|(_, o)| *o))
        });
    }

    /// Whether its cheats are on by `tick`.
    fn cheating(&mut self, tick: u64) -> bool {
        let start = *self.start.get_or_insert(tick);
        tick >= start + self.cheats.after_ticks
    }

    /// The nearest of `others` within sight that the map's own trace from `me`'s eyes
    /// reaches (nobody is shot at through a wall).
    pub fn look(&mut self, sim: &Sim, me: Option<DVec3>, others: impl Iterator<Item = DVec3>) {
        use expel_modes::deathmatch::EYE_HEIGHT;
        self.target = None;
        let Some(me) = me else { return };
        let eye = me + DVec3::Z * EYE_HEIGHT;
        let mut s = expel_core::TraceScratch::new();
        let mut near: Vec<(f64, DVec3)> = others
            .map(|o| (o.distance_squared(me), o))
            .filter(|(d, _)| *d < SIGHT * SIGHT && *d > 1.0)
            .collect();
        near.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.target = near.into_iter().map(|n| n.1).find(|o| {
            let t = sim.map().trace(
                &expel_core::Hull::point(),
                eye,
                *o,
                expel_core::Contents::SOLID,
                &mut s,
            );
            t.sweep.fraction == 1.0
        });
    }

    /// `cmd` with the triggers, as a player shoots: aimed at the target (within a few
    /// degrees, as a hand aims) in bursts of half a second out of every one and a half, a
    /// rocket every three seconds; without a target, now and then along its heading.
    /// (Perfect aim held on the trigger fragged every bot three times a second at 200
    /// bots: a crowd teleporting to its spawn points, nothing like a game.)
    pub fn arm(
        &mut self,
        tick: u64,
        me: Option<&PlayerState>,
        mut cmd: MoveCommand,
    ) -> MoveCommand {
        use expel_modes::deathmatch::{actions, EYE_HEIGHT};
        let turn = (tick + u64::from(self.n) * 17) % 180;
        let cheating = self.cheating(tick);
        let burst = if cheating && self.cheats.rapidfire {
            // Pressed every other tick, faster than the gun fires.
            tick.is_multiple_of(2)
        } else if cheating && self.cheats.wallshot {
            true
        } else {
            turn < 30 || (90..120).contains(&turn)
        };
        let rocket = if turn == 60 { actions::ROCKET } else { 0 };
        if self.holding {
            cmd.actions = 0;
            return cmd;
        }
        match (self.target, me) {
            (Some(t), Some(me)) => {
                let d = t - (me.origin() + DVec3::Z * EYE_HEIGHT);
                // A hand's error, steady over a burst: a few degrees either way.
                let wobble = |k: u64| {
                    let h = (tick / 30 + k).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(self.n);
                    (h % 801) as f64 / 100.0 - 4.0
                };
                let yaw = libm::atan2(d.y, d.x).to_degrees() + wobble(1);
                // Within what a command may say (±90°: past it the server flags it invalid).
                let pitch = (-libm::atan2(d.z, d.truncate().length()).to_degrees()
                    + wobble(2) / 2.0)
                    .clamp(-89.0, 89.0);
                let aimed = MoveCommand::new(1.0, 0.0, 0.0, yaw, pitch);
                // It aims, and keeps going where it was going (a player strafes about its
                // target; a crowd running at whom it aims is all collisions).
                let (fwd, right, _) = cmd.view();
                let wish = fwd.truncate().normalize_or_zero() * f64::from(cmd.forward)
                    + right.truncate() * f64::from(cmd.side);
                let (fwd, right, _) = aimed.view();
                let axis = |v: DVec3| {
                    let a = wish.dot(v.truncate().normalize_or_zero());
                    a.round().clamp(-127.0, 127.0) as i8
                };
                (cmd.forward, cmd.side) = (axis(fwd), axis(right));
                (cmd.yaw, cmd.pitch) = (aimed.yaw, aimed.pitch);
                cmd.actions = if burst { actions::FIRE } else { 0 } | rocket;
            }
            _ => {
                cmd.actions = rocket | if turn < 20 { actions::FIRE } else { 0 };
            }
        }
        cmd
    }
}

/// A headless player's commands: before each tick, the driver's command for it (the
/// driver returns `None` when it has no more); after that the last one, for a second so
/// the server catches up.
pub struct Script<D> {
    driver: D,
    /// When the driver ran out.
    done: Option<Instant>,
    /// Shoots, when it has a gunner.
    pub gunner: Option<Gunner>,
}

impl<D: FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>> Script<D> {
    /// Commands from `driver` (tick, our player) until it returns `None`.
    pub fn new(driver: D) -> Script<D> {
        Script {
            driver,
            done: None,
            gunner: None,
        }
    }

    /// The script shooting with `gunner`.
    pub fn with_gunner(mut self, gunner: Option<Gunner>) -> Script<D> {
        self.gunner = gunner;
        self
    }

    /// Whether the driver ran out long enough ago: time to say goodbye.
    pub fn over(&self, now: Instant) -> bool {
        self.done
            .is_some_and(|d| now.saturating_duration_since(d) > Duration::from_secs(1))
    }

    /// The command for `tick` (our player predicted so far: `state`), asked just before
    /// it runs; `None` once the driver ran out (the last one is held).
    pub fn command(
        &mut self,
        tick: u64,
        state: Option<&PlayerState>,
        now: Instant,
    ) -> Option<MoveCommand> {
        if self.done.is_some() {
            return None;
        }
        let next = (self.driver)(tick, state);
        if next.is_none() {
            self.done = Some(now);
        }
        match &mut self.gunner {
            Some(g) => next.map(|c| g.arm(tick, state, c)),
            None => next,
        }
    }
}

/// Plays headless: before each tick asks `driver` for the command (it returns `None`
/// when it has no more), then keeps the last one for a second so the server catches up,
/// and says goodbye.
pub async fn run(
    mut s: Session,
    driver: impl FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>,
    opts: RunOptions,
) -> Result<RunReport, ClientError> {
    s.set_link(opts.link, opts.seed);
    s.set_buffer_ticks(opts.buffer_ticks);
    s.set_light(opts.light);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.seconds.max(0.0));
    let stats0 = s.diagnostics().transport;
    let cheats = opts.cheats;
    let shooting = cheats.backtrack || cheats.wallshot || cheats.rapidfire;
    let gunner = (opts.fire || shooting).then(|| Gunner::new(opts.seed as u32).with_cheats(cheats));
    if cheats.wallshot {
        crate::cheats::leaking().store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let me = s.welcome.player;
    if (opts.fire || shooting) && !opts.light {
        // A predicting bot sees its own rockets at once, as a player would.
        s.set_launcher(Box::new(expel_modes::deathmatch::RocketLauncher::default()));
    }
    let mut script = Script::new(driver).with_gunner(gunner);
    // A predicting shooter counts its shots and the hits it saw and the server confirmed.
    let mut shots = ((opts.fire || shooting) && !opts.light).then(crate::ShotRecord::default);
    // A predicting bot looks at what it draws; the game's events (hits, frags) go to it
    // when its drawn view reaches them, as a player would see them.
    let mut sight = (!opts.light).then(crate::Sight::default);
    if !opts.light {
        s.set_release(
            expel_client::Channel::Reliable,
            expel_client::Release::Drawn,
        );
    }
    let mut recorder = Recorder::new(&s);
    let mut settled_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= deadline || script.over(now) {
            break;
        }
        if let Status::Ended(_) = s.status() {
            break;
        }
        let leaking = crate::cheats::leaking().load(std::sync::atomic::Ordering::Relaxed);
        if let (true, Some(at)) = (leaking, s.display_origin()) {
            // The swarm colludes: where each stands, for the wallshot cheater.
            crate::cheats::leak()
                .lock()
                .map(|mut l| l.insert(me, at))
                .ok();
        }
        if let Some(g) = script.gunner.as_mut() {
            // Its clock settled, and a second more: the commands it made while its
            // clock was still finding the server's came late, were stepped as repeats,
            // and its prediction stands corrected only a round trip later.
            if s.machine().settled() {
                settled_at.get_or_insert(now);
            }
            g.holding = settled_at.is_none_or(|at| now < at + SETTLE_HOLD);
            if cheats.wallshot && g.cheating(s.predicted_tick()) {
                let leaked = crate::cheats::leak()
                    .lock()
                    .map(|l| l.clone())
                    .unwrap_or_default();
                let at = s.display_origin().map(|a| (me, a));
                g.look_leaked(&s.sim, at, &s.others(now), &leaked);
            } else {
                g.look(&s.sim, s.display_origin(), s.others(now).into_values());
            }
        }
        s.update_with(now, &mut |tick, st| script.command(tick, st, now));
        recorder.update(&s);
        if let Some(r) = shots.as_mut() {
            r.look(s.machine_mut(), now + CONFIRM_WAIT < deadline);
        }
        if let Some(v) = sight.as_mut() {
            v.look(s.machine_mut(), now);
        }
        let wake = s
            .next_wake()
            .unwrap_or(now + Duration::from_millis(5))
            .min(deadline);
        s.wait(wake).await;
    }
    let mut report = recorder.finish(&s, started, &stats0);
    if let Some(r) = shots {
        report.shots = r.shots();
        report.hits_seen = r.hits_seen();
        report.hits_confirmed = r.hits_confirmed();
        report.hits_confirmed_unseen = r.hits_confirmed_unseen();
    }
    if let Some(v) = sight {
        report.sight = v.figures();
    }
    s.close("done").await;
    Ok(report)
}

/// A cheater's run: [`run`] with `cheats` tampering with what it sends.
/// Also returns when the cheat began, in seconds of play (ticks sent at the tick rate).
pub async fn run_cheating(
    mut session: Session,
    driver: impl FnMut(u64, Option<&PlayerState>) -> Option<expel_core::MoveCommand>,
    opts: RunOptions,
    cheats: crate::Cheats,
) -> Result<(RunReport, Option<f64>), ClientError> {
    let began = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if cheats != crate::Cheats::default() {
        session.set_tamper(Box::new(crate::CheatTamper::new(cheats, began.clone())));
    }
    let rate = f64::from(session.welcome.tick_rate().max(1));
    let opts = RunOptions { cheats, ..opts };
    let report = run(session, driver, opts).await?;
    let at = began.load(std::sync::atomic::Ordering::Relaxed);
    Ok((report, (at > 0).then(|| at as f64 / rate)))
}

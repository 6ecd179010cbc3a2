//! Expel in the browser: the protocol's client machine and the core, compiled to
//! WebAssembly and driven by the page (`web/page/main.js`). The page owns the I/O (a
//! WebTransport session: a bidirectional stream for control, datagrams for inputs and
//! snapshots) and the clock (`performance.now()`, passed into every call); this crate
//! owns everything that decides: prediction, reconciliation, interpolation, the game's
//! messages. It is the same code a native client runs, so a browser player's moves are
//! judged bit for bit like a native player's.
//!
//! `web/build.sh` builds it into `web/dist/`, which `expel serve --web` serves.

use expel_core::movement::{buttons, MoveMode};
use expel_core::{MoveCommand, MoveConfig, PlayerId, PlayerState, Sim, SimScratch};
use expel_modes::deathmatch::{actions, DeathmatchNews, FighterState, RocketLauncher, Weapon};
use expel_modes::tag::{TagNews, TagScore};
use expel_protocol::client::{ClientEvent, ClientMachine, ClientOutput, ClientSettings, Status};
use expel_protocol::game::state::Replicated;
use expel_protocol::messages::decode_message;
use expel_protocol::plan::{plan, round_tenth as r};
use expel_protocol::time::Instant;
use expel_protocol::Code;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use wasm_bindgen::prelude::*;

/// Game messages kept for the page to show.
const LINES_KEPT: usize = 8;
/// Control writes and datagrams waiting for the page; past it the oldest datagrams go
/// (as the network may drop them). Control bytes are never dropped: the page takes
/// them every frame.
const DATAGRAMS_KEPT: usize = 256;

/// Which shipped game the server plays, as its welcome tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Game {
    Unknown,
    Tag,
    Deathmatch,
}

/// One browser player: the client machine and what the page reads of it.
#[wasm_bindgen]
pub struct WebClient {
    machine: ClientMachine,
    clock: PageClock,
    control: VecDeque<Vec<u8>>,
    datagrams: VecDeque<Vec<u8>>,
    game: Game,
    lines: VecDeque<String>,
    tag: Option<TagScore>,
    frags: Vec<(PlayerId, i32, u32)>,
    hits: u64,
    /// The snapshot count and the instant (ms) a second's window began, and the rate
    /// measured over the last whole window.
    window: (u64, f64),
    snapshots_per_s: f64,
}

#[wasm_bindgen]
impl WebClient {
    /// A player joining with `token`, at page time `now_ms`.
    #[wasm_bindgen(constructor)]
    pub fn new(token: String, now_ms: f64) -> WebClient {
        let clock = PageClock::new(now_ms);
        let machine = ClientMachine::new(ClientSettings::new(token), clock.at(now_ms));
        let mut c = WebClient {
            machine,
            clock,
            control: VecDeque::new(),
            datagrams: VecDeque::new(),
            game: Game::Unknown,
            lines: VecDeque::new(),
            tag: None,
            frags: Vec::new(),
            hits: 0,
            window: (0, now_ms),
            snapshots_per_s: 0.0,
        };
        c.drain();
        c
    }

    /// Bytes read from the control stream.
    pub fn handle_control(&mut self, bytes: &[u8], now_ms: f64) {
        self.machine.handle_control(bytes, self.clock.at(now_ms));
        self.drain();
    }

    /// A datagram received.
    pub fn handle_datagram(&mut self, bytes: &[u8], now_ms: f64) {
        self.machine.handle_datagram(bytes, self.clock.at(now_ms));
        self.drain();
    }

    /// Time passed: runs the ticks due by `now_ms`. The page calls it every frame and at
    /// [`WebClient::next_timeout_ms`].
    pub fn handle_timeout(&mut self, now_ms: f64) {
        self.machine.handle_timeout(self.clock.at(now_ms));
        self.drain();
        let (count, since) = self.window;
        let seconds = (now_ms - since) / 1000.0;
        if seconds >= 1.0 {
            let now_count = self.snapshots();
            self.snapshots_per_s = now_count.saturating_sub(count) as f64 / seconds;
            self.window = (now_count, now_ms);
        }
    }

    /// The session is gone: `code` is the close's application code (negative when the
    /// transport gave none), `reason` its words.
    pub fn handle_closed(&mut self, code: f64, reason: &str) {
        let code = (code >= 0.0 && code.is_finite()).then_some(code as u64);
        self.machine.handle_closed(code, reason);
        self.drain();
    }

    /// The transport's round-trip estimate (WebTransport's `smoothedRtt`), in ms.
    pub fn set_rtt_ms(&mut self, ms: f64) {
        if ms.is_finite() && ms > 0.0 {
            self.machine
                .set_rtt(std::time::Duration::from_secs_f64(ms / 1000.0));
        }
    }

    /// This frame's input: axes from -1 to 1, view angles in degrees, the buttons held.
    #[allow(clippy::too_many_arguments)]
    pub fn input(
        &mut self,
        forward: f64,
        side: f64,
        yaw: f64,
        pitch: f64,
        jump: bool,
        crouch: bool,
        fire: bool,
        rocket: bool,
    ) {
        let mut b = 0;
        if jump {
            b |= buttons::JUMP;
        }
        if crouch {
            b |= buttons::CROUCH;
        }
        let mut a = 0;
        if self.game == Game::Deathmatch {
            if fire {
                a |= actions::FIRE;
            }
            if rocket {
                a |= actions::ROCKET;
            }
        }
        let cmd = MoveCommand::new(forward, side, 0.0, yaw, pitch)
            .with_buttons(b)
            .with_actions(a, 0);
        self.machine.input(cmd);
    }

    /// The next control-stream write, oldest first.
    pub fn take_control(&mut self) -> Option<Vec<u8>> {
        self.control.pop_front()
    }

    /// The next datagram to send, oldest first.
    pub fn take_datagram(&mut self) -> Option<Vec<u8>> {
        self.datagrams.pop_front()
    }

    /// When the machine next wants [`WebClient::handle_timeout`], in page ms (NaN: only
    /// when something arrives).
    pub fn next_timeout_ms(&self) -> f64 {
        self.machine
            .poll_timeout()
            .map_or(f64::NAN, |t| self.clock.millis(t))
    }

    /// Whether the session ended with a code worth trying again later (server full, a
    /// restart): the page reconnects only then.
    pub fn transient(&self) -> bool {
        self.end_code().is_some_and(Code::is_transient)
    }

    /// What the page publishes as `window.expelStats` (JSON): `state`, `player`, `tick`,
    /// `snapshots_per_s`, `corrections`, `unexplained_corrections`, `rtt_ms`, and `code`
    /// (a number) once refused or ended.
    pub fn stats(&self) -> String {
        let s = self.machine.stats();
        let (state, reason) = match self.machine.status() {
            Status::Connecting => ("connecting", None),
            Status::ReceivingMap => ("joining", None),
            Status::Playing => ("playing", None),
            Status::Ended(end) => {
                let refused = matches!(end, expel_protocol::client::End::Refused { .. });
                (
                    if refused { "refused" } else { "ended" },
                    Some(end.reason()),
                )
            }
        };
        let mut v = json!({
            "state": state,
            "player": self.machine.welcome().map(|w| w.player.0),
            "tick": self.machine.predicted_tick(),
            "snapshots_per_s": (self.snapshots_per_s * 10.0).round() / 10.0,
            "snapshots": self.snapshots(),
            "corrections": s.predict.corrections,
            "unexplained_corrections": s.unexplained_corrections,
            "rtt_ms": (s.rtt * 1e4).round() / 10.0,
            "datagrams_in": s.datagrams_in,
            "datagrams_out": s.datagrams_out,
        });
        if let Some(reason) = reason {
            v["reason"] = json!(reason);
            v["code"] = json!(self.end_code().map(Code::number));
        }
        v.to_string()
    }

    /// The map from above (JSON: `bounds`, `floors`, `walls`), once it is here.
    pub fn plan(&self) -> Option<String> {
        let p = plan(self.machine.sim()?);
        Some(json!({"bounds": p.bounds, "floors": p.floors, "walls": p.walls}).to_string())
    }

    /// What to draw at page time `now_ms` (JSON): `me` (`[x, y, z]`), `others` (`[id, x,
    /// y, z, yaw]`), `movers` (their bounds from above), `rockets` (`[x, y, z]`), the game's
    /// `lines` and its `scores` (`[id, points]`, best first; `it` at tag).
    pub fn frame(&self, now_ms: f64) -> String {
        let m = &self.machine;
        let me = m.display_origin().map(|v| [r(v.x), r(v.y), r(v.z)]);
        let at = m.render_tick(self.clock.at(now_ms));
        let others: Vec<Value> = m
            .others_drawn(at)
            .iter()
            .map(|(id, d)| json!([id.0, r(d.origin.x), r(d.origin.y), r(d.origin.z), r(d.yaw)]))
            .collect();
        let movers: Vec<[f64; 4]> = match m.sim() {
            Some(sim) => sim
                .movers()
                .iter()
                .zip(m.movers())
                .map(|(mover, s)| {
                    let b = mover.world_bounds(&mover.pose(s));
                    [r(b.min.x), r(b.min.y), r(b.max.x), r(b.max.y)]
                })
                .collect(),
            None => Vec::new(),
        };
        // Our own rockets as predicted, and everything else the snapshots show (but the
        // server's twins of ours, drawn already).
        let launched = m.launched();
        let twins: Vec<_> = launched.iter().filter_map(|l| l.twin).collect();
        let rockets: Vec<[f64; 3]> = launched
            .iter()
            .map(|l| l.origin)
            .chain(
                m.entities_drawn(at)
                    .iter()
                    .filter(|(id, _)| !twins.contains(id))
                    .map(|(_, e)| e.origin),
            )
            .map(|v| [r(v.x), r(v.y), r(v.z)])
            .collect();
        let (scores, it) = self.scores();
        json!({
            "me": me,
            "others": others,
            "movers": movers,
            "rockets": rockets,
            "lines": self.lines,
            "scores": scores,
            "it": it,
            "hits": self.hits,
            "game": match self.game {
                Game::Unknown => "",
                Game::Tag => "tag",
                Game::Deathmatch => "deathmatch",
            },
        })
        .to_string()
    }
}

impl WebClient {
    fn snapshots(&self) -> u64 {
        self.machine.stats().predict.snapshots
    }

    fn end_code(&self) -> Option<Code> {
        match self.machine.status() {
            Status::Ended(end) => end.code(),
            _ => None,
        }
    }

    /// The scoreboard, best first, and who is "it" at tag.
    fn scores(&self) -> (Vec<(u32, i64)>, Option<u32>) {
        let mut rows: Vec<(u32, i64)> = match (&self.tag, self.game) {
            (Some(t), Game::Tag) => t.scores.iter().map(|(p, n)| (p.0, i64::from(*n))).collect(),
            _ => self
                .frags
                .iter()
                .map(|(p, f, _)| (p.0, i64::from(*f)))
                .collect(),
        };
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        rows.truncate(10);
        (rows, self.tag.as_ref().and_then(|t| t.it).map(|p| p.0))
    }

    /// Moves what the machine has for the page into its queues, and reads its events and
    /// the game's messages.
    fn drain(&mut self) {
        while let Some(out) = self.machine.poll_output() {
            match out {
                ClientOutput::Control(b) => self.control.push_back(b),
                ClientOutput::Datagram(b) => {
                    if self.datagrams.len() == DATAGRAMS_KEPT {
                        self.datagrams.pop_front();
                    }
                    self.datagrams.push_back(b);
                }
            }
        }
        while let Some(e) = self.machine.poll_event() {
            if let ClientEvent::Welcomed { .. } = e {
                self.welcomed();
            }
        }
        while let Some(letter) = self.machine.poll_message() {
            let line = match self.game {
                Game::Tag => decode_message::<TagNews>(&letter.bytes)
                    .ok()
                    .and_then(|n| self.tag_news(n)),
                Game::Deathmatch => decode_message::<DeathmatchNews>(&letter.bytes)
                    .ok()
                    .and_then(|n| self.deathmatch_news(n)),
                Game::Unknown => None,
            };
            if let Some(line) = line {
                if self.lines.len() == LINES_KEPT {
                    self.lines.pop_front();
                }
                self.lines.push_back(line);
            }
        }
    }

    fn welcomed(&mut self) {
        let Some(w) = self.machine.welcome() else {
            return;
        };
        self.game = if w.states.player.as_deref() == Some(FighterState::NAME) {
            Game::Deathmatch
        } else if w.states.player.is_none() {
            Game::Tag
        } else {
            Game::Unknown
        };
        if self.game == Game::Deathmatch {
            self.machine
                .set_launcher(Box::new(RocketLauncher::default()));
        }
    }

    fn tag_news(&mut self, news: TagNews) -> Option<String> {
        match news {
            TagNews::Score(s) => {
                let line = (self.tag.as_ref().map(|t| t.it) != Some(s.it))
                    .then(|| s.it.map(|p| format!("player {} is it", p.0)))
                    .flatten();
                self.tag = Some(s);
                line
            }
            TagNews::Said { from, line } => Some(format!("{}: {line}", from.0)),
        }
    }

    fn deathmatch_news(&mut self, news: DeathmatchNews) -> Option<String> {
        match news {
            DeathmatchNews::Score(s) => {
                self.frags = s.frags;
                None
            }
            DeathmatchNews::Hit { .. } => {
                self.hits += 1;
                None
            }
            DeathmatchNews::Frag {
                killer,
                victim,
                weapon,
            } => {
                let with = match weapon {
                    Weapon::Gun => "gun",
                    Weapon::Rocket => "rocket",
                };
                Some(match killer {
                    Some(k) if k != victim => format!("{} fragged {} ({with})", k.0, victim.0),
                    _ => format!("{} died", victim.0),
                })
            }
        }
    }
}

/// The page's clock as the machine's instants. In the browser an instant is the page's
/// time itself; a native build (the workspace's tests) counts from an instant taken when
/// the player was made.
struct PageClock {
    #[cfg(not(target_arch = "wasm32"))]
    origin: (Instant, f64),
}

impl PageClock {
    #[cfg(target_arch = "wasm32")]
    fn new(_now_ms: f64) -> PageClock {
        PageClock {}
    }

    #[cfg(target_arch = "wasm32")]
    fn at(&self, ms: f64) -> Instant {
        Instant::from_page_millis(ms)
    }

    #[cfg(target_arch = "wasm32")]
    fn millis(&self, t: Instant) -> f64 {
        t.page_millis()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn new(now_ms: f64) -> PageClock {
        PageClock {
            origin: (Instant::now(), now_ms),
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn at(&self, ms: f64) -> Instant {
        let (base, base_ms) = self.origin;
        let after = ((ms - base_ms) / 1000.0).max(0.0);
        base + std::time::Duration::from_secs_f64(if after.is_finite() { after } else { 0.0 })
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn millis(&self, t: Instant) -> f64 {
        let (base, base_ms) = self.origin;
        base_ms + t.saturating_duration_since(base).as_secs_f64() * 1000.0
    }
}

/// Values per command in [`sim_hash`]'s input: forward, side, up, yaw, pitch, jump,
/// crouch (non-zero: held).
pub const INPUT_FIELDS: usize = 7;

/// The core's golden run, as `expel sim MAP --inputs FILE` makes it: one walking player
/// from the map's first spawn point at 60 Hz, one command a tick; returns the world's
/// hash after the last (16 hex digits). `inputs` holds [`INPUT_FIELDS`] numbers per tick.
#[wasm_bindgen]
pub fn sim_hash(map: &[u8], inputs: &[f64]) -> Result<String, String> {
    let data = expel_core::MapData::parse_any(map).map_err(|e| format!("map: {e}"))?;
    let config = MoveConfig {
        tick_rate: 60,
        ..MoveConfig::default()
    }
    .validate()
    .map_err(|e| format!("movement settings: {e}"))?;
    let model = std::sync::Arc::new(expel_core::CollisionModel::build(&data));
    let sim = Sim::from_map(model, &data, config).0;
    let spawn = *sim.spawns().first().ok_or("the map has no spawn point")?;
    let mut world = sim.new_state();
    let mut start = PlayerState::at(spawn);
    start.mode = MoveMode::Walk;
    sim.add_player(&mut world, PlayerId(0), start)
        .map_err(|e| format!("placing the player: {e}"))?;
    if !inputs.len().is_multiple_of(INPUT_FIELDS) {
        return Err(format!(
            "{} input numbers are not whole commands of {INPUT_FIELDS}",
            inputs.len()
        ));
    }
    let mut scratch = SimScratch::new();
    let mut commands = BTreeMap::new();
    for c in inputs.chunks_exact(INPUT_FIELDS) {
        if c.iter().any(|v| !v.is_finite()) {
            return Err("an input is not a finite number".into());
        }
        let mut b = 0;
        if c[5] != 0.0 {
            b |= buttons::JUMP;
        }
        if c[6] != 0.0 {
            b |= buttons::CROUCH;
        }
        commands.insert(
            PlayerId(0),
            MoveCommand::new(c[0], c[1], c[2], c[3], c[4]).with_buttons(b),
        );
        sim.step(&mut world, &commands, &mut scratch);
    }
    Ok(format!("{:016x}", world.hash()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The golden run's first inputs (`tests/data/replay.jsonl`) as the page passes them.
    fn replay_inputs() -> Vec<f64> {
        let text = include_str!("../../tests/data/replay.jsonl");
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            let num = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let flag = |k: &str| f64::from(u8::from(v.get(k) == Some(&json!(true))));
            out.extend([
                num("forward"),
                num("side"),
                num("up"),
                num("yaw"),
                num("pitch"),
                flag("jump"),
                flag("crouch"),
            ]);
        }
        out
    }

    #[test]
    fn the_golden_run_gives_the_golden_hash() {
        let map = include_bytes!("../../maps/arena.map");
        let golden = include_str!("../../tests/golden/hashes.txt")
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 5 && f[0] == "sim" && f[1] == "maps/arena.map")
                    .then(|| f[4].to_string())
            })
            .expect("arena's sim line");
        assert_eq!(sim_hash(map, &replay_inputs()), Ok(golden));
        assert!(sim_hash(map, &[1.0, 2.0]).is_err());
        assert!(sim_hash(b"not a map", &[]).is_err());
    }

    #[test]
    fn a_new_player_says_hello_and_publishes_its_state() {
        let mut c = WebClient::new("token".into(), 1000.0);
        assert!(c.take_control().is_some(), "the hello goes out at once");
        let s: Value = serde_json::from_str(&c.stats()).unwrap();
        assert_eq!(s["state"], "connecting");
        assert!(s.get("code").is_none());
        c.handle_closed(-1.0, "gone");
        let s: Value = serde_json::from_str(&c.stats()).unwrap();
        assert_eq!(s["state"], "ended");
        assert!(!c.transient());
    }
}

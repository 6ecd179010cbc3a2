//! King of the hill on Expel, its server and clients in one program, written as a game
//! outside Expel's house writes it: one dependency (`expel`), one `use expel::prelude::*`.
//! `cargo run --manifest-path examples/king-of-the-hill/Cargo.toml -- 12 3` (12 s, 3 clients).

use expel::prelude::*;
use std::collections::BTreeMap;
use std::error::Error;
use std::time::{Duration, Instant};

/// The hill, a circle on the arena's floor in the open; ticks held alone on it per point
/// (a second at 60 Hz); seconds each client's turn to climb it lasts.
const HILL: [f64; 2] = [256.0, -256.0];
const HILL_RADIUS: f64 = 96.0;
const TICKS_PER_POINT: u64 = 60;
const TURN: f64 = 4.0;

/// What a player sends: a shout for everyone.
#[derive(Serialize, Deserialize)]
#[serde(crate = "expel::serde")]
pub(crate) struct Shout(pub(crate) String);

/// What the game tells every player.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(crate = "expel::serde")]
pub(crate) enum News {
    /// A player's shout, cut to 80 characters.
    Shouted { from: PlayerId, words: String },
}

/// Each player's standing, the game's own state of it: the snapshots carry it to every
/// client, sending only what changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(crate = "expel::serde")]
pub(crate) struct Climber {
    pub(crate) points: u32,
    pub(crate) king: bool,
}

impl Replicated for Climber {
    const NAME: &'static str = "king-of-the-hill.climber/1";
}

/// The game's state types, the same for its server and its clients.
fn states() -> StateTypes {
    StateTypes::new().player::<Climber>()
}

/// The rules: the one player alone on the hill scores a point per second held.
#[derive(Default)]
pub(crate) struct KingOfTheHill {
    points: BTreeMap<PlayerId, u32>,
    king: Option<PlayerId>,
    held: u64,
}

impl KingOfTheHill {
    /// Sets every player's standing (one that did not change costs no byte).
    fn tell(&self, game: &mut Game<'_>) {
        for (&player, &points) in &self.points {
            let king = self.king == Some(player);
            let _ = game.set_player_state(player, &Climber { points, king }, Scope::Everyone);
        }
    }
}

impl GameRules for KingOfTheHill {
    fn states(&self) -> StateTypes {
        states()
    }

    fn joined(&mut self, game: &mut Game<'_>, player: PlayerId) {
        self.points.insert(player, 0);
        self.tell(game);
    }

    fn left(&mut self, _game: &mut Game<'_>, player: PlayerId, _reason: &str) {
        self.points.remove(&player);
        self.king = self.king.filter(|k| *k != player);
    }

    fn tick(&mut self, game: &mut Game<'_>) {
        while let Some((from, _, Shout(words))) = game.poll::<Shout>() {
            let words = words.chars().take(80).collect();
            let _ = game.broadcast(Channel::Reliable, &News::Shouted { from, words });
        }
        let world = game.world();
        let on_hill = |p: &PlayerId| world.player(*p).is_some_and(|s| on_the_hill(s.origin()));
        let kings: Vec<PlayerId> = game.players().filter(on_hill).collect();
        let king = (kings.len() == 1).then(|| kings[0]);
        if king != self.king {
            (self.king, self.held) = (king, 0);
            self.tell(game);
        } else if let Some(k) = king {
            self.held += 1;
            if self.held.is_multiple_of(TICKS_PER_POINT) {
                *self.points.entry(k).or_default() += 1;
                self.tell(game);
            }
        }
    }
}

fn on_the_hill(at: DVec3) -> bool {
    let (dx, dy) = (at.x - HILL[0], at.y - HILL[1]);
    dx * dx + dy * dy <= HILL_RADIUS * HILL_RADIUS
}

/// What one client saw: its id, the last standings, and the shouts.
pub(crate) type Seen = (PlayerId, BTreeMap<PlayerId, u32>, Vec<(PlayerId, String)>);

/// Serves the game and plays it for `seconds` with `clients` clients taking turns.
pub(crate) async fn play(seconds: f64, clients: u32) -> Result<Vec<Seen>, Box<dyn Error>> {
    let rules = KingOfTheHill::default();
    let server = Server::builder(Map::arena()?).rules(rules).start().await?;
    let mut players = Vec::new();
    for id in (1..=clients).map(PlayerId) {
        let token = server.token(id, Duration::from_secs(60));
        let trust = Trust::Fingerprint(server.fingerprint.clone());
        let options = ConnectOptions::new(token, trust).with_states(states());
        let s = connect(server.addr, &options).await?;
        players.push((s, (id, BTreeMap::new(), Vec::new()), None::<[f64; 3]>));
    }
    let (start, mut shouted) = (Instant::now(), false);
    while start.elapsed().as_secs_f64() < seconds {
        let (now, t) = (Instant::now(), start.elapsed().as_secs_f64());
        for (i, (s, seen, home)) in players.iter_mut().enumerate() {
            // Home is where the client first stands; it waits there for its turn.
            if let Some(at) = s.local_player().map(|p| p.origin().to_array()) {
                let home = *home.get_or_insert(at);
                let turn = (t / TURN) as usize % clients as usize == i;
                let goal = if turn { HILL } else { [home[0], home[1]] };
                let (dx, dy) = (goal[0] - at[0], goal[1] - at[1]);
                let forward = f64::from(u8::from(dx * dx + dy * dy > 24.0 * 24.0));
                let yaw = dy.atan2(dx).to_degrees();
                s.input(MoveCommand::new(forward, 0.0, 0.0, yaw, 0.0));
            }
            if i == 1 && t > 1.0 && !std::mem::replace(&mut shouted, true) {
                let _ = s.send(Channel::Reliable, &Shout("mine next!".into()), now);
            }
            s.update(now);
            while let Some(Delivered { message: news, .. }) = s.poll_message::<News>() {
                match news {
                    News::Shouted { from, words } => seen.2.push((from, words)),
                }
            }
            let standings = s.player_states::<Climber>()?;
            seen.1 = standings.into_iter().map(|(p, c)| (p, c.points)).collect();
        }
        expel::tokio::time::sleep(Duration::from_millis(8)).await;
    }
    let mut seen = Vec::new();
    for (s, saw, _) in players {
        s.close("game over").await;
        seen.push(saw);
    }
    server.shutdown("game over").await;
    Ok(seen)
}

#[expel::tokio::main(crate = "expel::tokio")]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<f64>());
    let seconds = args.next().transpose()?.unwrap_or(12.0);
    let clients = args.next().transpose()?.unwrap_or(3.0).clamp(1.0, 16.0) as u32;
    for (me, points, shouts) in play(seconds, clients).await? {
        println!("player {me}: points {points:?}, shouts {shouts:?}");
    }
    Ok(())
}

//! A connection's way in: the control stream's hello, its refusals, the map's transfer,
//! and the player's entry into the world.

use crate::movement::MoveMode;
use crate::protocol::frame::encode_frame;
use crate::protocol::game::server::Notice;
use crate::protocol::headroom::{Headroom, Load, Window};
use crate::protocol::input::{InputBuffer, InputStats};
use crate::protocol::messages::Channel;
use crate::protocol::predict::replay::CommandLog;
use crate::protocol::rate::InputGate;
use crate::protocol::server::ServerSettings;
use crate::protocol::server::{
    Conn, ConnId, Event, MessageDrop, Output, Player, Server, Stage, REPLAY_SECONDS,
};
use crate::protocol::snapshot::{Feedback, SnapshotEncoder};
use crate::protocol::token::{self, Grant, ReplayGuard};
use crate::protocol::{decode, ClientControl, Code, ServerControl, Welcome, MAP_CHUNK, VERSION};
use crate::sim::PlayerId;
use crate::validate::{ValidationConfig, Validator};
use std::collections::BTreeMap;
use std::time::Instant;

/// A hello, as the door weighs it.
#[derive(Clone, Copy, Debug)]
pub(in crate::protocol) struct Knock<'a> {
    /// The protocol version the client speaks.
    pub(in crate::protocol) version: u16,
    /// Its connect token.
    pub(in crate::protocol) token: &'a str,
    /// Unix seconds now, for the token's expiry.
    pub(in crate::protocol) unix: u64,
    /// Players in the world or on their way in.
    pub(in crate::protocol) clients: usize,
}

/// Who may come in: the protocol version, a connect token the server's secret signed (for
/// this server, unexpired, never used before), a free player slot, and the headroom the
/// load leaves. A hello it refuses gets the refusal's code and words for people.
#[derive(Debug, Default)]
pub(in crate::protocol) struct Door {
    /// The tokens already used, until they expire.
    replay: ReplayGuard,
    /// How many players the load allows.
    headroom: Headroom,
}

impl Door {
    /// Admits `knock` or says why not; `in_use` says whether a player id is connected
    /// already. A token is spent only when its player comes in: one refused because the
    /// server is full or its player connected stays good for later.
    pub(in crate::protocol) fn admit(
        &mut self,
        settings: &ServerSettings,
        knock: Knock<'_>,
        in_use: impl Fn(PlayerId) -> bool,
    ) -> Result<Grant, (Code, String)> {
        let Knock {
            version,
            token,
            unix,
            clients,
        } = knock;
        if version != VERSION {
            let reason = format!(
                "protocol version {version} is not supported (this server speaks {VERSION})"
            );
            return Err((Code::Version, reason));
        }
        let server = settings.server_id.as_ref();
        let grant = token::verify(&settings.secret, token, unix, server)
            .map_err(|e| (e.code(), e.to_string()))?;
        let id = grant.player_id;
        let max = settings.max_players;
        if clients >= max {
            return Err((Code::Full, format!("server full ({max} players)")));
        }
        if let Some(cap) = self.headroom.capacity() {
            if clients >= cap {
                let why = (self.headroom)
                    .strained()
                    .unwrap_or("its players fill its headroom");
                let reason = format!(
                    "server full for its load: it carries {cap} players now ({why}; at most {max} when it can)"
                );
                return Err((Code::FullLoad, reason));
            }
        }
        if in_use(id) {
            return Err((
                Code::PlayerInUse,
                format!("player {id} is already connected"),
            ));
        }
        self.replay
            .admit(&grant, unix)
            .map_err(|e| (e.code(), e.to_string()))?;
        Ok(grant)
    }

    /// A player was welcomed.
    pub(in crate::protocol) fn joined(&mut self) {
        self.headroom.joined();
    }

    /// Takes the load the shell measured with the server's running counts (see
    /// [`Headroom::report_totals`]): the players it admits from now on.
    pub(in crate::protocol) fn report_load(&mut self, load: Load, totals: Window) -> Option<usize> {
        self.headroom.report_totals(load, totals);
        self.headroom.capacity()
    }
}

impl Server {
    /// Bytes arrived on the connection's control stream.
    pub fn handle_control(&mut self, conn: ConnId, bytes: &[u8], now: Instant) {
        self.wall.called(now);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if matches!(c.stage, Stage::Closing) {
            return;
        }
        c.dec.push(bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            if matches!(c.stage, Stage::Closing) {
                return;
            }
            let frame = match c.dec.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => {
                    self.stats.malformed_control += 1;
                    let hello = matches!(c.stage, Stage::Hello { .. });
                    let reason = format!("malformed control frame: {e}");
                    if hello {
                        self.refuse(conn, Code::BadHello, reason);
                    } else {
                        self.kick(conn, Code::Malformed, reason);
                    }
                    return;
                }
            };
            let msg = decode::<ClientControl>("control", &frame);
            let hello = matches!(c.stage, Stage::Hello { .. });
            match (hello, msg) {
                (
                    true,
                    Ok(ClientControl::Hello {
                        version,
                        token,
                        have_map,
                    }),
                ) => self.hello(conn, version, &token, have_map, now),
                (false, Ok(ClientControl::Bye { reason })) => {
                    let reason = format!("said bye: {reason}");
                    self.close(conn, Vec::new(), Code::Left, reason);
                }
                (false, Ok(ClientControl::Message { bytes })) => match c.stage {
                    Stage::Playing { player } => {
                        self.message_in(player, Channel::Reliable, 0, bytes, now);
                    }
                    // Sent before its player entered the world: nobody to take it.
                    _ => self.message_dropped(Channel::Reliable, MessageDrop::NotPlaying),
                },
                (true, _) => {
                    self.stats.malformed_control += 1;
                    let reason = "the first message must be a hello".to_string();
                    self.refuse(conn, Code::BadHello, reason);
                }
                (false, _) => {
                    self.stats.malformed_control += 1;
                    self.kick(conn, Code::Malformed, "malformed control message".into());
                }
            }
        }
    }

    fn hello(
        &mut self,
        conn: ConnId,
        version: u16,
        token: &str,
        have_map: Option<[u8; 32]>,
        now: Instant,
    ) {
        let knock = Knock {
            version,
            token,
            unix: self.wall.unix(now),
            clients: self.stats.clients as usize,
        };
        let (players, conns) = (&self.players, &self.conns);
        let in_use = |id| players.contains_key(&id) || transferring(conns, id);
        let id = match self.door.admit(&self.settings, knock, in_use) {
            Ok(grant) => grant.player_id,
            Err((code, reason)) => return self.refuse(conn, code, reason),
        };
        let sending_map = have_map != Some(self.map_hash);
        let welcome = Welcome {
            player_id: id,
            snapshot_rate: self.settings.snapshot_rate,
            input_rate: self.input_rate(),
            config: self.sim.config().clone(),
            map_name: self.settings.map_name.clone(),
            map_hash: self.map_hash,
            map_size: self.settings.map_bytes.len() as u64,
            sending_map,
            // The clock's tick, which the world reaches however late it runs.
            server_tick: self.wall.tick(now).max(self.world.tick),
            movement: self.settings.movement,
        };
        let bytes = encode_frame(&ServerControl::Welcome(Box::new(welcome)));
        self.outputs.push_back(Output::Control { conn, bytes });
        self.stats.clients += 1;
        self.door.joined();
        self.events.push_back(Event::Joined {
            conn,
            player: id,
            sending_map,
        });
        if sending_map {
            self.outputs.push_back(Output::Map { conn });
            if let Some(c) = self.conns.get_mut(&conn) {
                c.stage = Stage::Map { player: id };
            }
        } else {
            self.enter(conn, id, now);
        }
        self.count_pending();
    }

    /// The map finished sending: the player enters the world, and its input clock starts.
    pub fn handle_map_sent(&mut self, conn: ConnId, now: Instant) {
        if let Some(Conn {
            stage: Stage::Map { player },
            ..
        }) = self.conns.get(&conn)
        {
            let player = *player;
            self.enter(conn, player, now);
        }
    }

    fn enter(&mut self, conn: ConnId, id: PlayerId, now: Instant) {
        let spawn = self.sim.join_state(&self.world, id, MoveMode::Walk);
        if self.sim.add_player(&mut self.world, id, spawn).is_err() {
            self.kick(conn, Code::NoRoom, "no room in the world".into());
            return;
        }
        let input_rate = self.input_rate();
        let gate = match self.conns.get_mut(&conn) {
            Some(c) => {
                c.stage = Stage::Playing { player: id };
                std::mem::replace(&mut c.gate, InputGate::new(input_rate, now))
            }
            None => InputGate::new(input_rate, now),
        };
        let rate = self.rate();
        self.players.insert(
            id,
            Player {
                conn,
                inputs: InputBuffer::new(),
                counted: InputStats::default(),
                late_reported: 0,
                snapshots: SnapshotEncoder::new(),
                commands: CommandLog::new(REPLAY_SECONDS as usize * rate as usize),
                replay_at: 0,
                expected: BTreeMap::new(),
                budget: self.settings.client_budget as f64 / 4.0,
                validator: Validator::new(ValidationConfig::for_tick_rate(rate)),
                unjudged: 0,
                feedback: Feedback::default(),
                correcting: false,
                correction_snapshot: 0,
                entered: self.world.tick,
                last_input: now,
                gate,
                mail: Server::mailbox(now),
                outbox: Default::default(),
                aim: Default::default(),
            },
        );
        (self.roster).entered(conn, id, self.players.keys().copied(), &mut self.outputs);
        self.notify(Notice::Joined(id));
    }
}

/// Whether player `id` is on its way in, its map being sent.
fn transferring(conns: &BTreeMap<ConnId, Conn>, id: PlayerId) -> bool {
    conns
        .values()
        .any(|c| matches!(c.stage, Stage::Map { player } if player == id))
}

/// The control frames that carry `map` to a client, in order, made as they are written.
pub fn map_frames(map: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    (0..).map_while(|i| map_frame(map, i))
}

/// The `i`th of [`map_frames`], or `None` past the last: a shell streaming the map to a
/// slow peer keeps the index, not the frames.
pub fn map_frame(map: &[u8], i: usize) -> Option<Vec<u8>> {
    let at = i.checked_mul(MAP_CHUNK)?;
    let chunk = map.get(at..)?.get(..MAP_CHUNK.min(map.len() - at))?;
    if chunk.is_empty() {
        return None;
    }
    Some(encode_frame(&ServerControl::MapData {
        offset: at as u64,
        bytes: chunk.to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::token::mint;
    use std::sync::Arc;

    const UNIX: u64 = 1_800_000_000;

    fn signed(secret: &[u8], player_id: u32, nonce: u8) -> String {
        let grant = Grant {
            player_id,
            expires: UNIX + 60,
            nonce: [nonce; 16],
            server: None,
        };
        mint(secret, &grant)
    }

    fn token(player_id: u32, nonce: u8) -> String {
        signed(b"door secret", player_id, nonce)
    }

    fn knock(token: &str, clients: usize) -> Knock<'_> {
        Knock {
            version: VERSION,
            token,
            unix: UNIX,
            clients,
        }
    }

    fn code(r: Result<Grant, (Code, String)>) -> Code {
        r.expect_err("refused").0
    }

    #[test]
    fn the_door_admits_a_good_hello_once_and_says_why_it_refuses() {
        let mut settings = ServerSettings::new("m", Arc::default(), b"door secret".to_vec());
        settings.max_players = 2;
        let mut door = Door::default();
        let free = |_| false;
        let t = token(7, 1);
        let old = Knock {
            version: VERSION - 1,
            ..knock(&t, 0)
        };
        assert_eq!(code(door.admit(&settings, old, free)), Code::Version);
        let forged = signed(b"another secret", 7, 1);
        let r = door.admit(&settings, knock(&forged, 0), free);
        assert_eq!(code(r), Code::TokenForged);
        // Refused while full or while its player is in: the token stays good.
        assert_eq!(code(door.admit(&settings, knock(&t, 2), free)), Code::Full);
        let in_use = |id| id == 7;
        let r = door.admit(&settings, knock(&t, 0), in_use);
        assert_eq!(code(r), Code::PlayerInUse);
        let grant = door.admit(&settings, knock(&t, 1), free).expect("admitted");
        assert_eq!(grant.player_id, 7);
        // Spent.
        let again = door.admit(&settings, knock(&t, 0), free);
        assert_eq!(code(again), Code::TokenReplayed);
    }

    #[test]
    fn the_door_holds_joins_to_what_the_load_allows() {
        let settings = ServerSettings::new("m", Arc::default(), b"door secret".to_vec());
        let mut door = Door::default();
        let mut totals = Window::default();
        let mut capacity = None;
        // 20 players keeping 40% of the thread busy: 2% each.
        for _ in 0..20 {
            totals.players = 20;
            totals.ticks += 15;
            totals.commands += 20 * 15;
            let load = Load {
                busy: 0.4,
                dropped: 0,
            };
            capacity = door.report_load(load, totals);
        }
        let cap = capacity.expect("an estimate");
        assert!(cap < settings.max_players, "{cap}");
        let t = token(3, 2);
        let (c, why) = door
            .admit(&settings, knock(&t, cap), |_| false)
            .expect_err("full for its load");
        assert_eq!(c, Code::FullLoad);
        assert!(why.contains(&format!("carries {cap} players")), "{why}");
        assert!(door.admit(&settings, knock(&t, cap - 1), |_| false).is_ok());
    }
}

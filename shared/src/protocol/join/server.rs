//! A connection's way in: the control stream's hello, its refusals, the map's transfer,
//! and the player's entry into the world.

use crate::movement::MoveMode;
use crate::protocol::frame::encode_frame;
use crate::protocol::game::server::Notice;
use crate::protocol::input::{InputBuffer, InputStats};
use crate::protocol::messages::Channel;
use crate::protocol::predict::replay::CommandLog;
use crate::protocol::rate::InputGate;
use crate::protocol::server::{
    Conn, ConnId, Event, MessageDrop, Output, Player, Server, Stage, REPLAY_SECONDS,
};
use crate::protocol::snapshot::{Feedback, SnapshotEncoder};
use crate::protocol::token;
use crate::protocol::{decode, ClientControl, Code, ServerControl, Welcome, MAP_CHUNK, VERSION};
use crate::sim::PlayerId;
use crate::validate::{ValidationConfig, Validator};
use std::collections::BTreeMap;
use std::time::Instant;

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
        if version != VERSION {
            let reason = format!(
                "protocol version {version} is not supported (this server speaks {VERSION})"
            );
            return self.refuse(conn, Code::Version, reason);
        }
        let unix = self.wall.unix(now);
        let server = self.settings.server_id.as_ref();
        let grant = match token::verify(&self.settings.secret, token, unix, server) {
            Ok(g) => g,
            Err(e) => return self.refuse(conn, e.code(), e.to_string()),
        };
        let id = grant.player_id;
        let max = self.settings.max_players;
        if self.stats.clients as usize >= max {
            return self.refuse(conn, Code::Full, format!("server full ({max} players)"));
        }
        if let Some(cap) = self.headroom.capacity() {
            if self.stats.clients as usize >= cap {
                let why = self
                    .headroom
                    .strained()
                    .unwrap_or("its players fill its headroom");
                let reason = format!(
                    "server full for its load: it carries {cap} players now ({why}; at most {max} when it can)"
                );
                return self.refuse(conn, Code::FullLoad, reason);
            }
        }
        if self.players.contains_key(&id) || self.transferring(id) {
            let reason = format!("player {id} is already connected");
            return self.refuse(conn, Code::PlayerInUse, reason);
        }
        // The nonce is burned only once the slot is certain: a token refused because the
        // server is full or its player connected stays good for later.
        if let Err(e) = self.replay.admit(&grant, unix) {
            return self.refuse(conn, e.code(), e.to_string());
        }
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
        self.headroom.joined();
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

    fn transferring(&self, id: PlayerId) -> bool {
        self.conns
            .values()
            .any(|c| matches!(c.stage, Stage::Map { player } if player == id))
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

//! A connection's control stream in the machine: the hello at the door, the welcome, the
//! map's transfer and the player's entry into the world; then the player's messages and
//! its goodbye.

use super::game::Notice;
use super::{Conn, ConnId, Event, MessageDrop, Output, Player, Server, Stage};
use crate::movement::MoveMode;
use crate::protocol::frame::encode_frame;
use crate::protocol::input::{InputBuffer, InputStats};
use crate::protocol::join::server::{House, Knock};
use crate::protocol::messages::Channel;
use crate::protocol::predict::replay::{CommandLog, REPLAY_SECONDS};
use crate::protocol::rate::InputGate;
use crate::protocol::snapshot::{Feedback, SnapshotEncoder};
use crate::protocol::{decode, ClientControl, Code, ServerControl, Welcome};
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
        let knock = Knock {
            version,
            token,
            unix: self.wall.unix(now),
            clients: self.stats.clients as usize,
        };
        let (players, conns) = (&self.players, &self.conns);
        let in_use = |id| players.contains_key(&id) || transferring(conns, id);
        let house = House {
            secret: &self.settings.secret,
            server: self.settings.server_id.as_ref(),
            max_players: self.settings.max_players,
        };
        let id = match self.door.admit(house, knock, in_use) {
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
                leaps: Default::default(),
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

//! A connection's control stream in the machine: the hello at the door, the welcome, the
//! map's transfer and the player's entry into the world; then the player's messages and
//! its goodbye.

use super::{Conn, ConnId, Event, MessageDrop, Output, ServerMachine, Stage};
use crate::code::Code;
use crate::codec::decode;
use crate::frame::encode_frame;
use crate::join::server::{House, Knock};
use crate::messages::Channel;
use crate::time::Instant;
use crate::wire::{ClientControl, ServerControl, Welcome};
use expel_core::sim::PlayerId;
use std::collections::BTreeMap;

/// The work of [`ServerMachine::handle_control`].
pub(super) fn handle_control(server: &mut ServerMachine, conn: ConnId, bytes: &[u8], now: Instant) {
    server.wall.called(now);
    let Some(c) = server.conns.get_mut(&conn) else {
        return;
    };
    if matches!(c.stage, Stage::Closing) {
        return;
    }
    c.dec.push(bytes);
    loop {
        let Some(c) = server.conns.get_mut(&conn) else {
            return;
        };
        if matches!(c.stage, Stage::Closing) {
            return;
        }
        let frame = match c.dec.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => return,
            Err(e) => {
                server.stats.malformed_control += 1;
                let hello = matches!(c.stage, Stage::Hello { .. });
                let reason = format!("malformed control frame: {e}");
                if hello {
                    server.refuse(conn, Code::BadHello, reason);
                } else {
                    server.kick(conn, Code::Malformed, reason);
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
            ) => self::hello(server, conn, version, &token, have_map, now),
            (false, Ok(ClientControl::Bye { reason })) => {
                let reason = format!("said bye: {reason}");
                server.close(conn, Vec::new(), Code::Left, reason);
            }
            (false, Ok(ClientControl::Message { bytes })) => match c.stage {
                Stage::Playing { player } => {
                    super::messages::message_in(server, player, Channel::Reliable, 0, bytes, now);
                }
                // Sent before its player entered the world: nobody to take it.
                _ => super::messages::message_dropped(
                    server,
                    Channel::Reliable,
                    MessageDrop::NotPlaying,
                ),
            },
            (true, _) => {
                server.stats.malformed_control += 1;
                let reason = "the first message must be a hello".to_string();
                server.refuse(conn, Code::BadHello, reason);
            }
            (false, _) => {
                server.stats.malformed_control += 1;
                server.kick(conn, Code::Malformed, "malformed control message".into());
            }
        }
    }
}

fn hello(
    server: &mut ServerMachine,
    conn: ConnId,
    version: u16,
    token: &str,
    have_map: Option<[u8; 32]>,
    now: Instant,
) {
    let knock = Knock {
        version,
        token,
        unix: server.wall.unix(now),
        clients: server.stats.clients as usize,
    };
    let (players, conns) = (&server.players, &server.conns);
    let in_use = |id| players.contains_key(&id) || transferring(conns, id);
    let house = House {
        secret: &server.settings.secret,
        server: server.settings.server_id.as_ref(),
        max_players: server.settings.max_players,
    };
    let id = match server.door.admit(house, knock, in_use) {
        Ok(grant) => grant.player,
        Err((code, reason)) => return server.refuse(conn, code, reason),
    };
    let sending_map = have_map != Some(server.map_hash);
    let welcome = Welcome {
        player: id,
        snapshot_rate: server.settings.snapshot_rate,
        input_rate: server.input_rate(),
        config: server.sim.config().clone(),
        map_name: server.settings.map_name.clone(),
        map_hash: server.map_hash,
        map_size: server.settings.map_bytes.len() as u64,
        sending_map,
        // The clock's tick, which the world reaches however late it runs.
        server_tick: server.wall.tick(now).max(server.world.tick),
        movement: server.settings.movement,
        states: server.game.types.names(),
    };
    let bytes = encode_frame(&ServerControl::Welcome(Box::new(welcome)));
    server.outputs.push_back(Output::Control { conn, bytes });
    server.stats.clients += 1;
    server.door.joined();
    server.events.push_back(Event::Joined {
        conn,
        player: id,
        sending_map,
    });
    if sending_map {
        server.outputs.push_back(Output::Map { conn });
        if let Some(c) = server.conns.get_mut(&conn) {
            c.stage = Stage::Map { player: id };
        }
    } else {
        server.enter(conn, id, now);
    }
    server.count_pending();
}

/// The work of [`ServerMachine::handle_map_sent`].
pub(super) fn handle_map_sent(server: &mut ServerMachine, conn: ConnId, now: Instant) {
    if let Some(Conn {
        stage: Stage::Map { player },
        ..
    }) = server.conns.get(&conn)
    {
        let player = *player;
        server.enter(conn, player, now);
    }
}

/// Whether player `id` is on its way in, its map being sent.
fn transferring(conns: &BTreeMap<ConnId, Conn>, id: PlayerId) -> bool {
    conns
        .values()
        .any(|c| matches!(c.stage, Stage::Map { player } if player == id))
}

//! The messages. Field names and order are the wire format (postcard): change them only
//! with [`super::VERSION`].

use super::code::Code;
use super::game::ends::WireEnd;
use super::game::state::{StateNames, MAX_STATE_NAME};
use crate::codec::{ProtocolError, MAX_INPUT_COMMANDS, MAX_MAP_BYTES};
use expel_core::movement::{MoveCommand, MoveConfig, PlayerState};
use expel_core::sim::ShotView;
use expel_core::validate::Commands;
use expel_core::PlayerId;
use serde::{Deserialize, Serialize};

/// What a client sends on the control stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientControl {
    /// The first message: protocol version, connect token, and the hash of a map the client
    /// already has (the server sends the map when it is not this one).
    Hello {
        /// [`super::VERSION`].
        version: u16,
        /// A connect token ([`super::token`]).
        token: String,
        /// BLAKE3 hash of a map the client holds.
        have_map: Option<[u8; 32]>,
    },
    /// The client leaves.
    Bye {
        /// Why.
        reason: String,
    },
    /// A game message on the reliable channel ([`super::messages`]).
    Message {
        /// The game's encoding of it.
        bytes: Vec<u8>,
    },
}

/// What the server tells a client it accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The client's player.
    pub player: PlayerId,
    /// Snapshots per second.
    pub snapshot_rate: u32,
    /// Input datagrams per second the server asks for at most (each carries the commands
    /// since the one before): one every [`Welcome::input_every`] ticks.
    pub input_rate: u32,
    /// The movement settings the server simulates with (its tick rate among them).
    pub config: MoveConfig,
    /// The map's name.
    pub map_name: String,
    /// BLAKE3 hash of the map's bytes.
    pub map_hash: [u8; 32],
    /// Size of the map in bytes.
    pub map_size: u64,
    /// Whether [`ServerControl::MapData`] chunks follow.
    pub sending_map: bool,
    /// The server's tick when it sent this.
    pub server_tick: u64,
    /// Who moves the players: the server, or the clients under validation.
    pub movement: MovementAuthority,
    /// The names of the game's own state types: a client that reads others stops here.
    pub states: StateNames,
}

impl Welcome {
    /// Simulation ticks per second (the movement settings').
    pub fn tick_rate(&self) -> u32 {
        self.config.tick_rate
    }

    /// Ticks between input datagrams (at least one).
    pub fn input_every(&self) -> u64 {
        crate::codec::input_every(self.tick_rate(), self.input_rate)
    }

    /// Refuses a welcome no server of this protocol sends: rates out of range, or a tick
    /// so far on that the client's own ticks from it would overflow.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let invalid = |detail: String| ProtocolError::Invalid {
            what: "welcome",
            detail,
        };
        let rate = self.tick_rate();
        if !expel_core::movement::limits::TICK_RATE.contains(&rate) {
            return Err(invalid(format!("tick rate {rate} out of range")));
        }
        for (name, r) in [("snapshot", self.snapshot_rate), ("input", self.input_rate)] {
            if r == 0 || r > rate {
                return Err(invalid(format!(
                    "{name} rate {r} (1 to the tick rate {rate})"
                )));
            }
        }
        if !self.states.valid() {
            return Err(invalid(format!(
                "state type names {:?} (1 to {MAX_STATE_NAME} bytes each)",
                self.states
            )));
        }
        if self.server_tick > MAX_TICK {
            return Err(invalid(format!(
                "server tick {} (at most {MAX_TICK})",
                self.server_tick
            )));
        }
        Ok(())
    }
}

/// The latest tick a server may say it is at: 2^48, four thousand years at 240 ticks a
/// second, so a client's ticks counted on from it never come near overflowing.
pub const MAX_TICK: u64 = 1 << 48;

/// Who owns player movement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MovementAuthority {
    /// The server simulates every command (clients predict and report).
    #[default]
    Server,
    /// Clients move themselves and claim their states; the server validates each claim.
    Client,
}

impl MovementAuthority {
    /// As `expel serve --movement` names it.
    pub fn name(self) -> &'static str {
        match self {
            MovementAuthority::Server => "server",
            MovementAuthority::Client => "client",
        }
    }
}

/// What the server sends on the control stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerControl {
    /// The hello is accepted.
    Welcome(Box<Welcome>),
    /// A piece of the map, in order.
    MapData {
        /// Offset of `bytes` in the map file.
        offset: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The server's last words: the hello refused, the player removed, or the server
    /// shutting down (the code's [`Kind`](super::code::Kind)); the connection closes.
    Ended {
        /// Why, for programs.
        code: Code,
        /// Why, for people.
        detail: String,
    },
    /// A game message on the reliable channel ([`super::messages`]).
    Message {
        /// The server tick whose world the rules saw when they sent it.
        tick: u64,
        /// The game's encoding of it.
        bytes: Vec<u8>,
    },
    /// Players who entered or left the world (the server, not our view), in order. The
    /// first after the map lists everyone already in.
    Roster {
        /// The changes, oldest first.
        changes: Vec<RosterChange>,
    },
}

/// A change to the players in the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RosterChange {
    /// The player entered the world.
    Joined(PlayerId),
    /// The player left the world.
    Left(PlayerId),
}

impl RosterChange {
    /// The player it is about.
    pub fn player(&self) -> PlayerId {
        match self {
            RosterChange::Joined(p) | RosterChange::Left(p) => *p,
        }
    }
}

/// Tick-stamped commands and the newest snapshot received.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputMsg {
    /// Server tick of the newest snapshot the client received (0: none yet).
    pub ack: u64,
    /// Tick of the first command.
    pub first_tick: u64,
    /// Commands for ticks `first_tick`, `first_tick + 1`, ...
    pub commands: Vec<MoveCommand>,
    /// The state the client predicted after its last command, for validation.
    pub predicted: Option<PlayerState>,
    /// Under [`MovementAuthority::Client`], the state claimed after each command (as many
    /// as `commands`). Under the server's, the state predicted after each while any of
    /// them presses one of the game's buttons and the datagram carries several ticks'
    /// new commands (a shot leaves from where the client had itself after the tick
    /// before); otherwise empty.
    pub claims: Vec<PlayerState>,
    /// The view the others were drawn at when each command was made (as many as
    /// `commands`), sent while any of them presses one of the game's buttons (a shot is
    /// judged at it); otherwise empty.
    pub views: Vec<ViewClaim>,
}

/// The view a command was made at, relative to its tick: the others were drawn between
/// the snapshots of ticks `tick - back` and `tick - back + span`, `k`/255 of the way.
/// `back` 0: none (no snapshot drawn yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ViewClaim {
    /// Ticks from the older snapshot to the command's.
    pub back: u16,
    /// Ticks from the older snapshot to the newer.
    pub span: u8,
    /// How far between, in 255ths.
    pub k: u8,
}

impl ViewClaim {
    /// The claim of `view` for a command of tick `tick` (none if it does not fit).
    pub fn of(tick: u64, view: Option<&ShotView>) -> ViewClaim {
        let fit = view.and_then(|v| {
            let back = u16::try_from(tick.checked_sub(v.from)?).ok()?;
            let span = u8::try_from(v.to.checked_sub(v.from)?).ok()?;
            Some(ViewClaim { back, span, k: v.k })
        });
        fit.unwrap_or_default()
    }

    /// The view claimed for a command of tick `tick` (none for `back` 0; one reaching
    /// back before tick 0 is claimed from tick 0, never a snapshot's).
    pub fn view(&self, tick: u64) -> Option<ShotView> {
        if self.back == 0 {
            return None;
        }
        let from = tick.saturating_sub(u64::from(self.back));
        Some(ShotView {
            from,
            to: from.saturating_add(u64::from(self.span)),
            k: self.k,
        })
    }
}

impl InputMsg {
    /// Checks counts and tick arithmetic.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let invalid = |detail: String| ProtocolError::Invalid {
            what: "input",
            detail,
        };
        if self.commands.is_empty() || self.commands.len() > MAX_INPUT_COMMANDS {
            return Err(invalid(format!(
                "{} commands (1 to {MAX_INPUT_COMMANDS})",
                self.commands.len()
            )));
        }
        if self
            .first_tick
            .checked_add(self.commands.len() as u64)
            .is_none()
        {
            return Err(invalid("tick overflows".into()));
        }
        if !self.views.is_empty() && self.views.len() != self.commands.len() {
            return Err(invalid(format!(
                "{} views for {} commands",
                self.views.len(),
                self.commands.len()
            )));
        }
        if !self.claims.is_empty() && self.claims.len() != self.commands.len() {
            return Err(invalid(format!(
                "{} claims for {} commands",
                self.claims.len(),
                self.commands.len()
            )));
        }
        Ok(())
    }

    /// What the checks judge: the commands with their ticks and the acknowledgement.
    pub fn batch(&self) -> Commands<'_> {
        Commands {
            first_tick: self.first_tick,
            commands: &self.commands,
            ack: self.ack,
        }
    }

    /// The commands with their ticks.
    pub fn ticked(&self) -> impl Iterator<Item = (u64, MoveCommand)> + '_ {
        self.commands
            .iter()
            .enumerate()
            .map(|(i, c)| (self.first_tick.saturating_add(i as u64), *c))
    }
}

/// Datagrams from a client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientDatagram {
    /// Commands.
    Input(InputMsg),
    /// A game message on the unreliable channel ([`super::messages`]).
    Message {
        /// Its number: the receiver delivers only one newer than all it delivered.
        seq: u64,
        /// The game's encoding of it.
        bytes: Vec<u8>,
    },
}

impl ClientDatagram {
    /// The first byte of an encoded [`ClientDatagram::Message`] (postcard's variant
    /// index): a receiver tells the kinds apart before decoding, to judge each against
    /// its own allowance.
    pub const MESSAGE_TAG: u8 = 1;
}

/// One entity's changed fields: bit `i` of `mask` set means field `i` changed, and its
/// difference from the baseline is the next entry of `values`. On the wire: the id, the
/// mask, then one value per bit set (the mask says how many: no count is sent).
#[derive(Clone, Debug, PartialEq)]
pub struct EntityDelta {
    /// Player id, or mover index.
    pub id: u32,
    /// Changed fields.
    pub mask: u16,
    /// The changed fields' values, in field order.
    pub values: FieldValues,
}

impl Serialize for EntityDelta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let values = self.values.as_slice();
        let mut t = s.serialize_tuple(2 + values.len())?;
        t.serialize_element(&self.id)?;
        t.serialize_element(&self.mask)?;
        for v in values {
            t.serialize_element(v)?;
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for EntityDelta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = EntityDelta;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an id, a field mask and one value per bit of it")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<EntityDelta, A::Error> {
                use serde::de::Error;
                let id = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let mask: u16 = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(1, &self))?;
                let mut values = FieldValues::default();
                for i in 0..mask.count_ones() as usize {
                    let v = seq
                        .next_element()?
                        .ok_or_else(|| A::Error::invalid_length(2 + i, &self))?;
                    values.push(v);
                }
                Ok(EntityDelta { id, mask, values })
            }
        }
        // A tuple as long as the longest delta: the mask says how much of it is there.
        d.deserialize_tuple(2 + 16, Visit)
    }
}

/// Up to 16 field values (one per `mask` bit), kept inline: a snapshot carries one list
/// per entity, and a heap allocation each cost more than the rest of its decoding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FieldValues {
    len: u8,
    values: [i64; 16],
}

impl FieldValues {
    /// Appends a value; `false` (and nothing kept) when all 16 places are taken.
    pub fn push(&mut self, v: i64) -> bool {
        let Some(slot) = self.values.get_mut(usize::from(self.len)) else {
            return false;
        };
        *slot = v;
        self.len += 1;
        true
    }

    /// The values, in order.
    pub fn as_slice(&self) -> &[i64] {
        &self.values[..usize::from(self.len)]
    }
}

/// What the server tells a client about its commands in each snapshot. Its news (the
/// ticks of the last correction, contact, missed command and move by the rules) reads 0
/// when there is none newer than the snapshot's baseline: that snapshot told it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feedback {
    /// The last tick for which the server applied a command from this client (0: none).
    pub last_command: u64,
    /// How many ticks ahead of the server the client's commands arrived since the last
    /// snapshot, at worst (negative: late). The client's clock steers by it, so it holds
    /// whatever the path's delay and jitter.
    pub input_lead: Option<i32>,
    /// Trusted-client mode: the newest tick whose claim was rejected (0: none). Only then
    /// does the client take the server's state for its own; a state the server merely
    /// holds while claims are in flight is no correction.
    pub corrected: u64,
    /// The newest tick on which the server's move of this player touched another player
    /// (0: none). A prediction cannot know where others go, so a correction that spans
    /// such a tick is explained; every other one is the prediction's fault.
    pub contact: u64,
    /// The newest tick for which the server had no command (or claim) from this client
    /// and repeated its last one (0: none): a late or lost input, also explained.
    pub missed: u64,
    /// How many ticks so far the server had no command (or claim) from this client.
    pub missed_total: u64,
    /// How many ticks the server's clock was past the snapshot's tick when it was made
    /// (0 unless the server runs late): the server catches up on every tick it owes, so
    /// a client keeps to its clock, never to a late snapshot's tick.
    pub behind: u32,
    /// The newest tick whose step began with the game's rules moving this player (a
    /// respawn, a place, a freeze; 0: none): no prediction knows of it, so a correction
    /// spanning it is explained.
    pub moved: u64,
}

/// A tick on the wire as its distance back from the snapshot's `tick`, plus one (0:
/// none): a byte whatever the server's uptime, where the tick itself grows to four.
pub(crate) fn tick_gap(tick: u64, t: u64) -> u64 {
    if t == 0 {
        0
    } else {
        tick.saturating_sub(t).saturating_add(1)
    }
}

/// The tick [`tick_gap`] stands for; `None` for a gap reaching before tick 1.
pub(crate) fn tick_from_gap(tick: u64, gap: u64) -> Option<u64> {
    if gap == 0 {
        Some(0)
    } else {
        tick.checked_add(1)?.checked_sub(gap).filter(|&t| t > 0)
    }
}

impl Feedback {
    /// The feedback as a snapshot of `tick` written against a baseline of tick
    /// `baseline` (0: none) carries it: its ticks as [`tick_gap`]s. The news (a
    /// correction, a contact, a missed command, a move by the rules) goes as 0 once the
    /// baseline told it: the client holds that snapshot, reads each as "newer than the
    /// snapshot it last took" and keeps the newest, so an old tick would only cost bytes
    /// (its gap grows with the match: two or three bytes each, every snapshot).
    pub(crate) fn to_wire(self, tick: u64, baseline: u64) -> Feedback {
        let g = |t| tick_gap(tick, t);
        let news = |t: u64| {
            if baseline > 0 && t <= baseline {
                0
            } else {
                g(t)
            }
        };
        Feedback {
            last_command: g(self.last_command),
            corrected: news(self.corrected),
            contact: news(self.contact),
            missed: news(self.missed),
            moved: news(self.moved),
            ..self
        }
    }

    /// The feedback a snapshot of `tick` carried; `None` where a gap reaches before tick 1.
    pub(crate) fn off_wire(self, tick: u64) -> Option<Feedback> {
        let t = |g| tick_from_gap(tick, g);
        Some(Feedback {
            last_command: t(self.last_command)?,
            corrected: t(self.corrected)?,
            contact: t(self.contact)?,
            missed: t(self.missed)?,
            moved: t(self.moved)?,
            ..self
        })
    }
}

/// A snapshot of the world for one client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotMsg {
    /// The server tick the snapshot shows (after that tick's step).
    pub tick: u64,
    /// The snapshot the deltas are against, as a tick gap: `tick` less it, plus one (0:
    /// none, every entity is in full).
    pub baseline: u64,
    /// What the server tells the client about its commands, its ticks as gaps the same
    /// way (wire-identical to the fields inline: postcard writes a struct's fields one
    /// after another).
    pub feedback: Feedback,
    /// The client's own state (origin, velocity, flags, mode: id 0), against the
    /// baseline's; exact once applied.
    pub own: EntityDelta,
    /// Other players in view, against the baseline (in full when new to it). In this
    /// list and the three after it, entries go in id order and each id is sent as its
    /// gap from the entry before (the first from 0): nearby ids cost a byte, not five.
    pub players: Vec<EntityDelta>,
    /// Players in the baseline that left the view.
    pub removed: Vec<u32>,
    /// Movers near the client, against the baseline.
    pub movers: Vec<EntityDelta>,
    /// Mover indices in the baseline that left the view.
    pub removed_movers: Vec<u32>,
    /// The game's entities and states.
    pub game: GameLists,
}

/// A snapshot's lists of the game's things: its entities in view, and the game's own
/// state of players and of entities, each as deltas against the baseline and the ids
/// that left it; then the entities that ended since the baseline. On the wire a byte says
/// which of the four carry anything, and only those follow: a game with no entities and
/// no states pays one byte a snapshot for them, not seven.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GameLists {
    /// The game's entities in view (see [`EntityView`](super::snapshot::EntityView)),
    /// against the baseline.
    pub entities: Vec<EntityDelta>,
    /// EntityState ids in the baseline that left the view (or the world).
    pub removed_entities: Vec<u32>,
    /// The game's own state of players (the client's own among them), against the
    /// baseline: its length, then its bytes four to a field.
    pub player_states: Vec<EntityDelta>,
    /// Players whose state the baseline had and this snapshot does not.
    pub removed_player_states: Vec<u32>,
    /// The game's own state of entities in view, the same way.
    pub entity_states: Vec<EntityDelta>,
    /// Entities whose state the baseline had and this snapshot does not.
    pub removed_entity_states: Vec<u32>,
    /// The game's entities in view that ended since the baseline (see
    /// [`ends`](super::game::ends)).
    pub ends: Vec<WireEnd>,
}

impl GameLists {
    /// The three lists' deltas and removed ids, in wire order.
    fn pairs(&self) -> [(&Vec<EntityDelta>, &Vec<u32>); 3] {
        [
            (&self.entities, &self.removed_entities),
            (&self.player_states, &self.removed_player_states),
            (&self.entity_states, &self.removed_entity_states),
        ]
    }
}

impl Serialize for GameLists {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let pairs = self.pairs();
        let mask = pairs
            .iter()
            .enumerate()
            .filter(|(_, (d, r))| !d.is_empty() || !r.is_empty())
            .fold(0u8, |m, (i, _)| m | 1 << i);
        let ends = !self.ends.is_empty();
        let mask = mask | u8::from(ends) << 3;
        let len = 1 + 2 * (mask & 7).count_ones() as usize + usize::from(ends);
        let mut t = s.serialize_tuple(len)?;
        t.serialize_element(&mask)?;
        for (i, (d, r)) in pairs.iter().enumerate() {
            if mask & 1 << i != 0 {
                t.serialize_element(d)?;
                t.serialize_element(r)?;
            }
        }
        if ends {
            t.serialize_element(&self.ends)?;
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for GameLists {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = GameLists;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mask of the lists present, then each present list")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<GameLists, A::Error> {
                use serde::de::Error;
                let mask: u8 = seq
                    .next_element()?
                    .ok_or_else(|| A::Error::invalid_length(0, &self))?;
                if mask >> 4 != 0 {
                    return Err(A::Error::custom(format!("game lists mask {mask:#x}")));
                }
                let mut g = GameLists::default();
                let lists = [
                    (&mut g.entities, &mut g.removed_entities),
                    (&mut g.player_states, &mut g.removed_player_states),
                    (&mut g.entity_states, &mut g.removed_entity_states),
                ];
                for (i, (d, r)) in lists.into_iter().enumerate() {
                    if mask & 1 << i != 0 {
                        *d = seq
                            .next_element()?
                            .ok_or_else(|| A::Error::invalid_length(1 + 2 * i, &self))?;
                        *r = seq
                            .next_element()?
                            .ok_or_else(|| A::Error::invalid_length(2 + 2 * i, &self))?;
                    }
                }
                if mask & 1 << 3 != 0 {
                    g.ends = seq
                        .next_element()?
                        .ok_or_else(|| A::Error::invalid_length(7, &self))?;
                }
                Ok(g)
            }
        }
        // A tuple as long as the longest: the mask says how much of it is there.
        d.deserialize_tuple(8, Visit)
    }
}

/// Datagrams from the server.
// A snapshot is decoded once per datagram and taken apart at once: boxing it would cost an
// allocation per snapshot to spare a message's few bytes of stack.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerDatagram {
    /// A snapshot.
    Snapshot(SnapshotMsg),
    /// A game message on the unreliable channel ([`super::messages`]).
    Message {
        /// Its number: the receiver delivers only one newer than all it delivered.
        seq: u64,
        /// The server tick whose world the rules saw when they sent it.
        tick: u64,
        /// The game's encoding of it.
        bytes: Vec<u8>,
    },
}

impl ServerDatagram {
    /// The first byte of an encoded [`ServerDatagram::Message`] (postcard's variant
    /// index; a snapshot's is 0).
    pub const MESSAGE_TAG: u8 = 1;
}

impl ServerControl {
    /// Checks a map chunk against the announced size.
    pub fn check_map_chunk(offset: u64, len: usize, size: u64) -> Result<(), ProtocolError> {
        let end = offset.checked_add(len as u64);
        if size > MAX_MAP_BYTES || end.is_none_or(|e| e > size) {
            return Err(ProtocolError::Invalid {
                what: "map data",
                detail: format!("chunk {offset}+{len} beyond the map's {size} bytes"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delta on the wire is its id, its mask and one value per bit: no count. It reads
    /// back whole, and bytes cut short of what the mask promises are refused.
    /// News the baseline told goes as 0 (a byte), newer news as its gap; either way the
    /// client that holds the baseline reads whether it is newer than the baseline the
    /// same, and the last command goes whatever the baseline.
    #[test]
    fn news_the_baseline_told_costs_a_byte_and_reads_the_same() {
        let fb = Feedback {
            last_command: 20_000,
            input_lead: Some(3),
            corrected: 0,
            contact: 19_990,
            missed: 100,
            missed_total: 40,
            behind: 0,
            moved: 19_999,
        };
        let (tick, baseline) = (20_001, 19_995);
        let bare = fb.to_wire(tick, 0);
        let told = fb.to_wire(tick, baseline);
        let size = |f: &Feedback| postcard::to_allocvec(f).unwrap().len();
        assert_eq!((told.contact, told.missed, told.corrected), (0, 0, 0));
        assert_eq!(
            (told.moved, told.last_command),
            (bare.moved, bare.last_command)
        );
        // The missed command's gap took three bytes.
        assert_eq!(size(&bare) - size(&told), 2, "{bare:?} against {told:?}");
        let (a, b) = (bare.off_wire(tick).unwrap(), told.off_wire(tick).unwrap());
        let newer =
            |f: &Feedback| [f.contact, f.missed, f.moved, f.corrected].map(|t| t > baseline);
        assert_eq!(newer(&a), newer(&b));
        assert_eq!((a.last_command, b.moved), (20_000, 19_999));
    }

    #[test]
    fn a_delta_is_its_id_its_mask_and_one_value_per_bit() {
        for mask in [0u16, 1, 0b101, 0x8001, 0xffff] {
            let mut values = FieldValues::default();
            for i in 0..mask.count_ones() as i64 {
                assert!(values.push((i - 3) * 1_000_003));
            }
            let d = EntityDelta {
                id: 300,
                mask,
                values,
            };
            let bytes = postcard::to_allocvec(&d).unwrap();
            let mut want = postcard::to_allocvec(&(300u32, mask)).unwrap();
            for v in values.as_slice() {
                want.extend(postcard::to_allocvec(v).unwrap());
            }
            assert_eq!(bytes, want);
            assert_eq!(postcard::from_bytes::<EntityDelta>(&bytes).unwrap(), d);
            if mask != 0 {
                let short = &bytes[..bytes.len() - 1];
                assert!(postcard::from_bytes::<EntityDelta>(short).is_err());
            }
        }
        let mut v = FieldValues::default();
        assert!((0..16).all(|x| v.push(x)));
        assert!(!v.push(16));
    }
}

//! A tick's commands, delta-coded against each player's last: a command that did not
//! change costs one byte, a turn of the view two or three.
//!
//! Per player, in id order: a byte of which fields changed ([`ABSENT`]: no command came
//! for the tick), then the changed fields: the axes as bytes, the buttons as a byte, the
//! game's buttons as a varint and its field as a byte. Yaw and pitch count as changed
//! when they turned otherwise than the tick before (a steady turn costs nothing): each
//! is then a zigzag varint of the difference from that.

use expel_core::movement::MoveCommand;
use expel_core::PlayerId;
use std::collections::BTreeMap;

const FORWARD: u8 = 1;
const SIDE: u8 = 2;
const UP: u8 = 4;
const YAW: u8 = 8;
const PITCH: u8 = 16;
const BUTTONS: u8 = 32;
const GAME: u8 = 64;
/// No command came for the tick.
const ABSENT: u8 = 128;

/// A player's last command and how its view turned in it (yaw, pitch).
#[derive(Clone, Copy, Debug, Default)]
struct Was {
    command: MoveCommand,
    turn: (u16, u16),
}

impl Was {
    /// The view this tick if it turns as it did the tick before.
    fn expected(&self) -> (u16, u16) {
        let c = &self.command;
        (
            c.yaw.wrapping_add(self.turn.0),
            c.pitch.wrapping_add(self.turn.1),
        )
    }

    fn became(&mut self, c: MoveCommand) {
        let old = self.command;
        self.turn = (c.yaw.wrapping_sub(old.yaw), c.pitch.wrapping_sub(old.pitch));
        self.command = c;
    }
}

/// Each player's last command, as both ends of a recording keep it.
#[derive(Debug, Default)]
pub(crate) struct Last(BTreeMap<PlayerId, Was>);

impl Last {
    /// A player entered the world: its commands start from the default.
    pub(crate) fn joined(&mut self, id: PlayerId) {
        self.0.insert(id, Was::default());
    }

    /// A player left.
    pub(crate) fn left(&mut self, id: PlayerId) {
        self.0.remove(&id);
    }

    /// Appends the commands of `players` (in id order; `None`: none came) to `out`.
    pub(crate) fn encode<'a>(
        &mut self,
        players: impl Iterator<Item = (PlayerId, Option<&'a MoveCommand>)>,
        out: &mut Vec<u8>,
    ) {
        for (id, c) in players {
            let Some(c) = c else {
                out.push(ABSENT);
                continue;
            };
            let was = self.0.entry(id).or_default();
            let (last, (yaw, pitch)) = (was.command, was.expected());
            let mut mask = 0;
            mask |= if c.forward != last.forward {
                FORWARD
            } else {
                0
            };
            mask |= if c.side != last.side { SIDE } else { 0 };
            mask |= if c.up != last.up { UP } else { 0 };
            mask |= if c.yaw != yaw { YAW } else { 0 };
            mask |= if c.pitch != pitch { PITCH } else { 0 };
            mask |= if c.buttons != last.buttons {
                BUTTONS
            } else {
                0
            };
            let game = c.actions != last.actions || c.weapon != last.weapon;
            mask |= if game { GAME } else { 0 };
            out.push(mask);
            for (bit, v) in [(FORWARD, c.forward), (SIDE, c.side), (UP, c.up)] {
                if mask & bit != 0 {
                    out.push(v as u8);
                }
            }
            if mask & YAW != 0 {
                varint(zigzag(c.yaw.wrapping_sub(yaw) as i16), out);
            }
            if mask & PITCH != 0 {
                varint(zigzag(c.pitch.wrapping_sub(pitch) as i16), out);
            }
            if mask & BUTTONS != 0 {
                out.push(c.buttons);
            }
            if game {
                varint(u32::from(c.actions), out);
                out.push(c.weapon);
            }
            was.became(*c);
        }
    }

    /// Reads the commands of `players` (in id order) from `bytes`: each one's command or
    /// `None`; `None` for the whole if the bytes do not hold exactly them.
    pub(crate) fn decode(
        &mut self,
        players: impl Iterator<Item = PlayerId>,
        bytes: &[u8],
    ) -> Option<Vec<(PlayerId, Option<MoveCommand>)>> {
        let mut r = bytes;
        let mut out = Vec::new();
        for id in players {
            let (&mask, rest) = r.split_first()?;
            r = rest;
            if mask == ABSENT {
                out.push((id, None));
                continue;
            }
            if mask & ABSENT != 0 {
                return None;
            }
            let was = self.0.entry(id).or_default();
            let (yaw, pitch) = was.expected();
            let mut c = MoveCommand {
                yaw,
                pitch,
                ..was.command
            };
            for (bit, v) in [
                (FORWARD, &mut c.forward),
                (SIDE, &mut c.side),
                (UP, &mut c.up),
            ] {
                if mask & bit != 0 {
                    let (&b, rest) = r.split_first()?;
                    *v = b as i8;
                    r = rest;
                }
            }
            if mask & YAW != 0 {
                c.yaw = yaw.wrapping_add(unzigzag(read_varint(&mut r)?)? as u16);
            }
            if mask & PITCH != 0 {
                c.pitch = pitch.wrapping_add(unzigzag(read_varint(&mut r)?)? as u16);
            }
            if mask & BUTTONS != 0 {
                let (&b, rest) = r.split_first()?;
                c.buttons = b;
                r = rest;
            }
            if mask & GAME != 0 {
                c.actions = u16::try_from(read_varint(&mut r)?).ok()?;
                let (&w, rest) = r.split_first()?;
                c.weapon = w;
                r = rest;
            }
            was.became(c);
            out.push((id, Some(c)));
        }
        r.is_empty().then_some(out)
    }
}

fn zigzag(v: i16) -> u32 {
    ((i32::from(v) << 1) ^ (i32::from(v) >> 15)) as u32
}

fn unzigzag(v: u32) -> Option<i16> {
    let v = u16::try_from(v).ok()?;
    Some(((v >> 1) as i16) ^ -((v & 1) as i16))
}

fn varint(mut v: u32, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn read_varint(r: &mut &[u8]) -> Option<u32> {
    let mut v: u32 = 0;
    for shift in (0..35).step_by(7) {
        let (&b, rest) = r.split_first()?;
        *r = rest;
        v |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn command() -> impl Strategy<Value = MoveCommand> {
        (any::<(i8, i8, i8, u16, u16)>(), any::<(u8, u16, u8)>()).prop_map(
            |((forward, side, up, yaw, pitch), (buttons, actions, weapon))| MoveCommand {
                forward,
                side,
                up,
                yaw,
                pitch,
                buttons,
                actions,
                weapon,
            },
        )
    }

    proptest! {
        /// Whatever the commands, ticks of them decode to what was encoded.
        #[test]
        fn ticks_of_commands_decode_as_encoded(
            ticks in proptest::collection::vec(
                proptest::collection::vec(proptest::option::of(command()), 3), 1..20)
        ) {
            let (mut enc, mut dec) = (Last::default(), Last::default());
            let ids = [PlayerId(2), PlayerId(5), PlayerId(9)];
            for t in &ticks {
                let mut bytes = Vec::new();
                enc.encode(ids.iter().copied().zip(t.iter().map(Option::as_ref)), &mut bytes);
                let got = dec.decode(ids.iter().copied(), &bytes).expect("decodes");
                let want: Vec<_> = ids.iter().copied().zip(t.iter().copied()).collect();
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn a_held_command_and_a_steady_turn_cost_a_byte_and_short_bytes_are_refused() {
        let mut enc = Last::default();
        let turned = |yaw| MoveCommand {
            forward: 127,
            yaw,
            ..MoveCommand::default()
        };
        let sizes: Vec<usize> = [1000, 1300, 1600, 1900, 1900, 1900]
            .into_iter()
            .map(|yaw| {
                let mut bytes = Vec::new();
                enc.encode([(PlayerId(1), Some(&turned(yaw)))].into_iter(), &mut bytes);
                bytes.len()
            })
            .collect();
        // Started, turned, turning steadily, stopped, held.
        assert_eq!(sizes, vec![4, 3, 1, 1, 3, 1]);
        let c = turned(1000);
        let mut first = Vec::new();
        enc.encode([(PlayerId(1), Some(&c))].into_iter(), &mut first);
        let mut dec = Last::default();
        assert!(dec
            .decode([PlayerId(1)].into_iter(), &first[..first.len() - 1])
            .is_none());
        assert!(dec.decode([PlayerId(1)].into_iter(), &[]).is_none());
    }
}

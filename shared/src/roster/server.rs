//! Who is in the world, as every client is told it: a player entering gets the whole
//! roster once, and the joins and leaves go to all every tenth of a second (per tick,
//! a join storm would cost a frame per player per tick).

use crate::frame::encode_frame;
use crate::report::server::{ConnId, Output};
use crate::wire::{RosterChange, ServerControl};
use expel_core::sim::PlayerId;
use std::collections::{BTreeMap, VecDeque};

/// Changes per frame: far under [`MAX_FRAME`](crate::frame::MAX_FRAME) at six
/// bytes each at most.
const PER_FRAME: usize = 4096;

/// The frames that carry `changes`, in order.
fn frames(changes: &[RosterChange]) -> Vec<Vec<u8>> {
    changes
        .chunks(PER_FRAME)
        .map(|c| {
            encode_frame(&ServerControl::Roster {
                changes: c.to_vec(),
            })
        })
        .collect()
}

/// The roster's machine: the changes since it was last sent, and who entered meanwhile
/// (each hears only what followed its entry). The server owns one and hands it the
/// players and the outputs to write to.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    /// Players who entered or left the world since the roster was last sent.
    changes: Vec<RosterChange>,
    /// Players that entered since then, and where in `changes` their news begins.
    entered: BTreeMap<PlayerId, usize>,
}

impl Roster {
    /// `player` entered the world on `conn`: it is told who else is in (`others`), and
    /// everyone of it with the tick's other changes.
    pub(crate) fn entered(
        &mut self,
        conn: ConnId,
        player: PlayerId,
        others: impl Iterator<Item = PlayerId>,
        outputs: &mut VecDeque<Output>,
    ) {
        let changes: Vec<RosterChange> = others
            .filter(|p| *p != player)
            .map(RosterChange::Joined)
            .collect();
        for bytes in frames(&changes) {
            outputs.push_back(Output::Control { conn, bytes });
        }
        // What came before is in the roster it was just sent: it hears what follows.
        self.entered.insert(player, self.changes.len() + 1);
        self.changes.push(RosterChange::Joined(player));
    }

    /// `player` left the world.
    pub(crate) fn left(&mut self, player: PlayerId) {
        self.changes.push(RosterChange::Left(player));
    }

    /// Sends the changes since the last time to every player in the world (`players`:
    /// each with its connection), encoded once, at the tenths of a second of `tick`'s
    /// `rate`.
    pub(crate) fn send(
        &mut self,
        (tick, rate): (u64, u32),
        players: impl Iterator<Item = (PlayerId, ConnId)>,
        outputs: &mut VecDeque<Output>,
    ) {
        let every = u64::from(rate / 10).max(1);
        if self.changes.is_empty() || !tick.is_multiple_of(every) {
            return;
        }
        let changes = std::mem::take(&mut self.changes);
        let entered = std::mem::take(&mut self.entered);
        let all = frames(&changes);
        for (id, conn) in players {
            // A player that entered since the last time hears only what followed.
            let from = entered.get(&id).copied().unwrap_or(0);
            let news = changes.get(from..).unwrap_or_default();
            // A player told only of itself (alone, just in) is told nothing.
            if news.iter().all(|c| c.player() == id) {
                continue;
            }
            let own;
            let frames = if from == 0 {
                &all
            } else {
                own = frames(news);
                &own
            };
            for bytes in frames {
                outputs.push_back(Output::Control {
                    conn,
                    bytes: bytes.clone(),
                });
            }
        }
    }
}

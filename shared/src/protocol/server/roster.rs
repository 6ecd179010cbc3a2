//! Who is in the world, as every client is told it: a player entering gets the whole
//! roster once, and the joins and leaves go to all every tenth of a second (per tick,
//! a join storm would cost a frame per player per tick).

use super::{ConnId, Output, Server};
use crate::protocol::frame::encode_frame;
use crate::protocol::{RosterChange, ServerControl};
use crate::sim::PlayerId;

/// Changes per frame: far under [`MAX_FRAME`](crate::protocol::frame::MAX_FRAME) at six
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

impl Server {
    /// `player` entered the world on `conn`: it is told who else is in, and everyone of
    /// it with the tick's other changes.
    pub(super) fn roster_entered(&mut self, conn: ConnId, player: PlayerId) {
        let changes: Vec<RosterChange> = self
            .players
            .keys()
            .filter(|p| **p != player)
            .map(|p| RosterChange::Joined(*p))
            .collect();
        for bytes in frames(&changes) {
            self.outputs.push_back(Output::Control { conn, bytes });
        }
        // What came before is in the roster it was just sent: it hears what follows.
        self.roster_entered
            .insert(player, self.roster_changes.len() + 1);
        self.roster_changes.push(RosterChange::Joined(player));
    }

    /// `player` left the world.
    pub(super) fn roster_left(&mut self, player: PlayerId) {
        self.roster_changes.push(RosterChange::Left(player));
    }

    /// Sends the changes since the last time to every player in the world, encoded once,
    /// at the tenths of a second.
    pub(super) fn send_roster(&mut self) {
        let every = u64::from(self.rate() / 10).max(1);
        if self.roster_changes.is_empty() || !self.world.tick.is_multiple_of(every) {
            return;
        }
        let changes = std::mem::take(&mut self.roster_changes);
        let entered = std::mem::take(&mut self.roster_entered);
        let all = frames(&changes);
        for (id, s) in &self.players {
            // A player that entered since the last time hears only what followed.
            let from = entered.get(id).copied().unwrap_or(0);
            let news = changes.get(from..).unwrap_or_default();
            // A player told only of itself (alone, just in) is told nothing.
            if news.iter().all(|c| c.player() == *id) {
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
                self.outputs.push_back(Output::Control {
                    conn: s.conn,
                    bytes: bytes.clone(),
                });
            }
        }
    }
}

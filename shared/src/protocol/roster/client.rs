//! Who else is in the world (the server's roster, not our view), and how far the map
//! has come.

use crate::protocol::client::push_event;
use crate::protocol::client::{Client, ClientEvent, End, Status};
use crate::protocol::RosterChange;
use crate::sim::PlayerId;
use std::collections::BTreeSet;

/// Most players a client keeps in its roster: a server claiming more is broken.
pub const MAX_ROSTER: usize = 1 << 16;

impl Client {
    /// The other players in the world (whether or not our snapshots show them).
    pub fn roster(&self) -> &BTreeSet<PlayerId> {
        &self.roster
    }

    /// While the map arrives: bytes received and the map's size.
    pub fn map_progress(&self) -> Option<(u64, u64)> {
        let w = self.welcome.as_ref().filter(|w| w.sending_map)?;
        let got = match self.status {
            Status::Connecting | Status::ReceivingMap => self.map.len() as u64,
            _ => w.map_size,
        };
        Some((got, w.map_size))
    }

    /// A light client (a load-test bot) keeps no roster.
    pub(in crate::protocol) fn roster_changed(&mut self, changes: Vec<RosterChange>) {
        if self.settings.light {
            return;
        }
        let me = self.welcome.as_ref().map(|w| w.player_id);
        for c in changes {
            match c {
                RosterChange::Joined(player) if Some(player) != me => {
                    if self.roster.len() >= MAX_ROSTER && !self.roster.contains(&player) {
                        let why = format!("a roster over {MAX_ROSTER} players");
                        return self.end(End::Protocol(why));
                    }
                    if self.roster.insert(player) {
                        push_event(&mut self.events, ClientEvent::PlayerJoined { player });
                    }
                }
                RosterChange::Left(player) => {
                    if self.roster.remove(&player) {
                        push_event(&mut self.events, ClientEvent::PlayerLeft { player });
                    }
                }
                RosterChange::Joined(_) => {}
            }
        }
    }
}

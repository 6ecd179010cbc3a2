//! Who else is in the world: the server's roster, not our view.

use crate::report::client::{push_event, ClientEvent, End};
use crate::wire::RosterChange;
use expel_core::sim::PlayerId;
use std::collections::{BTreeSet, VecDeque};

/// Most players a client keeps in its roster: a server claiming more is broken.
pub const MAX_ROSTER: usize = 1 << 16;

/// The other players in the world (whether or not our snapshots show them), as the
/// server's roster changes tell of them.
#[derive(Debug, Default)]
pub(crate) struct Roster {
    players: BTreeSet<PlayerId>,
}

impl Roster {
    pub(crate) fn players(&self) -> &BTreeSet<PlayerId> {
        &self.players
    }

    /// Takes the server's changes, telling `events` of each; our own player (`me`) is not
    /// one of the others. A roster past [`MAX_ROSTER`] is the server's error.
    pub(crate) fn apply(
        &mut self,
        me: Option<PlayerId>,
        changes: Vec<RosterChange>,
        events: &mut VecDeque<ClientEvent>,
    ) -> Result<(), End> {
        for c in changes {
            match c {
                RosterChange::Joined(player) if Some(player) != me => {
                    if self.players.len() >= MAX_ROSTER && !self.players.contains(&player) {
                        let why = format!("a roster over {MAX_ROSTER} players");
                        return Err(End::Protocol(why));
                    }
                    if self.players.insert(player) {
                        push_event(events, ClientEvent::PlayerJoined { player });
                    }
                }
                RosterChange::Left(player) => {
                    if self.players.remove(&player) {
                        push_event(events, ClientEvent::PlayerLeft { player });
                    }
                }
                RosterChange::Joined(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roster_keeps_the_others_and_tells_of_each_change() {
        let mut r = Roster::default();
        let mut events = VecDeque::new();
        let changes = vec![
            RosterChange::Joined(PlayerId(1)),
            RosterChange::Joined(PlayerId(2)),
            RosterChange::Joined(PlayerId(3)),
            RosterChange::Joined(PlayerId(2)),
            RosterChange::Left(PlayerId(3)),
            RosterChange::Left(PlayerId(9)),
        ];
        r.apply(Some(PlayerId(1)), changes, &mut events).unwrap();
        assert_eq!(
            r.players().iter().copied().collect::<Vec<_>>(),
            vec![PlayerId(2)]
        );
        assert_eq!(
            Vec::from(events),
            vec![
                ClientEvent::PlayerJoined {
                    player: PlayerId(2)
                },
                ClientEvent::PlayerJoined {
                    player: PlayerId(3)
                },
                ClientEvent::PlayerLeft {
                    player: PlayerId(3)
                },
            ]
        );
        let mut events = VecDeque::new();
        let flood = (10..10 + MAX_ROSTER as u32 + 1)
            .map(|p| RosterChange::Joined(PlayerId(p)))
            .collect();
        assert!(r.apply(None, flood, &mut events).is_err());
    }
}

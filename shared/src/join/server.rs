//! Joining, the server's part: the door a hello meets (who may come in, and why not) and
//! the frames that carry the map. The server machine runs a connection's way in with
//! them (`server/control.rs`).

use crate::code::Code;
use crate::codec::{MAP_CHUNK, VERSION};
use crate::frame::encode_frame;
use crate::headroom::{Headroom, Load, Window};
use crate::token::{self, Grant, ReplayGuard, ServerId};
use crate::wire::ServerControl;
use expel_core::sim::PlayerId;

/// A hello, as the door weighs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Knock<'a> {
    /// The protocol version the client speaks.
    pub(crate) version: u16,
    /// Its connect token.
    pub(crate) token: &'a str,
    /// Unix seconds now, for the token's expiry.
    pub(crate) unix: u64,
    /// Players in the world or on their way in.
    pub(crate) clients: usize,
}

/// What the door holds a hello to: the server's secret and id (a token must be signed
/// with the one and made for the other) and its cap on players.
#[derive(Clone, Copy, Debug)]
pub(crate) struct House<'a> {
    pub(crate) secret: &'a [u8],
    pub(crate) server: Option<&'a ServerId>,
    pub(crate) max_players: usize,
}

/// Who may come in: the protocol version, a connect token the server's secret signed (for
/// this server, unexpired, never used before), a free player slot, and the headroom the
/// load leaves. A hello it refuses gets the refusal's code and words for people.
#[derive(Debug, Default)]
pub(crate) struct Door {
    /// The tokens already used, until they expire.
    replay: ReplayGuard,
    /// How many players the load allows.
    headroom: Headroom,
}

impl Door {
    /// Admits `knock` or says why not; `in_use` says whether a player id is connected
    /// already. A token is spent only when its player comes in: one refused because the
    /// server is full or its player connected stays good for later.
    pub(crate) fn admit(
        &mut self,
        house: House<'_>,
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
        let grant = token::verify(house.secret, token, unix, house.server)
            .map_err(|e| (e.code(), e.to_string()))?;
        let id = grant.player;
        let max = house.max_players;
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
    pub(crate) fn joined(&mut self) {
        self.headroom.joined();
    }

    /// Takes the load the shell measured with the server's running counts (see
    /// [`Headroom::report_totals`]): the players it admits from now on.
    pub(crate) fn report_load(&mut self, load: Load, totals: Window) -> Option<usize> {
        self.headroom.report_totals(load, totals);
        self.headroom.capacity()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::mint;

    const UNIX: u64 = 1_800_000_000;

    fn signed(secret: &[u8], player_id: u32, nonce: u8) -> String {
        let grant = Grant {
            player: PlayerId(player_id),
            expires: UNIX + 60,
            nonce: [nonce; 16],
            server: None,
        };
        mint(secret, &grant)
    }

    fn token(player_id: u32, nonce: u8) -> String {
        signed(b"door secret", player_id, nonce)
    }

    fn house() -> House<'static> {
        House {
            secret: b"door secret",
            server: None,
            max_players: 64,
        }
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
        let house = House {
            max_players: 2,
            ..house()
        };
        let mut door = Door::default();
        let free = |_| false;
        let t = token(7, 1);
        let old = Knock {
            version: VERSION - 1,
            ..knock(&t, 0)
        };
        assert_eq!(code(door.admit(house, old, free)), Code::Version);
        let forged = signed(b"another secret", 7, 1);
        let r = door.admit(house, knock(&forged, 0), free);
        assert_eq!(code(r), Code::TokenForged);
        // Refused while full or while its player is in: the token stays good.
        assert_eq!(code(door.admit(house, knock(&t, 2), free)), Code::Full);
        let in_use = |id| id == PlayerId(7);
        let r = door.admit(house, knock(&t, 0), in_use);
        assert_eq!(code(r), Code::PlayerInUse);
        let grant = door.admit(house, knock(&t, 1), free).expect("admitted");
        assert_eq!(grant.player, PlayerId(7));
        // Spent.
        let again = door.admit(house, knock(&t, 0), free);
        assert_eq!(code(again), Code::TokenReplayed);
    }

    #[test]
    fn the_door_holds_joins_to_what_the_load_allows() {
        let house = house();
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
        assert!(cap < house.max_players, "{cap}");
        let t = token(3, 2);
        let (c, why) = door
            .admit(house, knock(&t, cap), |_| false)
            .expect_err("full for its load");
        assert_eq!(c, Code::FullLoad);
        assert!(why.contains(&format!("carries {cap} players")), "{why}");
        assert!(door.admit(house, knock(&t, cap - 1), |_| false).is_ok());
    }
}

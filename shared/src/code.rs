//! Why a connection ended, as a number a program acts on; the words beside it are for
//! people. The server sends it with its last words on the control stream
//! ([`ServerControl::Ended`](super::ServerControl::Ended)) and as the QUIC close frame's
//! application error code, so a client learns it even when the last words are lost.
//!
//! The numbers are grouped by what ended, so a client reads the kind of a code a newer
//! server added: 0 the peer left, 1–9 the server stopped, 10–39 a refused hello, 40 and
//! up a removed player (100–199 for a violation of move or shot validation).

use expel_core::validate::ViolationKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// First number of the refusals.
const REFUSED_FROM: u16 = 10;
/// First number of the removals.
const KICKED_FROM: u16 = 40;
/// Violation `i` of [`ViolationKind::ALL`] is this plus `i`.
const VIOLATION_FROM: u16 = 100;
const VIOLATION_TO: u16 = 199;

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "u16", into = "u16")]
pub enum Code {
    /// The client said goodbye (or nothing went wrong).
    Left,
    /// The server is shutting down.
    Shutdown,
    /// The hello's protocol version is not the server's.
    Version,
    /// The connect token is not a token.
    TokenMalformed,
    /// The token's format is one the server does not read.
    TokenVersion,
    /// The token was not signed with the server's secret.
    TokenForged,
    /// The token was minted for another server.
    TokenWrongServer,
    /// The token expired.
    TokenExpired,
    /// The token was used before.
    TokenReplayed,
    /// Every player slot is taken.
    Full,
    /// The server carries all the players its load allows now (QUIC's refusal at the
    /// door reads as this too).
    FullLoad,
    /// The token's player is connected already (its last connection may not be gone yet).
    PlayerInUse,
    /// No hello came in time.
    HelloTimeout,
    /// The first message was not a well-formed hello.
    BadHello,
    /// A malformed control frame or message from a joined client.
    Malformed,
    /// No input came in time.
    InputTimeout,
    /// Too many, too large or malformed game messages.
    MessageAbuse,
    /// The game's rules took the player out.
    Removed,
    /// The world had no room for the player's body.
    NoRoom,
    /// The client took no bytes on its control stream in time.
    Stalled,
    /// Validation's evidence of this cheat, kept up past its threshold.
    Violation(ViolationKind),
    /// A number this build does not know (a newer server's): shown, never retried.
    Unknown(u16),
}

/// What a code ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The client left.
    Left,
    /// The server stopped.
    Shutdown,
    /// The hello was refused.
    Refused,
    /// The player was removed.
    Kicked,
}

/// The codes without data, in number order from each group's first.
const PLAIN: [(Code, u16, &str); 20] = [
    (Code::Left, 0, "left"),
    (Code::Shutdown, 1, "shutdown"),
    (Code::Version, REFUSED_FROM, "version"),
    (Code::TokenMalformed, REFUSED_FROM + 1, "token_malformed"),
    (Code::TokenVersion, REFUSED_FROM + 2, "token_version"),
    (Code::TokenForged, REFUSED_FROM + 3, "token_forged"),
    (
        Code::TokenWrongServer,
        REFUSED_FROM + 4,
        "token_wrong_server",
    ),
    (Code::TokenExpired, REFUSED_FROM + 5, "token_expired"),
    (Code::TokenReplayed, REFUSED_FROM + 6, "token_replayed"),
    (Code::Full, REFUSED_FROM + 7, "full"),
    (Code::FullLoad, REFUSED_FROM + 8, "full_load"),
    (Code::PlayerInUse, REFUSED_FROM + 9, "player_in_use"),
    (Code::HelloTimeout, REFUSED_FROM + 10, "hello_timeout"),
    (Code::BadHello, REFUSED_FROM + 11, "bad_hello"),
    (Code::Malformed, KICKED_FROM, "malformed"),
    (Code::InputTimeout, KICKED_FROM + 1, "input_timeout"),
    (Code::MessageAbuse, KICKED_FROM + 2, "message_abuse"),
    (Code::Removed, KICKED_FROM + 3, "removed"),
    (Code::NoRoom, KICKED_FROM + 4, "no_room"),
    (Code::Stalled, KICKED_FROM + 5, "stalled"),
];

impl Code {
    /// Its number on the wire.
    pub fn number(self) -> u16 {
        match self {
            Code::Violation(k) => {
                let i = ViolationKind::ALL.iter().position(|x| *x == k).unwrap_or(0);
                // ALL has fewer than a hundred kinds: the sum stays in the group.
                VIOLATION_FROM.saturating_add(i as u16)
            }
            Code::Unknown(n) => n,
            plain => PLAIN
                .iter()
                .find(|(c, _, _)| *c == plain)
                .map_or(u16::MAX, |(_, n, _)| *n),
        }
    }

    /// The code with this number (an [`Code::Unknown`] one if this build has none).
    pub fn from_number(n: u16) -> Code {
        if (VIOLATION_FROM..=VIOLATION_TO).contains(&n) {
            let i = usize::from(n - VIOLATION_FROM);
            return ViolationKind::ALL
                .get(i)
                .map_or(Code::Unknown(n), |k| Code::Violation(*k));
        }
        PLAIN
            .iter()
            .find(|(_, m, _)| *m == n)
            .map_or(Code::Unknown(n), |(c, _, _)| *c)
    }

    /// The code a QUIC close frame's application error code stands for.
    pub fn from_close(code: u64) -> Code {
        u16::try_from(code).map_or(Code::Unknown(u16::MAX), Code::from_number)
    }

    /// What it ended, read from its number's group (so also for unknown codes).
    pub fn kind(self) -> Kind {
        match self.number() {
            0 => Kind::Left,
            1..REFUSED_FROM => Kind::Shutdown,
            REFUSED_FROM..KICKED_FROM => Kind::Refused,
            _ => Kind::Kicked,
        }
    }

    /// Whether the same client trying again later may get in: the server was full, was
    /// stopping, or still held its last connection. No unknown code is.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Code::Shutdown | Code::Full | Code::FullLoad | Code::PlayerInUse | Code::HelloTimeout
        )
    }

    /// A stable snake-case name, for logs and metric labels (`kicked_speed` style names
    /// are the violation's own: `speed`, `backtrack`...).
    pub fn label(self) -> &'static str {
        match self {
            Code::Violation(k) => k.name(),
            Code::Unknown(_) => "unknown",
            plain => PLAIN
                .iter()
                .find(|(c, _, _)| *c == plain)
                .map_or("unknown", |(_, _, l)| l),
        }
    }
}

impl From<u16> for Code {
    fn from(n: u16) -> Code {
        Code::from_number(n)
    }
}

impl From<Code> for u16 {
    fn from(c: Code) -> u16 {
        c.number()
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Code::Violation(k) => write!(f, "violation:{} ({})", k.name(), self.number()),
            Code::Unknown(n) => write!(f, "unknown code {n}"),
            c => write!(f, "{} ({})", c.label(), c.number()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_survives_its_number_and_the_wire() {
        let all = PLAIN
            .iter()
            .map(|(c, _, _)| *c)
            .chain(ViolationKind::ALL.iter().map(|k| Code::Violation(*k)));
        let mut seen = std::collections::BTreeSet::new();
        for c in all {
            assert!(seen.insert(c.number()), "{c:?} shares its number");
            assert_eq!(Code::from_number(c.number()), c);
            let bytes = postcard::to_allocvec(&c).unwrap();
            assert_eq!(postcard::from_bytes::<Code>(&bytes).unwrap(), c);
        }
    }

    #[test]
    fn a_newer_servers_code_keeps_its_number_and_its_groups_kind_and_is_never_transient() {
        for (n, kind) in [
            (7, Kind::Shutdown),
            (33, Kind::Refused),
            (77, Kind::Kicked),
            (199, Kind::Kicked),
            (4000, Kind::Kicked),
        ] {
            let c = Code::from_number(n);
            assert_eq!(c, Code::Unknown(n));
            assert_eq!((c.number(), c.kind()), (n, kind));
            assert!(!c.is_transient());
            assert!(c.to_string().contains(&n.to_string()), "{c}");
        }
        assert_eq!(Code::from_close(1 << 40), Code::Unknown(u16::MAX));
    }

    #[test]
    fn kinds_follow_the_groups() {
        assert_eq!(Code::Left.kind(), Kind::Left);
        assert_eq!(Code::Shutdown.kind(), Kind::Shutdown);
        assert_eq!(Code::Full.kind(), Kind::Refused);
        assert_eq!(Code::BadHello.kind(), Kind::Refused);
        assert_eq!(Code::Removed.kind(), Kind::Kicked);
        assert_eq!(Code::Violation(ViolationKind::Speed).kind(), Kind::Kicked);
        assert!(Code::Full.is_transient() && !Code::TokenForged.is_transient());
    }
}

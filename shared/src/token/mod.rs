//! Connect tokens: HMAC-SHA256 with a server secret over a format version, the player id,
//! an expiry time, a nonce and the server the token is for. The token is hex: version (1
//! byte, [`TOKEN_VERSION`]), id (4 bytes LE), expiry (8, unix seconds LE), nonce (16),
//! server (16: a hash of the server's id, [`ServerId`]; zero for a server with none), MAC
//! (32). A server refuses a forged, expired, replayed or another server's token with the
//! reason.
//!
//! Servers of a fleet share one secret, and each remembers the nonces it admitted: a token
//! that named no server would join each of them once. Bound to one server's id, it joins
//! that one only.

pub mod keyed;

use crate::code::Code;
use expel_core::PlayerId;
use keyed::KeyedHash;
use std::collections::BTreeMap;
use thiserror::Error;

/// The token format this build mints and accepts.
pub const TOKEN_VERSION: u8 = 2;
const BODY: usize = 1 + 4 + 8 + 16 + 16;
const LEN: usize = BODY + 32;
/// Raw bytes of a version 1 token (no version byte, no server), to name it when refused.
const LEN_V1: usize = 4 + 8 + 16 + 32;
/// Most nonces remembered at once; beyond it the oldest-expiring are forgotten first.
const MAX_REMEMBERED: usize = 1 << 20;

/// The server a token is for: a hash of its id (`expel serve --server-id`, under Agones
/// the GameServer's name), so any id fits the token's fixed size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ServerId([u8; 16]);

impl ServerId {
    /// The id `name` stands for. Refuses an empty or over-long one (256 bytes).
    pub fn new(name: &str) -> Result<ServerId, String> {
        if name.is_empty() || name.len() > 256 {
            return Err(format!(
                "a server id must be 1 to 256 bytes, got {}",
                name.len()
            ));
        }
        let text = [b"expel-server-id".as_slice(), name.as_bytes()].concat();
        let h = ring::digest::digest(&ring::digest::SHA256, &text);
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.as_ref()[..16]);
        Ok(ServerId(id))
    }
}

/// What a token grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The player the token is for.
    pub player: PlayerId,
    /// Unix time (seconds) after which it is refused.
    pub expires: u64,
    /// Makes each token unique, for replay detection.
    pub nonce: [u8; 16],
    /// The only server that accepts it (`None`: only a server without an id).
    pub server: Option<ServerId>,
}

/// Why a token was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Not a token at all.
    #[error("malformed token")]
    Malformed,
    /// A format this build does not read.
    #[error(
        "token format v{0} is not accepted (this server reads v{TOKEN_VERSION}): mint a new one"
    )]
    Version(u8),
    /// The MAC does not match: not made with this server's secret.
    #[error("token signature invalid (forged, or signed with another secret)")]
    Forged,
    /// Signed with the right secret, for another server (or for none, or for one where
    /// this server has no id).
    #[error("token minted for another server")]
    WrongServer,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
    /// Already used.
    #[error("token already used")]
    Replayed,
}

impl TokenError {
    /// The refusal's code.
    pub fn code(&self) -> Code {
        match self {
            TokenError::Malformed => Code::TokenMalformed,
            TokenError::Version(_) => Code::TokenVersion,
            TokenError::Forged => Code::TokenForged,
            TokenError::WrongServer => Code::TokenWrongServer,
            TokenError::Expired => Code::TokenExpired,
            TokenError::Replayed => Code::TokenReplayed,
        }
    }
}

/// What a token's MAC covers: a label, then the body.
fn signed(body: &[u8]) -> Vec<u8> {
    [b"expel-token".as_slice(), body].concat()
}

/// A token for `grant`, signed with `secret`.
pub fn mint(secret: &[u8], grant: &Grant) -> String {
    let mut body = Vec::with_capacity(LEN);
    body.push(TOKEN_VERSION);
    body.extend_from_slice(&grant.player.0.to_le_bytes());
    body.extend_from_slice(&grant.expires.to_le_bytes());
    body.extend_from_slice(&grant.nonce);
    body.extend_from_slice(&grant.server.map_or([0; 16], |s| s.0));
    let tag = KeyedHash::new(secret).tag(&signed(&body));
    body.extend_from_slice(&tag);
    hex::encode(body)
}

/// Checks a token's format, signature, server and expiry at unix time `now`, for the
/// server `server` (`None`: a server without an id, which takes only tokens for none).
pub fn verify(
    secret: &[u8],
    token: &str,
    now: u64,
    server: Option<&ServerId>,
) -> Result<Grant, TokenError> {
    let raw = hex::decode(token.trim()).map_err(|_| TokenError::Malformed)?;
    let raw: [u8; LEN] = match (raw.first(), <[u8; LEN]>::try_from(raw.as_slice())) {
        (Some(&TOKEN_VERSION), Ok(raw)) => raw,
        (Some(&v), Ok(_)) => return Err(TokenError::Version(v)),
        _ if raw.len() == LEN_V1 => return Err(TokenError::Version(1)),
        _ => return Err(TokenError::Malformed),
    };
    if !KeyedHash::new(secret).verify(&signed(&raw[..BODY]), &raw[BODY..]) {
        return Err(TokenError::Forged);
    }
    // Fixed fields of a token of fixed length.
    fn field<const N: usize>(raw: &[u8; LEN], at: usize) -> [u8; N] {
        std::array::from_fn(|i| raw[at + i])
    }
    let bound: [u8; 16] = field(&raw, 29);
    let grant = Grant {
        player: PlayerId(u32::from_le_bytes(field(&raw, 1))),
        expires: u64::from_le_bytes(field(&raw, 5)),
        nonce: field(&raw, 13),
        server: (bound != [0; 16]).then_some(ServerId(bound)),
    };
    if grant.server.as_ref() != server {
        return Err(TokenError::WrongServer);
    }
    if now > grant.expires {
        return Err(TokenError::Expired);
    }
    Ok(grant)
}

/// Remembers the nonces of accepted tokens until they expire.
#[derive(Default, Debug)]
pub struct ReplayGuard {
    seen: BTreeMap<[u8; 16], u64>,
    by_expiry: BTreeMap<(u64, [u8; 16]), ()>,
}

impl ReplayGuard {
    /// An empty guard.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `grant` once; a second use before expiry is [`TokenError::Replayed`].
    pub fn admit(&mut self, grant: &Grant, now: u64) -> Result<(), TokenError> {
        // Forget what has expired (ordered by expiry, so this stops early).
        while let Some((&(exp, nonce), _)) = self.by_expiry.first_key_value() {
            if exp >= now && self.seen.len() < MAX_REMEMBERED {
                break;
            }
            self.by_expiry.remove(&(exp, nonce));
            self.seen.remove(&nonce);
        }
        if self.seen.contains_key(&grant.nonce) {
            return Err(TokenError::Replayed);
        }
        self.seen.insert(grant.nonce, grant.expires);
        self.by_expiry.insert((grant.expires, grant.nonce), ());
        Ok(())
    }

    /// Nonces remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none are remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_and_refuse_forgery_expiry_and_replay() {
        let c = Grant {
            player: PlayerId(7),
            expires: 1000,
            nonce: [3; 16],
            server: None,
        };
        let t = mint(b"secret", &c);
        assert_eq!(verify(b"secret", &t, 999, None), Ok(c));
        assert_eq!(verify(b"other", &t, 999, None), Err(TokenError::Forged));
        assert_eq!(verify(b"secret", &t, 1001, None), Err(TokenError::Expired));
        let mut tampered = hex::decode(&t).unwrap();
        tampered[1] ^= 1;
        assert_eq!(
            verify(b"secret", &hex::encode(tampered), 999, None),
            Err(TokenError::Forged)
        );
        assert_eq!(verify(b"secret", "zz", 0, None), Err(TokenError::Malformed));
        assert_eq!(
            verify(b"secret", &t[..10], 0, None),
            Err(TokenError::Malformed)
        );
        let mut g = ReplayGuard::new();
        assert_eq!(g.admit(&c, 10), Ok(()));
        assert_eq!(g.admit(&c, 11), Err(TokenError::Replayed));
        // Once expired, the nonce is forgotten (the token itself is refused as expired).
        let d = Grant {
            nonce: [4; 16],
            ..c
        };
        assert_eq!(g.admit(&d, 2000), Ok(()));
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn a_token_opens_only_the_server_it_was_minted_for() {
        let a = ServerId::new("match-a").unwrap();
        let b = ServerId::new("match-b").unwrap();
        let g = Grant {
            player: PlayerId(1),
            expires: 100,
            nonce: [1; 16],
            server: Some(a),
        };
        let t = mint(b"s", &g);
        assert_eq!(verify(b"s", &t, 0, Some(&a)), Ok(g));
        assert_eq!(verify(b"s", &t, 0, Some(&b)), Err(TokenError::WrongServer));
        assert_eq!(verify(b"s", &t, 0, None), Err(TokenError::WrongServer));
        let unbound = mint(b"s", &Grant { server: None, ..g });
        assert_eq!(
            verify(b"s", &unbound, 0, Some(&a)),
            Err(TokenError::WrongServer)
        );
        // The server is signed: rewriting it is a forgery.
        let mut raw = hex::decode(&t).unwrap();
        raw[29] ^= 1;
        assert_eq!(
            verify(b"s", &hex::encode(raw), 0, Some(&a)),
            Err(TokenError::Forged)
        );
        assert!(ServerId::new("").is_err());
    }

    #[test]
    fn the_format_is_versioned() {
        let g = Grant {
            player: PlayerId(1),
            expires: 100,
            nonce: [1; 16],
            server: None,
        };
        let t = mint(b"s", &g);
        assert!(t.starts_with("02"), "{t}");
        // A version 1 token (60 bytes, no version byte) is named as such.
        let v1 = hex::encode([0u8; LEN_V1]);
        assert_eq!(verify(b"s", &v1, 0, None), Err(TokenError::Version(1)));
        let mut v3 = hex::decode(&t).unwrap();
        v3[0] = 3;
        assert_eq!(
            verify(b"s", &hex::encode(v3), 0, None),
            Err(TokenError::Version(3))
        );
    }
}

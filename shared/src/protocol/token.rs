//! Connect tokens: HMAC-SHA256 with a server secret over the player id, an expiry time and
//! a nonce. The token is hex: id (4 bytes LE), expiry (8, unix seconds LE), nonce (16),
//! MAC (32). A server refuses a forged, expired or replayed token with the reason.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::BTreeMap;
use thiserror::Error;

type HmacSha256 = Hmac<Sha256>;

const BODY: usize = 4 + 8 + 16;
const LEN: usize = BODY + 32;
/// Most nonces remembered at once; beyond it the oldest-expiring are forgotten first.
const MAX_REMEMBERED: usize = 1 << 20;

/// What a token grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The player the token is for.
    pub player_id: u32,
    /// Unix time (seconds) after which it is refused.
    pub expires: u64,
    /// Makes each token unique, for replay detection.
    pub nonce: [u8; 16],
}

/// Why a token was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// Not a token at all.
    #[error("malformed token")]
    Malformed,
    /// The MAC does not match: not made with this server's secret.
    #[error("token signature invalid (forged or for another server)")]
    Forged,
    /// Past its expiry.
    #[error("token expired")]
    Expired,
    /// Already used.
    #[error("token already used")]
    Replayed,
}

fn mac(secret: &[u8], body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length.
    let mut m = <HmacSha256 as Mac>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    m.update(b"expel-token-v1");
    m.update(body);
    m
}

/// A token for `grant`, signed with `secret`.
pub fn mint(secret: &[u8], grant: &Grant) -> String {
    let mut body = Vec::with_capacity(LEN);
    body.extend_from_slice(&grant.player_id.to_le_bytes());
    body.extend_from_slice(&grant.expires.to_le_bytes());
    body.extend_from_slice(&grant.nonce);
    let tag = mac(secret, &body).finalize().into_bytes();
    body.extend_from_slice(&tag);
    hex::encode(body)
}

/// Checks a token's signature and expiry at unix time `now`.
pub fn verify(secret: &[u8], token: &str, now: u64) -> Result<Grant, TokenError> {
    let raw = hex::decode(token.trim()).map_err(|_| TokenError::Malformed)?;
    if raw.len() != LEN {
        return Err(TokenError::Malformed);
    }
    mac(secret, &raw[..BODY])
        .verify_slice(&raw[BODY..])
        .map_err(|_| TokenError::Forged)?;
    let grant = Grant {
        player_id: u32::from_le_bytes(raw[0..4].try_into().map_err(|_| TokenError::Malformed)?),
        expires: u64::from_le_bytes(raw[4..12].try_into().map_err(|_| TokenError::Malformed)?),
        nonce: raw[12..28].try_into().map_err(|_| TokenError::Malformed)?,
    };
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
            player_id: 7,
            expires: 1000,
            nonce: [3; 16],
        };
        let t = mint(b"secret", &c);
        assert_eq!(verify(b"secret", &t, 999), Ok(c));
        assert_eq!(verify(b"other", &t, 999), Err(TokenError::Forged));
        assert_eq!(verify(b"secret", &t, 1001), Err(TokenError::Expired));
        let mut tampered = hex::decode(&t).unwrap();
        tampered[0] ^= 1;
        assert_eq!(
            verify(b"secret", &hex::encode(tampered), 999),
            Err(TokenError::Forged)
        );
        assert_eq!(verify(b"secret", "zz", 0), Err(TokenError::Malformed));
        assert_eq!(verify(b"secret", &t[..10], 0), Err(TokenError::Malformed));
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
}

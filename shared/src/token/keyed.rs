//! The project's one keyed hash: HMAC-SHA256, from `ring` (which the QUIC stack's TLS
//! already builds on). Its output is fixed by its specification (RFC 2104 over FIPS
//! 180-4), unlike a hasher whose algorithm a toolchain may change, so the connect tokens,
//! connection ids and stateless reset keys one build makes are known to the next.

/// A key and the hash it keys.
#[derive(Clone)]
pub struct KeyedHash(ring::hmac::Key);

impl std::fmt::Debug for KeyedHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyedHash") // never the key
    }
}

impl KeyedHash {
    /// The hash keyed by `key` (any length).
    pub fn new(key: &[u8]) -> KeyedHash {
        KeyedHash(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key))
    }

    /// The tag of `message`.
    pub fn tag(&self, message: &[u8]) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(ring::hmac::sign(&self.0, message).as_ref());
        out
    }

    /// Whether `tag` is `message`'s, compared in constant time.
    pub fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        ring::hmac::verify(&self.0, message, tag).is_ok()
    }

    /// A key for another use, derived from this one by a label naming the use: knowing
    /// one derived key tells nothing of the others.
    pub fn derive(&self, label: &[u8]) -> KeyedHash {
        KeyedHash::new(&self.tag(label))
    }

    /// The key as `ring` holds it (QUIC's stateless resets take it as their HMAC key).
    pub fn ring_key(&self) -> &ring::hmac::Key {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231, test case 2.
    #[test]
    fn the_tag_is_hmac_sha256() {
        let tag = KeyedHash::new(b"Jefe").tag(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(tag),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let k = KeyedHash::new(b"Jefe");
        assert!(k.verify(b"what do ya want for nothing?", &tag));
        assert!(!k.verify(b"what do ya want for nothing!", &tag));
        assert_ne!(k.derive(b"a").tag(b"x"), k.derive(b"b").tag(b"x"));
    }
}

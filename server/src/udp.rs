//! The QUIC socket, with a doorman: datagrams that cannot be QUIC for this server are
//! dropped and counted before quinn sees them. QUIC itself drops them silently; an
//! operator under a flood wants to know what is arriving and how much.
//!
//! A datagram is dropped when (RFC 9000 and 8999):
//! * it is shorter than any QUIC packet can be (21 bytes);
//! * it claims QUIC v1 but its fixed bit is clear (this server does not advertise
//!   greasing that bit, so no client of it clears it);
//! * it is a v1 Initial in a datagram under 1,200 bytes (servers must discard those);
//! * it is a short-header packet whose connection id this server never issued (ids carry
//!   a keyed hash; a packet for a connection of a previous run of the same server passes,
//!   so that it can be reset).
//!
//! Long-header packets of other versions pass (quinn answers them with version
//! negotiation) and are counted apart.

use expel_protocol::token::keyed::KeyedHash;
use expel_quic::RecvMeta;
use prometheus_client::metrics::counter::Counter;
use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};
use std::time::Duration;

/// Bytes of a connection id's nonce: the owning I/O thread, then seven random bytes.
const CID_NONCE: usize = 8;
/// Bytes of a connection id's keyed hash (a forged short header passes one time in 2^32).
const CID_SIGNATURE: usize = 4;
/// Bytes of a connection id this server issues.
pub const CID_LEN: usize = CID_NONCE + CID_SIGNATURE;

/// The server's connection ids: a random nonce and a keyed hash of it, so the doorman can
/// tell an id this server issued without a lookup (and one from before a restart with the
/// same secret too, so that it can be reset).
///
/// quinn's `HashedConnectionIdGenerator` does the same with a 3-byte nonce. quinn checks a
/// new connection's ids against those in use, but not the id a stateless retry hands out:
/// with a thousand players holding several ids each, a 3-byte nonce can hand a retry a
/// live connection's id, and the client's next Initial then goes to that connection,
/// which drops it: the player's handshake is lost. Eight random bytes make that one in
/// 10^15.
///
/// The hash is HMAC-SHA256 (the connect tokens' algorithm): its result is fixed by its
/// specification, so a server built with another toolchain still knows its previous
/// life's ids and can reset them.
#[derive(Clone)]
pub(crate) struct CidGenerator {
    key: KeyedHash,
    /// The I/O thread whose endpoint issues these ids: an id's first byte names it, so a
    /// datagram that reaches another thread's socket (a client that moved to a new
    /// address hashes to another socket of the port) is handed to its owner.
    owner: u8,
}

impl std::fmt::Debug for CidGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CidGenerator")
    }
}

impl CidGenerator {
    pub(crate) fn new(key: KeyedHash) -> CidGenerator {
        CidGenerator { key, owner: 0 }
    }

    /// The same key, issuing ids that name I/O thread `owner`.
    pub(crate) fn for_owner(&self, owner: u8) -> CidGenerator {
        CidGenerator {
            key: self.key.clone(),
            owner,
        }
    }

    fn signature(&self, nonce: &[u8]) -> [u8; CID_SIGNATURE] {
        let tag = self.key.tag(nonce);
        std::array::from_fn(|i| tag[i])
    }

    fn issued(&self, cid: &[u8]) -> bool {
        cid.len() == CID_LEN && self.signature(&cid[..CID_NONCE]) == cid[CID_NONCE..]
    }
}

impl ConnectionIdGenerator for CidGenerator {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        id[..CID_NONCE].copy_from_slice(&rand::random::<[u8; CID_NONCE]>());
        id[0] = self.owner;
        let sig = self.signature(&id[..CID_NONCE]);
        id[CID_NONCE..].copy_from_slice(&sig);
        ConnectionId::new(&id)
    }

    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        if self.issued(cid) {
            Ok(())
        } else {
            Err(InvalidCid)
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// What the doorman counts: handles on the server's metrics (a clone shares the counts;
/// `Metrics::udp_counts` hands them out), so the doorman needs nothing else of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct UdpCounts {
    /// Datagrams received (each of a coalesced batch counted).
    pub(crate) datagrams: Counter,
    /// Of them, long-header packets of another QUIC version (passed on).
    pub(crate) other_version: Counter,
    /// Of them, dropped, in [`Rejected::ALL`] order.
    pub(crate) rejected: [Counter; Rejected::ALL.len()],
}

/// Why a datagram was dropped, as the metrics label it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Shorter than any QUIC packet.
    Short,
    /// QUIC v1 or short header with the fixed bit clear.
    FixedBit,
    /// A QUIC v1 Initial in a datagram under 1,200 bytes.
    SmallInitial,
    /// A short-header packet for a connection id this server did not issue.
    UnknownConnection,
}

impl Rejected {
    /// Every reason, in the order metrics list them.
    pub const ALL: [Rejected; 4] = [
        Rejected::Short,
        Rejected::FixedBit,
        Rejected::SmallInitial,
        Rejected::UnknownConnection,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Rejected::Short => "short",
            Rejected::FixedBit => "fixed_bit",
            Rejected::SmallInitial => "small_initial",
            Rejected::UnknownConnection => "unknown_connection",
        }
    }
}

/// What one datagram is, by its first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to QUIC.
    Pass,
    /// A long-header packet of a version this server does not speak: QUIC answers it
    /// with version negotiation.
    OtherVersion,
    /// Drop it.
    Drop(Rejected),
}

/// Judges one datagram; `issued` says whether a short header's connection id (the
/// [`CID_LEN`] bytes after its first) is one this server could have issued.
pub fn judge(d: &[u8], mut issued: impl FnMut(&[u8]) -> bool) -> Verdict {
    const MIN_PACKET: usize = 21;
    const MIN_INITIAL_DATAGRAM: usize = 1200;
    if d.len() < MIN_PACKET {
        return Verdict::Drop(Rejected::Short);
    }
    let first = d[0];
    if first & 0x80 == 0 {
        // Short header: only ever for a connection this server made.
        if first & 0x40 == 0 {
            return Verdict::Drop(Rejected::FixedBit);
        }
        if !issued(&d[1..1 + CID_LEN]) {
            return Verdict::Drop(Rejected::UnknownConnection);
        }
        return Verdict::Pass;
    }
    let version = u32::from_be_bytes([d[1], d[2], d[3], d[4]]);
    if version != 1 {
        return Verdict::OtherVersion;
    }
    if first & 0x40 == 0 {
        return Verdict::Drop(Rejected::FixedBit);
    }
    let initial = first & 0x30 == 0;
    if initial && d.len() < MIN_INITIAL_DATAGRAM {
        return Verdict::Drop(Rejected::SmallInitial);
    }
    Verdict::Pass
}

/// Connection ids whose signature was checked, remembered by their first bytes (random):
/// a connection's packets carry the same id, so the keyed hash runs about once per id,
/// not once per packet. Only ids that passed are kept; one that collides with another is
/// checked again.
const KNOWN_IDS: usize = 4096;

/// [`judge`] in front of the endpoint's receive path.
pub(crate) struct Doorman {
    cids: CidGenerator,
    known: Vec<Option<[u8; CID_LEN]>>,
    counts: UdpCounts,
}

impl Doorman {
    pub(crate) fn new(cids: CidGenerator, counts: UdpCounts) -> Doorman {
        Doorman {
            cids,
            known: vec![None; KNOWN_IDS],
            counts,
        }
    }

    /// Whether this server issued `cid`, from the remembered ids or the keyed hash.
    fn issued(&mut self, cid: &[u8]) -> bool {
        if cid.len() != CID_LEN {
            return false;
        }
        // (The first byte names the owning thread; the next two are random.)
        let slot = usize::from(u16::from_le_bytes([cid[1], cid[2]])) % KNOWN_IDS;
        if self.known[slot].is_some_and(|k| k == cid) {
            return true;
        }
        let ok = self.cids.issued(cid);
        if ok {
            let mut id = [0; CID_LEN];
            id.copy_from_slice(cid);
            self.known[slot] = Some(id);
        }
        ok
    }

    /// The I/O thread that owns the connection a datagram belongs to, by the connection
    /// id it carries when that is one this server issued (a short header's, or a long
    /// header's destination id once the server has chosen it); `None` for a client's
    /// own first id, which whichever thread receives it may take.
    pub(crate) fn owner(&mut self, d: &[u8]) -> Option<u8> {
        let cid = if d.first()? & 0x80 == 0 {
            d.get(1..1 + CID_LEN)?
        } else {
            let len = usize::from(*d.get(5)?);
            d.get(6..6 + len)?
        };
        // (Checked first: a long header's id may be empty.)
        if self.issued(cid) {
            cid.first().copied()
        } else {
            None
        }
    }

    /// Filters one received buffer (several datagrams of `stride` bytes each when the
    /// kernel coalesced them): the dropped ones are cut out and `meta.len` shrinks.
    pub(crate) fn filter(&mut self, buf: &mut [u8], meta: &mut RecvMeta) {
        let stride = meta.stride.max(1);
        let mut kept = 0;
        let mut at = 0;
        while at < meta.len {
            let end = (at + stride).min(meta.len);
            self.counts.datagrams.inc();
            let keep = match judge(&buf[at..end], |cid| self.issued(cid)) {
                Verdict::Pass => true,
                Verdict::OtherVersion => {
                    self.counts.other_version.inc();
                    true
                }
                Verdict::Drop(why) => {
                    if let Some(i) = Rejected::ALL.iter().position(|x| *x == why) {
                        self.counts.rejected[i].inc();
                    }
                    false
                }
            };
            if keep {
                if kept != at {
                    buf.copy_within(at..end, kept);
                }
                kept += end - at;
            }
            at = end;
        }
        meta.len = kept;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cannot_be_quic_for_this_server_is_dropped_and_the_rest_passes() {
        let ours = |cid: &[u8]| cid[0] == 7;
        assert_eq!(judge(&[0x40; 20], ours), Verdict::Drop(Rejected::Short));
        // Short headers: fixed bit, then the connection id.
        let mut short = vec![0x41u8; 40];
        short[1] = 7;
        assert_eq!(judge(&short, ours), Verdict::Pass);
        short[1] = 8;
        assert_eq!(
            judge(&short, ours),
            Verdict::Drop(Rejected::UnknownConnection)
        );
        short[0] = 0x01;
        assert_eq!(judge(&short, ours), Verdict::Drop(Rejected::FixedBit));
        // Long headers: v1 Initials must fill 1,200 bytes; other versions pass.
        let mut initial = vec![0u8; 1200];
        initial[0] = 0xc0;
        initial[1..5].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(judge(&initial, ours), Verdict::Pass);
        assert_eq!(
            judge(&initial[..1199], ours),
            Verdict::Drop(Rejected::SmallInitial)
        );
        let mut handshake = initial[..100].to_vec();
        handshake[0] = 0xe0;
        assert_eq!(judge(&handshake, ours), Verdict::Pass);
        handshake[0] = 0xa0;
        assert_eq!(judge(&handshake, ours), Verdict::Drop(Rejected::FixedBit));
        initial[1..5].copy_from_slice(&0x0a0a_0a0au32.to_be_bytes());
        assert_eq!(judge(&initial[..100], ours), Verdict::OtherVersion);
    }

    #[test]
    fn connection_ids_are_wide_unique_and_checked_by_the_key_alone() {
        let mut g = CidGenerator::new(KeyedHash::new(b"42"));
        let ids: std::collections::BTreeSet<Vec<u8>> =
            (0..100_000).map(|_| g.generate_cid().to_vec()).collect();
        // A 3-byte nonce (quinn's) repeats about 300 times in 100,000 draws.
        assert_eq!(ids.len(), 100_000);
        for id in ids.iter().take(100) {
            assert_eq!(id.len(), CID_LEN);
            // Another generator with the key (the server after a restart) knows them.
            assert!(CidGenerator::new(KeyedHash::new(b"42")).issued(id));
            assert!(!CidGenerator::new(KeyedHash::new(b"43")).issued(id));
            let mut forged = id.clone();
            forged[0] ^= 1;
            assert!(!g.issued(&forged));
            assert!(g.validate(&ConnectionId::new(id)).is_ok());
        }
    }

    /// The signature is HMAC-SHA256, the same bits on every build: a known answer
    /// (Python's `hmac.new(key, bytes(range(8)), hashlib.sha256)`, first four bytes).
    #[test]
    fn connection_id_signatures_have_a_known_answer() {
        let g = CidGenerator::new(KeyedHash::new(b"expel cid known answer"));
        let nonce: Vec<u8> = (0..8).collect();
        assert_eq!(g.signature(&nonce), [0xde, 0xc7, 0x40, 0x10]);
        let mut id = nonce.clone();
        id.extend_from_slice(&[0xde, 0xc7, 0x40, 0x10]);
        assert!(g.issued(&id));
    }

    /// The owning thread is read from ids this server issued alone, and any bytes at all
    /// (an empty or cut-off id, a lone byte) are answered without a panic.
    #[test]
    fn the_owner_is_read_from_issued_ids_and_anything_else_is_nobodys() {
        let mut door = Doorman::new(
            CidGenerator::new(KeyedHash::new(b"k")),
            UdpCounts::default(),
        );
        let id = CidGenerator::new(KeyedHash::new(b"k"))
            .for_owner(3)
            .generate_cid();
        let mut short = vec![0x41];
        short.extend_from_slice(&id);
        short.extend_from_slice(&[0; 20]);
        assert_eq!(door.owner(&short), Some(3));
        let mut long = vec![0xe0, 0, 0, 0, 1, CID_LEN as u8];
        long.extend_from_slice(&id);
        assert_eq!(door.owner(&long), Some(3));
        // A client's own first id, an empty one, one cut short, nothing.
        assert_eq!(
            door.owner(&[0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8]),
            None
        );
        assert_eq!(door.owner(&[0xc0, 0, 0, 0, 1, 0, 9, 9]), None);
        assert_eq!(door.owner(&[0xc0, 0, 0, 0, 1, 200, 1]), None);
        assert_eq!(door.owner(&short[..5]), None);
        assert_eq!(door.owner(&[]), None);
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for len in 0..64 {
            let d: Vec<u8> = (0..len)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as u8
                })
                .collect();
            let _ = door.owner(&d);
        }
    }

    #[test]
    fn remembered_ids_pass_and_nothing_else_does() {
        let mut door = Doorman::new(
            CidGenerator::new(KeyedHash::new(b"k")),
            UdpCounts::default(),
        );
        let mut g = CidGenerator::new(KeyedHash::new(b"k"));
        let ids: Vec<ConnectionId> = (0..10_000).map(|_| g.generate_cid()).collect();
        for _ in 0..2 {
            assert!(ids.iter().all(|id| door.issued(id)));
        }
        assert!(!door.issued(&[0; CID_LEN]), "an empty slot is no id");
        for id in &ids {
            // Same slot and nonce, another signature: checked, not remembered.
            let mut forged = id.to_vec();
            forged[CID_LEN - 1] ^= 1;
            assert!(!door.issued(&forged));
        }
        assert!(!door.issued(&ids[0][..CID_LEN - 1]));
    }
}

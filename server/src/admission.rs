//! Who may start a connection: connections that have not joined yet (a QUIC handshake in
//! flight, or a hello not yet answered) cost the server memory before anyone has shown a
//! token, so they are bounded per address and in total. Past a lower mark, addresses QUIC
//! has not validated are sent a stateless retry first (quinn-proto's `Endpoint::retry`): a
//! flood of Initials from forged addresses then costs one packet each and no state.
//!
//! Pure bookkeeping, no I/O: the QUIC driver asks [`Admission::decide`] for each attempt
//! and holds the [`Pending`] it gets until the connection joins or ends. [`PerAddress`]
//! counts the same way for the HTTP endpoint's connections and live viewers.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bounds on what a peer may hold or make the server wait for.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections not yet joined, from all addresses.
    pub pending_total: usize,
    /// Connections not yet joined, from one IP address.
    pub pending_per_address: usize,
    /// Not-yet-joined connections beyond which an address QUIC has not validated gets a
    /// stateless retry instead of a handshake.
    pub retry_above: usize,
    /// How long a QUIC handshake may take.
    pub handshake_timeout: Duration,
    /// How long one write to a peer may wait for its flow-control credit: a peer that
    /// grants none for this long has stalled and is dropped.
    pub write_timeout: Duration,
    /// Slowest map transfer accepted, bytes per second: the whole transfer must finish
    /// within `write_timeout` plus the map's size at this rate.
    pub min_map_rate: u64,
}

impl Limits {
    /// When a map of `bytes` whose transfer was asked for at `from` must be written in
    /// whole: the write timeout, plus the map at [`Limits::min_map_rate`].
    pub(crate) fn map_deadline(&self, from: Instant, bytes: usize) -> Instant {
        let transfer = Duration::from_secs_f64(bytes as f64 / self.min_map_rate.max(1) as f64);
        from + self.write_timeout + transfer
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            pending_total: 256,
            pending_per_address: 64,
            retry_above: 32,
            handshake_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            min_map_rate: 64 * 1024,
        }
    }
}

/// What to do with a new connection attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start the handshake.
    Accept,
    /// Ask the peer to prove its address first (stateless).
    Retry,
    /// Refuse: too many not-yet-joined connections in total.
    RefuseTotal,
    /// Refuse: too many not-yet-joined connections from this address.
    RefuseAddress,
    /// Refuse: the server carries all the players its load allows.
    RefuseLoad,
}

impl Decision {
    /// The metric label of the outcome.
    pub fn label(self) -> &'static str {
        match self {
            Decision::Accept => "accepted",
            Decision::Retry => "retried",
            Decision::RefuseTotal => "refused_total",
            Decision::RefuseAddress => "refused_address",
            Decision::RefuseLoad => "refused_load",
        }
    }

    /// Every outcome, in the order metrics list them.
    pub const ALL: [Decision; 5] = [
        Decision::Accept,
        Decision::Retry,
        Decision::RefuseTotal,
        Decision::RefuseAddress,
        Decision::RefuseLoad,
    ];
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_address: BTreeMap<IpAddr, usize>,
}

/// The address a limit counts `ip` under: an IPv4 address (also one mapped into IPv6) as
/// itself, an IPv6 address by its /64, which one host or one customer line is given whole
/// (2^64 addresses: counted one by one, a per-address limit would bind nobody).
pub(crate) fn counted_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// Things held per IP address (connections, viewers), counted while their [`Held`] lives;
/// an IPv6 address counts under its /64 ([`counted_as`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct PerAddress {
    counts: Arc<Mutex<Counts>>,
}

/// One thing counted against its address; dropping it gives the room back.
#[derive(Debug)]
pub(crate) struct Held {
    ip: IpAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ok(mut c) = self.counts.lock() {
            c.total = c.total.saturating_sub(1);
            if let Some(n) = c.by_address.get_mut(&self.ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.by_address.remove(&self.ip);
                }
            }
        }
    }
}

impl PerAddress {
    /// Nothing held.
    pub(crate) fn new() -> PerAddress {
        PerAddress::default()
    }

    /// Counts one more for `ip` if that leaves at most `per_address` from it and `total`
    /// in all.
    pub(crate) fn take(&self, ip: IpAddr, per_address: usize, total: usize) -> Option<Held> {
        let ip = counted_as(ip);
        let mut c = self.counts.lock().ok()?;
        let from = c.by_address.get(&ip).copied().unwrap_or(0);
        if from >= per_address || c.total >= total {
            return None;
        }
        c.total += 1;
        *c.by_address.entry(ip).or_default() += 1;
        Some(Held {
            ip,
            counts: self.counts.clone(),
        })
    }

    /// (held in all, held from `ip`); a poisoned count reads as full.
    pub(crate) fn held(&self, ip: IpAddr) -> (usize, usize) {
        let ip = counted_as(ip);
        self.counts.lock().map_or((usize::MAX, usize::MAX), |c| {
            (c.total, c.by_address.get(&ip).copied().unwrap_or(0))
        })
    }

    /// Held in all.
    pub(crate) fn total(&self) -> usize {
        self.counts.lock().map_or(usize::MAX, |c| c.total)
    }
}

/// The not-yet-joined connections, counted for the QUIC driver.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    limits: Limits,
    pending: PerAddress,
}

/// One not-yet-joined connection counted against its address, until dropped (the
/// connection joined or ended).
pub(crate) type Pending = Held;

impl Admission {
    /// Admission under `limits`, nothing pending.
    pub(crate) fn new(limits: Limits) -> Admission {
        Admission {
            limits,
            pending: PerAddress::new(),
        }
    }

    /// Decides on an attempt from `ip` (`validated`: QUIC has seen the peer answer at
    /// that address, after a retry). On [`Decision::Accept`] the attempt is counted until
    /// the returned [`Pending`] is dropped. (One task decides, so the count read here is
    /// the one taken.)
    pub(crate) fn decide(&self, ip: IpAddr, validated: bool) -> (Decision, Option<Pending>) {
        let l = &self.limits;
        let (total, from) = self.pending.held(ip);
        let decision = if total >= l.pending_total {
            Decision::RefuseTotal
        } else if from >= l.pending_per_address {
            Decision::RefuseAddress
        } else if !validated && total >= l.retry_above {
            Decision::Retry
        } else {
            Decision::Accept
        };
        if decision != Decision::Accept {
            return (decision, None);
        }
        match self
            .pending
            .take(ip, l.pending_per_address, l.pending_total)
        {
            Some(p) => (decision, Some(p)),
            None => (Decision::RefuseTotal, None),
        }
    }

    /// Not-yet-joined connections now.
    pub(crate) fn pending(&self) -> usize {
        self.pending.total()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_per_address_and_in_total_with_retry_in_between() {
        let a = Admission::new(Limits {
            pending_total: 6,
            pending_per_address: 3,
            retry_above: 4,
            ..Limits::default()
        });
        let ip = |n: u8| IpAddr::from([127, 0, 0, n]);
        let mut held = Vec::new();
        for _ in 0..3 {
            let (d, p) = a.decide(ip(1), false);
            assert_eq!(d, Decision::Accept);
            held.push(p.unwrap());
        }
        assert_eq!(a.decide(ip(1), true).0, Decision::RefuseAddress);
        held.push(a.decide(ip(2), false).1.unwrap());
        // Four pending: an unvalidated address is asked to retry, a validated one enters.
        assert_eq!(a.decide(ip(3), false).0, Decision::Retry);
        held.push(a.decide(ip(3), true).1.unwrap());
        held.push(a.decide(ip(4), true).1.unwrap());
        assert_eq!(a.pending(), 6);
        assert_eq!(a.decide(ip(5), true).0, Decision::RefuseTotal);
        // Room comes back as connections join or end.
        held.truncate(2);
        assert_eq!(a.pending(), 2);
        // (The attempt accepted here is dropped at once, as a connection that ended.)
        assert_eq!(a.decide(ip(1), false).0, Decision::Accept);
        assert_eq!(a.pending(), 2);
        drop(held);
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn an_ipv6_host_counts_by_its_64_and_an_ipv4_one_by_its_address() {
        let a = Admission::new(Limits {
            pending_total: 100,
            pending_per_address: 2,
            retry_above: 100,
            ..Limits::default()
        });
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        let _held: Vec<_> = ["2001:db8:1:2::1", "2001:db8:1:2:ffff::9"]
            .iter()
            .map(|s| a.decide(v6(s), false).1.unwrap())
            .collect();
        // A third address of the same /64 is the same host.
        assert_eq!(
            a.decide(v6("2001:db8:1:2:8000::"), false).0,
            Decision::RefuseAddress
        );
        // The next /64 is another.
        assert_eq!(a.decide(v6("2001:db8:1:3::1"), false).0, Decision::Accept);
        // IPv4 addresses count one by one, mapped into IPv6 or not.
        let _four: Vec<_> = ["10.0.0.1", "::ffff:10.0.0.1"]
            .iter()
            .map(|s| a.decide(v6(s), false).1.unwrap())
            .collect();
        assert_eq!(a.decide(v6("10.0.0.1"), false).0, Decision::RefuseAddress);
        assert_eq!(a.decide(v6("10.0.0.2"), false).0, Decision::Accept);
    }
}

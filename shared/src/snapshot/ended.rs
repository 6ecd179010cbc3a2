//! The server's side of the entities' ends (see
//! [`ends`](crate::game::ends)): those of the last [`ENDS_KEPT_TICKS`] ticks,
//! each with who may be told, for every client's snapshots.

use super::*;
use crate::game::ends::EntityStart;

/// Ticks an end is kept on the server: a client whose newest acknowledgement is older is
/// sent its snapshots in full, and any end older than this is no longer told to it
/// (about four seconds at 60 Hz; a client that far behind has lost more than a rocket).
pub const ENDS_KEPT_TICKS: u64 = 256;
/// Most ends kept on the server: a game that ends more in [`ENDS_KEPT_TICKS`] loses the
/// oldest first (counted).
pub const ENDS_KEPT: usize = 4096;
/// Most ends one snapshot carries (the oldest first; the rest ride the next ones).
pub const ENDS_PER_SNAPSHOT: usize = 24;

/// An end as the server keeps it: who may be told, and where it started.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ended {
    pub(crate) end: EntityEnd,
    pub(crate) scope: Scope,
    /// Its start, always (a snapshot sends it where the baseline lacks the entity).
    pub(crate) start: EntityStart,
}

/// The server's ends of the last [`ENDS_KEPT_TICKS`] ticks, oldest first.
#[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
#[derive(Debug, Default)]
pub(crate) struct EndLog {
    ends: VecDeque<Ended>,
    /// Ends dropped for [`ENDS_KEPT`] before their time, since the last look.
    overflowed: u64,
}

#[cfg_attr(not(feature = "server"), allow(dead_code))] // the server's
impl EndLog {
    /// Keeps `ended`; forgets those older than [`ENDS_KEPT_TICKS`] behind it.
    pub(crate) fn push(&mut self, mut ended: Ended) {
        // Told to the unit: what the server keeps is what its clients decode.
        ended.end = ended.end.rounded();
        ended.start = EntityEnd {
            start: Some(ended.start),
            ..ended.end
        }
        .rounded()
        .start
        .unwrap_or(ended.start);
        let tick = ended.end.tick;
        while self
            .ends
            .front()
            .is_some_and(|e| e.end.tick + ENDS_KEPT_TICKS < tick)
        {
            self.ends.pop_front();
        }
        if self.ends.len() >= ENDS_KEPT {
            self.ends.pop_front();
            self.overflowed += 1;
        }
        self.ends.push_back(ended);
    }

    /// The ends a client last acknowledging tick `since` (0: nothing, or too old) has not
    /// been sure to hear of, up to tick `tick`: those that ended after `since`, oldest
    /// first.
    pub(crate) fn since(&self, since: u64, tick: u64) -> impl Iterator<Item = &Ended> {
        // An entity that ended at `e` was in the world at `e` and gone at `e + 1`: a
        // snapshot of `since >= e + 1` told of it.
        let from = self.ends.partition_point(|e| e.end.tick < since);
        self.ends
            .range(from..)
            .take_while(move |e| e.end.tick < tick)
    }

    /// Ends dropped for [`ENDS_KEPT`] since the last call.
    pub(crate) fn take_overflowed(&mut self) -> u64 {
        std::mem::take(&mut self.overflowed)
    }

    /// How many are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::ends::EndCause;
    use expel_core::sim::Struck;

    fn ended(id: EntityId, tick: u64) -> Ended {
        let start = EntityStart {
            kind: 1,
            owner: Some(PlayerId(3)),
            born: tick,
            from: [0; 3],
        };
        Ended {
            end: EntityEnd {
                id,
                tick,
                at: [256, 0, 0],
                cause: EndCause::Impact(Struck::World),
                start: None,
            },
            scope: Scope::Near,
            start,
        }
    }

    #[test]
    fn a_client_is_told_what_ended_since_its_acknowledgement() {
        let mut log = EndLog::default();
        for (id, t) in [(1, 10), (2, 11), (3, 13)] {
            log.push(ended(EntityId(id), t));
        }
        let ids = |since, tick| {
            log.since(since, tick)
                .map(|e| e.end.id.0)
                .collect::<Vec<_>>()
        };
        // A snapshot of 12 shows 2 gone (it stood at 11): told to one acknowledging 11.
        assert_eq!(ids(11, 12), vec![2]);
        assert_eq!(ids(0, 14), vec![1, 2, 3]);
        // Acknowledging 12 means the snapshot of 12 came, which told of 1 and 2.
        assert_eq!(ids(12, 14), vec![3]);
        assert_eq!(ids(14, 20), Vec::<u32>::new());
    }

    #[test]
    fn the_log_forgets_by_age_and_by_count() {
        let mut log = EndLog::default();
        log.push(ended(EntityId(1), 1));
        log.push(ended(EntityId(2), 2 + ENDS_KEPT_TICKS));
        assert_eq!(log.len(), 1, "an end older than the window is forgotten");
        for i in 0..ENDS_KEPT as u32 + 10 {
            log.push(ended(EntityId(10 + i), 300));
        }
        assert_eq!(log.len(), ENDS_KEPT);
        assert_eq!(log.take_overflowed(), 11);
        assert_eq!(log.take_overflowed(), 0);
    }
}

//! Joining, the client's half: the welcome (or the refusal), the map's transfer checked
//! against its hash, the simulation built from it, and where the clock starts.

use crate::codec::MAX_MAP_BYTES;
use crate::input::clock::MAX_LEAD_RTT;
use crate::report::client::{End, Status};
use crate::time::Instant;
use crate::wire::{ServerControl, Welcome};
use expel_core::collision::CollisionModel;
use expel_core::map::MapData;
use expel_core::sim::Sim;
use std::sync::Arc;

/// The client's way in: from the hello sent to the welcome, and the map's bytes as they
/// arrive.
#[derive(Debug)]
pub(crate) struct Joining {
    welcome: Option<Welcome>,
    /// The map's bytes so far, while the server sends it.
    map: Vec<u8>,
    /// When the hello was sent, and the welcome came: a first round trip.
    hello_at: Instant,
    welcome_at: Instant,
}

impl Joining {
    /// A hello sent at `now`.
    pub(crate) fn new(now: Instant) -> Joining {
        Joining {
            welcome: None,
            map: Vec::new(),
            hello_at: now,
            welcome_at: now,
        }
    }

    /// The welcome, once it came.
    pub(crate) fn welcome(&self) -> Option<&Welcome> {
        self.welcome.as_ref()
    }

    /// The round trip from the hello to the welcome, seconds.
    pub(crate) fn first_rtt(&self) -> f64 {
        (self.welcome_at)
            .saturating_duration_since(self.hello_at)
            .as_secs_f64()
    }

    /// The welcome (checked) came at `now`. The map to play on when it is here: the one
    /// the client has (`have_map`) unless the server sends its own, which is then awaited
    /// (`None`).
    pub(crate) fn welcomed(
        &mut self,
        w: Welcome,
        have_map: Option<Arc<Vec<u8>>>,
        now: Instant,
    ) -> Result<Option<Arc<Vec<u8>>>, End> {
        self.welcome_at = now;
        if w.sending_map {
            if w.map_size > MAX_MAP_BYTES {
                let why = format!("a map of {} bytes is over the limit", w.map_size);
                return Err(End::Protocol(why));
            }
            let empty = w.map_size == 0;
            self.welcome = Some(w);
            return if empty {
                self.map_done().map(Some)
            } else {
                Ok(None)
            };
        }
        let Some(map) = have_map else {
            return Err(End::Protocol("the server sent no map".into()));
        };
        self.welcome = Some(w);
        Ok(Some(map))
    }

    /// A chunk of the map came: the whole map once the last one is here and its hash
    /// holds.
    pub(crate) fn map_chunk(
        &mut self,
        offset: u64,
        bytes: &[u8],
    ) -> Result<Option<Arc<Vec<u8>>>, End> {
        let Some(size) = self.welcome.as_ref().map(|w| w.map_size) else {
            return Ok(None);
        };
        if let Err(e) = ServerControl::check_map_chunk(offset, bytes.len(), size) {
            return Err(End::Protocol(e.to_string()));
        }
        if offset != self.map.len() as u64 {
            let why = format!("map chunk at {offset}, expected {}", self.map.len());
            return Err(End::Protocol(why));
        }
        self.map.extend_from_slice(bytes);
        if self.map.len() as u64 == size {
            return self.map_done().map(Some);
        }
        Ok(None)
    }

    fn map_done(&mut self) -> Result<Arc<Vec<u8>>, End> {
        let map = Arc::new(std::mem::take(&mut self.map));
        let hash = self.welcome.as_ref().map(|w| w.map_hash);
        if hash != Some(*blake3::hash(&map).as_bytes()) {
            return Err(End::Protocol("received map does not match its hash".into()));
        }
        Ok(map)
    }

    /// While the map arrives: bytes received and the map's size.
    pub(crate) fn progress(&self, status: &Status) -> Option<(u64, u64)> {
        let w = self.welcome.as_ref().filter(|w| w.sending_map)?;
        let got = match status {
            Status::Connecting | Status::ReceivingMap => self.map.len() as u64,
            _ => w.map_size,
        };
        Some((got, w.map_size))
    }

    /// Where the clock starts at `now`: commands sent now reach the server a round trip
    /// (`rtt` seconds) and the time spent since the welcome left it after its tick; that
    /// far, and `buffer` ticks, ahead of it.
    pub(crate) fn opening_tick(
        &self,
        welcome: &Welcome,
        rtt: f64,
        buffer: f64,
        now: Instant,
    ) -> u64 {
        let period = 1.0 / f64::from(welcome.tick_rate().max(1));
        let since = now.saturating_duration_since(self.welcome_at).as_secs_f64();
        let lead = (rtt.min(MAX_LEAD_RTT) + since) / period + buffer;
        // (A lead of any size saturates; the welcome's tick is at most MAX_TICK.)
        welcome.server_tick.saturating_add(lead.ceil() as u64)
    }
}

/// The simulation of a map the server sent, with the server's movement settings.
pub(crate) fn build_sim(map: &[u8], welcome: &Welcome) -> Result<Arc<Sim>, String> {
    let data = MapData::parse_any(map).map_err(|e| format!("map: {e}"))?;
    let movement = welcome
        .config
        .clone()
        .validate()
        .map_err(|e| format!("movement settings: {e}"))?;
    let model = Arc::new(CollisionModel::build(&data));
    Ok(Arc::new(Sim::from_map(model, &data, movement).0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use expel_core::PlayerId;
    use std::time::Duration;

    fn welcome(map: &[u8], sending_map: bool) -> Welcome {
        Welcome {
            player: PlayerId(1),
            snapshot_rate: 30,
            input_rate: 60,
            config: expel_core::MoveConfig::default(),
            map_name: "test".into(),
            map_hash: *blake3::hash(map).as_bytes(),
            map_size: map.len() as u64,
            sending_map,
            server_tick: 100,
            movement: Default::default(),
            states: Default::default(),
        }
    }

    fn protocol_error(r: Result<Option<Arc<Vec<u8>>>, End>) -> String {
        match r {
            Err(End::Protocol(why)) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_sent_map_is_taken_in_order_and_whole_against_its_hash() {
        #[allow(clippy::disallowed_methods)] // the base of the test's instants
        let t0 = Instant::now();
        let map = vec![7u8; 100];
        let mut j = Joining::new(t0);
        let later = t0 + Duration::from_millis(80);
        assert_eq!(j.welcomed(welcome(&map, true), None, later), Ok(None));
        assert_eq!(j.first_rtt(), 0.08);
        assert_eq!(j.progress(&Status::ReceivingMap), Some((0, 100)));
        assert_eq!(j.map_chunk(0, &map[..60]), Ok(None));
        assert_eq!(j.progress(&Status::ReceivingMap), Some((60, 100)));
        let got = j.map_chunk(60, &map[60..]).unwrap().expect("whole");
        assert_eq!(*got, map);

        // Out of order, over its size, or not the map the welcome named: the end.
        let mut j = Joining::new(t0);
        j.welcomed(welcome(&map, true), None, t0).unwrap();
        assert!(protocol_error(j.map_chunk(10, &map[..10])).contains("expected 0"));
        let mut j = Joining::new(t0);
        j.welcomed(welcome(&map, true), None, t0).unwrap();
        assert!(j.map_chunk(0, &[0; 101]).is_err());
        let mut j = Joining::new(t0);
        j.welcomed(welcome(&map, true), None, t0).unwrap();
        let why = protocol_error(j.map_chunk(0, &[8; 100]));
        assert!(why.contains("hash"), "{why}");
    }

    #[test]
    fn a_welcome_without_a_map_plays_on_the_clients_own_or_ends() {
        #[allow(clippy::disallowed_methods)] // the base of the test's instants
        let t0 = Instant::now();
        let map = Arc::new(vec![1u8, 2, 3]);
        let mut j = Joining::new(t0);
        let got = j.welcomed(welcome(&map, false), Some(map.clone()), t0);
        assert_eq!(got, Ok(Some(map.clone())));
        assert_eq!(j.progress(&Status::Playing), None, "nothing was sent");
        let mut j = Joining::new(t0);
        let why = protocol_error(j.welcomed(welcome(&map, false), None, t0));
        assert!(why.contains("no map"), "{why}");
        let mut w = welcome(&map, true);
        w.map_size = MAX_MAP_BYTES + 1;
        let why = protocol_error(Joining::new(t0).welcomed(w, None, t0));
        assert!(why.contains("over the limit"), "{why}");
        // An empty map is whole at once.
        let mut j = Joining::new(t0);
        assert_eq!(
            j.welcomed(welcome(&[], true), None, t0),
            Ok(Some(Arc::default()))
        );
    }
}

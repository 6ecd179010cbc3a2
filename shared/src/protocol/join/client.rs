//! Joining, the client's half: the welcome (or the refusal), the map's transfer checked
//! against its hash, the simulation built from it, and where the clock starts.

use crate::collision::CollisionModel;
use crate::map::MapData;
use crate::protocol::client::{push_event, Client, ClientEvent, End, Play, Status, MAX_LEAD_RTT};
use crate::protocol::predict::Predictor;
use crate::protocol::snapshot::interp::Interpolator;
use crate::protocol::snapshot::SnapshotDecoder;
use crate::protocol::{ServerControl, Welcome, MAX_MAP_BYTES};
use crate::sim::Sim;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

impl Client {
    pub(in crate::protocol) fn welcomed(&mut self, w: Welcome, now: Instant) {
        if let Err(e) = w.validate() {
            return self.end(End::Protocol(e.to_string()));
        }
        self.welcome_at = now;
        if self.transport_rtt.is_none() {
            self.stats.rtt = now.saturating_duration_since(self.hello_at).as_secs_f64();
        }
        push_event(
            &mut self.events,
            ClientEvent::Welcomed {
                player: w.player_id,
                sending_map: w.sending_map,
            },
        );
        if w.sending_map {
            if w.map_size > MAX_MAP_BYTES {
                let why = format!("a map of {} bytes is over the limit", w.map_size);
                return self.end(End::Protocol(why));
            }
            self.status = Status::ReceivingMap;
            self.welcome = Some(w);
            if self.welcome.as_ref().is_some_and(|w| w.map_size == 0) {
                self.map_done(now);
            }
            return;
        }
        let Some(map) = self.settings.have_map.clone() else {
            return self.end(End::Protocol("the server sent no map".into()));
        };
        self.welcome = Some(w);
        self.start(map, now);
    }

    pub(in crate::protocol) fn map_chunk(&mut self, offset: u64, bytes: &[u8], now: Instant) {
        let Some(size) = self.welcome.as_ref().map(|w| w.map_size) else {
            return;
        };
        if let Err(e) = ServerControl::check_map_chunk(offset, bytes.len(), size) {
            return self.end(End::Protocol(e.to_string()));
        }
        if offset != self.map.len() as u64 {
            let why = format!("map chunk at {offset}, expected {}", self.map.len());
            return self.end(End::Protocol(why));
        }
        self.map.extend_from_slice(bytes);
        if self.map.len() as u64 == size {
            self.map_done(now);
        }
    }

    fn map_done(&mut self, now: Instant) {
        let map = Arc::new(std::mem::take(&mut self.map));
        let hash = self.welcome.as_ref().map(|w| w.map_hash);
        if hash != Some(*blake3::hash(&map).as_bytes()) {
            return self.end(End::Protocol("received map does not match its hash".into()));
        }
        self.start(map, now);
    }

    /// Builds (or reuses) the simulation and starts the clock.
    fn start(&mut self, map: Arc<Vec<u8>>, now: Instant) {
        let Some(welcome) = self.welcome.clone() else {
            return;
        };
        let reuse = self
            .settings
            .sim
            .clone()
            .filter(|s| !welcome.sending_map && *s.config() == welcome.config);
        let sim = match reuse {
            Some(s) => s,
            None => match build_sim(&map, &welcome) {
                Ok(s) => s,
                Err(e) => return self.end(End::Protocol(e)),
            },
        };
        let period = 1.0 / f64::from(welcome.tick_rate().max(1));
        let tick = self.opening_tick(&welcome, now);
        let player = welcome.player_id;
        let mut predictor = Predictor::new(sim.clone(), player);
        predictor.set_light(self.settings.light);
        let mut snapshots = SnapshotDecoder::new();
        snapshots.set_others(!self.settings.light);
        self.play = Some(Play {
            predictor,
            sim,
            map,
            snapshots,
            interp: Interpolator::new(),
            tick,
            running: false,
            settled: false,
            first_tick: tick + 1,
            period,
            next_at: now,
            heard_at: now,
            lead_mean: None,
            lead_deviation: 0.0,
            trip_floor: None,
            floor_at: now,
            newest: None,
            span: None,
            seen_correction: 0,
            sent_at: BTreeMap::new(),
            views: BTreeMap::new(),
            last_predicted: None,
            scratch: crate::SimScratch::new(),
            in_view: BTreeSet::new(),
            game: Default::default(),
            welcome,
        });
        self.status = Status::Playing;
        push_event(&mut self.events, ClientEvent::Joined { player });
    }

    /// Where the clock starts at `now`: commands sent now reach the server a round trip
    /// and the time spent since the welcome left it after its tick; that far, and the
    /// buffer, ahead of it.
    pub(in crate::protocol) fn opening_tick(&self, welcome: &Welcome, now: Instant) -> u64 {
        let period = 1.0 / f64::from(welcome.tick_rate().max(1));
        let since = now.saturating_duration_since(self.welcome_at).as_secs_f64();
        let lead = (self.stats.rtt.min(MAX_LEAD_RTT) + since) / period + self.settings.buffer_ticks;
        // (A lead of any size saturates; the welcome's tick is at most MAX_TICK.)
        welcome.server_tick.saturating_add(lead.ceil() as u64)
    }
}

/// The simulation of a map the server sent, with the server's movement settings.
fn build_sim(map: &[u8], welcome: &Welcome) -> Result<Arc<Sim>, String> {
    let data = MapData::parse_any(map).map_err(|e| format!("map: {e}"))?;
    let movement = welcome
        .config
        .clone()
        .validate()
        .map_err(|e| format!("movement settings: {e}"))?;
    let model = Arc::new(CollisionModel::build(&data));
    Ok(Arc::new(Sim::from_map(model, &data, movement).0))
}

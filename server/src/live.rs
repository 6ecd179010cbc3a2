//! The live view's data: the map drawn from above (once, as JSON) and a frame of the world
//! (players, movers, flagged cheaters, tick time, traffic) that the tick loop publishes
//! about ten times a second while someone watches. The page itself is `view.html`.

use crate::admission::{Held, PerAddress};
use crate::metrics::Metrics;
use expel_core::{Sim, WorldState};
use expel_protocol::plan::{plan, round_tenth as r};
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::watch;

/// The live view page: plain HTML, CSS and JavaScript, nothing fetched from elsewhere.
pub(crate) const PAGE: &str = include_str!("view.html");

/// Viewers streaming at once.
const MAX_VIEWERS: usize = 32;
/// Viewers streaming at once from one IP address.
const VIEWERS_PER_ADDRESS: usize = 4;

/// Frames per second published to viewers.
pub(crate) const FRAME_RATE: u32 = 10;

/// The live view's shared state.
pub(crate) struct Live {
    /// The map from above, as JSON.
    pub map_json: String,
    frames: watch::Sender<Arc<str>>,
    viewers: PerAddress,
}

impl Live {
    /// The view of `sim`'s map, named `name`.
    pub(crate) fn new(sim: &Sim, name: &str) -> Live {
        Live {
            map_json: map_json(sim, name),
            frames: watch::Sender::new(Arc::from("")),
            viewers: PerAddress::new(),
        }
    }

    /// A seat for a viewer at `from`, while there is room in all and for its address.
    pub(crate) fn seat(&self, from: IpAddr) -> Option<Held> {
        self.viewers.take(from, VIEWERS_PER_ADDRESS, MAX_VIEWERS)
    }

    /// The stream of frames.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<str>> {
        self.frames.subscribe()
    }

    /// Whether anyone is watching (frames are built only then).
    pub(crate) fn watched(&self) -> bool {
        self.frames.receiver_count() > 0
    }

    /// Publishes a frame; a viewer that has not sent the previous one skips it.
    pub(crate) fn publish(&self, frame: String) {
        self.frames.send_replace(Arc::from(frame));
    }
}

/// The map from above ([`plan`]), as the page draws it.
pub(crate) fn map_json(sim: &Sim, name: &str) -> String {
    let p = plan(sim);
    serde_json::json!({
        "name": name,
        "tick_rate": sim.config().tick_rate,
        "bounds": p.bounds,
        "floors": p.floors,
        "walls": p.walls,
    })
    .to_string()
}

/// Most of the game's entities one frame shows (a frame goes to every viewer several
/// times a second).
const FRAME_ENTITIES: usize = 2048;

/// One frame of the world: `players` as `[id, x, y, z, flagged]`, `movers` as their
/// bounds from above `[x0, y0, x1, y1]`, the game's entities (projectiles, pickups) as
/// `[id, x, y, z, kind, moving]` (the first [`FRAME_ENTITIES`]), the longest tick since
/// the last frame (ms) and the traffic totals (bytes), from which the page draws its
/// charts.
pub(crate) fn frame(sim: &Sim, world: &WorldState, m: &Metrics, tick_ms: f64) -> String {
    let flagged = m.flagged();
    let traffic = m.read_machine(|s| (s.bytes_out, s.bytes_in));
    let flagged = |id: u32| flagged.contains_key(&id);
    frame_of(sim, world, &flagged, tick_ms, traffic)
}

/// [`frame`] of a world whose flagged players `flagged` tells and whose traffic totals
/// (out, in) are `traffic`: a live server's, or a replay's.
pub(crate) fn frame_of(
    sim: &Sim,
    world: &WorldState,
    flagged: &dyn Fn(u32) -> bool,
    tick_ms: f64,
    (bytes_out, bytes_in): (u64, u64),
) -> String {
    let players: Vec<_> = world
        .players
        .iter()
        .map(|(id, p)| {
            let v = p.state.origin();
            let f = u8::from(flagged(id.0));
            serde_json::json!([id, r(v.x), r(v.y), r(v.z), f])
        })
        .collect();
    let movers: Vec<_> = sim
        .movers()
        .iter()
        .zip(&world.movers)
        .map(|(mover, s)| {
            let b = mover.world_bounds(&mover.pose(s));
            [r(b.min.x), r(b.min.y), r(b.max.x), r(b.max.y)]
        })
        .collect();
    let entities: Vec<_> = world
        .entities
        .iter()
        .take(FRAME_ENTITIES)
        .map(|(id, e)| {
            let v = e.origin();
            let moving = u8::from(e.motion.is_some() && !e.at_rest);
            serde_json::json!([id, r(v.x), r(v.y), r(v.z), e.kind, moving])
        })
        .collect();
    serde_json::json!({
        "tick": world.tick,
        "tick_ms": (tick_ms * 1000.0).round() / 1000.0,
        "bytes_out": bytes_out,
        "bytes_in": bytes_in,
        "players": players,
        "movers": movers,
        "entities": entities,
    })
    .to_string()
}

//! A map seen from above, for drawing: floors (faces looking up, with their height) as
//! polygons and walls (faces looking sideways) as segments. Ceilings would hide the floors
//! and are left out, and so are the tops of roofs (faces looking up far above every spawn
//! point: outside the playable space, they would cover everything). The operator's live
//! view and the browser client draw the same plan.

use expel_core::Sim;
use glam::{DVec2, DVec3};

/// Height above the highest spawn point past which an upward face is a roof.
const ROOF_ABOVE_SPAWNS: f64 = 384.0;

/// A coordinate to a tenth of a unit (plenty for a drawing, and short to send).
pub fn round_tenth(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// The map from above, coordinates to a tenth of a unit.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `[min x, min y, max x, max y, min z, max z]`.
    pub bounds: [f64; 6],
    /// Each floor as `[height, x0, y0, x1, y1, ...]`.
    pub floors: Vec<Vec<f64>>,
    /// Each wall as `[x0, y0, x1, y1]`.
    pub walls: Vec<[f64; 4]>,
}

/// The plan of `sim`'s map.
pub fn plan(sim: &Sim) -> Plan {
    let r = round_tenth;
    let model = sim.map();
    let b = model.bounds();
    let roof = sim
        .spawns()
        .iter()
        .map(|s| s.z + ROOF_ABOVE_SPAWNS)
        .fold(f64::NEG_INFINITY, f64::max);
    let roof = if roof.is_finite() {
        roof
    } else {
        f64::INFINITY
    };
    let (mut floors, mut walls) = (Vec::new(), Vec::new());
    for (i, p) in model.polygons().iter().enumerate() {
        let n = p.plane.normal;
        let pts: Vec<DVec3> = model.polygon_points(i).collect();
        if pts.len() < 2 {
            continue;
        }
        let z = pts.iter().map(|v| v.z).sum::<f64>() / pts.len() as f64;
        if n.z > 0.2 {
            if z > roof {
                continue;
            }
            let mut floor = vec![r(z)];
            floor.extend(pts.iter().flat_map(|v| [r(v.x), r(v.y)]));
            floors.push(floor);
        } else if n.z > -0.2 {
            // A wall seen from above is the segment between its extremes along the wall.
            let along = DVec2::new(-n.y, n.x);
            let key = |v: &&DVec3| along.dot(v.truncate());
            let (Some(a), Some(c)) = (
                pts.iter().min_by(|x, y| key(x).total_cmp(&key(y))),
                pts.iter().max_by(|x, y| key(x).total_cmp(&key(y))),
            ) else {
                continue;
            };
            walls.push([r(a.x), r(a.y), r(c.x), r(c.y)]);
        }
    }
    Plan {
        bounds: [
            r(b.min.x),
            r(b.min.y),
            r(b.max.x),
            r(b.max.y),
            r(b.min.z),
            r(b.max.z),
        ],
        floors,
        walls,
    }
}

//! What a client's snapshot holds back to fit its bytes: the budget's room, which far
//! players and entities are held where the client's baseline carries them (those it would
//! notice last first), and the count of what was held.

use super::encoder::{mixed, write_snapshot};
use super::*;

/// The bytes one client's snapshot may take: its share of the client's budget, and the
/// most its path carries in one datagram. Over the budget, a snapshot holds far players
/// and the game's far entities where the client's baseline carries them; still over,
/// it goes at the datagram's size with all of them held rather than leave out a player
/// within the exact reach (the budget is then spent ahead, and the next snapshots hold
/// more). Only a snapshot over the datagram leaves players out, the farthest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Bytes left of the client's budget.
    pub budget: usize,
    /// Bytes of the largest datagram the path carries.
    pub datagram: usize,
}

impl Room {
    /// A datagram's room, and as much of the budget.
    pub fn datagram(bytes: usize) -> Room {
        Room {
            budget: bytes,
            datagram: bytes,
        }
    }
}

/// What a client's snapshots held back to keep small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Far players held where the client's baseline carries them instead of sent.
    pub held: u64,
    /// Snapshots that held far players past their turn, or left out far ones new to the
    /// baseline, to fit the client's bytes.
    pub squeezed: u64,
    /// Entities' ends left out of a snapshot past
    /// [`ENDS_PER_SNAPSHOT`] (they are not
    /// told again once the client acknowledges it).
    pub ends_cut: u64,
    /// Ends of far entities the client never held, left out to fit its bytes (not told
    /// again once it acknowledges the snapshot).
    pub ends_left: u64,
}

/// Shares of the far players held, farthest first, tried in turn while a snapshot does
/// not fit its client's bytes (its budget, or the path's datagram): far players are sent
/// more rarely before any player is dropped from the view (one dropped and chosen again
/// is sent whole); with all held, far ones new to the baseline wait for a later snapshot.
/// Players within the client's exact reach are never held.
const SQUEEZE: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// How many times its [`held_tolerance`] a far player held to fit its client's bytes
/// may stray from where it is drawn: past it, it is sent (or, if even that does not
/// fit, left out of the view) rather than drawn where it is not. Shots are judged where
/// it was drawn, so this also bounds what a stale picture may hit.
pub(super) const SQUEEZED_DRIFT: f64 = 4.0;

/// What one client's snapshot is written from, and the bytes it must fit.
pub(super) struct Fit<'a> {
    pub(super) crowd: &'a Crowd,
    /// The baseline, carried on to the snapshot's tick.
    pub(super) ahead: &'a Scene,
    /// The game's entities in view, and their keys (see [`Crowd::entities_for`]), in id
    /// order.
    pub(super) entities: (&'a Entities<ENTITY_FIELDS>, &'a [(f64, usize)]),
    pub(super) me: PlayerId,
    pub(super) o: DVec3,
    /// The way the client faces, across (x, y).
    pub(super) fwd: glam::DVec2,
    pub(super) exact: f64,
    pub(super) written: u64,
    pub(super) feedback: Feedback,
    pub(super) room: Room,
}

impl Fit<'_> {
    /// How far an end is from the client (the nearer of where the entity began and
    /// ended) when the budget may leave it out: an entity the client never held (the end
    /// brings its start), not its own, which began and ended beyond the client's exact
    /// reach. A crowd firing rockets point-blank ends several near each client every
    /// snapshot, each about 20 bytes with its start: the far ones the client never saw
    /// fly give way with the far players' shares, the farthest first. Ends within the
    /// exact reach, of the client's own rockets, and of what it holds always go.
    fn far_end(&self, e: &EntityEnd) -> Option<f64> {
        let start = e.start.filter(|s| s.owner != Some(self.me))?;
        let grid = |p| expel_core::movement::from_grid(p, POSITION_SCALE);
        let d = grid(start.from)
            .distance(self.o)
            .min(e.at().distance(self.o));
        (d > self.exact).then_some(d)
    }

    /// The datagram of `scene` with the players `chosen` (crowd indices in id order), far
    /// ones held as [`SQUEEZE`] allows until it fits the budget; over it with all held,
    /// that one if it fits the datagram. `None` if it does not: the caller leaves out
    /// players.
    ///
    /// `squeezed` is the index in [`SQUEEZE`] the last snapshot settled on, and this
    /// one's.
    pub(super) fn write(
        &self,
        scene: &mut Scene,
        chosen: &[u32],
        scratch: &mut FitScratch,
        squeezed: &mut usize,
    ) -> Option<Written> {
        let (o, exact, written) = (self.o, self.exact, self.written);
        let (entities, keys) = self.entities;
        let budget = self.room.budget.min(self.room.datagram);
        let FitScratch {
            marks,
            far,
            near_only,
        } = scratch;
        // How soon the client would notice each far player, in the players' order.
        marks.clear();
        let fields = |i: &u32| &self.crowd.players[*i as usize].1;
        marks.extend(
            chosen
                .iter()
                .map(|i| Mark::of(fields(i), o, exact, self.fwd)),
        );
        let marks = &marks[..];
        // The far players' keys and the near-only entities' keys, gathered only once a
        // snapshot holds a share of them (most do not).
        let mut gathered = false;
        // Each end's distance where the budget may leave it out (see `far_end`), and
        // those distances; the ends themselves are kept to choose from again at each
        // step only when some may go (few snapshots).
        let end_keys: Vec<Option<f64>> = scene.ends.iter().map(|e| self.far_end(e)).collect();
        let mut far_ends: Vec<f64> = end_keys.iter().flatten().copied().collect();
        let all_ends = (!far_ends.is_empty()).then(|| scene.ends.clone());
        // Where the last one settled, and on the client's probe turns a step below it;
        // a budget spent ahead (a crowd over it) goes straight to all held.
        let last = SQUEEZE.len() - 1;
        let settled = (*squeezed).min(last);
        let mut next = if budget == 0 {
            last
        } else if probe_turn(self.me, written) {
            settled.saturating_sub(1)
        } else {
            settled
        };
        while next <= last {
            let (index, share) = (next, SQUEEZE[next]);
            let (squeeze, entities_from) = if share == 0.0 {
                (f64::INFINITY, None)
            } else {
                if let Some(all) = &all_ends {
                    let from = nth_held(&mut far_ends, share).unwrap_or(f64::INFINITY);
                    scene.ends.clear();
                    let kept = all
                        .iter()
                        .zip(&end_keys)
                        .filter(|(_, k)| k.is_none_or(|d| d < from));
                    scene.ends.extend(kept.map(|(e, _)| *e));
                }
                if !gathered {
                    far.clear();
                    far.extend(marks.iter().filter_map(|m| m.held_key()));
                    near_only.clear();
                    near_only.extend(keys.iter().map(|k| k.0).filter(|k| *k >= 0.0));
                    gathered = true;
                }
                // Held: those at or beyond the least one of the share.
                let squeeze = nth_held(far, share).map_or(f64::INFINITY, f64::next_down);
                (squeeze, nth_held(near_only, share))
            };
            // Field by field into slots already there: a tuple built on the way was
            // copied again through the stack, its loads stalling on its own stores.
            let players = &mut scene.players.0;
            players.resize(chosen.len(), (0, [0; PLAYER_FIELDS]));
            for (slot, &i) in players.iter_mut().zip(chosen) {
                let (id, fields) = &self.crowd.players[i as usize];
                slot.0 = id.0;
                slot.1 = *fields;
            }
            let held = thin(
                &mut scene.players,
                &self.ahead.players,
                (squeeze, marks),
                written,
            );
            if share == 1.0 {
                // Last, a far player new to the baseline (sent whole) waits for a later
                // snapshot of the same choice.
                defer_new(&mut scene.players, &self.ahead.players, marks);
            }
            scene.entities.0.clone_from(&entities.0);
            if let Some(from) = entities_from {
                squeeze_entities(&mut scene.entities, keys, &self.ahead.entities, from);
            }
            self.crowd.states_for(self.me, scene);
            let bytes = write_snapshot(scene, self.ahead, self.feedback);
            if bytes.len() <= budget || (index == last && bytes.len() <= self.room.datagram) {
                *squeezed = index;
                let ends_left = all_ends.map_or(0, |all| all.len() - scene.ends.len());
                return Some(Written {
                    bytes,
                    held,
                    squeezed: share > 0.0,
                    ends_left,
                });
            }
            if index + 1 < last && bytes.len() > 2 * budget {
                // Far over: holding another share of the far players will not do.
                next = last;
            } else {
                next = index + 1;
            }
        }
        *squeezed = 0;
        // The caller tries again with fewer players: from every end.
        if let Some(all) = all_ends {
            scene.ends = all;
        }
        None
    }
}

/// Snapshots between a squeezed client's tries of a lighter squeeze: each try that does
/// not fit writes the snapshot again (trying on every snapshot wrote twice each one that
/// settled where the last did). A client whose room grows gets its far players back a
/// step every this many snapshots (133 ms at 30 a second).
const PROBE_EVERY: u64 = 4;

/// Whether the `written`-th snapshot of client `me` tries a lighter squeeze first, at an
/// offset drawn from its id (clients squeezed together do not all try at once), from
/// other bits than its view's refresh turn (a snapshot that chooses afresh may be
/// written more than once already).
fn probe_turn(me: PlayerId, written: u64) -> bool {
    written
        .wrapping_add(mixed(me) >> 8)
        .is_multiple_of(PROBE_EVERY)
}

/// What [`Fit::write`] works in, kept by the client's encoder from one snapshot to the
/// next (no allocation once grown).
#[derive(Debug, Default)]
pub(super) struct FitScratch {
    /// The chosen players' marks (see [`Mark`]), in their order.
    marks: Vec<Mark>,
    /// The far players' keys, and the near-only entities' keys, in no order.
    far: Vec<f64>,
    near_only: Vec<f64>,
}

/// A snapshot that fits, and what it held back to fit.
pub(super) struct Written {
    pub(super) bytes: Vec<u8>,
    /// Far players held where the baseline carries them.
    pub(super) held: u32,
    /// Whether it held any past their turn (or left out far ones new to the baseline).
    pub(super) squeezed: bool,
    /// Far ends it left out (see [`Fit::far_end`]).
    pub(super) ends_left: usize,
}

/// A chosen player as the budget sees it: within the client's exact reach (never held),
/// in its sights (never held either), or far, with how soon the client would notice it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mark {
    Exact,
    Sighted,
    Far {
        /// Its distance.
        d: f64,
        /// See [`notice_key`].
        key: f64,
    },
}

impl Mark {
    /// The mark of a player's fields `f` for a client at `o` with exact reach `exact`,
    /// facing `fwd`: its place, distance and way from the client are found once.
    #[inline]
    fn of(f: &PlayerFields, o: DVec3, exact: f64, fwd: glam::DVec2) -> Mark {
        let d = field_distance(f, o);
        if d <= exact {
            return Mark::Exact;
        }
        let to = (DVec3::new(f[0] as f64, f[1] as f64, f[2] as f64) / POSITION_SCALE - o)
            .truncate()
            .try_normalize();
        if to.is_some_and(|to| in_sights(to, fwd)) {
            return Mark::Sighted;
        }
        let key = to.map_or(d, |to| notice_key(d, to, f[5], fwd));
        Mark::Far { d, key }
    }

    /// The key a squeeze holds it by, if it may be held.
    fn held_key(self) -> Option<f64> {
        match self {
            Mark::Far { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// How soon a client facing `fwd` would notice a player `d` units off the way `to`
/// (a unit vector across (x, y)), whose yaw field is `yaw`, change, as a distance (less:
/// sooner): its distance, twice that out of the client's view (more than 60 degrees off
/// the way it faces), half that while it aims at the client (within 10 degrees). A
/// snapshot over its bytes holds the greatest first.
fn notice_key(d: f64, to: glam::DVec2, yaw: i64, fwd: glam::DVec2) -> f64 {
    let mut key = d;
    if fwd.dot(to) < 0.5 {
        key *= 2.0;
    }
    if yaw_dir(yaw).dot(-to) > AIM_COS {
        key *= 0.5;
    }
    key
}

/// Whether a client facing `fwd` aims at a player the way `to` (within 10 degrees
/// across): it is then never held, however far, since a shot the client sees hit it is
/// judged against where it was drawn.
fn in_sights(to: glam::DVec2, fwd: glam::DVec2) -> bool {
    fwd.dot(to) > AIM_COS
}

/// cos(10 degrees): within it, one player aims at another.
const AIM_COS: f64 = 0.984_807_753_012_208;

/// The unit vector across (x, y) of a yaw field (256ths of a turn), from a table.
pub(super) fn yaw_dir(yaw: i64) -> glam::DVec2 {
    static DIRS: std::sync::LazyLock<Vec<glam::DVec2>> = std::sync::LazyLock::new(|| {
        (0..256)
            .map(|k| {
                let a = f64::from(k) * (std::f64::consts::TAU / 256.0);
                glam::DVec2::new(libm::cos(a), libm::sin(a))
            })
            .collect()
    });
    DIRS[(yaw & 255) as usize]
}

/// The least of the greatest `share` of `keys` (rounded up): the nearest one a squeeze
/// of that share holds; `None` when it holds none. `keys` are in any order and are
/// reordered: a selection, not a sort, since most snapshots try one share.
fn nth_held(keys: &mut [f64], share: f64) -> Option<f64> {
    // At most `keys.len()`: the cast cannot overflow.
    let held = (keys.len() as f64 * share).ceil() as usize;
    let n = held.checked_sub(1)?;
    Some(*keys.select_nth_unstable_by(n, |a, b| b.total_cmp(a)).1)
}

/// Holds the game's entities that are only near the client whose keys (`keys`: their
/// keys in `entities_for`, negative for its own and everyone's, in the entities' order)
/// are `from` or farther where the baseline carries them (a rocket flying straight is
/// where it would be), and leaves out those of them new to the baseline for a later
/// snapshot.
fn squeeze_entities(
    entities: &mut Entities<ENTITY_FIELDS>,
    keys: &[(f64, usize)],
    ahead: &Entities<ENTITY_FIELDS>,
    from: f64,
) {
    let mut keys = keys.iter();
    entities.0.retain_mut(|(id, f)| {
        let squeezed = keys.next().is_some_and(|k| k.0 >= from);
        match ahead.get(*id) {
            _ if !squeezed => true,
            Some(a) => {
                *f = *a;
                true
            }
            None => false,
        }
    });
}

/// How far (units) from `o` a player's fields put it.
fn field_distance(f: &PlayerFields, o: DVec3) -> f64 {
    (DVec3::new(f[0] as f64, f[1] as f64, f[2] as f64) / POSITION_SCALE).distance(o)
}

/// Leaves out each player beyond the client's exact reach (`marks`, in the players'
/// order) that `ahead` (the baseline) lacks.
fn defer_new(
    players: &mut Entities<PLAYER_FIELDS>,
    ahead: &Entities<PLAYER_FIELDS>,
    marks: &[Mark],
) {
    let mut olds = ahead.0.iter().peekable();
    let mut marks = marks.iter();
    players.0.retain(|(id, _)| {
        let exact = matches!(marks.next(), Some(Mark::Exact));
        while olds.next_if(|(a, _)| a < id).is_some() {}
        exact || olds.next_if(|(a, _)| a == id).is_some()
    });
}

/// Holds each far player (`marks`, in the players' order: beyond the client's exact reach
/// and not in its sights, see [`Mark`]) where the client's baseline carries it (`ahead`),
/// so nothing is sent for it, except on its turn: once in `d / THIN_STEP` snapshots at
/// distance `d` (at least once in `MAX_HELD + 1`), or at once when it strays past
/// [`held_tolerance`] from there, turns past [`FACING_DRIFT`], or changes flags or mode.
/// The scene then holds what the client will draw. `written` numbers the snapshot: a
/// player's turns fall at an offset drawn from its id, so a client's far players are not
/// all sent in the same snapshot. Those whose [`notice_key`] is beyond `squeeze` are
/// held whatever their turn, flags or mode, while they stray no more than
/// [`SQUEEZED_DRIFT`] times their tolerance (a snapshot over its bytes).
fn thin(
    players: &mut Entities<PLAYER_FIELDS>,
    ahead: &Entities<PLAYER_FIELDS>,
    (squeeze, marks): (f64, &[Mark]),
    written: u64,
) -> u32 {
    let mut held = 0;
    let mut olds = ahead.0.iter().peekable();
    for ((id, f), mark) in players.0.iter_mut().zip(marks) {
        while olds.next_if(|(a, _)| a < id).is_some() {}
        let Some((_, a)) = olds.next_if(|(a, _)| a == id) else {
            continue;
        };
        let Mark::Far { d, key } = *mark else {
            continue;
        };
        if f == a {
            continue;
        }
        let off = (0..3).map(|k| f[k].abs_diff(a[k])).max().unwrap_or(0) as f64 / POSITION_SCALE;
        if key > squeeze && off <= SQUEEZED_DRIFT * held_tolerance(d) {
            *f = *a;
            held += 1;
            continue;
        }
        if f[3..5] != a[3..5] {
            continue;
        }
        let strayed = off > held_tolerance(d);
        let turned = (5..7).any(|k| facing_turn(f[k], a[k]) > FACING_DRIFT);
        // At most MAX_HELD + 1: the cast cannot overflow.
        let every = (d / THIN_STEP).ceil().clamp(1.0, f64::from(MAX_HELD + 1)) as u64;
        let turn = written
            .wrapping_add(mixed(PlayerId(*id)))
            .is_multiple_of(every);
        if !(strayed || turned || turn) {
            *f = *a;
            held += 1;
        }
    }
    held
}

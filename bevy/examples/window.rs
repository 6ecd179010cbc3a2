//! The client plugin in a window: the map drawn in 3D from above and behind the local
//! player, the player walking, the others and the game's entities where the plugin puts
//! their `Transform`s, each player with a nose the way it faces.
//!
//! ```text
//! expel serve --secret S &           # prints its address and fingerprint
//! expel token --secret S --player 7  # a token for player 7
//! cargo run -p expel-bevy --example window -- ADDR --token T --fingerprint F \
//!     [--seconds N] [--size PIXELS] [--screenshot FILE.png]
//! ```
//!
//! Bevy's renderer wants a GPU (or Mesa's software Vulkan) and several minutes more of
//! build; this example keeps the plugin's build as it is and draws the Transforms itself:
//! a small z-buffered rasterizer into a software framebuffer window (X11, so it runs
//! under Xvfb). A game draws the same Transforms with `DefaultPlugins`, a mesh of
//! [`expel_bevy::map_triangles`] and a camera. It walks a circle by itself; with
//! `--seconds` it leaves after that long, prints one JSON line (frames drawn, the path
//! walked, the most players seen at once) and saves the last frame with `--screenshot`.

use bevy::app::{AppExit, ScheduleRunnerPlugin};
use bevy::prelude::*;
use expel_bevy::{
    from_bevy, map_triangles, Connect, Connection, Ended, Expel, ExpelClientPlugin, ExpelInput,
    GameEntity, Leave, LocalPlayer, MapTriangles, RemotePlayer,
};
use expel_client::prelude::*;
use expel_core::{Contents, Hull, TraceScratch};
use minifb::{Key, Window, WindowOptions};
use std::time::{Duration, Instant};

/// The local player's colour, the others', their noses, the game's entities, the sky.
const ME: u32 = 0x00ff_ff40;
const OTHER: u32 = 0x00ff_4040;
const NOSE: u32 = 0x00ff_a0a0;
const THING: u32 = 0x00ff_ffff;
const SKY: u32 = 0x0020_2838;

/// The window and its buffers: not `Send` (X11), so a non-send resource.
struct Screen {
    window: Window,
    size: usize,
    colour: Vec<u32>,
    /// 1 / depth of what each pixel shows (0: nothing).
    depth: Vec<f32>,
    /// The chase camera's traces' working memory ("keep one and reuse it").
    trace: TraceScratch,
}

#[derive(Resource)]
struct Run {
    started: Instant,
    seconds: Option<f64>,
    screenshot: Option<std::path::PathBuf>,
    frames: u64,
    walked: f32,
    last: Option<Vec3>,
    most_seen: usize,
    leaving: bool,
}

/// What is drawn besides the Transforms, once the session has the map: the map's
/// triangles, and the standing hull's box, Bevy's way round (min, max about the origin).
#[derive(Resource, Default)]
struct Scenery {
    map: Option<MapTriangles>,
    body: (Vec3, Vec3),
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: ADDR --token T --fingerprint F"))?;
    let (mut token, mut fingerprint, mut seconds, mut size, mut screenshot) =
        (None, None, None, 480usize, None);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} wants a value"))?;
        match flag.as_str() {
            "--token" => token = Some(value),
            "--fingerprint" => fingerprint = Some(value),
            "--seconds" => seconds = Some(value.parse()?),
            "--size" => size = value.parse()?,
            "--screenshot" => screenshot = Some(value.into()),
            _ => anyhow::bail!("unknown flag {flag}"),
        }
    }
    let token = token.ok_or_else(|| anyhow::anyhow!("--token is required"))?;
    let trust = Trust::Fingerprint(
        fingerprint.ok_or_else(|| anyhow::anyhow!("--fingerprint is required"))?,
    );
    let mut window = Window::new("expel: bevy", size, size, WindowOptions::default())?;
    window.set_target_fps(60);
    let exit = App::new()
        .add_plugins((
            MinimalPlugins.set(ScheduleRunnerPlugin::run_loop(Duration::from_secs_f64(
                1.0 / 60.0,
            ))),
            ExpelClientPlugin::<()>::default(),
        ))
        .insert_resource(Connect::new(
            addr.parse()?,
            ConnectOptions::new(token, trust),
        ))
        .insert_non_send(Screen {
            window,
            size,
            colour: vec![SKY; size * size],
            depth: vec![0.0; size * size],
            trace: TraceScratch::default(),
        })
        .insert_resource(Run {
            started: Instant::now(),
            seconds,
            screenshot,
            frames: 0,
            walked: 0.0,
            last: None,
            most_seen: 0,
            leaving: false,
        })
        .init_resource::<Scenery>()
        .add_systems(Update, (walk, take_map))
        .add_systems(PostUpdate, (render, finish).chain())
        .run();
    if let AppExit::Error(code) = exit {
        anyhow::bail!("the app ended with {code}");
    }
    Ok(())
}

/// Walks a circle at half speed, turning a quarter turn every two seconds.
fn walk(run: Res<Run>, mut input: ResMut<ExpelInput>) {
    let yaw = run.started.elapsed().as_secs_f64() * 45.0 % 360.0;
    input.0 = MoveCommand::new(0.5, 0.0, 0.0, yaw, 0.0);
}

/// The map's triangles and the body's box, from the session's simulation (once).
fn take_map(expel: Option<Res<Expel>>, mut scenery: ResMut<Scenery>) {
    if let (Some(expel), None) = (expel, &scenery.map) {
        let sim = &expel.0.sim;
        let b = sim.movement().stand().bounds();
        let (a, c) = (expel_bevy::to_bevy(b.min), expel_bevy::to_bevy(b.max));
        *scenery = Scenery {
            map: Some(map_triangles(sim.map())),
            body: (a.min(c), a.max(c)),
        };
    }
}

/// One frame: the map, then every player's box and nose, then the game's entities.
fn render(
    mut screen: NonSendMut<Screen>,
    mut run: ResMut<Run>,
    expel: Option<Res<Expel>>,
    scenery: Res<Scenery>,
    me: Query<&Transform, With<LocalPlayer>>,
    others: Query<(&Transform, &RemotePlayer)>,
    things: Query<&Transform, With<GameEntity>>,
) {
    let Screen {
        window,
        size,
        colour,
        depth,
        trace,
    } = &mut *screen;
    colour.fill(SKY);
    depth.fill(0.0);
    let Ok(me) = me.single() else {
        let _ = window.update_with_buffer(colour, *size, *size);
        return;
    };
    // Above and behind, looking down at the player: the first of a few places, each
    // steeper, that the map's own trace reaches from the player (no wall hides it), else
    // the steepest pulled in to where the trace stopped.
    let ahead = me.rotation * Vec3::X;
    let wanted = |(back, up): (f32, f32)| me.translation - ahead * back + Vec3::Y * up;
    let mut reached = |to: Vec3| {
        let Some(e) = &expel else { return 1.0 };
        let from = from_bevy(me.translation);
        let t =
            e.0.sim
                .map()
                .trace(&Hull::point(), from, from_bevy(to), Contents::SOLID, trace);
        t.sweep.fraction as f32
    };
    let mut eye = me.translation;
    for place in [(260.0, 380.0), (140.0, 420.0), (40.0, 440.0)].map(wanted) {
        let fraction = reached(place);
        eye = me.translation + (place - me.translation) * (fraction * 0.95);
        if fraction >= 1.0 {
            break;
        }
    }
    let view = Mat4::look_at_rh(eye, me.translation + ahead * 60.0, Vec3::Y);
    let mut raster = Raster {
        view,
        focal: 1.0 / (37.5f32.to_radians()).tan(),
        size: *size,
        colour,
        depth,
    };
    if let Some(m) = &scenery.map {
        let light = Vec3::new(0.4, 0.8, 0.3).normalize();
        for t in m.indices.chunks_exact(3) {
            let p = [t[0], t[1], t[2]].map(|i| Vec3::from(m.positions[i as usize]));
            let n = Vec3::from(m.normals[t[0] as usize]);
            // Floors green-grey, walls sand, ceilings slate; lit from above.
            let base = if n.y > 0.7 {
                Vec3::new(0.55, 0.62, 0.5)
            } else if n.y < -0.7 {
                Vec3::new(0.4, 0.4, 0.5)
            } else {
                Vec3::new(0.7, 0.6, 0.45)
            };
            let lit = base * (0.35 + 0.65 * n.dot(light).max(0.0));
            raster.triangle(p, Shade::Lit(lit));
        }
    }
    let (lo, hi) = scenery.body;
    raster.cuboid(me.translation, lo, hi, Quat::IDENTITY, ME);
    raster.nose(me, hi.y, THING);
    for (t, p) in &others {
        let top = if p.crouched { hi.y - 16.0 } else { hi.y };
        raster.cuboid(
            t.translation,
            lo,
            Vec3::new(hi.x, top, hi.z),
            Quat::IDENTITY,
            OTHER,
        );
        raster.nose(t, top, NOSE);
    }
    for t in &things {
        raster.cuboid(
            t.translation,
            Vec3::splat(-4.0),
            Vec3::splat(4.0),
            Quat::IDENTITY,
            THING,
        );
    }
    run.frames += 1;
    run.most_seen = run.most_seen.max(others.iter().count());
    if let Some(last) = run.last {
        run.walked += (me.translation - last).length();
    }
    run.last = Some(me.translation);
    let _ = window.update_with_buffer(colour, *size, *size);
}

/// Leaves when the time is up (or the window closes), saving the last frame; exits
/// once the session ended, with its summary line.
fn finish(
    screen: NonSend<Screen>,
    mut run: ResMut<Run>,
    state: Res<State<Connection>>,
    ended: Option<Res<Ended>>,
    mut leave: MessageWriter<Leave>,
    mut exit: MessageWriter<AppExit>,
) {
    if *state.get() == Connection::Ended {
        let summary = serde_json::json!({
            "frames": run.frames,
            "walked": run.walked,
            "most_seen": run.most_seen,
            "ended": ended.map(|e| format!("{:?}", *e)),
        });
        println!("{summary}");
        exit.write(AppExit::Success);
        return;
    }
    let closed = !screen.window.is_open() || screen.window.is_key_down(Key::Escape);
    let due = run
        .seconds
        .is_some_and(|s| run.started.elapsed().as_secs_f64() >= s);
    if (closed || due) && !run.leaving {
        run.leaving = true;
        if let Some(path) = &run.screenshot {
            if let Err(e) = save_png(path, &screen.colour, screen.size) {
                eprintln!("writing {}: {e}", path.display());
            }
        }
        leave.write(Leave("done".into()));
    }
}

/// How a triangle is coloured: lit (shaded by distance) or one flat colour.
#[derive(Clone, Copy)]
enum Shade {
    Lit(Vec3),
    Flat(u32),
}

/// A z-buffered triangle rasterizer over the frame.
struct Raster<'a> {
    view: Mat4,
    /// 1 / tan(half the field of view).
    focal: f32,
    size: usize,
    colour: &'a mut [u32],
    depth: &'a mut [f32],
}

/// Nearer than this to the eye is cut away.
const NEAR: f32 = 4.0;

impl Raster<'_> {
    /// A box from `lo` to `hi` about `at`, turned by `turn`.
    fn cuboid(&mut self, at: Vec3, lo: Vec3, hi: Vec3, turn: Quat, colour: u32) {
        let corner = |i: usize| {
            let c = Vec3::new(
                if i & 1 == 0 { lo.x } else { hi.x },
                if i & 2 == 0 { lo.y } else { hi.y },
                if i & 4 == 0 { lo.z } else { hi.z },
            );
            at + turn * c
        };
        const FACES: [[usize; 4]; 6] = [
            [0, 1, 3, 2],
            [4, 6, 7, 5],
            [0, 4, 5, 1],
            [2, 3, 7, 6],
            [0, 2, 6, 4],
            [1, 5, 7, 3],
        ];
        for f in FACES {
            let q = f.map(corner);
            self.triangle([q[0], q[1], q[2]], Shade::Flat(colour));
            self.triangle([q[0], q[2], q[3]], Shade::Flat(colour));
        }
    }

    /// A player's nose: a bar from its head the way `t` faces.
    fn nose(&mut self, t: &Transform, top: f32, colour: u32) {
        let y = top - 10.0;
        self.cuboid(
            t.translation,
            Vec3::new(0.0, y - 4.0, -4.0),
            Vec3::new(36.0, y + 4.0, 4.0),
            t.rotation,
            colour,
        );
    }

    /// One triangle in Bevy's world coordinates (both sides drawn).
    fn triangle(&mut self, world: [Vec3; 3], shade: Shade) {
        // To the eye's frame, then cut at the near plane (a polygon of up to 4 corners).
        let v = world.map(|p| self.view.transform_point3(p));
        let mut poly: Vec<Vec3> = Vec::with_capacity(4);
        for i in 0..3 {
            let (a, b) = (v[i], v[(i + 1) % 3]);
            let (ina, inb) = (-a.z >= NEAR, -b.z >= NEAR);
            if ina {
                poly.push(a);
            }
            if ina != inb {
                let s = (-NEAR - a.z) / (b.z - a.z);
                poly.push(a + (b - a) * s);
            }
        }
        if poly.len() < 3 {
            return;
        }
        let half = self.size as f32 / 2.0;
        let screen: Vec<Vec3> = poly
            .iter()
            .map(|p| {
                let w = -p.z;
                Vec3::new(
                    half + half * self.focal * p.x / w,
                    half - half * self.focal * p.y / w,
                    1.0 / w,
                )
            })
            .collect();
        let colour = match shade {
            Shade::Flat(c) => c,
            Shade::Lit(rgb) => {
                // Fog toward the sky with distance.
                let d = poly.iter().map(|p| -p.z).sum::<f32>() / poly.len() as f32;
                let fog = (d / 3000.0).clamp(0.0, 0.8);
                let sky = Vec3::new(0.125, 0.157, 0.22);
                let c = rgb * (1.0 - fog) + sky * fog;
                let byte = |x: f32| (x.clamp(0.0, 1.0) * 255.0) as u32;
                byte(c.x) << 16 | byte(c.y) << 8 | byte(c.z)
            }
        };
        for k in 1..screen.len() - 1 {
            self.fill([screen[0], screen[k], screen[k + 1]], colour);
        }
    }

    /// A screen triangle (x, y, 1/depth), nearest wins.
    fn fill(&mut self, t: [Vec3; 3], colour: u32) {
        let area = (t[1].x - t[0].x) * (t[2].y - t[0].y) - (t[2].x - t[0].x) * (t[1].y - t[0].y);
        if area.abs() < 1e-6 {
            return;
        }
        let max = self.size as f32 - 1.0;
        let (x0, x1) = (
            t.iter().map(|p| p.x).fold(f32::MAX, f32::min).max(0.0),
            t.iter().map(|p| p.x).fold(f32::MIN, f32::max).min(max),
        );
        let (y0, y1) = (
            t.iter().map(|p| p.y).fold(f32::MAX, f32::min).max(0.0),
            t.iter().map(|p| p.y).fold(f32::MIN, f32::max).min(max),
        );
        if x0 > x1 || y0 > y1 {
            return;
        }
        for y in y0 as usize..=y1 as usize {
            for x in x0 as usize..=x1 as usize {
                let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
                let edge = |a: Vec3, b: Vec3| (b.x - a.x) * (py - a.y) - (px - a.x) * (b.y - a.y);
                let w = [edge(t[1], t[2]), edge(t[2], t[0]), edge(t[0], t[1])].map(|e| e / area);
                if w.iter().any(|&e| e < 0.0) {
                    continue;
                }
                let inv = w[0] * t[0].z + w[1] * t[1].z + w[2] * t[2].z;
                let i = y * self.size + x;
                if inv > self.depth[i] {
                    self.depth[i] = inv;
                    self.colour[i] = colour;
                }
            }
        }
    }
}

/// The frame as an RGB PNG.
fn save_png(path: &std::path::Path, buf: &[u32], size: usize) -> anyhow::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut enc = png::Encoder::new(file, size as u32, size as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let rgb: Vec<u8> = buf
        .iter()
        .flat_map(|p| [(p >> 16) as u8, (p >> 8) as u8, *p as u8])
        .collect();
    enc.write_header()?.write_image_data(&rgb)?;
    Ok(())
}

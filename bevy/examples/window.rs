//! The client plugin in a window, drawn by Bevy's renderer: `DefaultPlugins`, a chase
//! camera above and behind the local player, the map's mesh from
//! [`expel_bevy::map_triangles`], and a box with a nose for each player (the way it faces)
//! and for each of the game's entities, where the plugin puts their `Transform`s.
//!
//! ```text
//! expel serve --secret S &           # prints its address and fingerprint
//! expel token --secret S --player 7  # a token for player 7
//! cargo run -p expel-bevy --features render --example window -- ADDR --token T \
//!     --fingerprint F [--seconds N] [--size PIXELS] [--screenshot FILE.png]
//! ```
//!
//! The renderer wants a GPU or Mesa's software Vulkan (Debian's `mesa-vulkan-drivers`:
//! the suite runs it under Xvfb with `VK_ICD_FILENAMES` naming lavapipe). It walks a
//! circle by itself; with `--seconds` it leaves after that long, saving the frame with
//! `--screenshot` first, and prints one JSON line (frames drawn, the path walked, the
//! most players seen at once, how the session ended).

use bevy::core_pipeline::tonemapping::Tonemapping;
use bevy::prelude::*;
use bevy::render::view::screenshot::{save_to_disk, Screenshot, ScreenshotCaptured};
use bevy::window::{WindowCloseRequested, WindowResolution};
use expel_bevy::{
    from_bevy, map_triangles, Connect, Connection, Ended, Expel, ExpelClientPlugin, ExpelInput,
    GameEntity, Leave, LocalPlayer, RemotePlayer,
};
use expel_client::prelude::*;
use expel_core::{Contents, Hull, TraceScratch};
use std::path::PathBuf;
use std::time::Instant;

/// The local player's colour, the others', their noses, the game's entities, the sky
/// (drawn unlit and untonemapped, so a screenshot shows these very colours).
const ME: Color = Color::srgb_u8(0xff, 0xff, 0x40);
const OTHER: Color = Color::srgb_u8(0xff, 0x40, 0x40);
const NOSE: Color = Color::srgb_u8(0xff, 0xa0, 0xa0);
const THING: Color = Color::srgb_u8(0xff, 0xff, 0xff);
const SKY: Color = Color::srgb_u8(0x20, 0x28, 0x38);

#[derive(Resource)]
struct Run {
    started: Instant,
    seconds: Option<f64>,
    screenshot: Option<PathBuf>,
    frames: u64,
    walked: f32,
    last: Option<Vec3>,
    most_seen: usize,
    /// Leaving was asked for (the time is up or the window closed): the screenshot is
    /// taken first, then the goodbye said once it is saved.
    leaving: Leaving,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Leaving {
    No,
    Shooting,
    Shot,
    Said,
}

/// The materials and meshes the bodies share, made once.
#[derive(Resource)]
struct Looks {
    me: Handle<StandardMaterial>,
    other: Handle<StandardMaterial>,
    nose: Handle<StandardMaterial>,
    thing: Handle<StandardMaterial>,
    thing_mesh: Handle<Mesh>,
    /// A bar from a player's head the way it faces (+X turned by its rotation).
    snout: Handle<Mesh>,
}

/// The standing hull's box, Bevy's way round, once the session has the map.
#[derive(Resource, Default)]
struct Body(Option<(Vec3, Vec3)>);

#[derive(Component)]
struct ChaseCamera;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: ADDR --token T --fingerprint F"))?;
    let (mut token, mut fingerprint, mut seconds, mut size, mut screenshot) =
        (None, None, None, 480u32, None);
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
    let window = Window {
        title: "expel: bevy".into(),
        resolution: WindowResolution::new(size, size),
        ..default()
    };
    let exit = App::new()
        .add_plugins((
            DefaultPlugins.set(WindowPlugin {
                primary_window: Some(window),
                // A close asks for the goodbye first (`finish`).
                close_when_requested: false,
                ..default()
            }),
            ExpelClientPlugin::<()>::default(),
        ))
        .insert_resource(ClearColor(SKY))
        .insert_resource(Connect::new(
            addr.parse()?,
            ConnectOptions::new(token, trust),
        ))
        .insert_resource(Run {
            started: Instant::now(),
            seconds,
            screenshot,
            frames: 0,
            walked: 0.0,
            last: None,
            most_seen: 0,
            leaving: Leaving::No,
        })
        .init_resource::<Body>()
        .add_systems(Startup, setup)
        .add_systems(Update, (walk, take_map, dress, count))
        .add_systems(PostUpdate, (chase, finish))
        .run();
    if let AppExit::Error(code) = exit {
        anyhow::bail!("the app ended with {code}");
    }
    Ok(())
}

/// The camera, the sun and the shared looks.
fn setup(
    mut commands: Commands,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
) {
    // No tonemapping: the colours drawn are the colours given (and its lookup tables,
    // another feature to build, are not needed).
    // A wide view (75 degrees): from above and behind, the others near the player are in it.
    let wide = PerspectiveProjection {
        fov: 75f32.to_radians(),
        ..default()
    };
    commands.spawn((
        Camera3d::default(),
        Projection::Perspective(wide),
        Tonemapping::None,
        // Four samples a pixel cost a software renderer (lavapipe) half its frames.
        Msaa::Off,
        ChaseCamera,
    ));
    // The sun from above, and a weaker one from the other side so no wall is black.
    for (lux, from) in [
        (4_000.0, Vec3::new(0.4, 0.8, 0.3)),
        (1_500.0, Vec3::new(-0.5, 0.4, -0.7)),
    ] {
        commands.spawn((
            DirectionalLight {
                illuminance: lux,
                ..default()
            },
            Transform::from_translation(from).looking_at(Vec3::ZERO, Vec3::Y),
        ));
    }
    let mut flat = |c: Color| {
        materials.add(StandardMaterial {
            base_color: c,
            unlit: true,
            ..default()
        })
    };
    let looks = Looks {
        me: flat(ME),
        other: flat(OTHER),
        nose: flat(NOSE),
        thing: flat(THING),
        thing_mesh: meshes.add(Cuboid::new(8.0, 8.0, 8.0)),
        snout: meshes.add(Cuboid::new(36.0, 8.0, 8.0)),
    };
    commands.insert_resource(looks);
}

/// Walks a circle at half speed, turning a quarter turn every two seconds.
fn walk(run: Res<Run>, mut input: ResMut<ExpelInput>) {
    let yaw = run.started.elapsed().as_secs_f64() * 45.0 % 360.0;
    input.0 = MoveCommand::new(0.5, 0.0, 0.0, yaw, 0.0);
}

/// The map's mesh and the body's box, from the session's simulation (once).
fn take_map(
    mut commands: Commands,
    expel: Option<Res<Expel>>,
    mut body: ResMut<Body>,
    mut meshes: ResMut<Assets<Mesh>>,
    mut materials: ResMut<Assets<StandardMaterial>>,
) {
    let (Some(expel), None) = (expel, body.0) else {
        return;
    };
    let sim = &expel.0.sim;
    let b = sim.movement().stand().bounds();
    let (a, c) = (expel_bevy::to_bevy(b.min), expel_bevy::to_bevy(b.max));
    body.0 = Some((a.min(c), a.max(c)));
    let t = map_triangles(sim.map());
    let mesh = Mesh::new(
        bevy::mesh::PrimitiveTopology::TriangleList,
        bevy::asset::RenderAssetUsages::default(),
    )
    .with_inserted_attribute(Mesh::ATTRIBUTE_POSITION, t.positions)
    .with_inserted_attribute(Mesh::ATTRIBUTE_NORMAL, t.normals)
    .with_inserted_indices(bevy::mesh::Indices::U32(t.indices));
    let ground = materials.add(StandardMaterial {
        base_color: Color::srgb(0.55, 0.62, 0.5),
        perceptual_roughness: 0.9,
        // The map's faces are seen from either side (from outside a wall, say).
        double_sided: true,
        cull_mode: None,
        ..default()
    });
    commands.spawn((Mesh3d(meshes.add(mesh)), MeshMaterial3d(ground)));
}

/// Gives each new player a body and a nose, and each new game entity a box.
#[allow(clippy::type_complexity)] // Bevy's queries are their own description
fn dress(
    mut commands: Commands,
    body: Res<Body>,
    looks: Res<Looks>,
    mut meshes: ResMut<Assets<Mesh>>,
    players: Query<
        (Entity, Has<LocalPlayer>, Option<&RemotePlayer>),
        (
            Without<Visibility>,
            Or<(With<LocalPlayer>, With<RemotePlayer>)>,
        ),
    >,
    things: Query<Entity, (Added<GameEntity>, Without<Mesh3d>)>,
) {
    let Some((lo, hi)) = body.0 else { return };
    for (e, local, remote) in &players {
        let top = match remote {
            Some(p) if p.crouched => hi.y - 16.0,
            _ => hi.y,
        };
        let (colour, nose) = if local {
            (looks.me.clone(), looks.thing.clone())
        } else {
            (looks.other.clone(), looks.nose.clone())
        };
        let size = Vec3::new(hi.x - lo.x, top - lo.y, hi.z - lo.z);
        let centre = Vec3::new((lo.x + hi.x) / 2.0, (lo.y + top) / 2.0, (lo.z + hi.z) / 2.0);
        let trunk = meshes.add(Cuboid::from_size(size));
        let snout = looks.snout.clone();
        commands
            .entity(e)
            .insert(Visibility::default())
            .with_children(|c| {
                c.spawn((
                    Mesh3d(trunk),
                    MeshMaterial3d(colour),
                    Transform::from_translation(centre),
                ));
                c.spawn((
                    Mesh3d(snout),
                    MeshMaterial3d(nose),
                    Transform::from_xyz(18.0, top - 10.0, 0.0),
                ));
            });
    }
    for e in &things {
        let look = (
            Mesh3d(looks.thing_mesh.clone()),
            MeshMaterial3d(looks.thing.clone()),
        );
        commands.entity(e).insert((look, Visibility::default()));
    }
}

/// Counts frames, the path walked and the most others in view.
fn count(
    mut run: ResMut<Run>,
    me: Query<&Transform, With<LocalPlayer>>,
    others: Query<(), With<RemotePlayer>>,
) {
    let Ok(me) = me.single() else { return };
    run.frames += 1;
    run.most_seen = run.most_seen.max(others.iter().count());
    if let Some(last) = run.last {
        run.walked += (me.translation - last).length();
    }
    run.last = Some(me.translation);
}

/// The camera above and behind the player, looking down at it: the first of a few
/// places, each steeper, that the map's own trace reaches from the player (no wall hides
/// it), else the steepest pulled in to where the trace stopped.
fn chase(
    expel: Option<Res<Expel>>,
    me: Query<&Transform, (With<LocalPlayer>, Without<ChaseCamera>)>,
    mut camera: Query<&mut Transform, With<ChaseCamera>>,
    mut scratch: Local<TraceScratch>,
) {
    let (Some(expel), Ok(me), Ok(mut camera)) = (expel, me.single(), camera.single_mut()) else {
        return;
    };
    let ahead = me.rotation * Vec3::X;
    let from = from_bevy(me.translation);
    let mut eye = me.translation;
    for (back, up) in [(260.0, 380.0), (140.0, 420.0), (40.0, 440.0)] {
        let place = me.translation - ahead * back + Vec3::Y * up;
        let map = expel.0.sim.map();
        let t = map.trace(
            &Hull::point(),
            from,
            from_bevy(place),
            Contents::SOLID,
            &mut scratch,
        );
        let fraction = t.sweep.fraction as f32;
        eye = me.translation + (place - me.translation) * (fraction * 0.95);
        if fraction >= 1.0 {
            break;
        }
    }
    *camera = Transform::from_translation(eye).looking_at(me.translation + ahead * 60.0, Vec3::Y);
}

/// Leaves when the time is up (or the window is closed): the screenshot first, the
/// goodbye once it is saved; exits once the session ended, with its summary line.
#[allow(clippy::too_many_arguments)] // one system, each parameter a thing it reads
fn finish(
    mut commands: Commands,
    mut run: ResMut<Run>,
    state: Res<State<Connection>>,
    ended: Option<Res<Ended>>,
    mut closes: MessageReader<WindowCloseRequested>,
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
    let closed = closes.read().count() > 0;
    let due = run
        .seconds
        .is_some_and(|s| run.started.elapsed().as_secs_f64() >= s);
    match run.leaving {
        Leaving::No if closed || due => match run.screenshot.clone() {
            Some(path) => {
                run.leaving = Leaving::Shooting;
                let mut save = save_to_disk(path);
                commands.spawn(Screenshot::primary_window()).observe(
                    move |shot: On<ScreenshotCaptured>, mut run: ResMut<Run>| {
                        save(shot);
                        run.leaving = Leaving::Shot;
                    },
                );
            }
            None => run.leaving = Leaving::Shot,
        },
        Leaving::Shot => {
            run.leaving = Leaving::Said;
            leave.write(Leave("done".into()));
        }
        _ => {}
    }
}

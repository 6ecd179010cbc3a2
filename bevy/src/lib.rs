//! Expel for Bevy: a client plugin. Insert a [`Connect`] resource and the plugin joins
//! (the progress a [`Connection`] state), then each frame it sends the game's
//! [`ExpelInput`], runs the session, draws the local player (predicted) through its
//! [`Transform`], keeps an entity for each other player ([`RemotePlayer`]) and each of
//! the game's entities ([`GameEntity`]) with interpolated transforms, and turns the
//! server's messages and the client's events into Bevy messages ([`Received`],
//! [`ExpelEvent`]). A [`Leave`] message says goodbye.
//!
//! ```no_run
//! use bevy::prelude::*;
//! use expel_bevy::{Connect, ExpelClientPlugin, ExpelInput, LocalPlayer, Received};
//! # #[derive(serde::Deserialize)] struct News;
//! # fn opts() -> expel_client::ConnectOptions { unimplemented!() }
//! App::new()
//!     .add_plugins((MinimalPlugins, ExpelClientPlugin::<News>::default()))
//!     .insert_resource(Connect::new("127.0.0.1:27960".parse().unwrap(), opts()))
//!     .add_systems(Update, |mut input: ResMut<ExpelInput>, me: Query<&Transform, With<LocalPlayer>>| {
//!         input.0 = expel_client::prelude::MoveCommand::new(1.0, 0.0, 0.0, 90.0, 0.0);
//!     })
//!     .run();
//! ```
//!
//! Expel's world is Z-up in `f64` game units (a player is 56 tall); Bevy's is Y-up in
//! `f32`. [`to_bevy`] is the one place that converts: Expel's x, y, z are Bevy's x, -z,
//! y (both right-handed), one unit for one unit. A facing (yaw about Expel's up) turns
//! the local +X axis toward where the player looks ([`facing`]).

use bevy::prelude::*;
use bevy::state::app::StatesPlugin;
use expel_client::prelude::*;
use expel_client::MessageError;
use expel_core::CollisionModel;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::time::Instant;

/// Expel's coordinates (Z-up, `f64`) as Bevy's (Y-up, `f32`).
pub fn to_bevy(v: DVec3) -> Vec3 {
    Vec3::new(v.x as f32, v.z as f32, -v.y as f32)
}

/// Bevy's coordinates as Expel's: the inverse of [`to_bevy`].
pub fn from_bevy(v: Vec3) -> DVec3 {
    DVec3::new(f64::from(v.x), -f64::from(v.z), f64::from(v.y))
}

/// A facing (yaw in degrees about Expel's up, 0 along +x) as a rotation about Bevy's up
/// that turns the local +X axis to it.
pub fn facing(yaw_degrees: f64) -> Quat {
    Quat::from_rotation_y(yaw_degrees.to_radians() as f32)
}

/// Where the join stands.
#[derive(States, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Connection {
    /// Nothing asked yet (insert [`Connect`]).
    #[default]
    Idle,
    /// The QUIC handshake and the hello.
    Connecting,
    /// The map is arriving ([`MapProgress`]).
    ReceivingMap,
    /// In the world: [`Expel`] holds the session.
    Playing,
    /// Over ([`Ended`] says why).
    Ended,
}

/// Whom to join, and how: inserting it starts the join.
#[derive(Resource, Clone)]
pub struct Connect {
    /// The server.
    pub addr: SocketAddr,
    /// Token and trust.
    pub options: ConnectOptions,
}

impl Connect {
    /// Joins `addr` with `options`.
    pub fn new(addr: SocketAddr, options: ConnectOptions) -> Self {
        Connect { addr, options }
    }
}

/// The session, while playing.
#[derive(Resource)]
pub struct Expel(pub Session);

impl Expel {
    /// Sends the game's message now.
    pub fn send<T: serde::Serialize>(
        &mut self,
        channel: Channel,
        msg: &T,
    ) -> Result<(), MessageError> {
        self.0.send(channel, msg, Instant::now())
    }
}

/// The join under way.
#[derive(Resource)]
struct JoiningNow(Joining);

/// This frame's command, which the game sets (kept until changed).
#[derive(Resource, Default)]
pub struct ExpelInput(pub MoveCommand);

/// Bytes of the map received and its size, while it arrives.
#[derive(Resource, Default)]
pub struct MapProgress(pub Option<(u64, u64)>);

/// Why the session ended: how it ended once joined, or why the join failed.
#[derive(Resource, Debug)]
pub enum Ended {
    /// The join failed (its code, where the server refused).
    Join(ClientError),
    /// The session ended.
    Session(End),
}

/// Our player (predicted; its transform is where to draw it).
#[derive(Component)]
pub struct LocalPlayer;

/// Another player, interpolated.
#[derive(Component)]
pub struct RemotePlayer {
    /// Its id.
    pub id: PlayerId,
    /// Crouched, as last drawn.
    pub crouched: bool,
}

/// One of the game's entities, interpolated.
#[derive(Component)]
pub struct GameEntity {
    /// Its id.
    pub id: EntityId,
    /// Its kind, as the game numbers them.
    pub kind: u16,
}

/// A client event (welcomed, corrected, launched, ended...).
#[derive(Message, Debug, Clone)]
pub struct ExpelEvent(pub ClientEvent);

/// A message of the game's type `M` from the server.
#[derive(Message, Debug)]
pub struct Received<M: Send + Sync + 'static> {
    /// How it came.
    pub channel: Channel,
    /// The server tick whose world the rules saw when they sent it (see
    /// `Session::set_release` to have messages wait for the drawn view to reach it).
    pub tick: u64,
    /// The message.
    pub message: M,
}

/// Say goodbye with this reason: the session closes and the state becomes
/// [`Connection::Ended`].
#[derive(Message, Debug, Clone)]
pub struct Leave(pub String);

/// The client plugin; `M` is the type of the game's messages from the server (`()` for
/// none).
pub struct ExpelClientPlugin<M = ()>(PhantomData<fn() -> M>);

impl<M> Default for ExpelClientPlugin<M> {
    fn default() -> Self {
        ExpelClientPlugin(PhantomData)
    }
}

impl<M: serde::de::DeserializeOwned + Send + Sync + 'static> Plugin for ExpelClientPlugin<M> {
    fn build(&self, app: &mut App) {
        if !app.is_plugin_added::<StatesPlugin>() {
            app.add_plugins(StatesPlugin);
        }
        app.init_state::<Connection>()
            .init_resource::<ExpelInput>()
            .init_resource::<MapProgress>()
            .add_message::<ExpelEvent>()
            .add_message::<Received<M>>()
            .add_message::<Leave>()
            .add_systems(
                Update,
                (
                    join.run_if(not(in_state(Connection::Playing))),
                    (play::<M>, draw, leave)
                        .chain()
                        .run_if(in_state(Connection::Playing)),
                ),
            );
    }
}

/// Starts the join once [`Connect`] is there; then moves it on each frame.
fn join(
    mut commands: Commands,
    connect: Option<Res<Connect>>,
    joining: Option<ResMut<JoiningNow>>,
    state: Res<State<Connection>>,
    mut next: ResMut<NextState<Connection>>,
    mut progress: ResMut<MapProgress>,
) {
    let fail = |commands: &mut Commands, next: &mut NextState<Connection>, e: ClientError| {
        commands.insert_resource(Ended::Join(e));
        commands.remove_resource::<JoiningNow>();
        next.set(Connection::Ended);
    };
    let Some(mut joining) = joining else {
        if let (Some(c), Connection::Idle) = (connect, state.get()) {
            match Joining::start_blocking(c.addr, &c.options) {
                Ok(j) => {
                    commands.insert_resource(JoiningNow(j));
                    next.set(Connection::Connecting);
                }
                Err(e) => fail(&mut commands, &mut next, e),
            }
        }
        return;
    };
    match joining.0.update(Instant::now()) {
        Ok(false) => {
            progress.0 = joining.0.map_progress();
            // Set once: setting a state again runs its enter and exit systems again.
            let receiving = matches!(joining.0.status(), Status::ReceivingMap);
            if receiving && *state.get() != Connection::ReceivingMap {
                next.set(Connection::ReceivingMap);
            }
        }
        Ok(true) => {
            // The session is made from the join by value: in a command, with the world.
            commands.queue(|world: &mut World| {
                let Some(JoiningNow(j)) = world.remove_resource::<JoiningNow>() else {
                    return;
                };
                let state = match j.joined() {
                    Ok(session) => {
                        let at = to_bevy(session.display_origin().unwrap_or_default());
                        world.spawn((LocalPlayer, Transform::from_translation(at)));
                        world.insert_resource(Expel(session));
                        Connection::Playing
                    }
                    Err(e) => {
                        world.insert_resource(Ended::Join(e));
                        Connection::Ended
                    }
                };
                world.resource_mut::<NextState<Connection>>().set(state);
            });
        }
        Err(e) => fail(&mut commands, &mut next, e),
    }
}

/// Input, update, events and messages.
fn play<M: serde::de::DeserializeOwned + Send + Sync + 'static>(
    mut commands: Commands,
    mut expel: ResMut<Expel>,
    input: Res<ExpelInput>,
    mut events: MessageWriter<ExpelEvent>,
    mut received: MessageWriter<Received<M>>,
    mut next: ResMut<NextState<Connection>>,
) {
    let now = Instant::now();
    let session = &mut expel.0;
    session.input(input.0);
    session.update(now);
    while let Some(e) = session.poll_event() {
        events.write(ExpelEvent(e));
    }
    while let Some(m) = session.poll_message::<M>() {
        received.write(Received {
            channel: m.channel,
            tick: m.tick,
            message: m.message,
        });
    }
    if let Status::Ended(end) = session.status() {
        commands.insert_resource(Ended::Session(end.clone()));
        next.set(Connection::Ended);
    }
}

/// Transforms: ours predicted, the others' and the game's entities interpolated.
#[allow(clippy::type_complexity)]
fn draw(
    mut commands: Commands,
    expel: Res<Expel>,
    input: Res<ExpelInput>,
    mut me: Query<
        &mut Transform,
        (
            With<LocalPlayer>,
            Without<RemotePlayer>,
            Without<GameEntity>,
        ),
    >,
    mut others: Query<(Entity, &mut RemotePlayer, &mut Transform), Without<GameEntity>>,
    mut things: Query<(Entity, &GameEntity, &mut Transform), Without<RemotePlayer>>,
) {
    let now = Instant::now();
    let session = &expel.0;
    if let (Some(at), Ok(mut t)) = (session.display_origin(), me.single_mut()) {
        t.translation = to_bevy(at);
        // Our facing is our own command's: it needs no prediction.
        t.rotation = facing(f64::from(input.0.yaw) * 360.0 / 65536.0);
    }
    let mut drawn: BTreeMap<PlayerId, Drawn> = session.others_drawn(now);
    for (e, mut p, mut t) in &mut others {
        match drawn.remove(&p.id) {
            Some(d) => {
                *t = Transform::from_translation(to_bevy(d.origin)).with_rotation(facing(d.yaw));
                p.crouched = d.crouched;
            }
            None => commands.entity(e).despawn(),
        }
    }
    for (id, d) in drawn {
        let t = Transform::from_translation(to_bevy(d.origin)).with_rotation(facing(d.yaw));
        commands.spawn((
            RemotePlayer {
                id,
                crouched: d.crouched,
            },
            t,
        ));
    }
    let mut drawn: BTreeMap<EntityId, DrawnEntity> = session.entities(now);
    for (e, g, mut t) in &mut things {
        match drawn.remove(&g.id) {
            Some(d) => t.translation = to_bevy(d.origin),
            None => commands.entity(e).despawn(),
        }
    }
    for (id, d) in drawn {
        let kind = d.view.kind;
        commands.spawn((
            GameEntity { id, kind },
            Transform::from_translation(to_bevy(d.origin)),
        ));
    }
}

/// Says goodbye when asked.
fn leave(
    mut commands: Commands,
    mut asked: MessageReader<Leave>,
    mut next: ResMut<NextState<Connection>>,
) {
    if let Some(Leave(reason)) = asked.read().last().cloned() {
        commands.queue(move |world: &mut World| {
            if let Some(Expel(session)) = world.remove_resource::<Expel>() {
                session.close_blocking(&reason);
            }
            world.insert_resource(Ended::Session(End::Left(reason)));
        });
        next.set(Connection::Ended);
    }
}

/// The map's faces as triangles in Bevy's coordinates, for a mesh to draw: positions,
/// normals (one per position) and indices, each face fanned from its first corner.
#[derive(Clone, Debug, Default)]
pub struct MapTriangles {
    /// Corner positions.
    pub positions: Vec<[f32; 3]>,
    /// The face's normal at each corner.
    pub normals: Vec<[f32; 3]>,
    /// Three per triangle, counter-clockwise seen from the front.
    pub indices: Vec<u32>,
}

/// [`MapTriangles`] of a map's collision model (what the players collide with, which is
/// what a debug view or a simple game draws).
pub fn map_triangles(model: &CollisionModel) -> MapTriangles {
    let mut out = MapTriangles::default();
    for (i, p) in model.polygons().iter().enumerate() {
        let first = out.positions.len() as u32;
        let n = to_bevy(p.plane.normal).to_array();
        let corners: Vec<DVec3> = model.polygon_points(i).collect();
        for c in &corners {
            out.positions.push(to_bevy(*c).to_array());
            out.normals.push(n);
        }
        for k in 1..corners.len().saturating_sub(1) as u32 {
            out.indices.extend([first, first + k, first + k + 1]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_convert_both_ways_z_up_to_y_up() {
        let v = DVec3::new(1.5, -2.0, 56.0);
        assert_eq!(to_bevy(v), Vec3::new(1.5, 56.0, 2.0));
        assert_eq!(from_bevy(to_bevy(v)), v);
        // Expel's +y (left of +x seen from above) is Bevy's -z, as both are right-handed.
        assert_eq!(to_bevy(DVec3::Y), Vec3::NEG_Z);
    }
}

//! A headless Bevy app with the client plugin against the real server on loopback QUIC.

use bevy::prelude::*;
use expel_bevy::{
    Connect, Connection, Ended, ExpelClientPlugin, ExpelInput, Leave, LocalPlayer, Received,
    RemotePlayer,
};
use expel_client::prelude::*;
use expel_modes::tag::{Tag, TagNews};
use expel_server::{Map, Server};
use std::time::{Duration, Instant};

/// Messages the app received, counted by a system of the test's.
#[derive(Resource, Default)]
struct Heard(Vec<TagNews>);

fn listen(mut news: MessageReader<Received<TagNews>>, mut heard: ResMut<Heard>) {
    heard.0.extend(news.read().map(|r| r.message.clone()));
}

/// Joins, walks, sees a second client, hears the game's message and leaves cleanly: the
/// server counts it gone.
#[test]
fn a_headless_app_joins_walks_sees_another_hears_the_game_and_leaves() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt
        .block_on(
            Server::builder(Map::arena().unwrap())
                .rules(Tag::new())
                .start(),
        )
        .unwrap();
    let options = |id: u32| {
        let trust = Trust::Fingerprint(server.fingerprint.clone());
        ConnectOptions::new(server.token(PlayerId(id), Duration::from_secs(60)), trust)
    };
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, ExpelClientPlugin::<TagNews>::default()))
        .init_resource::<Heard>()
        .insert_resource(Connect::new(server.addr, options(1)))
        // Walk along +x.
        .insert_resource(ExpelInput(MoveCommand::new(1.0, 0.0, 0.0, 0.0, 0.0)))
        .add_systems(Update, listen);
    let mut other = connect_blocking(server.addr, &options(2)).unwrap();
    let mut states = Vec::new();
    let mut start: Option<Vec3> = None;
    let until = Instant::now() + Duration::from_secs(20);
    let (walked, saw) = loop {
        assert!(Instant::now() < until, "states {states:?}");
        app.update();
        other.input(MoveCommand::new(0.0, 0.0, 0.0, 0.0, 0.0));
        other.update(Instant::now());
        let state = *app.world().resource::<State<Connection>>().get();
        if states.last() != Some(&state) {
            states.push(state);
        }
        let world = app.world_mut();
        let me = world
            .query_filtered::<&Transform, With<LocalPlayer>>()
            .iter(world)
            .next()
            .map(|t| t.translation);
        let saw: Vec<PlayerId> = world
            .query::<&RemotePlayer>()
            .iter(world)
            .map(|p| p.id)
            .collect();
        if let Some(at) = me {
            let from = *start.get_or_insert(at);
            let walked = (at - from).length();
            let heard = !world.resource::<Heard>().0.is_empty();
            if walked > 100.0 && saw.contains(&PlayerId(2)) && heard {
                break (walked, saw);
            }
        }
        std::thread::sleep(Duration::from_millis(4));
    };
    println!("walked {walked:.0} units, saw {saw:?}, states {states:?}");
    assert_eq!(states[..2], [Connection::Idle, Connection::Connecting]);
    assert_eq!(states.last(), Some(&Connection::Playing));
    // Tag's score names both players.
    let heard = &app.world().resource::<Heard>().0;
    assert!(
        heard
            .iter()
            .any(|n| matches!(n, TagNews::Score(s) if s.scores.len() == 2)),
        "{heard:?}"
    );
    app.world_mut().write_message(Leave("done".into()));
    for _ in 0..3 {
        app.update();
    }
    assert_eq!(
        *app.world().resource::<State<Connection>>().get(),
        Connection::Ended
    );
    assert!(matches!(
        app.world().resource::<Ended>(),
        Ended::Session(End::Left(r)) if r == "done"
    ));
    // The server lets the player go at once (a goodbye, not a silence).
    let until = Instant::now() + Duration::from_secs(5);
    while server.metrics.machine().clients != 1 {
        assert!(Instant::now() < until, "the server still holds the player");
        other.update(Instant::now());
        std::thread::sleep(Duration::from_millis(20));
    }
    other.close_blocking("done");
    rt.block_on(server.shutdown("done"));
}

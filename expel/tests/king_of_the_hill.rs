//! The example game outside the workspace (examples/king-of-the-hill, which depends on
//! `expel` alone), played by real clients over loopback QUIC.
use expel_core::PlayerId;

#[allow(dead_code)]
#[path = "../../examples/king-of-the-hill/src/main.rs"]
mod king_of_the_hill;

/// Two clients take turns on the hill: each scores while alone on it, both see the same
/// standings, and a shout reaches the other.
#[expel::tokio::test(crate = "expel::tokio", flavor = "multi_thread", worker_threads = 2)]
async fn king_of_the_hill_is_played_by_real_clients() {
    let seen = king_of_the_hill::play(9.0, 2).await.unwrap();
    assert_eq!(seen.len(), 2);
    let points = &seen[0].1;
    assert_eq!(
        points.keys().copied().collect::<Vec<_>>(),
        [1, 2].map(PlayerId)
    );
    assert!(
        points[&PlayerId(1)] >= 1,
        "the first turn's king scored nothing: {points:?}"
    );
    assert!(
        points[&PlayerId(2)] >= 1,
        "the second turn's king scored nothing: {points:?}"
    );
    let (a, b) = (&seen[0].1, &seen[1].1);
    let off: u32 = a.keys().map(|k| a[k].abs_diff(b[k])).sum();
    assert!(off <= 1, "the clients saw different standings: {a:?} {b:?}");
    for (me, _, shouts) in &seen {
        assert_eq!(
            shouts,
            &vec![(PlayerId(2), "mine next!".to_string())],
            "player {me}"
        );
    }
}

/// A client built for another game is stopped at the welcome, told both state types'
/// names; one of this game joins the same server.
#[expel::tokio::test(crate = "expel::tokio", flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_game_is_told_so_at_the_door() {
    use expel::prelude::*;
    use king_of_the_hill::{Climber, KingOfTheHill};
    use std::time::Duration;

    #[derive(Serialize, Deserialize)]
    struct Fighter(i32);
    impl Replicated for Fighter {
        const NAME: &'static str = "another-game.fighter/1";
    }

    let map = Map::arena().unwrap();
    let server = Server::builder(map).rules(KingOfTheHill::default()).start();
    let server = server.await.unwrap();
    let trust = Trust::Fingerprint(server.fingerprint.clone());
    let options = |id: u32, states: StateTypes| {
        let token = server.token(PlayerId(id), Duration::from_secs(60));
        ConnectOptions::new(token, trust.clone()).with_states(states)
    };
    let other = options(1, StateTypes::new().player::<Fighter>());
    match connect(server.addr, &other).await {
        Err(ClientError::OtherGame(why)) => {
            assert!(
                why.contains(Fighter::NAME) && why.contains(Climber::NAME),
                "{why}"
            )
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a client of another game joined"),
    }
    let ours = options(2, StateTypes::new().player::<Climber>());
    let session = connect(server.addr, &ours).await.unwrap();
    session.close("done").await;
    server.shutdown("done").await;
}

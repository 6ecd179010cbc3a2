//! A Bevy game globs both preludes: every name in Expel's must stay unambiguous beside
//! Bevy's. A clash shows only where a game names it, as a compile error, so the check is
//! that this file builds with each name used; the assertions say what each resolved to.
#![cfg(feature = "bevy")]

use bevy::prelude::*;
use expel::prelude::*;

/// A game's own state, by the prelude's trait (a Bevy game often has a `GameState` of
/// its own: the trait is named apart from it).
#[derive(Serialize, Deserialize)]
struct Health(u8);
impl Replicated for Health {
    const NAME: &'static str = "test.health/1";
}

#[test]
fn every_name_of_the_prelude_stands_beside_bevys() {
    let names: Vec<&str> = vec![
        std::any::type_name::<EntityId>(),
        std::any::type_name::<EntityState>(),
        std::any::type_name::<Motion>(),
        std::any::type_name::<MoveCommand>(),
        std::any::type_name::<MoveMode>(),
        std::any::type_name::<PlayerId>(),
        std::any::type_name::<PlayerState>(),
        std::any::type_name::<Channel>(),
        std::any::type_name::<Scope>(),
        std::any::type_name::<StateTypes>(),
        std::any::type_name::<StateError>(),
        std::any::type_name::<DVec3>(),
        std::any::type_name::<Game<'static>>(),
        std::any::type_name::<dyn GameRules>(),
        std::any::type_name::<Map>(),
        std::any::type_name::<RuleError>(),
        std::any::type_name::<Sender>(),
        std::any::type_name::<Server>(),
        std::any::type_name::<ServerError>(),
        std::any::type_name::<ServerSettings>(),
        std::any::type_name::<SpawnError>(),
        std::any::type_name::<ClientError>(),
        std::any::type_name::<ClientEvent>(),
        std::any::type_name::<Code>(),
        std::any::type_name::<ConnectOptions>(),
        std::any::type_name::<Delivered<()>>(),
        std::any::type_name::<Drawn>(),
        std::any::type_name::<DrawnEntity>(),
        std::any::type_name::<End>(),
        std::any::type_name::<dyn Launcher>(),
        std::any::type_name::<Release>(),
        std::any::type_name::<Session>(),
        std::any::type_name::<Status>(),
        std::any::type_name::<Trust>(),
    ];
    // Bevy's own names still mean Bevy's.
    let bevys = [
        std::any::type_name::<Entity>(),
        std::any::type_name::<Transform>(),
    ];
    assert!(bevys.iter().all(|n| n.starts_with("bevy")), "{bevys:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("expel") || n.starts_with("glam") || n.starts_with("dyn expel")),
        "{names:?}"
    );
    let _: fn(std::net::SocketAddr, &ConnectOptions) -> Result<Session, ClientError> =
        connect_blocking;
    let _ = connect;
    fn derives<T: Serialize + for<'a> Deserialize<'a>>() {}
    derives::<PlayerId>();
    assert_eq!(
        StateTypes::new().player::<Health>().player_name(),
        Some(Health::NAME)
    );
}

//! A game's own state types on the simulated network: the rules register them, set them
//! as the types themselves (another type, or one past the bound, is refused with its
//! name), and every client reads them as those types; a client built for another game
//! stops at the welcome with both names, and bytes that do not decode as the type a
//! client registered are counted, not taken.

use expel_core::sim::{EntityId, EntityState, PlayerId};
use expel_core::MoveCommand;
use expel_protocol::client::{ClientSettings, End, Status};
use expel_protocol::conditioner::Impairment;
use expel_protocol::game::state::{Replicated, StateError, StateOf, StateTypes, MAX_STATE_BYTES};
use expel_protocol::server::{Game, GameRules};
use expel_protocol::snapshot::Scope;
use expel_protocol::MovementAuthority;
use expel_testkit::network::{network, token};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A player's state: armour points and a label.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Armor {
    points: u16,
    label: String,
}
impl Replicated for Armor {
    const NAME: &'static str = "test.armor/1";
}

/// An entity's state: a crate's charge.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
struct Charge(u32);
impl Replicated for Charge {
    const NAME: &'static str = "test.charge/1";
}

/// A server of another build that calls its own type by `Armor`'s name.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
struct NotArmor(u8);
impl Replicated for NotArmor {
    const NAME: &'static str = "test.armor/1";
}

/// What the rules set and what they were refused.
#[derive(Default)]
struct Log {
    armor: BTreeMap<PlayerId, Armor>,
    charge: Option<(EntityId, Charge)>,
    refused: Vec<StateError>,
}

/// Sets each player's armour for its first 120 ticks (then leaves it), and a crate's
/// charge; tries once a type it did not register and once a label too long.
struct Armory {
    log: Arc<Mutex<Log>>,
    /// Sets `NotArmor` instead (a server whose type is not the one its name says).
    impostor: bool,
}

impl GameRules for Armory {
    fn states(&self) -> StateTypes {
        if self.impostor {
            return StateTypes::new().player::<NotArmor>();
        }
        StateTypes::new().player::<Armor>().entity::<Charge>()
    }

    fn tick(&mut self, game: &mut Game<'_>) {
        let tick = game.tick();
        let mut log = self.log.lock().unwrap();
        let players: Vec<PlayerId> = game.players().collect();
        for p in players {
            if self.impostor {
                let _ = game.set_player_state(p, &NotArmor(7), Scope::Everyone);
                continue;
            }
            if tick <= 120 {
                let armor = Armor {
                    points: (tick % 50) as u16 + p.0 as u16,
                    label: format!("player {p}"),
                };
                game.set_player_state(p, &armor, Scope::Everyone).unwrap();
                log.armor.insert(p, armor);
            }
            if tick == 60 {
                let wrong = game.set_player_state(p, &Charge(1), Scope::Everyone);
                let long = Armor {
                    points: 1,
                    label: "x".repeat(MAX_STATE_BYTES),
                };
                let large = game.set_player_state(p, &long, Scope::Everyone);
                log.refused
                    .extend([wrong, large].into_iter().filter_map(Result::err));
            }
        }
        if log.charge.is_none() && !self.impostor {
            let at = game.sim().spawns()[0];
            let id = game.spawn(EntityState::fixed(at), Scope::Everyone).unwrap();
            game.set_entity_state(id, &Charge(250)).unwrap();
            log.charge = Some((id, Charge(250)));
        }
    }
}

fn settings(id: u32, states: StateTypes) -> ClientSettings {
    ClientSettings {
        states,
        ..ClientSettings::new(token(id))
    }
}

#[test]
fn registered_states_reach_every_client_as_their_types() {
    let mut net = network(3, MovementAuthority::Server, Impairment::default(), 3);
    let log = Arc::new(Mutex::new(Log::default()));
    let rules = Armory {
        log: log.clone(),
        impostor: false,
    };
    net.server_mut().set_rules(Box::new(rules));
    let ours = StateTypes::new().player::<Armor>().entity::<Charge>();
    let typed = net.connect(settings(4, ours));
    // Built for a game whose players' state is a `Charge`.
    let other = net.connect(settings(5, StateTypes::new().player::<Charge>()));
    net.run(Duration::from_secs(4), &mut |_, _| MoveCommand::default());

    let log = log.lock().unwrap();
    assert_eq!(log.armor.len(), 4, "the four playing clients' players");
    for i in [0, 1, 2, typed] {
        let c = net.client(i);
        assert_eq!(c.status(), &Status::Playing, "client {i}");
        for (p, want) in &log.armor {
            let got = c.player_state::<Armor>(*p);
            assert_eq!(got, Ok(Some(want.clone())), "client {i}, player {p}");
        }
        let all = c.player_states::<Armor>().unwrap();
        assert_eq!(&all, &log.armor, "client {i}");
        let (crate_id, charge) = log.charge.unwrap();
        assert_eq!(c.entity_state::<Charge>(crate_id), Ok(Some(charge)));
        // Read as another type: refused with the server's name.
        let wrong = c.player_state::<Charge>(PlayerId(1)).unwrap_err();
        assert!(
            matches!(&wrong, StateError::NotTheServers { servers: Some(s), .. } if s == Armor::NAME),
            "{wrong}"
        );
        assert_eq!(c.stats().states_undecodable, 0, "client {i}");
    }
    // The rules were refused a type they did not register and a state past the bound,
    // each with the type named.
    assert_eq!(log.refused.len(), 8, "{:?}", log.refused);
    for e in &log.refused {
        match e {
            StateError::NotRegistered { of, ty, registered } => {
                assert_eq!(*of, StateOf::Player);
                assert!(ty.ends_with("Charge") && registered.unwrap().ends_with("Armor"));
            }
            StateError::TooLarge { ty, bytes } => {
                assert!(ty.ends_with("Armor") && *bytes > MAX_STATE_BYTES, "{e}");
            }
            other => panic!("{other}"),
        }
    }
    // The client of the other game stopped at the welcome, told both names.
    match net.client(other).status() {
        Status::Ended(End::OtherGame(why)) => {
            assert!(
                why.contains(Armor::NAME) && why.contains(Charge::NAME),
                "{why}"
            );
        }
        s => panic!("the other game's client: {s:?}"),
    }
}

#[test]
fn states_that_do_not_decode_as_the_registered_type_are_counted() {
    let mut net = network(1, MovementAuthority::Server, Impairment::default(), 4);
    let log = Arc::new(Mutex::new(Log::default()));
    let rules = Armory {
        log,
        impostor: true,
    };
    net.server_mut().set_rules(Box::new(rules));
    let typed = net.connect(settings(2, StateTypes::new().player::<Armor>()));
    net.run(Duration::from_secs(2), &mut |_, _| MoveCommand::default());
    let c = net.client(typed);
    assert_eq!(c.status(), &Status::Playing, "the names agree");
    // Both players' states arrived once each (they never change) and neither decodes.
    assert_eq!(c.stats().states_undecodable, 2);
    let got = c.player_state::<Armor>(PlayerId(2));
    assert!(matches!(got, Err(StateError::Codec { .. })), "{got:?}");
    // The client that registered nothing reads the impostor's type by its name.
    assert_eq!(
        net.client(0).player_state::<NotArmor>(PlayerId(1)),
        Ok(Some(NotArmor(7)))
    );
}

//! Every `--help` list of names is the table that parses them: what the help offers is
//! exactly what the command takes, and a name outside it is refused with the same list.

use std::process::Command;

/// The names `expel ARGS --help` lists for `flag`.
fn listed(args: &[&str], flag: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(args)
        .arg("--help")
        .output()
        .expect("expel runs");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    // clap sets a flag's description on the lines after it, up to the next flag.
    let at = help
        .find(&format!("{flag} <"))
        .unwrap_or_else(|| panic!("{args:?} --help names no {flag}:\n{help}"));
    let rest = &help[at..];
    let end = rest[2..].find("\n  -").map_or(rest.len(), |e| e + 2);
    let text = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
    let list = text
        .split("[possible values: ")
        .nth(1)
        .and_then(|l| l.split(']').next())
        .unwrap_or_else(|| panic!("{args:?} --help lists no values for {flag}: {text}"));
    list.split(", ").map(str::to_string).collect()
}

fn names<T>(table: &[(&str, T)]) -> Vec<String> {
    table.iter().map(|(name, _)| name.to_string()).collect()
}

#[test]
fn every_help_list_is_the_table_that_parses_it() {
    assert_eq!(
        listed(&["bots"], "--cheat"),
        names(&expel_bots::CheatKind::ALL)
    );
    assert_eq!(
        listed(&["bots"], "--behavior"),
        names(&expel_bots::Behavior::NAMES)
    );
    assert_eq!(listed(&["serve"], "--mode"), names(&expel_modes::MODES));
    assert_eq!(listed(&["serve"], "--movement"), ["server", "client"]);
    assert_eq!(listed(&["sim"], "--mode"), ["walk", "noclip", "spectator"]);
    assert_eq!(listed(&["demo"], "--mode"), ["tag", "deathmatch"]);
}

#[test]
fn an_unknown_name_is_refused_with_the_names_it_may_take() {
    let out = Command::new(env!("CARGO_BIN_EXE_expel"))
        .args(["bots", "--server", "127.0.0.1:9", "--fingerprint", "00"])
        .args(["--count", "1", "--duration", "1", "--cheat", "aimbot"])
        .output()
        .expect("expel runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'aimbot'"), "{err}");
    for (name, _) in expel_bots::CheatKind::ALL {
        assert!(err.contains(name), "the refusal leaves out {name}: {err}");
    }
}

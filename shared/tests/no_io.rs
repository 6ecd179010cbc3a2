//! The deterministic core (`expel-core`) and the protocol's state machines do no I/O of
//! their own: no async runtime or QUIC stack among either crate's dependencies, no clock
//! read, socket or sleep in their source (outside unit tests). Their `clippy.toml` files
//! deny the clock reads too, where clippy runs; this test holds without them.

use std::path::Path;

const FORBIDDEN_CRATES: [&str; 5] = ["tokio", "quinn", "mio", "socket2", "async-std"];
const FORBIDDEN_CODE: [&str; 9] = [
    "Instant::now",
    "SystemTime::now",
    "tokio::",
    "quinn::",
    "std::net::",
    "thread::sleep",
    "async fn",
    ".await",
    "UdpSocket",
];

/// The two crates: the core, and the protocol over it.
const CRATES: [&str; 2] = [
    concat!(env!("CARGO_MANIFEST_DIR"), "/../core"),
    env!("CARGO_MANIFEST_DIR"),
];

#[test]
fn no_runtime_or_transport_among_the_dependencies() {
    for dir in CRATES {
        one_crates_dependencies(dir);
    }
}

fn one_crates_dependencies(dir: &str) {
    let manifest = std::fs::read_to_string(format!("{dir}/Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    for c in FORBIDDEN_CRATES {
        assert!(
            !deps.lines().any(|l| l.trim_start().starts_with(c)),
            "{dir} depends on {c}"
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_clock_socket_or_async_in_the_source() {
    let mut files = Vec::new();
    for dir in CRATES {
        let before = files.len();
        rust_files(&Path::new(dir).join("src"), &mut files);
        assert!(files.len() > before + 10, "found the sources of {dir}");
    }
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // Unit tests may take a base instant for virtual time.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            for bad in FORBIDDEN_CODE {
                // A whole token: `.await` is not `.awaiting_hello`.
                let whole = line.match_indices(bad).any(|(i, _)| {
                    !line[i + bad.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if whole {
                    found.push(format!("{}:{}: {bad}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "I/O in the core: {found:#?}");
}

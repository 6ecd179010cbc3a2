//! Embeds the browser client (`web/dist/`, built by `web/build.sh`) into `expel` when it
//! has been built, so `expel serve --web` serves it from the one binary. Without it the
//! binary builds all the same and `--web` says how to build the page.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(expel_page)");
    // The whole folder: web/dist may not exist yet, and a path that does not exist reads
    // as changed on every build (which would rebuild expel each time).
    println!("cargo::rerun-if-changed=web");
    let dist = std::path::Path::new("web/dist");
    if ["expel_web.js", "expel_web_bg.wasm"]
        .iter()
        .all(|f| dist.join(f).is_file())
    {
        println!("cargo::rustc-cfg=expel_page");
    }
}

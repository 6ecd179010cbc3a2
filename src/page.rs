//! The browser page `expel serve --web` serves: `web/page/` (the page and its script)
//! and the WebAssembly client `web/build.sh` builds into `web/dist/`, embedded when this
//! binary was built after it.

use anyhow::{bail, Result};
use expel_server::WebPage;

/// The page's files, or why there are none.
pub(crate) fn web_page() -> Result<WebPage> {
    let Some((glue, wasm)) = built() else {
        bail!(
            "this expel was built without the browser client: run web/build.sh, then build \
             expel again (cargo build --release)"
        );
    };
    Ok(WebPage::new()
        .with_file(
            "/",
            "text/html; charset=utf-8",
            include_str!("../web/page/index.html"),
        )
        .with_file(
            "/main.js",
            "text/javascript",
            include_str!("../web/page/main.js"),
        )
        .with_file("/expel_web.js", "text/javascript", glue)
        .with_file("/expel_web_bg.wasm", "application/wasm", wasm))
}

/// Whether the browser client is in this binary.
pub(crate) fn available() -> bool {
    built().is_some()
}

#[cfg(expel_page)]
fn built() -> Option<(&'static str, &'static [u8])> {
    Some((
        include_str!("../web/dist/expel_web.js"),
        include_bytes!("../web/dist/expel_web_bg.wasm"),
    ))
}

#[cfg(not(expel_page))]
fn built() -> Option<(&'static str, &'static [u8])> {
    None
}

//! What the browser's door serves over HTTP: the page, its script and its WebAssembly
//! (given by whoever starts the server: the `expel` binary embeds `web/`'s build), and
//! `door.json`, where the page learns the session's port and the certificate to pin.
//! Nothing of the operator's is here: no positions, no metrics.

use bytes::Bytes;

/// The files of the browser's page, by path.
#[derive(Clone, Debug, Default)]
pub struct WebPage {
    files: Vec<PageFile>,
}

#[derive(Clone, Debug)]
pub(crate) struct PageFile {
    path: String,
    pub(crate) content_type: &'static str,
    pub(crate) body: Bytes,
}

impl WebPage {
    /// No files yet.
    pub fn new() -> WebPage {
        WebPage::default()
    }

    /// Serves `body` at `path` (`/` for the page itself) as `content_type`.
    pub fn with_file(
        mut self,
        path: &str,
        content_type: &'static str,
        body: impl Into<Bytes>,
    ) -> WebPage {
        self.files.retain(|f| f.path != path);
        self.files.push(PageFile {
            path: path.to_string(),
            content_type,
            body: body.into(),
        });
        self
    }

    /// The file at `path` (`/index.html` is `/`).
    pub(crate) fn get(&self, path: &str) -> Option<&PageFile> {
        let path = if path == "/index.html" { "/" } else { path };
        self.files.iter().find(|f| f.path == path)
    }
}

/// `door.json` for a door bound at `port` with a certificate of `hash`: the session's port
/// and path, and the hash to pin (`null` for the operator's certificate, which browsers
/// check themselves).
pub(crate) fn door_json(port: u16, hash: &str, development: bool) -> String {
    serde_json::json!({
        "port": port,
        "path": super::SESSION_PATH,
        "cert_hash": development.then_some(hash),
    })
    .to_string()
}

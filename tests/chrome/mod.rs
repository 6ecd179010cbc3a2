//! A real headless Chromium (from the system packages) driven through the Chrome DevTools
//! protocol, for the tests of the pages Expel serves: the operator's live view and the
//! browser client. Without Chromium a test says so and passes, unless
//! `EXPEL_REQUIRE_BROWSER` is set (CI sets it, and installs Chromium).
#![allow(dead_code)] // each test binary uses its own part

use expel_testkit::process::Kill;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Chromium's path, or `None` (after saying so) where the test is to be skipped.
pub(crate) fn chromium() -> Option<&'static str> {
    let found = [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/usr/bin/google-chrome",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists());
    if found.is_none() {
        assert!(
            std::env::var_os("EXPEL_REQUIRE_BROWSER").is_none(),
            "EXPEL_REQUIRE_BROWSER is set but no Chromium is installed"
        );
        eprintln!("no Chromium: the browser test is skipped (apt-get install chromium)");
    }
    found
}

/// A plain HTTP GET on loopback: the body, read to its Content-Length (Chromium's
/// DevTools server keeps the connection open) or to the end.
pub(crate) fn get(host: &str, path: &str) -> String {
    get_as(host, path, None)
}

/// [`get`] with the operator token as a bearer token, if given.
pub(crate) fn get_as(host: &str, path: &str, token: Option<&str>) -> String {
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return String::new();
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = Vec::new();
    match len {
        Some(n) => {
            body.resize(n, 0);
            r.read_exact(&mut body).unwrap();
        }
        None => {
            r.read_to_end(&mut body).unwrap();
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// A headless Chromium showing one page, and a DevTools session on that page.
pub(crate) struct Browser {
    pub(crate) page: Page,
    _chrome: Kill,
}

impl Browser {
    /// Opens `url` in Chromium at `browser`, its profile in `profile`, with `flags` beyond
    /// the headless defaults.
    pub(crate) fn open(browser: &str, url: &str, profile: &Path, flags: &[&str]) -> Browser {
        let mut chrome = Kill(
            Command::new(browser)
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--remote-debugging-port=0",
                    "--window-size=1200,800",
                ])
                .args(flags)
                .arg(format!("--user-data-dir={}", profile.display()))
                .arg(url)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run chromium"),
        );
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
        let (tx, rx) = std::sync::mpsc::channel();
        let err = chrome.0.stderr.take().unwrap();
        // Read Chromium's log to its end (a full pipe would stall it), passing on the
        // address.
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let devtools = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("Chromium printed no DevTools address");
        let port_host = devtools
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        // The page's own DevTools socket.
        let deadline = Instant::now() + Duration::from_secs(30);
        let page_ws = loop {
            let list: Value =
                serde_json::from_str(&get(&port_host, "/json/list")).unwrap_or(Value::Null);
            let found = list.as_array().and_then(|l| {
                l.iter()
                    .find(|t| {
                        t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url))
                    })
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(String::from))
            });
            if let Some(ws) = found {
                break ws;
            }
            assert!(Instant::now() < deadline, "no page target: {list}");
            std::thread::sleep(Duration::from_millis(200));
        };
        let (ws, _) = tungstenite::connect(page_ws.as_str()).unwrap();
        Browser {
            page: Page { ws, next: 0 },
            _chrome: chrome,
        }
    }
}

/// One Chrome DevTools session on a page.
pub(crate) struct Page {
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next: u64,
}

impl Page {
    /// Calls a DevTools `method` and returns its result.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let m = self.ws.read().unwrap();
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            if v["id"] == id {
                return v["result"].clone();
            }
        }
    }

    /// The value of `expression` in the page (a promise's, once it settles).
    pub(crate) fn eval(&mut self, expression: &str) -> Value {
        let params = json!({"expression": expression, "returnByValue": true, "awaitPromise": true});
        self.call("Runtime.evaluate", params)["result"]["value"].clone()
    }

    /// A PNG of what the page shows.
    pub(crate) fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap_or(""))
            .unwrap_or_default()
    }
}

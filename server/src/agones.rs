//! Agones: the server tells the SDK sidecar of its pod, through the SDK's local REST
//! interface (`http://localhost:$AGONES_SDK_HTTP_PORT`), what the orchestrator needs to
//! know: its player capacity, that it is ready once it accepts players, that it is healthy
//! every few seconds while its tick runs (and not while it stalls), each player's connect
//! and disconnect (the alpha player-tracking endpoints), and that it is shutting down.
//!
//! [`Reporter`] decides the calls, in order, from what it is told and the time passed in;
//! `run` makes them with an HTTP client. A call that fails (the sidecar may start after
//! the server) is tried again with capped backoff, and the player list is reconciled, not
//! queued: however long the sidecar is away, what is held is the set of players, never a
//! backlog of calls.

use expel_protocol::backoff::Backoff;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tracing::{debug, info, warn};

/// Where the SDK sidecar listens and how often to say the server is healthy.
#[derive(Clone, Debug)]
pub struct AgonesConfig {
    /// The SDK's REST address (localhost and `AGONES_SDK_HTTP_PORT`).
    pub sdk: SocketAddr,
    /// Time between health pings while the tick runs (Agones's default check period is
    /// 5 s, with 3 misses allowed).
    pub health_every: Duration,
}

impl AgonesConfig {
    /// From the environment Agones gives a game server: `Some` when
    /// `AGONES_SDK_HTTP_PORT` is set (an error if it is not a port).
    pub fn from_env() -> Result<Option<AgonesConfig>, String> {
        let Ok(port) = std::env::var("AGONES_SDK_HTTP_PORT") else {
            return Ok(None);
        };
        let port: u16 = port
            .trim()
            .parse()
            .map_err(|_| format!("AGONES_SDK_HTTP_PORT is not a port: {port:?}"))?;
        Ok(Some(AgonesConfig {
            sdk: SocketAddr::from(([127, 0, 0, 1], port)),
            health_every: Duration::from_secs(2),
        }))
    }
}

/// One call to the SDK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `PUT /alpha/player/capacity`.
    Capacity(u64),
    /// `POST /ready`.
    Ready,
    /// `POST /health`.
    Health,
    /// `POST /alpha/player/connect`.
    Connect(u32),
    /// `POST /alpha/player/disconnect`.
    Disconnect(u32),
    /// `POST /shutdown`.
    Shutdown,
}

impl Call {
    /// Method, path and JSON body.
    pub fn request(&self) -> (&'static str, &'static str, String) {
        match self {
            // int64 travels as a JSON string through the SDK's gateway.
            Call::Capacity(n) => (
                "PUT",
                "/alpha/player/capacity",
                serde_json::json!({"count": n.to_string()}).to_string(),
            ),
            Call::Ready => ("POST", "/ready", "{}".into()),
            Call::Health => ("POST", "/health", "{}".into()),
            Call::Connect(p) => (
                "POST",
                "/alpha/player/connect",
                serde_json::json!({"playerID": p.to_string()}).to_string(),
            ),
            Call::Disconnect(p) => (
                "POST",
                "/alpha/player/disconnect",
                serde_json::json!({"playerID": p.to_string()}).to_string(),
            ),
            Call::Shutdown => ("POST", "/shutdown", "{}".into()),
        }
    }
}

/// What the server is, as the reporter sees it at one instant.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// The server accepts players.
    pub accepting: bool,
    /// The tick ran recently.
    pub tick_healthy: bool,
    /// The server is draining or its match ended: the pod should go.
    pub shutting_down: bool,
    /// Players in the server.
    pub players: BTreeSet<u32>,
    /// Players it carries now (its maximum, or fewer under load).
    pub capacity: u64,
}

/// Decides the SDK calls: capacity, then ready, then health pings and player changes,
/// and shutdown last. Pure: time is passed in.
#[derive(Debug)]
pub struct Reporter {
    health_every: Duration,
    /// The capacity the SDK was last told.
    capacity_told: Option<u64>,
    ready_told: bool,
    shutdown_told: bool,
    next_health: Option<Instant>,
    /// Players the SDK has been told are connected.
    told: BTreeSet<u32>,
}

impl Reporter {
    /// A reporter that pings health every `health_every`.
    pub fn new(health_every: Duration) -> Reporter {
        Reporter {
            health_every,
            capacity_told: None,
            ready_told: false,
            shutdown_told: false,
            next_health: None,
            told: BTreeSet::new(),
        }
    }

    /// The next call to make now, if any.
    pub fn next(&self, seen: &Seen, now: Instant) -> Option<Call> {
        if self.shutdown_told {
            return None;
        }
        if seen.shutting_down {
            return Some(Call::Shutdown);
        }
        if !seen.accepting {
            return None;
        }
        if self.capacity_told != Some(seen.capacity) {
            return Some(Call::Capacity(seen.capacity));
        }
        if !self.ready_told {
            return Some(Call::Ready);
        }
        if seen.tick_healthy && self.next_health.is_none_or(|t| now >= t) {
            return Some(Call::Health);
        }
        // Leaves first: a slot given back before the next one is taken.
        if let Some(p) = self.told.difference(&seen.players).next() {
            return Some(Call::Disconnect(*p));
        }
        if let Some(p) = seen.players.difference(&self.told).next() {
            return Some(Call::Connect(*p));
        }
        None
    }

    /// When [`Reporter::next`] may have something new without being told anything: the
    /// next health ping.
    pub fn wake_at(&self) -> Option<Instant> {
        self.next_health
    }

    /// `call` succeeded at `now`.
    pub fn done(&mut self, call: &Call, now: Instant) {
        match call {
            Call::Capacity(n) => self.capacity_told = Some(*n),
            Call::Ready => self.ready_told = true,
            Call::Health => self.next_health = Some(now + self.health_every),
            Call::Connect(p) => {
                self.told.insert(*p);
            }
            Call::Disconnect(p) => {
                self.told.remove(p);
            }
            Call::Shutdown => self.shutdown_told = true,
        }
    }

    /// Whether `POST /shutdown` went through.
    pub fn shut_down(&self) -> bool {
        self.shutdown_told
    }
}

/// What the server shares with the reporting task: its players and a bell rung when they
/// change.
#[derive(Debug, Default)]
pub(crate) struct Players {
    set: Mutex<BTreeSet<u32>>,
    changed: Notify,
}

impl Players {
    pub(crate) fn joined(&self, p: u32) {
        if let Ok(mut s) = self.set.lock() {
            s.insert(p);
        }
        self.changed.notify_one();
    }

    pub(crate) fn left(&self, p: u32) {
        if let Ok(mut s) = self.set.lock() {
            s.remove(&p);
        }
        self.changed.notify_one();
    }

    fn now(&self) -> BTreeSet<u32> {
        self.set.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// Longest wait for one SDK call.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Backoff after a failed call: from the first, doubling to the last.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Reports to the SDK until the server stops: on shutdown, `POST /shutdown` (tried until
/// it goes through or `CALL_TIMEOUT` twice over) and the task ends. `tick_healthy` and
/// `accepting` are read at each decision.
pub(crate) async fn run(
    cfg: AgonesConfig,
    players: Arc<Players>,
    status: impl Fn() -> (bool, bool, u64) + Send + 'static,
    mut shutdown: watch::Receiver<Option<String>>,
) {
    let client = match reqwest::Client::builder()
        .no_proxy()
        .timeout(CALL_TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "agones: no HTTP client; not reporting");
            return std::future::pending().await;
        }
    };
    let base = format!("http://{}", cfg.sdk);
    let mut r = Reporter::new(cfg.health_every);
    let mut retry = Backoff::new(RETRY_FIRST, RETRY_MAX, 1);
    let mut stopping: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let (accepting, tick_healthy, capacity) = status();
        let seen = Seen {
            accepting,
            tick_healthy,
            shutting_down: stopping.is_some(),
            players: players.now(),
            capacity,
        };
        if let Some(call) = r.next(&seen, now) {
            let (method, path, body) = call.request();
            let req = match method {
                "PUT" => client.put(format!("{base}{path}")),
                _ => client.post(format!("{base}{path}")),
            };
            let sent = req
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await;
            match sent.map(|resp| resp.status()) {
                Ok(s) if s.is_success() => {
                    debug!(?call, "agones call");
                    if call == Call::Ready {
                        info!(sdk = %cfg.sdk, "agones: ready");
                    }
                    r.done(&call, Instant::now());
                    retry.reset();
                    continue;
                }
                // A refused player connect (capacity reached) is the SDK's answer, not a
                // failure to retry: the player is counted as told.
                Ok(s) if matches!(call, Call::Connect(_)) && s.is_client_error() => {
                    warn!(?call, status = %s, "agones refused a player connect");
                    r.done(&call, Instant::now());
                    continue;
                }
                Ok(s) => warn!(?call, status = %s, "agones call refused"),
                Err(e) => warn!(?call, error = %e, "agones call failed"),
            }
            if stopping.is_some_and(|t| t.elapsed() > CALL_TIMEOUT * 2) {
                return;
            }
            tokio::time::sleep(retry.next_delay()).await;
            continue;
        }
        if r.shut_down() {
            return;
        }
        // The next ping when it is ahead; while the tick is stalled (a ping overdue) or
        // before the server accepts, look again a quarter period on.
        let soon = now + cfg.health_every / 4;
        let wake = r
            .wake_at()
            .filter(|t| *t > now)
            .map_or(soon, |t| t.min(soon));
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = players.changed.notified() => {}
            _ = shutdown.changed(), if stopping.is_none() => stopping = Some(Instant::now()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(players: &[u32]) -> Seen {
        Seen {
            accepting: true,
            tick_healthy: true,
            shutting_down: false,
            players: players.iter().copied().collect(),
            capacity: 64,
        }
    }

    /// Drives the reporter as the task does, every call succeeding; returns the calls.
    fn drain(r: &mut Reporter, s: &Seen, now: Instant) -> Vec<Call> {
        let mut calls = Vec::new();
        while let Some(c) = r.next(s, now) {
            r.done(&c, now);
            calls.push(c);
        }
        calls
    }

    #[test]
    fn capacity_then_ready_then_health_and_players_then_shutdown_last() {
        let t0 = Instant::now();
        let mut r = Reporter::new(Duration::from_secs(2));
        let mut s = seen(&[]);
        s.accepting = false;
        assert_eq!(r.next(&s, t0), None, "nothing before the server accepts");
        s.accepting = true;
        assert_eq!(
            drain(&mut r, &s, t0),
            [Call::Capacity(64), Call::Ready, Call::Health]
        );
        let s = seen(&[3, 1]);
        assert_eq!(drain(&mut r, &s, t0), [Call::Connect(1), Call::Connect(3)]);
        // Health again only after the period.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(r.next(&s, t1), None);
        let t2 = t0 + Duration::from_secs(2);
        assert_eq!(r.next(&s, t2), Some(Call::Health));
        r.done(&Call::Health, t2);
        // Player 3 leaves and 7 joins: the leave first.
        let s = seen(&[1, 7]);
        assert_eq!(
            drain(&mut r, &s, t2),
            [Call::Disconnect(3), Call::Connect(7)]
        );
        // The load lowers what the server carries: the SDK is told, once.
        let mut loaded = seen(&[1, 7]);
        loaded.capacity = 40;
        assert_eq!(drain(&mut r, &loaded, t2), [Call::Capacity(40)]);
        assert_eq!(drain(&mut r, &seen(&[1, 7]), t2), [Call::Capacity(64)]);
        // A stalled tick: no health, however long.
        let mut stalled = seen(&[1, 7]);
        stalled.tick_healthy = false;
        assert_eq!(r.next(&stalled, t2 + Duration::from_secs(60)), None);
        // Shutting down: shutdown, then nothing more.
        let mut down = seen(&[1, 7]);
        down.shutting_down = true;
        assert_eq!(drain(&mut r, &down, t2), [Call::Shutdown]);
        assert_eq!(r.next(&seen(&[]), t2 + Duration::from_secs(60)), None);
    }

    #[test]
    fn a_failed_call_is_asked_for_again_and_players_are_reconciled_not_queued() {
        let t0 = Instant::now();
        let mut r = Reporter::new(Duration::from_secs(2));
        let s = Seen {
            capacity: 8,
            ..seen(&[])
        };
        // The sidecar is not up: the same first call until it succeeds.
        assert_eq!(r.next(&s, t0), Some(Call::Capacity(8)));
        assert_eq!(r.next(&s, t0), Some(Call::Capacity(8)));
        drain(&mut r, &s, t0);
        // A player who came and went while calls failed costs nothing.
        let s = Seen {
            capacity: 8,
            ..seen(&[5])
        };
        assert_eq!(r.next(&s, t0), Some(Call::Connect(5)));
        let gone = Seen {
            capacity: 8,
            ..seen(&[])
        };
        assert!(drain(&mut r, &gone, t0).is_empty());
    }

    #[test]
    fn requests_match_the_sdk_gateway() {
        assert_eq!(
            Call::Capacity(64).request(),
            ("PUT", "/alpha/player/capacity", "{\"count\":\"64\"}".into())
        );
        assert_eq!(
            Call::Connect(12).request(),
            (
                "POST",
                "/alpha/player/connect",
                "{\"playerID\":\"12\"}".into()
            )
        );
        assert_eq!(Call::Ready.request(), ("POST", "/ready", "{}".into()));
    }
}

//! The server's counters and their Prometheus text exposition, and the table of players
//! flagged by move validation (served as JSON to operators and the live view).

use crate::admission::Decision;
use crate::udp::{Rejected, UdpCounts};
use expel_shared::protocol::channel::Channel;
use expel_shared::protocol::server::{ServerStats, REFUSALS};
use expel_shared::validate::ViolationKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Upper bounds (seconds) of the tick duration histogram's buckets: fine enough (about
/// ×1.25 apart) that quantiles read off them are within a few percent.
const TICK_BUCKETS: [f64; 30] = [
    0.00005, 0.0001, 0.00015, 0.0002, 0.00025, 0.0003, 0.0004, 0.0005, 0.0006, 0.0008, 0.001,
    0.00125, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.0125, 0.016, 0.02,
    0.025, 0.032, 0.05, 0.064, 0.1, 0.25,
];

/// Seconds over which the longest tick is reported (a scraper polling at least this often
/// sees every maximum).
const MAX_WINDOW: usize = 5;

/// The outcomes of a re-run reported prediction, as `expel_prediction_replays_total`
/// labels them.
pub(crate) const REPLAY_OUTCOMES: [&str; 3] = ["same", "apart", "unknown"];
/// What became of the game's messages, as `expel_messages_total` labels it: sent by the
/// server, received from clients and taken, dropped (stale, repeated, no room or no
/// game), refused (too large, over the rate, malformed).
pub(crate) const MESSAGE_OUTCOMES: [&str; 4] = ["sent", "received", "dropped", "refused"];

/// Players kept in the flagged table; past it, new players' violations are only counted.
const FLAGGED_CAP: usize = 65_536;

/// The server's counters. Updated with relaxed atomics from any task.
#[derive(Default, Debug)]
pub struct Metrics {
    /// Players in the world.
    pub players: AtomicU64,
    /// Players the server carries now: its maximum, or fewer while its load says so.
    pub capacity: AtomicU64,
    /// Ticks stepped.
    pub ticks: AtomicU64,
    /// Tick lengths over the budget (the loop fell behind).
    pub overruns: AtomicU64,
    /// Threads a tick's per-player work runs on now (more than one only while it
    /// spreads over the workers).
    pub tick_threads: AtomicU64,
    /// I/O threads, each with its own socket on the QUIC port.
    pub io_threads: AtomicU64,
    /// Datagrams received.
    pub datagrams_in: AtomicU64,
    /// Datagrams sent.
    pub datagrams_out: AtomicU64,
    /// Datagram bytes received.
    pub bytes_in: AtomicU64,
    /// Datagram bytes sent.
    pub bytes_out: AtomicU64,
    /// Snapshots that could not be sent (no room, connection gone).
    pub snapshot_drops: AtomicU64,
    /// Commands applied on their tick.
    pub inputs_applied: AtomicU64,
    /// Ticks that passed without a joined client's command.
    pub inputs_missing: AtomicU64,
    /// Commands that arrived after their tick.
    pub inputs_late: AtomicU64,
    /// Redundant copies of commands.
    pub inputs_duplicate: AtomicU64,
    /// Commands stamped too far ahead.
    pub inputs_too_far_ahead: AtomicU64,
    /// Client-reported predictions that differed from the server's state, and rejected
    /// claims (corrections).
    pub corrections: AtomicU64,
    /// Trusted-client claims accepted.
    pub claims_accepted: AtomicU64,
    /// Trusted-client claims rejected (each also counted as a violation).
    pub claims_rejected: AtomicU64,
    /// Trusted-client ticks without a claim (the player held its state).
    pub claims_missing: AtomicU64,
    /// Datagrams that did not decode.
    pub malformed_datagrams: AtomicU64,
    /// Input datagrams dropped undecoded, over their connection's allowance.
    pub datagrams_over_rate: AtomicU64,
    /// QUIC packets dropped undecrypted: over their connection's packet rate.
    pub packets_over_rate: AtomicU64,
    /// Control messages that did not decode.
    pub malformed_control: AtomicU64,
    /// Connections accepted at the QUIC level.
    pub connections: AtomicU64,
    /// Handshakes that failed (wrong ALPN, TLS errors).
    pub handshake_failures: AtomicU64,
    /// Clients kicked.
    pub kicks: AtomicU64,
    /// Clients holding a player slot: welcomed, whether still receiving the map or in the
    /// world.
    pub clients: AtomicU64,
    /// Connections not yet joined (handshaking, or before their hello is answered).
    pub pending: AtomicU64,
    /// Connection attempts by what admission decided, in [`Decision::ALL`] order.
    pub incoming: [AtomicU64; Decision::ALL.len()],
    /// What arrived at the QUIC socket, and what its doorman dropped.
    pub udp: Arc<UdpCounts>,
    /// QUIC handshakes that did not finish within the handshake timeout.
    pub handshake_timeouts: AtomicU64,
    /// Connections dropped because a write to the peer waited past its deadline (the
    /// peer granted no flow-control credit).
    pub stalls: AtomicU64,
    /// HTTP connections accepted.
    pub http_connections: AtomicU64,
    /// HTTP connections closed at once: too many from the address.
    pub http_refused: AtomicU64,
    /// Errors accepting HTTP connections (such as the descriptor limit); each backs off.
    pub http_accept_errors: AtomicU64,
    /// HTTP requests for an operator's path without the operator token (answered 401).
    pub http_unauthorized: AtomicU64,
    /// Live viewers dropped for not reading their stream.
    pub live_dropped: AtomicU64,
    /// Datagrams the transport would not take (the connection gone or too small).
    pub datagram_send_errors: AtomicU64,
    /// Ticks run a period or more late (caught up on): the server's lateness.
    pub ticks_late: AtomicU64,
    /// Ticks skipped because the process could not keep up (paused or starved).
    pub ticks_skipped: AtomicU64,
    /// Reported predictions re-run, by outcome in [`REPLAY_OUTCOMES`] order.
    pub replays: [AtomicU64; REPLAY_OUTCOMES.len()],
    /// The game's messages: by channel ([`Channel::index`]), then outcome in
    /// [`MESSAGE_OUTCOMES`] order.
    pub messages: [[AtomicU64; MESSAGE_OUTCOMES.len()]; 2],
    /// Move-validation violations, by kind in [`ViolationKind::ALL`] order.
    pub violations: [AtomicU64; ViolationKind::ALL.len()],
    /// Refusals by reason, in [`REFUSALS`] order.
    pub refusals: [AtomicU64; REFUSALS.len()],
    tick_hist: Mutex<TickHistogram>,
    /// The game rules' summary for operators (JSON; `null` without rules).
    game: Mutex<String>,
    /// Violations by player (ids that had any), in [`ViolationKind::ALL`] order.
    flagged: Mutex<BTreeMap<u32, [u64; ViolationKind::ALL.len()]>>,
    /// Whether the server accepts players (false while shutting down).
    pub ready: AtomicBool,
    started: Option<Instant>,
    /// When the last tick ran: milliseconds after `started`, plus one (0: never).
    last_tick_ms: AtomicU64,
}

/// A tick loop that has not run for this long is stalled: health checks fail.
pub(crate) const STALL: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Default)]
struct TickHistogram {
    buckets: [u64; TICK_BUCKETS.len()],
    count: u64,
    sum: f64,
    /// The longest tick of each of the last seconds, with the second it was in.
    max: [(u64, f64); MAX_WINDOW],
}

/// The process's CPU time (user + system), seconds, where the platform tells it.
fn process_cpu_seconds() -> Option<f64> {
    // Linux: fields 14 and 15 of /proc/self/stat, in clock ticks (USER_HZ, 100 on every
    // Linux platform Rust supports).
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

impl Metrics {
    /// Metrics for a server starting now.
    pub fn new() -> Metrics {
        Metrics {
            started: Some(Instant::now()),
            game: Mutex::new("null".into()),
            ..Metrics::default()
        }
    }

    /// Records a violation by `player` in the flagged table (the counts by kind come from
    /// the protocol machine's [`ServerStats`]).
    pub fn flag(&self, player: u32, kind: ViolationKind) {
        let Some(i) = ViolationKind::ALL.iter().position(|k| *k == kind) else {
            return;
        };
        if let Ok(mut t) = self.flagged.lock() {
            if t.len() < FLAGGED_CAP || t.contains_key(&player) {
                t.entry(player).or_default()[i] += 1;
            }
        }
    }

    /// Takes the protocol machine's counters (it owns them; these are their copies).
    pub fn absorb(&self, s: &ServerStats) {
        let set = |a: &AtomicU64, v: u64| a.store(v, Relaxed);
        set(&self.datagrams_in, s.datagrams_in);
        set(&self.bytes_in, s.bytes_in);
        set(&self.datagrams_out, s.datagrams_out);
        set(&self.bytes_out, s.bytes_out);
        set(&self.snapshot_drops, s.snapshot_drops);
        set(&self.inputs_applied, s.inputs.applied);
        set(&self.inputs_missing, s.inputs.missing);
        set(&self.inputs_late, s.inputs.late);
        set(&self.inputs_duplicate, s.inputs.duplicate);
        set(&self.inputs_too_far_ahead, s.inputs.too_far_ahead);
        set(&self.corrections, s.corrections);
        set(&self.claims_accepted, s.claims_accepted);
        set(&self.claims_rejected, s.claims_rejected);
        set(&self.claims_missing, s.claims_missing);
        set(&self.malformed_datagrams, s.malformed_datagrams);
        set(&self.datagrams_over_rate, s.datagrams_over_rate);
        set(&self.malformed_control, s.malformed_control);
        set(&self.kicks, s.kicks);
        set(&self.clients, s.clients);
        set(&self.ticks_late, s.ticks_late);
        set(&self.ticks_skipped, s.ticks_skipped);
        for (a, v) in self.refusals.iter().zip(s.refusals) {
            set(a, v);
        }
        for (a, v) in self.violations.iter().zip(s.violations) {
            set(a, v);
        }
        for (a, c) in self.messages.iter().zip(&s.messages) {
            for (a, v) in a.iter().zip([c.sent, c.received, c.dropped, c.refused]) {
                set(a, v);
            }
        }
        let same = s.replays - s.replays_unknown - s.replays_apart;
        for (a, v) in self
            .replays
            .iter()
            .zip([same, s.replays_apart, s.replays_unknown])
        {
            set(a, v);
        }
    }

    /// The game rules' newest summary for operators (JSON).
    pub fn set_game(&self, json: String) {
        if let Ok(mut g) = self.game.lock() {
            *g = json;
        }
    }

    /// The game rules' summary (JSON: `null` while there is none).
    pub fn game(&self) -> String {
        self.game.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Players with violations: id and counts in [`ViolationKind::ALL`] order.
    pub fn flagged(&self) -> BTreeMap<u32, [u64; ViolationKind::ALL.len()]> {
        self.flagged.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// The flagged players as JSON: `{"players":[{"id":7,"violations":{"speed":2}}]}`.
    pub fn flagged_json(&self) -> String {
        let players: Vec<_> = self
            .flagged()
            .iter()
            .map(|(id, counts)| {
                let violations: serde_json::Map<String, serde_json::Value> = ViolationKind::ALL
                    .iter()
                    .zip(counts)
                    .filter(|(_, c)| **c > 0)
                    .map(|(k, c)| (k.name().to_string(), (*c).into()))
                    .collect();
                serde_json::json!({"id": id, "violations": violations})
            })
            .collect();
        serde_json::json!({ "players": players }).to_string()
    }

    /// The longest tick of the last few seconds, seconds.
    pub fn recent_max_tick(&self) -> f64 {
        let now = self.second();
        self.tick_hist.lock().map_or(0.0, |h| {
            h.max
                .iter()
                .filter(|(s, _)| s + MAX_WINDOW as u64 > now)
                .map(|(_, m)| *m)
                .fold(0.0, f64::max)
        })
    }

    /// Whether the tick ran within [`STALL`] (or, before the first tick, the server
    /// started within it).
    pub fn tick_healthy(&self) -> bool {
        let Some(started) = self.started else {
            return false;
        };
        let now = started.elapsed().as_millis() as u64;
        let last = self.last_tick_ms.load(Relaxed).saturating_sub(1);
        now.saturating_sub(last) < STALL.as_millis() as u64
    }

    fn second(&self) -> u64 {
        self.started.map_or(0, |s| s.elapsed().as_secs())
    }

    /// Counts an admission decision.
    pub fn incoming(&self, d: Decision) {
        if let Some(i) = Decision::ALL.iter().position(|x| *x == d) {
            self.incoming[i].fetch_add(1, Relaxed);
        }
    }

    /// Records one tick's duration.
    pub fn tick(&self, seconds: f64) {
        self.ticks.fetch_add(1, Relaxed);
        let at = self.started.map_or(0, |s| s.elapsed().as_millis() as u64);
        self.last_tick_ms.store(at + 1, Relaxed);
        let now = self.second();
        if let Ok(mut h) = self.tick_hist.lock() {
            for (i, b) in TICK_BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    h.buckets[i] += 1;
                }
            }
            h.count += 1;
            h.sum += seconds;
            let slot = &mut h.max[now as usize % MAX_WINDOW];
            if slot.0 != now {
                *slot = (now, 0.0);
            }
            slot.1 = slot.1.max(seconds);
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let mut counter = |name: &str, help: &str, v: &AtomicU64, kind: &str| {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Relaxed)
            );
        };
        counter(
            "expel_players",
            "Players in the world.",
            &self.players,
            "gauge",
        );
        counter(
            "expel_capacity_players",
            "Players the server carries now: its maximum, or fewer while its load says so (joins past it are refused as full_load).",
            &self.capacity,
            "gauge",
        );
        counter(
            "expel_ticks_total",
            "Simulation ticks stepped.",
            &self.ticks,
            "counter",
        );
        counter(
            "expel_tick_overruns_total",
            "Ticks that took longer than the tick period.",
            &self.overruns,
            "counter",
        );
        counter(
            "expel_tick_threads",
            "Threads a tick's per-player work runs on now (more than one only while ticks are long).",
            &self.tick_threads,
            "gauge",
        );
        counter(
            "expel_datagrams_in_total",
            "Datagrams received.",
            &self.datagrams_in,
            "counter",
        );
        counter(
            "expel_datagrams_out_total",
            "Datagrams sent.",
            &self.datagrams_out,
            "counter",
        );
        counter(
            "expel_bytes_in_total",
            "Datagram bytes received.",
            &self.bytes_in,
            "counter",
        );
        counter(
            "expel_bytes_out_total",
            "Datagram bytes sent.",
            &self.bytes_out,
            "counter",
        );
        counter(
            "expel_snapshot_drops_total",
            "Snapshots that could not be sent.",
            &self.snapshot_drops,
            "counter",
        );
        counter(
            "expel_inputs_applied_total",
            "Commands applied on their tick.",
            &self.inputs_applied,
            "counter",
        );
        counter(
            "expel_inputs_missing_total",
            "Ticks without the client's command (the last one repeated).",
            &self.inputs_missing,
            "counter",
        );
        counter(
            "expel_inputs_late_total",
            "Commands that arrived after their tick.",
            &self.inputs_late,
            "counter",
        );
        counter(
            "expel_inputs_duplicate_total",
            "Redundant copies of commands.",
            &self.inputs_duplicate,
            "counter",
        );
        counter(
            "expel_inputs_too_far_ahead_total",
            "Commands stamped too far ahead, refused.",
            &self.inputs_too_far_ahead,
            "counter",
        );
        counter(
            "expel_corrections_total",
            "Client predictions that differed from the server.",
            &self.corrections,
            "counter",
        );
        counter(
            "expel_claims_accepted_total",
            "Trusted-client claims accepted.",
            &self.claims_accepted,
            "counter",
        );
        counter(
            "expel_claims_rejected_total",
            "Trusted-client claims rejected and corrected.",
            &self.claims_rejected,
            "counter",
        );
        counter(
            "expel_claims_missing_total",
            "Trusted-client ticks without a claim; the player held its state.",
            &self.claims_missing,
            "counter",
        );
        counter(
            "expel_malformed_datagrams_total",
            "Datagrams that did not decode.",
            &self.malformed_datagrams,
            "counter",
        );
        counter(
            "expel_datagrams_over_rate_total",
            "Input datagrams dropped undecoded: over their connection's allowance (a few times the input rate).",
            &self.datagrams_over_rate,
            "counter",
        );
        counter(
            "expel_packets_over_rate_total",
            "QUIC packets of a playing connection dropped undecrypted: over its packet rate.",
            &self.packets_over_rate,
            "counter",
        );
        counter(
            "expel_malformed_control_total",
            "Control messages that did not decode.",
            &self.malformed_control,
            "counter",
        );
        counter(
            "expel_connections_total",
            "QUIC connections accepted.",
            &self.connections,
            "counter",
        );
        counter(
            "expel_handshake_failures_total",
            "QUIC handshakes that failed.",
            &self.handshake_failures,
            "counter",
        );
        counter(
            "expel_kicks_total",
            "Clients kicked.",
            &self.kicks,
            "counter",
        );
        counter(
            "expel_clients",
            "Clients holding a player slot (welcomed, receiving the map or playing).",
            &self.clients,
            "gauge",
        );
        counter(
            "expel_pending_connections",
            "Connections not yet joined (handshaking or before their hello is answered).",
            &self.pending,
            "gauge",
        );
        counter(
            "expel_handshake_timeouts_total",
            "QUIC handshakes that did not finish in time.",
            &self.handshake_timeouts,
            "counter",
        );
        counter(
            "expel_stalls_total",
            "Connections dropped because the peer granted no flow-control credit in time.",
            &self.stalls,
            "counter",
        );
        counter(
            "expel_http_connections_total",
            "HTTP connections accepted.",
            &self.http_connections,
            "counter",
        );
        counter(
            "expel_http_refused_total",
            "HTTP connections closed at once (too many from one address).",
            &self.http_refused,
            "counter",
        );
        counter(
            "expel_http_accept_errors_total",
            "Errors accepting HTTP connections (each one backs off).",
            &self.http_accept_errors,
            "counter",
        );
        counter(
            "expel_http_unauthorized_total",
            "HTTP requests for an operator's path without the operator token (answered 401).",
            &self.http_unauthorized,
            "counter",
        );
        counter(
            "expel_live_viewers_dropped_total",
            "Live viewers dropped for not reading their stream.",
            &self.live_dropped,
            "counter",
        );
        counter(
            "expel_datagram_send_errors_total",
            "Datagrams the transport would not take.",
            &self.datagram_send_errors,
            "counter",
        );
        counter(
            "expel_ticks_late_total",
            "Ticks run a period or more after they were due (caught up on, nobody judged for it).",
            &self.ticks_late,
            "counter",
        );
        counter(
            "expel_ticks_skipped_total",
            "Ticks skipped because the process could not keep up.",
            &self.ticks_skipped,
            "counter",
        );
        counter(
            "expel_udp_datagrams_total",
            "UDP datagrams received at the QUIC socket.",
            &self.udp.datagrams,
            "counter",
        );
        counter(
            "expel_udp_forwarded_total",
            "UDP datagrams one I/O thread's socket received for a connection another thread owns (a client that moved address), handed to it.",
            &self.udp.forwarded,
            "counter",
        );
        counter(
            "expel_io_threads",
            "I/O threads, each with a QUIC socket of its own on the port.",
            &self.io_threads,
            "gauge",
        );
        counter(
            "expel_udp_other_version_total",
            "Long-header packets of a QUIC version other than 1 (answered by version negotiation).",
            &self.udp.other_version,
            "counter",
        );
        let _ = writeln!(o, "# HELP expel_udp_rejected_total UDP datagrams dropped at the socket as not QUIC for this server, by reason.\n# TYPE expel_udp_rejected_total counter");
        for (r, v) in Rejected::ALL.iter().zip(&self.udp.rejected) {
            let _ = writeln!(
                o,
                "expel_udp_rejected_total{{reason=\"{}\"}} {}",
                r.label(),
                v.load(Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP expel_incoming_total Connection attempts, by what admission decided.\n# TYPE expel_incoming_total counter");
        for (d, v) in Decision::ALL.iter().zip(&self.incoming) {
            let _ = writeln!(
                o,
                "expel_incoming_total{{outcome=\"{}\"}} {}",
                d.label(),
                v.load(Relaxed)
            );
        }
        let _ = writeln!(o, "# HELP expel_refusals_total Connections refused, by reason.\n# TYPE expel_refusals_total counter");
        for (r, v) in REFUSALS.iter().zip(&self.refusals) {
            let _ = writeln!(
                o,
                "expel_refusals_total{{reason=\"{r}\"}} {}",
                v.load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP expel_violations_total Move-validation violations, by kind.\n# TYPE expel_violations_total counter"
        );
        for (k, v) in ViolationKind::ALL.iter().zip(&self.violations) {
            let _ = writeln!(
                o,
                "expel_violations_total{{kind=\"{}\"}} {}",
                k.name(),
                v.load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP expel_prediction_replays_total Reported predictions the server re-ran from the client's snapshot and commands, by outcome: the report was the re-run's (same), was not (apart: a modified client), or a command never arrived (unknown).\n# TYPE expel_prediction_replays_total counter"
        );
        for (k, v) in REPLAY_OUTCOMES.iter().zip(&self.replays) {
            let _ = writeln!(
                o,
                "expel_prediction_replays_total{{outcome=\"{k}\"}} {}",
                v.load(Relaxed)
            );
        }
        let _ = writeln!(
            o,
            "# HELP expel_messages_total The game's messages, by channel and outcome: sent (by the server), received (from clients, taken for the game), dropped (stale, repeated, no room or no game to take them), refused (too large, over the rate, malformed).\n# TYPE expel_messages_total counter"
        );
        for (ch, counts) in Channel::ALL.iter().zip(&self.messages) {
            for (k, v) in MESSAGE_OUTCOMES.iter().zip(counts) {
                let _ = writeln!(
                    o,
                    "expel_messages_total{{channel=\"{}\",outcome=\"{k}\"}} {}",
                    ch.name(),
                    v.load(Relaxed)
                );
            }
        }
        let _ = writeln!(o, "# HELP expel_tick_duration_seconds Time to step one tick and send its snapshots.\n# TYPE expel_tick_duration_seconds histogram");
        if let Ok(h) = self.tick_hist.lock() {
            for (b, c) in TICK_BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(o, "expel_tick_duration_seconds_bucket{{le=\"{b}\"}} {c}");
            }
            let _ = writeln!(
                o,
                "expel_tick_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(o, "expel_tick_duration_seconds_sum {}", h.sum);
            let _ = writeln!(o, "expel_tick_duration_seconds_count {}", h.count);
        }
        let _ = writeln!(
            o,
            "# HELP expel_tick_duration_max_seconds The longest tick of the last {MAX_WINDOW} seconds.\n# TYPE expel_tick_duration_max_seconds gauge\nexpel_tick_duration_max_seconds {}",
            self.recent_max_tick()
        );
        if let Some(cpu) = process_cpu_seconds() {
            let _ = writeln!(
                o,
                "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}"
            );
        }
        o
    }
}

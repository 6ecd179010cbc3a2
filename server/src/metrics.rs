//! The server's metrics (each defined once, exposed through `prometheus-client`) and the
//! table of players flagged by move validation (served as JSON to operators and the live
//! view).
//!
//! Two kinds of metric: the server's own (its tasks count them as they go: the table in
//! [`metrics!`]), and the protocol machine's, which the machine owns as plain numbers in
//! [`ServerStats`]; the tick loop hands over a copy and the exposition reads it at scrape
//! time ([`MACHINE`]), so no counter is kept twice.

use crate::admission::Decision;
use crate::udp::{Rejected, UdpCounts};
use expel_core::validate::ViolationKind;
use expel_protocol::messages::Channel;
use expel_protocol::server::{MessageDrop, ServerStats, REFUSALS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A gauge of whole numbers (players, threads).
pub type Gauge = prometheus_client::metrics::gauge::Gauge<u64, AtomicU64>;
/// A gauge of fractions (a thread's busy share).
pub type Share = prometheus_client::metrics::gauge::Gauge<f64, AtomicU64>;

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

/// Players kept in the flagged table; past it, new players' violations are only counted.
const FLAGGED_CAP: usize = 65_536;

/// A tick loop that has not run for this long is stalled: health checks fail.
pub(crate) const STALL: std::time::Duration = std::time::Duration::from_secs(1);

/// The media types of the two expositions: OpenMetrics (what `prometheus-client` writes,
/// and what Prometheus asks for first) and Prometheus's classic text, for every other
/// reader (see [`Metrics::render_classic`]).
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub(crate) const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A counter over one label whose values are known up front: every series reads 0 from
/// the start rather than being absent, and a count indexes an array instead of hashing
/// its labels. Whole counts by default; [`Seconds`] for time.
#[derive(Clone, Debug)]
pub struct Labelled<const N: usize, C = Counter> {
    key: &'static str,
    values: [&'static str; N],
    by: [C; N],
}

/// A counter of seconds (CPU time).
pub type Seconds = Counter<f64, AtomicU64>;

impl<const N: usize, C: Default> Labelled<N, C> {
    fn new(key: &'static str, values: [&'static str; N]) -> Self {
        Labelled {
            key,
            values,
            by: std::array::from_fn(|_| C::default()),
        }
    }
}

impl<const N: usize> Labelled<N> {
    /// Counts one for the `i`-th value.
    pub fn inc(&self, i: usize) {
        if let Some(c) = self.by.get(i) {
            c.inc();
        }
    }
}

impl<const N: usize> Labelled<N, Seconds> {
    /// Adds `secs` for the `i`-th value.
    pub fn add(&self, i: usize, secs: f64) {
        if let Some(c) = self.by.get(i) {
            c.inc_by(secs);
        }
    }
}

impl<const N: usize, C> TypedMetric for Labelled<N, C> {
    const TYPE: MetricType = MetricType::Counter;
}

impl<const N: usize, C: EncodeMetric> EncodeMetric for Labelled<N, C> {
    fn encode(&self, mut e: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (v, c) in self.values.iter().zip(&self.by) {
            c.encode(e.encode_family(&[(self.key, *v)])?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// What an I/O thread's CPU went to (`expel_io_cpu_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoWork {
    /// Reading its socket, and the QUIC work of what arrived (decryption, the
    /// connections' events, acknowledgements sent at once).
    Receive,
    /// The machine's outputs through QUIC to the socket (encryption, the packets).
    Send,
    /// The rest: QUIC's timers, handshakes, waiting for work.
    Other,
}

impl IoWork {
    /// Every kind, in the order of the metric's series.
    pub const ALL: [IoWork; 3] = [IoWork::Receive, IoWork::Send, IoWork::Other];

    /// The `work` label's value.
    pub fn label(self) -> &'static str {
        match self {
            IoWork::Receive => "receive",
            IoWork::Send => "send",
            IoWork::Other => "other",
        }
    }
}

/// Declares [`Metrics`] with the server's own metrics, one line each: the field, its
/// type, its Prometheus name (a counter's without the `_total` the exposition adds), its
/// help (also the field's doc), and how it is made; then the fields that are not
/// metrics, made by `Default`.
macro_rules! metrics {
    (
        $( $field:ident: $ty:ty = $name:literal, $help:literal, $make:expr; )*
        --
        $( $(#[$doc:meta])* $other:ident: $oty:ty, )*
    ) => {
        /// The server's metrics and the operators' tables. Updated from any task.
        #[derive(Debug)]
        pub struct Metrics {
            $( #[doc = $help] pub $field: $ty, )*
            $( $(#[$doc])* $other: $oty, )*
        }

        impl Metrics {
    /// Whether the load holds the players at what the server carries now, below its
    /// maximum of `max_players` (whose refusal is the hello's): a new connection is shed
    /// at the door, on either door.
    pub(crate) fn over_load(&self, max_players: u64) -> bool {
        let carried = self.capacity.get();
        carried < max_players && self.read_machine(|s| s.clients) >= carried
    }

            fn made() -> Metrics {
                Metrics {
                    $( $field: $make, )*
                    $( $other: Default::default(), )*
                }
            }

            fn register(&self, r: &mut Registry) {
                // The registry ends each help with a full stop of its own.
                $( r.register($name, $help.trim_end_matches('.'), self.$field.clone()); )*
            }
        }
    };
}

metrics! {
    players: Gauge = "expel_players", "Players in the world.", Gauge::default();
    capacity: Gauge = "expel_capacity_players",
        "Players the server carries now: its maximum, or fewer while its load says so (joins past it are refused as full_load).",
        Gauge::default();
    ticks: Counter = "expel_ticks", "Simulation ticks stepped.", Counter::default();
    overruns: Counter = "expel_tick_overruns", "Ticks that took longer than the tick period.",
        Counter::default();
    tick_threads: Gauge = "expel_tick_threads",
        "Worker threads a tick's per-player work runs on (the machine's own thread keeps the serial part).",
        Gauge::default();
    tick_duration: Histogram = "expel_tick_duration_seconds",
        "Time to step one tick and send its snapshots.",
        Histogram::new(TICK_BUCKETS);
    neighbour: Gauge = "expel_cpu_neighbour_percent",
        "Share of the server's cores' time other processes took of late (a noisy neighbour), in percent.",
        Gauge::default();
    machine_busy: Share = "expel_machine_busy_ratio",
        "Share of the last quarter second the machine's thread ran (0 to 1): the serial part of the ticks and taking what arrived, the one thread that caps a world's players.",
        Share::default();
    io_threads: Gauge = "expel_io_threads",
        "I/O threads, each with a QUIC socket of its own on the port.", Gauge::default();
    packets_over_rate: Counter = "expel_packets_over_rate",
        "QUIC packets of a playing connection dropped undecrypted: over its packet rate.",
        Counter::default();
    connections: Counter = "expel_connections", "QUIC connections accepted.", Counter::default();
    handshake_failures: Counter = "expel_handshake_failures",
        "QUIC handshakes that failed (wrong ALPN, TLS errors).", Counter::default();
    handshake_timeouts: Counter = "expel_handshake_timeouts",
        "QUIC handshakes that did not finish in time.", Counter::default();
    pending: Gauge = "expel_pending_connections",
        "Connections not yet joined (handshaking or before their hello is answered).",
        Gauge::default();
    incoming: Labelled<{ Decision::ALL.len() }> = "expel_incoming",
        "Connection attempts, by what admission decided.",
        Labelled::new("outcome", Decision::ALL.map(Decision::label));
    stalls: Counter = "expel_stalls",
        "Connections dropped because the peer granted no flow-control credit in time.",
        Counter::default();
    datagrams_overflowed: Counter = "expel_datagrams_overflowed",
        "Datagrams a connection received in a burst past its receive buffer (16 KiB) before they were taken: QUIC dropped them, the oldest first.",
        Counter::default();
    datagram_send_errors: Counter = "expel_datagram_send_errors",
        "Datagrams the transport would not take (the connection gone or too small).",
        Counter::default();
    udp_datagrams: Counter = "expel_udp_datagrams",
        "UDP datagrams received at the QUIC socket.", Counter::default();
    udp_sent: Counter = "expel_udp_sent",
        "UDP datagrams the QUIC sockets sent.", Counter::default();
    io_cpu: Labelled<{ IoWork::ALL.len() }, Seconds> = "expel_io_cpu_seconds",
        "CPU time of the QUIC I/O threads, by work: receive (reading the sockets and the QUIC work of what arrived), send (the machine's outputs through QUIC to the sockets), other (QUIC's timers, handshakes, waiting). Over expel_udp_datagrams and expel_udp_sent: the cost of a datagram each way.",
        Labelled::new("work", IoWork::ALL.map(IoWork::label));
    udp_drops: Counter = "expel_udp_drops",
        "UDP datagrams the kernel dropped at the QUIC sockets: their receive queues were full.",
        Counter::default();
    udp_backlogs: Counter = "expel_udp_backlogs",
        "Looks at a QUIC socket that left datagrams in it: its I/O thread was behind its players' packets (what waits comes late to its tick).",
        Counter::default();
    udp_forwarded: Counter = "expel_udp_forwarded",
        "UDP datagrams one I/O thread's socket received for a connection another thread owns (a client that moved address), handed to it.",
        Counter::default();
    udp_other_version: Counter = "expel_udp_other_version",
        "Long-header packets of a QUIC version other than 1 (answered by version negotiation).",
        Counter::default();
    udp_rejected: Labelled<{ Rejected::ALL.len() }> = "expel_udp_rejected",
        "UDP datagrams dropped at the socket as not QUIC for this server, by reason.",
        Labelled::new("reason", Rejected::ALL.map(Rejected::label));
    web_sessions: Counter = "expel_web_sessions",
        "WebTransport sessions accepted at the browser's door.", Counter::default();
    web_open: Gauge = "expel_web_open",
        "WebTransport sessions open now.", Gauge::default();
    web_refused: Counter = "expel_web_refused",
        "WebTransport attempts refused or failed before play (admission, a wrong path, no control stream in time, TLS).",
        Counter::default();
    web_over_rate: Counter = "expel_web_datagrams_over_rate",
        "WebTransport datagrams of a session dropped before the machine: over its datagram rate.",
        Counter::default();
    record_bytes: Counter = "expel_record_bytes",
        "Bytes of the match's recording written (`--record`).", Counter::default();
    record_failures: Counter = "expel_record_failures",
        "Recordings ended early: the disk fell behind or a write failed (the match played on).",
        Counter::default();
    recording: Gauge = "expel_recording",
        "1 while the match is being recorded.", Gauge::default();
    http_connections: Counter = "expel_http_connections", "HTTP connections accepted.",
        Counter::default();
    http_refused: Counter = "expel_http_refused",
        "HTTP connections closed at once (too many from one address).", Counter::default();
    http_accept_errors: Counter = "expel_http_accept_errors",
        "Errors accepting HTTP connections (each one backs off).", Counter::default();
    http_unauthorized: Counter = "expel_http_unauthorized",
        "HTTP requests for an operator's path without the operator token (answered 401).",
        Counter::default();
    live_dropped: Counter = "expel_live_viewers_dropped",
        "Live viewers dropped for not reading their stream.", Counter::default();
    --
    /// The protocol machine's newest counters (it owns them; the exposition reads this).
    machine: Arc<Mutex<ServerStats>>,
    /// The longest tick of each of the last seconds, with the second it was in.
    tick_max: Arc<Mutex<[(u64, f64); MAX_WINDOW]>>,
    /// The game rules' summary for operators (JSON; `null` without rules).
    game: Mutex<String>,
    /// Violations by player (ids that had any), in [`ViolationKind::ALL`] order.
    flagged: Mutex<BTreeMap<u32, [u64; ViolationKind::ALL.len()]>>,
    /// Whether the server accepts players (false while shutting down).
    ready: AtomicBool,
    started: Option<Instant>,
    /// When the last tick ran: milliseconds after `started`, plus one (0: never).
    last_tick_ms: AtomicU64,
    registry: Registry,
}

/// The protocol machine's counters and gauges, one line each: name (a counter's without
/// `_total`), help, type, and where [`ServerStats`] keeps it.
type MachineMetric = (
    &'static str,
    &'static str,
    MetricType,
    fn(&ServerStats) -> u64,
);
const MACHINE: &[MachineMetric] = {
    use MetricType::{Counter as C, Gauge as G};
    &[
        ("expel_datagrams_in", "Datagrams received.", C, |s| s.datagrams_in),
        ("expel_datagrams_out", "Datagrams sent.", C, |s| s.datagrams_out),
        ("expel_bytes_in", "Datagram bytes received.", C, |s| s.bytes_in),
        ("expel_bytes_out", "Datagram bytes sent.", C, |s| s.bytes_out),
        ("expel_snapshot_drops", "Snapshots that could not be sent.", C, |s| s.snapshot_drops),
        (
            "expel_snapshot_players_held",
            "Far players held where their clients' baselines carry them instead of sent.",
            C,
            |s| s.players_held,
        ),
        (
            "expel_snapshots_squeezed",
            "Snapshots that held far players past their turn to fit their clients' byte budget.",
            C,
            |s| s.snapshots_squeezed,
        ),
        (
            "expel_entity_ends_cut",
            "Entities' ends left out of a snapshot past the most one carries.",
            C,
            |s| s.entity_ends_cut,
        ),
        (
            "expel_entity_ends_left",
            "Ends of far entities a client never held, left out of its snapshot to fit its byte budget.",
            C,
            |s| s.entity_ends_left,
        ),
        ("expel_inputs_applied", "Commands applied on their tick.", C, |s| s.inputs.applied),
        (
            "expel_inputs_missing",
            "Ticks without the client's command (the last one repeated).",
            C,
            |s| s.inputs.missing,
        ),
        ("expel_inputs_late", "Commands that arrived after their tick.", C, |s| s.inputs.late),
        ("expel_inputs_duplicate", "Redundant copies of commands.", C, |s| s.inputs.duplicate),
        (
            "expel_inputs_too_far_ahead",
            "Commands stamped too far ahead, refused.",
            C,
            |s| s.inputs.too_far_ahead,
        ),
        (
            "expel_corrections",
            "Client predictions that differed from the server.",
            C,
            |s| s.corrections,
        ),
        ("expel_claims_accepted", "Trusted-client claims accepted.", C, |s| s.claims_accepted),
        (
            "expel_claims_rejected",
            "Trusted-client claims rejected and corrected.",
            C,
            |s| s.claims_rejected,
        ),
        (
            "expel_claims_missing",
            "Trusted-client ticks without a claim; the player held its state.",
            C,
            |s| s.claims_missing,
        ),
        (
            "expel_malformed_datagrams",
            "Datagrams that did not decode.",
            C,
            |s| s.malformed_datagrams,
        ),
        (
            "expel_datagrams_over_rate",
            "Input datagrams dropped undecoded: over their connection's allowance (a few times the input rate).",
            C,
            |s| s.datagrams_over_rate,
        ),
        (
            "expel_malformed_control",
            "Control messages that did not decode.",
            C,
            |s| s.malformed_control,
        ),
        ("expel_kicks", "Clients kicked.", C, |s| s.kicks),
        (
            "expel_clients",
            "Clients holding a player slot (welcomed, receiving the map or playing).",
            G,
            |s| s.clients,
        ),
        (
            "expel_ticks_late",
            "Ticks run a period or more after they were due (caught up on, nobody judged for it).",
            C,
            |s| s.ticks_late,
        ),
        (
            "expel_ticks_skipped",
            "Ticks skipped because the process could not keep up.",
            C,
            |s| s.ticks_skipped,
        ),
        (
            "expel_rule_refusals",
            "Players' commands or messages the game's rules refused by their own checks (a button the game does not define, firing faster than the weapon allows).",
            C,
            |s| s.rule_refusals,
        ),
        (
            "expel_shots",
            "Shots the game's rules judged as their shooters saw them (lag compensated).",
            C,
            |s| s.shots_judged,
        ),
        (
            "expel_shot_views_clamped",
            "Shots whose claimed view was older or newer than the client could have had, judged at the nearest it could.",
            C,
            |s| s.shot_views_clamped,
        ),
        (
            "expel_shots_unseen",
            "Shots aimed through a player the shooter's snapshots never showed it.",
            C,
            |s| s.shots_unseen,
        ),
        (
            "expel_shots_behind_walls",
            "Shots aimed at a player the shooter was shown, standing behind the wall the shot met.",
            C,
            |s| s.shots_behind_walls,
        ),
        (
            "expel_shots_over_budget",
            "Shots past a player's budget for one tick, refused.",
            C,
            |s| s.shots_over_budget,
        ),
        (
            "expel_shot_places_replayed",
            "Shots that left from where the shooter's client had itself, farther than the slack from the server's place, because a re-run of its own prediction made that place.",
            C,
            |s| s.shot_places_replayed,
        ),
        (
            "expel_shot_places_refused",
            "Shots whose client had itself farther than the slack from the server's place with no re-run bearing it out: they left from the server's place.",
            C,
            |s| s.shot_places_refused,
        ),
    ]
};

/// What is read at scrape time: the machine's counters, the longest recent tick and the
/// process's CPU time.
#[derive(Debug)]
struct Scraped {
    machine: Arc<Mutex<ServerStats>>,
    tick_max: Arc<Mutex<[(u64, f64); MAX_WINDOW]>>,
    started: Instant,
}

impl Collector for Scraped {
    fn encode(&self, mut d: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.machine.lock().map(|s| s.clone()).unwrap_or_default();
        for (name, help, kind, read) in MACHINE {
            let v = read(&s);
            let e = d.encode_descriptor(name, help, None, *kind)?;
            match kind {
                MetricType::Gauge => ConstGauge::new(v).encode(e)?,
                _ => ConstCounter::new(v).encode(e)?,
            }
        }
        let mut family = |name: &str, help: &str, series: Vec<(Vec<(&str, &str)>, u64)>| {
            let mut e = d.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (labels, v) in series {
                ConstCounter::new(v).encode(e.encode_family(&labels)?)?;
            }
            Ok::<(), std::fmt::Error>(())
        };
        family(
            "expel_refusals",
            "Connections refused, by reason.",
            REFUSALS
                .iter()
                .zip(s.refusals)
                .map(|(r, v)| (vec![("reason", r.label())], v))
                .collect(),
        )?;
        family(
            "expel_violations",
            "Move-validation violations, by kind.",
            ViolationKind::ALL
                .iter()
                .zip(s.violations)
                .map(|(k, v)| (vec![("kind", k.name())], v))
                .collect(),
        )?;
        let same = s
            .replays
            .saturating_sub(s.replays_unknown + s.replays_apart);
        family(
            "expel_prediction_replays",
            "Reported predictions the server re-ran from the client's snapshot and commands, by outcome: the report was the re-run's (same), was not (apart: a modified client), or a command never arrived (unknown).",
            [("same", same), ("apart", s.replays_apart), ("unknown", s.replays_unknown)]
                .into_iter()
                .map(|(o, v)| (vec![("outcome", o)], v))
                .collect(),
        )?;
        family(
            "expel_messages",
            "The game's messages, by channel and outcome: sent (by the server), received (from clients, taken for the game), dropped (stale, repeated, no room or no game to take them), refused (too large, over the rate, malformed).",
            Channel::ALL
                .iter()
                .zip(&s.messages)
                .flat_map(|(ch, c)| {
                    [
                        ("sent", c.sent),
                        ("received", c.received),
                        ("dropped", c.dropped),
                        ("refused", c.refused),
                    ]
                    .map(|(o, v)| (vec![("channel", ch.name()), ("outcome", o)], v))
                })
                .collect(),
        )?;
        family(
            "expel_message_drops",
            "The game's messages dropped, by reason: stale (unreliable, older than one delivered), queue_full (the sender's queue for the game), not_playing (sent before its player was in the world), no_game (no rules to take it), over_share (outgoing: a sender over its fair share of a recipient's allowance).",
            MessageDrop::ALL
                .iter()
                .zip(&s.message_drops)
                .map(|(r, v)| (vec![("reason", r.label())], *v))
                .collect(),
        )?;
        let max = recent_max(&self.tick_max, self.started.elapsed().as_secs());
        let help = format!("The longest tick of the last {MAX_WINDOW} seconds.");
        let e = d.encode_descriptor(
            "expel_tick_duration_max_seconds",
            &help,
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(max).encode(e)?;
        if let Some(cpu) = process_cpu_seconds() {
            let e = d.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(e)?;
        }
        Ok(())
    }
}

/// The longest tick of the window that ends at second `now`.
fn recent_max(window: &Mutex<[(u64, f64); MAX_WINDOW]>, now: u64) -> f64 {
    window.lock().map_or(0.0, |w| {
        w.iter()
            .filter(|(s, _)| s + MAX_WINDOW as u64 > now)
            .map(|(_, m)| *m)
            .fold(0.0, f64::max)
    })
}

/// The process's CPU time (user and system, all threads), seconds, where the platform
/// has a clock for it.
fn process_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    return Some(cpu_seconds(rustix::time::ClockId::ProcessCPUTime));
    #[cfg(not(unix))]
    None
}

/// The calling thread's CPU time, in seconds (where the system keeps it).
pub(crate) fn thread_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    return Some(cpu_seconds(rustix::time::ClockId::ThreadCPUTime));
    #[cfg(not(unix))]
    None
}

#[cfg(unix)]
fn cpu_seconds(clock: rustix::time::ClockId) -> f64 {
    let t = rustix::time::clock_gettime(clock);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics for a server starting now.
    pub fn new() -> Metrics {
        let started = Instant::now();
        let mut m = Metrics::made();
        m.started = Some(started);
        m.game = Mutex::new("null".into());
        let mut registry = Registry::default();
        m.register(&mut registry);
        registry.register_collector(Box::new(Scraped {
            machine: m.machine.clone(),
            tick_max: m.tick_max.clone(),
            started,
        }));
        m.registry = registry;
        m
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

    /// Handles on what the UDP doorman counts.
    pub(crate) fn udp_counts(&self) -> UdpCounts {
        UdpCounts {
            datagrams: self.udp_datagrams.clone(),
            other_version: self.udp_other_version.clone(),
            rejected: self.udp_rejected.by.clone(),
        }
    }

    /// Takes the protocol machine's newest counters.
    pub fn absorb(&self, s: &ServerStats) {
        if let Ok(mut m) = self.machine.lock() {
            m.clone_from(s);
        }
    }

    /// The protocol machine's counters as last handed over.
    pub fn machine(&self) -> ServerStats {
        self.read_machine(ServerStats::clone)
    }

    /// What `read` takes from the machine's counters as last handed over, without copying
    /// them all.
    pub fn read_machine<T>(&self, read: impl FnOnce(&ServerStats) -> T) -> T {
        match self.machine.lock() {
            Ok(s) => read(&s),
            Err(_) => read(&ServerStats::default()),
        }
    }

    /// Whether the server accepts players (false while shutting down).
    pub fn ready(&self) -> bool {
        self.ready.load(Relaxed)
    }

    /// Says whether the server accepts players.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Relaxed);
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
        recent_max(&self.tick_max, self.second())
    }

    /// Whether the tick ran within `STALL` (1 s) (or, before the first tick, the server
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
            self.incoming.inc(i);
        }
    }

    /// Adds `secs` of an I/O thread's CPU time to what it went to.
    pub fn io_cpu_spent(&self, w: IoWork, secs: f64) {
        if let Some(i) = IoWork::ALL.iter().position(|x| *x == w) {
            self.io_cpu.add(i, secs);
        }
    }

    /// Records one tick's duration.
    pub fn tick(&self, seconds: f64) {
        self.ticks.inc();
        let at = self.started.map_or(0, |s| s.elapsed().as_millis() as u64);
        self.last_tick_ms.store(at + 1, Relaxed);
        self.tick_duration.observe(seconds);
        let now = self.second();
        if let Ok(mut w) = self.tick_max.lock() {
            let slot = &mut w[now as usize % MAX_WINDOW];
            if slot.0 != now {
                *slot = (now, 0.0);
            }
            slot.1 = slot.1.max(seconds);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut o = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut o, &self.registry);
        o
    }

    /// The same in Prometheus's classic text format (version 0.0.4), for a reader that
    /// does not ask for OpenMetrics: a counter's family is named with its `_total` (as
    /// its samples are) and there is no `# EOF`. Those are the only differences for the
    /// metric types used here.
    pub fn render_classic(&self) -> String {
        let open = self.render();
        let mut counters = std::collections::BTreeSet::new();
        for line in open.lines() {
            if let Some(name) = line
                .strip_prefix("# TYPE ")
                .and_then(|r| r.strip_suffix(" counter"))
            {
                counters.insert(name.to_string());
            }
        }
        let mut o = String::with_capacity(open.len() + 16 * counters.len());
        for line in open.lines() {
            if line == "# EOF" {
                continue;
            }
            let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
                let rest = line.strip_prefix(tag)?;
                let (name, after) = rest.split_once(' ')?;
                counters
                    .contains(name)
                    .then(|| format!("{tag}{name}_total {after}"))
            });
            o.push_str(renamed.as_deref().unwrap_or(line));
            o.push('\n');
        }
        o
    }
}

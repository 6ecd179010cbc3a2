//! Expel's client library: a thin async shell (tokio + quinn) around the shared simulation
//! and protocol. It connects with a token, pinning the server's certificate fingerprint or
//! trusting an authority; fetches the map when it lacks it; keeps its tick ahead of the
//! server's by about the round trip plus a small buffer (slewing its clock, never jumping
//! back); sends each tick's command with the previous few; predicts its own player with the
//! shared movement ([`Predictor`]); reconciles each snapshot; and interpolates the others
//! ([`Interpolator`]). A [`LinkConditioner`] adds loss, delay, jitter (hence reordering)
//! and duplication to its datagrams, for tests and tools.

#[cfg(feature = "cheats")]
pub mod bots;
#[cfg(feature = "cheats")]
mod cheats;
mod tls;

#[cfg(feature = "cheats")]
pub use cheats::{CheatState, Cheats};
pub use expel_shared::protocol::interp::Interpolator;
pub use expel_shared::protocol::predict::{PredictStats, Predictor};
pub use tls::{client_config, Trust};

use bytes::Bytes;
use expel_shared::protocol::frame::{encode_frame, FrameDecoder};
use expel_shared::protocol::snapshot::SnapshotDecoder;
use expel_shared::protocol::{
    decode, encode, ClientControl, ClientDatagram, InputMsg, MovementAuthority, ServerControl,
    Welcome, ALPN, CLOSE_KICKED, INPUT_REDUNDANCY, MAX_MAP_BYTES, VERSION,
};
use expel_shared::{CollisionModel, MapData, MoveCommand, PlayerState, Sim};
use rand::{Rng, SeedableRng};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::mpsc;

/// Why a client could not connect or play.
#[derive(Debug, Error)]
pub enum ClientError {
    /// TLS configuration.
    #[error("tls: {0}")]
    Tls(String),
    /// The QUIC connection failed.
    #[error("connecting to {addr}: {detail}")]
    Connect {
        /// The server.
        addr: SocketAddr,
        /// What failed.
        detail: String,
    },
    /// The server refused the hello.
    #[error("refused by the server: {0}")]
    Refused(String),
    /// The server broke the protocol.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The map the server sent could not be used.
    #[error("map: {0}")]
    Map(String),
}

/// Loss, delay, jitter and duplication applied to datagrams in both directions.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkConditioner {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// One-way delay, milliseconds.
    pub delay_ms: f64,
    /// Uniform ± jitter on the delay, milliseconds (reorders datagrams).
    pub jitter_ms: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
}

impl LinkConditioner {
    fn active(&self) -> bool {
        self.loss > 0.0 || self.delay_ms > 0.0 || self.jitter_ms > 0.0 || self.duplicate > 0.0
    }

    /// Delivery delays for one datagram: none when lost, two when duplicated.
    fn plan(&self, rng: &mut impl Rng) -> Vec<Duration> {
        if rng.gen_bool(self.loss.clamp(0.0, 1.0)) {
            return Vec::new();
        }
        let copies = 1 + rng.gen_bool(self.duplicate.clamp(0.0, 1.0)) as usize;
        (0..copies)
            .map(|_| {
                let j = if self.jitter_ms > 0.0 {
                    rng.gen_range(-self.jitter_ms..self.jitter_ms)
                } else {
                    0.0
                };
                Duration::from_secs_f64((self.delay_ms + j).max(0.0) / 1000.0)
            })
            .collect()
    }
}

/// How to connect.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Connect token.
    pub token: String,
    /// How to trust the server.
    pub trust: Trust,
    /// A map the client already has (the server sends its map otherwise).
    pub have_map: Option<Arc<Vec<u8>>>,
    /// A simulation of `have_map` to reuse (many bots in one process share one), used
    /// when the server's map and movement settings match it.
    pub sim: Option<Arc<Sim>>,
}

/// A client that joined: the welcome, the map and its simulation, the connection.
pub struct Joined {
    /// What the server said.
    pub welcome: Welcome,
    /// The map's bytes.
    pub map: Arc<Vec<u8>>,
    /// The simulation, as the server runs it.
    pub sim: Arc<Sim>,
    endpoint: quinn::Endpoint,
    conn: quinn::Connection,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    dec: FrameDecoder,
}

async fn read_frame(
    recv: &mut quinn::RecvStream,
    dec: &mut FrameDecoder,
) -> Result<Option<ServerControl>, ClientError> {
    let mut buf = [0u8; 8192];
    loop {
        match dec.next_frame() {
            Ok(Some(f)) => {
                return decode("control", &f)
                    .map(Some)
                    .map_err(|e| ClientError::Protocol(e.to_string()))
            }
            Ok(None) => {}
            Err(e) => return Err(ClientError::Protocol(e.to_string())),
        }
        match recv.read(&mut buf).await {
            Ok(Some(n)) => dec.push(&buf[..n]),
            Ok(None) => return Ok(None),
            Err(e) => return Err(ClientError::Protocol(e.to_string())),
        }
    }
}

/// Connects, says hello, and receives the welcome and (if needed) the map.
pub async fn connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<Joined, ClientError> {
    let fail = |detail: String| ClientError::Connect { addr, detail };
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .map_err(|_| fail("bind address".into()))?;
    let mut endpoint = quinn::Endpoint::client(bind).map_err(|e| fail(e.to_string()))?;
    endpoint.set_default_client_config(client_config(&opts.trust, ALPN)?);
    let conn = endpoint
        .connect(addr, "localhost")
        .map_err(|e| fail(e.to_string()))?
        .await
        .map_err(|e| fail(e.to_string()))?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| fail(e.to_string()))?;
    let have_map = opts.have_map.as_ref().map(|m| *blake3::hash(m).as_bytes());
    let hello = ClientControl::Hello {
        version: VERSION,
        token: opts.token.clone(),
        have_map,
    };
    send.write_all(&encode_frame(&hello))
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut dec = FrameDecoder::new();
    let welcome = match read_frame(&mut recv, &mut dec).await {
        Ok(Some(ServerControl::Welcome(w))) => *w,
        Ok(Some(ServerControl::Refused { reason })) => return Err(ClientError::Refused(reason)),
        Ok(Some(other)) => {
            return Err(ClientError::Protocol(format!(
                "expected a welcome, got {other:?}"
            )))
        }
        Ok(None) | Err(_) => {
            // The reason may only be in the close frame.
            let reason = match conn.close_reason() {
                Some(quinn::ConnectionError::ApplicationClosed(c)) => {
                    String::from_utf8_lossy(&c.reason).into_owned()
                }
                other => format!("{other:?}"),
            };
            return Err(ClientError::Refused(reason));
        }
    };
    let map = if welcome.sending_map {
        if welcome.map_size > MAX_MAP_BYTES {
            return Err(ClientError::Map(format!(
                "{} bytes is over the limit",
                welcome.map_size
            )));
        }
        let mut map = Vec::with_capacity(welcome.map_size as usize);
        while (map.len() as u64) < welcome.map_size {
            match read_frame(&mut recv, &mut dec).await? {
                Some(ServerControl::MapData { offset, bytes }) => {
                    ServerControl::check_map_chunk(offset, bytes.len(), welcome.map_size)
                        .map_err(|e| ClientError::Map(e.to_string()))?;
                    if offset != map.len() as u64 {
                        return Err(ClientError::Map(format!(
                            "chunk at {offset}, expected {}",
                            map.len()
                        )));
                    }
                    map.extend_from_slice(&bytes);
                }
                other => {
                    return Err(ClientError::Map(format!(
                        "transfer interrupted by {other:?}"
                    )))
                }
            }
        }
        if *blake3::hash(&map).as_bytes() != welcome.map_hash {
            return Err(ClientError::Map(
                "received map does not match its hash".into(),
            ));
        }
        Arc::new(map)
    } else {
        opts.have_map
            .clone()
            .ok_or_else(|| ClientError::Protocol("server sent no map".into()))?
    };
    let reuse = opts
        .sim
        .clone()
        .filter(|s| !welcome.sending_map && *s.config() == welcome.config);
    let sim = match reuse {
        Some(s) => s,
        None => {
            let data = MapData::parse_any(&map).map_err(|e| ClientError::Map(e.to_string()))?;
            let movement = welcome
                .config
                .clone()
                .validate()
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            let model = Arc::new(CollisionModel::build(&data));
            Arc::new(Sim::from_map(model, &data, movement).0)
        }
    };
    Ok(Joined {
        welcome,
        map,
        sim,
        endpoint,
        conn,
        send,
        recv,
        dec,
    })
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Ticks the client predicted.
    pub ticks: u64,
    /// Prediction statistics (snapshots, corrections, largest correction).
    pub predict: PredictStats,
    /// Round-trip time samples, milliseconds.
    pub rtt_ms: Vec<f64>,
    /// Bytes received and sent per second (UDP, all of QUIC).
    pub down_bytes_per_s: f64,
    /// Bytes sent per second.
    pub up_bytes_per_s: f64,
    /// Why the server ended the session, if it did (kick or shutdown).
    pub ended_by_server: Option<String>,
    /// Snapshots that never arrived (gaps in the server's snapshot ticks).
    pub snapshots_lost: u64,
    /// Longest stretch of server ticks between two snapshots received.
    pub max_snapshot_gap: u64,
    /// Whether the last snapshot matched the prediction for its tick exactly.
    pub final_match: bool,
    /// The last snapshot's own state.
    pub final_state: Option<PlayerState>,
    /// Seconds from the start until the session ended.
    pub ended_after: f64,
    /// Seconds from the start until a cheat began, if one did.
    pub cheating_after: Option<f64>,
    /// The farthest east (largest x) the server ever held this player, in units.
    pub max_server_x: Option<f64>,
    /// Whether the server kicked this client.
    pub kicked: bool,
    /// Corrections that neither the server's contact with another player nor a command
    /// it lacked explain: the prediction itself was wrong.
    pub unexplained_corrections: u64,
}

impl RunReport {
    /// The `p`-th percentile of the RTT samples (milliseconds).
    pub fn rtt_percentile(&self, p: f64) -> f64 {
        percentile(&mut self.rtt_ms.clone(), p)
    }
}

/// The `p`-th percentile (0..=1, nearest rank) of `v`, sorting it; 0 when empty.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// How to run.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Stop after this many seconds.
    pub seconds: f64,
    /// Datagram conditions.
    pub link: LinkConditioner,
    /// Ticks the client stays ahead of the server beyond the round trip.
    pub buffer_ticks: f64,
    /// Seed of the conditioner's randomness.
    pub seed: u64,
    /// Test-only cheats.
    #[cfg(feature = "cheats")]
    pub cheats: Cheats,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seconds: 10.0,
            link: LinkConditioner::default(),
            buffer_ticks: 2.0,
            seed: 1,
            #[cfg(feature = "cheats")]
            cheats: Cheats::default(),
        }
    }
}

/// Plays: each tick asks `driver` for a command (it returns `None` when it has no more),
/// then keeps the last one for a second so the server catches up, and says bye.
pub async fn run(
    joined: Joined,
    mut driver: impl FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand>,
    opts: RunOptions,
) -> Result<RunReport, ClientError> {
    let Joined {
        welcome,
        sim,
        endpoint,
        conn,
        mut send,
        mut recv,
        mut dec,
        ..
    } = joined;
    let rate = welcome.tick_rate as f64;
    let base_period = 1.0 / rate;
    let mut predictor = Predictor::new(sim.clone(), welcome.player_id);
    let mut snapshots = SnapshotDecoder::new();
    let mut interp = Interpolator::new();
    let mut report = RunReport::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let link = opts.link;
    // Datagrams in, through the conditioner.
    let (dg_tx, mut dg_rx) = mpsc::unbounded_channel::<Bytes>();
    let reader = {
        let conn = conn.clone();
        let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed ^ 0x5eed);
        tokio::spawn(async move {
            while let Ok(b) = conn.read_datagram().await {
                if !link.active() {
                    let _ = dg_tx.send(b);
                    continue;
                }
                for d in link.plan(&mut rng) {
                    let (tx, b) = (dg_tx.clone(), b.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(d).await;
                        let _ = tx.send(b);
                    });
                }
            }
        })
    };
    // Control messages in (kick, shutdown).
    let (ctl_tx, mut ctl_rx) = mpsc::unbounded_channel::<ServerControl>();
    let control = tokio::spawn(async move {
        while let Ok(Some(m)) = read_frame(&mut recv, &mut dec).await {
            if ctl_tx.send(m).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    let lead = |rtt: f64| rtt / base_period + opts.buffer_ticks;
    let mut tick = welcome.server_tick + lead(0.05).ceil() as u64 + 1;
    let mut period = base_period;
    let mut next_at = tokio::time::Instant::now();
    let mut last_cmd = MoveCommand::default();
    let mut inputs_done: Option<Instant> = None;
    let deadline = started + Duration::from_secs_f64(opts.seconds.max(0.0));
    let stats0 = conn.stats();
    let every = (welcome.tick_rate / welcome.snapshot_rate.max(1)).max(1) as u64;
    let mut span: Option<(u64, u64)> = None;
    let trusted = welcome.movement == MovementAuthority::Client;
    let mut seen_correction = 0u64;
    #[cfg(feature = "cheats")]
    let (mut cheat, mut sent) = (
        CheatState::default(),
        std::collections::BTreeMap::<u64, PlayerState>::new(),
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_at) => {
                next_at += Duration::from_secs_f64(period);
                let now = Instant::now();
                if now >= deadline || inputs_done.is_some_and(|d| now - d > Duration::from_secs(1)) {
                    break;
                }
                tick += 1;
                let cmd = if inputs_done.is_none() {
                    match driver(tick, predictor.state().as_ref()) {
                        Some(c) => c,
                        None => {
                            inputs_done = Some(now);
                            last_cmd
                        }
                    }
                } else {
                    last_cmd
                };
                last_cmd = cmd;
                #[allow(unused_mut)]
                let mut predicted = predictor.command(tick, cmd);
                // Cheats rewrite every predicted tick, skipped ones included, into one
                // chain of their own.
                #[cfg(feature = "cheats")]
                if opts.cheats.moves() && predicted.is_some() {
                    let from = sent.last_key_value().map_or(tick, |(t, _)| t + 1);
                    for t in from.max(tick.saturating_sub(64))..=tick {
                        let Some(honest) = predictor.predicted_at(t) else {
                            continue;
                        };
                        let (cheated, on) = cheat.apply(&opts.cheats, &sim, &cmd, honest);
                        if on && report.cheating_after.is_none() {
                            report.cheating_after = Some(started.elapsed().as_secs_f64());
                        }
                        sent.insert(t, cheated);
                    }
                    sent = sent.split_off(&tick.saturating_sub(INPUT_REDUNDANCY as u64));
                    predicted = sent.get(&tick).copied();
                }
                report.ticks += 1;
                let first = tick.saturating_sub(INPUT_REDUNDANCY as u64 - 1).max(1);
                // Trusted-client mode: the state reached after each command, as claimed.
                let claims = if trusted {
                    #[cfg(feature = "cheats")]
                    if opts.cheats.moves() {
                        (first..=tick)
                            .map(|t| sent.get(&t).copied())
                            .collect::<Option<Vec<_>>>()
                            .unwrap_or_default()
                    } else {
                        predictor.states_between(first, tick).unwrap_or_default()
                    }
                    #[cfg(not(feature = "cheats"))]
                    predictor.states_between(first, tick).unwrap_or_default()
                } else {
                    Vec::new()
                };
                let msg = InputMsg {
                    ack: snapshots.newest(),
                    first_tick: first,
                    commands: predictor.commands_between(first, tick),
                    predicted,
                    claims,
                };
                let bytes = Bytes::from(encode(&ClientDatagram::Input(msg)));
                if !link.active() {
                    let _ = conn.send_datagram(bytes);
                } else {
                    for d in link.plan(&mut rng) {
                        let (c, b) = (conn.clone(), bytes.clone());
                        tokio::spawn(async move {
                            tokio::time::sleep(d).await;
                            let _ = c.send_datagram(b);
                        });
                    }
                }
                predictor.frame();
            }
            Some(b) = dg_rx.recv() => {
                let Ok(Some(mut snap)) = snapshots.decode(&b) else { continue };
                let x = snap.own.origin().x;
                report.max_server_x = Some(report.max_server_x.map_or(x, |m| m.max(x)));
                // A trusted client's own path stands unless the server rejected a claim:
                // a state the server holds while claims are in flight is no correction.
                if trusted && snap.corrected <= seen_correction {
                    if let Some(p) = predictor.predicted_at(snap.tick) {
                        snap.own = p;
                    }
                }
                seen_correction = seen_correction.max(snap.corrected);
                if let Some((_, last)) = span {
                    report.max_snapshot_gap = report.max_snapshot_gap.max(snap.tick - last);
                }
                span = Some(span.map_or((snap.tick, snap.tick), |(a, _)| (a, snap.tick)));
                // A correction is explained when the server's move met another player, the
                // server lacked our command, or our prediction met a player where the
                // last snapshot showed it; any other is the prediction's own error.
                let before = predictor.base_tick();
                let met = predictor.touched_player(before, snap.tick);
                let correction = predictor.snapshot(&snap);
                if correction.is_some() && snap.contact <= before && snap.missed <= before && !met {
                    report.unexplained_corrections += 1;
                }
                report.final_match = correction.is_none();
                report.final_state = Some(snap.own);
                interp.push(&snap);
                // Clock: stay ahead of the server by the round trip plus the buffer. The
                // server says how early our commands arrive, which covers every delay on
                // the path; before it has, the transport's RTT estimate stands in.
                let rtt = conn.rtt().as_secs_f64();
                report.rtt_ms.push(rtt * 1000.0);
                let error = match snap.input_lead {
                    Some(l) => opts.buffer_ticks - l as f64,
                    None => snap.tick as f64 + lead(rtt) - tick as f64,
                };
                if error > rate {
                    // Far behind (at the start, or after a stall): jump forward only, to
                    // where the server's tick and the round trip put us. The reported lead
                    // is the worst since the last snapshot, and a stalled client has since
                    // caught up on its own; adding it whole would overshoot.
                    tick = tick.max(snap.tick + lead(rtt).ceil() as u64);
                } else {
                    period = base_period / (1.0 + (error * 0.02).clamp(-0.2, 0.2));
                }
                // The speedhack cheat: a fast clock that ignores the server's steering.
                #[cfg(feature = "cheats")]
                if opts.cheats.clock_factor != 1.0 {
                    period = base_period / opts.cheats.clock_factor.max(0.1);
                }
            }
            why = conn.closed() => {
                // Closed by the server without a control message (a kick for cheating).
                if let quinn::ConnectionError::ApplicationClosed(c) = why {
                    report.ended_by_server = Some(String::from_utf8_lossy(&c.reason).into_owned());
                    report.kicked = c.error_code == CLOSE_KICKED.into();
                }
                break;
            }
            Some(m) = ctl_rx.recv() => {
                match m {
                    ServerControl::Kick { reason } => {
                        report.ended_by_server = Some(reason);
                        report.kicked = true;
                        break;
                    }
                    ServerControl::Shutdown { reason } => {
                        report.ended_by_server = Some(reason);
                        break;
                    }
                    _ => {}
                }
            }
        }
    }
    report.predict = predictor.stats;
    report.ended_after = started.elapsed().as_secs_f64();
    if let Some((a, b)) = span {
        report.snapshots_lost = ((b - a) / every + 1).saturating_sub(report.predict.snapshots);
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let stats = conn.stats();
    report.down_bytes_per_s = (stats.udp_rx.bytes - stats0.udp_rx.bytes) as f64 / secs;
    report.up_bytes_per_s = (stats.udp_tx.bytes - stats0.udp_tx.bytes) as f64 / secs;
    if report.ended_by_server.is_none() {
        let bye = ClientControl::Bye {
            reason: "done".into(),
        };
        let _ = send.write_all(&encode_frame(&bye)).await;
        let _ = send.finish();
        // The server closes once it has read the goodbye; closing first could drop it.
        let _ = tokio::time::timeout(Duration::from_secs(1), conn.closed()).await;
    }
    conn.close(0u32.into(), b"done");
    reader.abort();
    control.abort();
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    Ok(report)
}

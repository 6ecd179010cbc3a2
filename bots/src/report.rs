//! What a swarm saw, summed up: the server's figures read over the run, the timeline,
//! and the [`SwarmReport`] a load test prints.

use super::*;

/// One point of the run's timeline (for the chart).
#[derive(Clone, Debug, Serialize)]
pub struct TimelinePoint {
    /// Seconds since the start.
    pub t: f64,
    /// Players on the server.
    pub players: f64,
    /// Longest tick of the last seconds, ms.
    pub tick_ms_max: f64,
    /// 99th percentile tick over the last interval, ms.
    pub tick_ms_p99: Option<f64>,
    /// Server bytes sent per second, all players.
    pub down_bytes_per_s: f64,
    /// Server bytes received per second, all players.
    pub up_bytes_per_s: f64,
}

/// The server's figures over the run, from readings of its metrics.
#[derive(Clone, Debug, Default)]
pub struct ServerFigures {
    /// The readings, oldest first.
    pub scrapes: Vec<Scrape>,
}

impl ServerFigures {
    /// Tick time quantile over the whole run, ms (never above the longest tick, which
    /// interpolation within a wide bucket could otherwise claim).
    pub fn tick_ms(&self, q: f64) -> Option<f64> {
        let (a, b) = (self.scrapes.first()?, self.scrapes.last()?);
        let v = tick_quantile(a, b, q)? * 1000.0;
        Some(self.tick_ms_max().map_or(v, |m| v.min(m)))
    }

    /// The longest tick seen, ms: the largest recent maximum the server reported, and at
    /// least the lower bound of the highest histogram bucket that filled during the run
    /// (a reading that failed cannot hide a long tick).
    pub fn tick_ms_max(&self) -> Option<f64> {
        let (a, b) = (self.scrapes.first()?, self.scrapes.last()?);
        if self.scrapes.len() < 2 {
            return None;
        }
        let reported = self.scrapes.iter().map(|s| s.tick_max).fold(0.0, f64::max);
        // Non-cumulative counts per bucket over the run; the highest that grew.
        let mut floor = 0.0;
        let mut below = (0.0, 0.0); // (bound, cumulative increase) of the bucket before
        for (le, c) in &b.buckets {
            let before = a.buckets.iter().find(|(l, _)| l == le).map_or(0.0, |x| x.1);
            let grew = c - before;
            if grew > below.1 {
                floor = below.0;
            }
            below = (if le.is_finite() { *le } else { below.0 }, grew);
        }
        Some(reported.max(floor) * 1000.0)
    }

    /// The server's CPU use over the run, percent of one core.
    pub fn cpu_percent(&self) -> Option<f64> {
        let (a, b) = (self.scrapes.first()?, self.scrapes.last()?);
        let dt = b.at - a.at;
        (dt > 0.0).then_some(())?;
        Some((b.cpu? - a.cpu?) / dt * 100.0)
    }

    /// The server's CPU per player-second while every player it held at its peak was on
    /// it, ms: the CPU used over the readings' intervals that begin and end at the peak,
    /// over the player-seconds in them. The steady cost of a crowd, without the joins
    /// and leaves that bracket a run (handshakes and map transfers, then an idle tail),
    /// which [`ServerFigures::cpu_percent`] spreads over the whole run.
    pub fn cpu_ms_per_player_s(&self) -> Option<f64> {
        let peak = self.scrapes.iter().map(|s| s.players).fold(0.0, f64::max);
        let (mut cpu, mut player_s) = (0.0, 0.0);
        for w in self.scrapes.windows(2) {
            if peak > 0.0 && w[0].players == peak && w[1].players == peak {
                cpu += w[1].cpu? - w[0].cpu?;
                player_s += peak * (w[1].at - w[0].at);
            }
        }
        (player_s > 0.0).then(|| cpu / player_s * 1000.0)
    }

    /// Point by point.
    pub fn timeline(&self) -> Vec<TimelinePoint> {
        self.scrapes
            .windows(2)
            .map(|w| {
                let dt = (w[1].at - w[0].at).max(1e-9);
                TimelinePoint {
                    t: w[1].at,
                    players: w[1].players,
                    tick_ms_max: w[1].tick_max * 1000.0,
                    tick_ms_p99: tick_quantile(&w[0], &w[1], 0.99).map(|s| s * 1000.0),
                    down_bytes_per_s: (w[1].bytes_out - w[0].bytes_out) / dt,
                    up_bytes_per_s: (w[1].bytes_in - w[0].bytes_in) / dt,
                }
            })
            .collect()
    }
}

/// Reads the server's metrics every `every` until `stop` is set; the readings so far. A
/// reading that fails (a loaded server answering late) is skipped; with no reading at
/// all, the first error.
pub async fn watch_server(
    http: Operator,
    every: Duration,
    stop: Arc<tokio::sync::Notify>,
) -> Result<ServerFigures, String> {
    let started = Instant::now();
    let mut figures = ServerFigures::default();
    let mut ticker = tokio::time::interval(every);
    let mut first_error = None;
    let mut read = |figures: &mut ServerFigures, text: Result<String, String>| match text {
        Ok(t) => figures
            .scrapes
            .push(Scrape::parse(&t, started.elapsed().as_secs_f64())),
        Err(e) => {
            tracing::debug!(error = %e, "metrics reading skipped");
            first_error.get_or_insert(e);
        }
    };
    loop {
        tokio::select! {
            _ = ticker.tick() => read(&mut figures, http_get(&http, "/metrics").await),
            _ = stop.notified() => {
                read(&mut figures, http_get(&http, "/metrics").await);
                break;
            }
        }
    }
    match (figures.scrapes.len(), first_error) {
        (0, Some(e)) => Err(e),
        _ => Ok(figures),
    }
}

/// What the server's refusal says when its load, not its maximum, keeps a bot out.
const FULL_FOR_LOAD: &str = "full for its load";

/// The report of a swarm run (field names are a contract).
#[derive(Clone, Debug, Serialize)]
pub struct SwarmReport {
    /// Bots that joined.
    pub connected: u64,
    /// Bots that could not join.
    pub failed: u64,
    /// Of those, the bots the server refused for its load: at the hello because its
    /// load was full (its capacity, not its maximum of players), or at the door, before
    /// the handshake, which also sheds joins past those it lets be under way at once.
    pub refused_for_load: u64,
    /// Joined bots whose session ended early, not by a kick (connection lost, shutdown).
    pub disconnected: u64,
    /// Bots the server kicked.
    pub kicked: u64,
    /// Round trip, ms, over every bot's samples.
    pub rtt_ms_p50: f64,
    /// Round trip, 99th percentile.
    pub rtt_ms_p99: f64,
    /// Snapshots received per second, per bot (mean).
    pub snapshots_per_s: f64,
    /// Bytes received per second, per bot (mean, all of QUIC).
    pub down_bytes_per_s: f64,
    /// Bytes sent per second, per bot (mean).
    pub up_bytes_per_s: f64,
    /// UDP datagrams received per second, per bot (mean).
    pub down_datagrams_per_s: f64,
    /// UDP datagrams sent per second, per bot (mean).
    pub up_datagrams_per_s: f64,
    /// The protocol's bytes received per second, per bot (mean): snapshots without
    /// QUIC's headers, tags and acknowledgements.
    pub down_payload_bytes_per_s: f64,
    /// Honest bots' corrections per minute of play.
    pub corrections_per_min_honest: f64,
    /// Honest corrections the server's contact with other players and missing commands
    /// do not explain.
    pub unexplained_corrections: u64,
    /// Cheaters' corrections per minute of play.
    pub corrections_per_min_cheaters: f64,
    /// Cheaters whose cheat began.
    pub cheats_attempted: u64,
    /// Cheaters the server flagged or kicked.
    pub cheaters_detected: u64,
    /// Honest bots the server flagged.
    pub honest_flagged: u64,
    /// Honest predicting bots' gun shots (with `--fire`).
    pub shots: u64,
    /// Of those, hits the shooters saw on their own screens.
    pub hits_seen: u64,
    /// Of those, hits the server confirmed (lag compensation agreeing with the screen).
    pub hits_confirmed: u64,
    /// Hits the server confirmed that the shooters saw miss.
    pub hits_confirmed_unseen: u64,
    /// What the predicting bots drew at the edges, all told (see
    /// [`SightFigures`](crate::SightFigures)).
    pub sight: crate::SightFigures,
    /// Server tick time, median over the run, ms (from its metrics).
    pub server_tick_ms_p50: Option<f64>,
    /// Server tick time, 99th percentile, ms.
    pub server_tick_ms_p99: Option<f64>,
    /// Longest server tick, ms.
    pub server_tick_ms_max: Option<f64>,
    /// Server CPU, percent of one core.
    pub server_cpu_percent: Option<f64>,
    /// Server CPU per player-second while every player was on, ms.
    pub server_cpu_ms_per_player_s: Option<f64>,
    /// Bots that ran each cheat, and how many of them were detected.
    pub cheaters: BTreeMap<String, (u64, u64)>,
    /// Why bots failed (the first few distinct reasons).
    pub errors: Vec<String>,
    /// Times a bot lost its server and joined again (`--reconnect`).
    pub reconnects: u64,
    /// Longest time from losing the server to playing again, seconds.
    pub reconnect_s_max: Option<f64>,
    /// The server's figures second by second.
    pub timeline: Vec<TimelinePoint>,
}

/// Parses `/players.json`: flagged player ids.
pub fn flagged_players(json: &str) -> Result<Vec<u32>, String> {
    #[derive(serde::Deserialize)]
    struct Flagged {
        players: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        id: u32,
    }
    let f: Flagged = serde_json::from_str(json).map_err(|e| format!("players.json: {e}"))?;
    Ok(f.players.into_iter().map(|e| e.id).collect())
}

/// Sums the bots' outcomes and the server's figures into the report. `flagged`: player ids
/// the server flagged (from `/players.json`), if it could be read.
pub fn summarize(
    outcomes: &[BotOutcome],
    server: Option<&ServerFigures>,
    flagged: &[u32],
) -> SwarmReport {
    let mut rtt = Vec::new();
    let (mut snaps, mut down, mut up, mut played) = (0.0, 0.0, 0.0, 0u64);
    let (mut down_dg, mut up_dg, mut payload) = (0.0, 0.0, 0.0);
    let (mut honest_corr, mut honest_min, mut cheat_corr, mut cheat_min) = (0u64, 0.0, 0u64, 0.0);
    let mut r = SwarmReport {
        connected: 0,
        failed: 0,
        refused_for_load: 0,
        disconnected: 0,
        kicked: 0,
        rtt_ms_p50: 0.0,
        rtt_ms_p99: 0.0,
        snapshots_per_s: 0.0,
        down_bytes_per_s: 0.0,
        up_bytes_per_s: 0.0,
        down_datagrams_per_s: 0.0,
        up_datagrams_per_s: 0.0,
        down_payload_bytes_per_s: 0.0,
        corrections_per_min_honest: 0.0,
        unexplained_corrections: 0,
        corrections_per_min_cheaters: 0.0,
        cheats_attempted: 0,
        cheaters_detected: 0,
        honest_flagged: 0,
        shots: 0,
        hits_seen: 0,
        hits_confirmed: 0,
        hits_confirmed_unseen: 0,
        sight: Default::default(),
        server_tick_ms_p50: server.and_then(|s| s.tick_ms(0.5)),
        server_tick_ms_p99: server.and_then(|s| s.tick_ms(0.99)),
        server_tick_ms_max: server.and_then(|s| s.tick_ms_max()),
        server_cpu_percent: server.and_then(|s| s.cpu_percent()),
        server_cpu_ms_per_player_s: server.and_then(|s| s.cpu_ms_per_player_s()),
        cheaters: BTreeMap::new(),
        errors: Vec::new(),
        timeline: server.map(|s| s.timeline()).unwrap_or_default(),
        reconnects: 0,
        reconnect_s_max: None,
    };
    for o in outcomes {
        if let Some(e) = &o.error {
            if r.errors.len() < 8 && !r.errors.contains(e) {
                r.errors.push(e.clone());
            }
        }
        for t in &o.reconnects {
            r.reconnects += 1;
            r.reconnect_s_max = Some(r.reconnect_s_max.map_or(*t, |m: f64| m.max(*t)));
        }
        let Some(player) = o.player else {
            r.failed += 1;
            if o.error
                .as_deref()
                .is_some_and(|e| e.contains(FULL_FOR_LOAD))
            {
                r.refused_for_load += 1;
            }
            continue;
        };
        r.connected += 1;
        let flagged = flagged.contains(&player);
        let Some(rep) = &o.report else {
            r.disconnected += 1;
            continue;
        };
        if rep.kicked {
            r.kicked += 1;
        } else if rep.ended_by_server.is_some() {
            r.disconnected += 1;
        }
        rtt.extend_from_slice(&rep.rtt_ms);
        r.sight.add(&rep.sight);
        let secs = rep.ended_after.max(1e-9);
        snaps += rep.stats.predict.snapshots as f64 / secs;
        down += rep.down_bytes_per_s;
        up += rep.up_bytes_per_s;
        down_dg += rep.down_datagrams_per_s;
        up_dg += rep.up_datagrams_per_s;
        payload += rep.down_payload_bytes_per_s;
        played += 1;
        match o.cheat {
            None => {
                honest_corr += rep.stats.predict.corrections;
                honest_min += secs / 60.0;
                r.unexplained_corrections += rep.stats.unexplained_corrections;
                r.honest_flagged += flagged as u64;
                r.shots += rep.shots;
                r.hits_seen += rep.hits_seen;
                r.hits_confirmed += rep.hits_confirmed;
                r.hits_confirmed_unseen += rep.hits_confirmed_unseen;
            }
            Some(k) => {
                cheat_corr += rep.stats.predict.corrections;
                cheat_min += secs / 60.0;
                // The clock's cheat and the gunner's begin with the run (no tamper marks them).
                let began = matches!(
                    k,
                    CheatKind::Timing | CheatKind::Wallshot | CheatKind::Rapidfire
                ) || o.cheating_after.is_some();
                let detected = flagged || rep.kicked;
                r.cheats_attempted += began as u64;
                r.cheaters_detected += detected as u64;
                let e = r.cheaters.entry(k.name().to_string()).or_default();
                e.0 += 1;
                e.1 += detected as u64;
            }
        }
    }
    r.rtt_ms_p50 = percentile(&mut rtt, 0.5);
    r.rtt_ms_p99 = percentile(&mut rtt, 0.99);
    if played > 0 {
        let n = played as f64;
        (r.snapshots_per_s, r.down_bytes_per_s, r.up_bytes_per_s) = (snaps / n, down / n, up / n);
        (r.down_datagrams_per_s, r.up_datagrams_per_s) = (down_dg / n, up_dg / n);
        r.down_payload_bytes_per_s = payload / n;
    }
    if honest_min > 0.0 {
        r.corrections_per_min_honest = honest_corr as f64 / honest_min;
    }
    if cheat_min > 0.0 {
        r.corrections_per_min_cheaters = cheat_corr as f64 / cheat_min;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(counts: &[(f64, f64)]) -> Scrape {
        Scrape {
            buckets: counts.to_vec(),
            ..Scrape::default()
        }
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_of_the_rank() {
        let a = scrape(&[(0.001, 10.0), (0.002, 10.0), (f64::INFINITY, 10.0)]);
        // 100 more ticks: 50 up to 1 ms, 50 between 1 and 2 ms.
        let b = scrape(&[(0.001, 60.0), (0.002, 110.0), (f64::INFINITY, 110.0)]);
        assert_eq!(tick_quantile(&a, &b, 0.5), Some(0.001));
        let p75 = tick_quantile(&a, &b, 0.75).unwrap();
        assert!((p75 - 0.0015).abs() < 1e-12, "{p75}");
        assert_eq!(tick_quantile(&a, &a, 0.5), None, "no ticks, no quantile");
    }

    /// Only the intervals with every player on count: the joins before, and the idle
    /// tail after, neither add CPU nor player-seconds.
    #[test]
    fn cpu_per_player_second_counts_the_time_everyone_was_on() {
        let at = |at: f64, players: f64, cpu: f64| Scrape {
            at,
            players,
            cpu: Some(cpu),
            ..Scrape::default()
        };
        let f = ServerFigures {
            // Joins cost 2 s of CPU in the first second; then 100 players at half a core
            // for 4 s; then the tail.
            scrapes: vec![
                at(0.0, 0.0, 0.0),
                at(1.0, 100.0, 2.0),
                at(3.0, 100.0, 3.0),
                at(5.0, 100.0, 4.0),
                at(6.0, 0.0, 4.1),
            ],
        };
        let per = f.cpu_ms_per_player_s().unwrap();
        assert!((per - 5.0).abs() < 1e-12, "{per}");
        assert!((f.cpu_percent().unwrap() - 4.1 / 6.0 * 100.0).abs() < 1e-9);
        // Never everyone on for a whole interval: no figure.
        let f = ServerFigures {
            scrapes: vec![at(0.0, 0.0, 0.0), at(1.0, 100.0, 2.0)],
        };
        assert_eq!(f.cpu_ms_per_player_s(), None);
    }

    #[test]
    fn the_longest_tick_bounds_the_quantiles_and_survives_a_missed_reading() {
        let a = scrape(&[(0.001, 0.0), (0.05, 0.0), (f64::INFINITY, 0.0)]);
        let mut b = scrape(&[(0.001, 90.0), (0.05, 100.0), (f64::INFINITY, 100.0)]);
        b.tick_max = 0.004;
        let f = ServerFigures {
            scrapes: vec![a.clone(), b.clone()],
        };
        // Interpolation alone would put p99 near 45 ms; the longest tick was 4 ms.
        assert_eq!(f.tick_ms_max(), Some(4.0));
        assert_eq!(f.tick_ms(0.99), Some(4.0));
        // The reading that saw the long tick failed: the histogram still shows a tick
        // above 1 ms.
        b.tick_max = 0.0;
        let f = ServerFigures {
            scrapes: vec![a, b],
        };
        assert_eq!(f.tick_ms_max(), Some(1.0));
    }

    #[test]
    fn the_exposition_is_read_by_name() {
        let text = "# HELP x y\nexpel_players 7\nexpel_tick_duration_seconds_bucket{le=\"0.001\"} 3\nexpel_tick_duration_seconds_bucket{le=\"+Inf\"} 4\nexpel_tick_duration_max_seconds 0.0042\nprocess_cpu_seconds_total 1.5\n";
        let s = Scrape::parse(text, 1.0);
        assert_eq!(s.players, 7.0);
        assert_eq!(s.buckets, vec![(0.001, 3.0), (f64::INFINITY, 4.0)]);
        assert_eq!((s.tick_max, s.cpu), (0.0042, Some(1.5)));
    }
}

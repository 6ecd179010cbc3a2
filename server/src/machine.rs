//! The machine's thread: it owns the protocol machine ([`Server`]), runs its ticks on
//! time, feeds it what the I/O threads gathered and hands them what it says. It touches
//! no socket: between ticks it sleeps until a tick is due or an I/O thread has something
//! that should not wait (a join, a control message, a close).

use crate::io::{Down, IoThreads, Wake};
use crate::quic::Up;
use crate::record::Writer;
use crate::{live, meter, Shared, SHUTDOWN_GRACE};
use expel_protocol::server::{Event, ServerMachine};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Lateness worth a warning in the log.
const LATE_TOLD: Duration = Duration::from_millis(100);
/// A neighbour's share of the server's cores past which the I/O threads stop holding off
/// while the machine ticks (see [`IoThreads::hold_off`]), and under which they hold off
/// again.
const NEIGHBOUR_IN: f64 = 0.15;
const NEIGHBOUR_GONE: f64 = 0.05;

/// Runs [`machine_loop`] on a thread of its own, apart from the tick's workers: it does the
/// serial part of each tick (ordering, the rules, merging what the workers found) and
/// waits while they do the per-player part, so its CPU time is the serial part alone. The
/// handle is a task's, for the supervisor; a panic on the thread surfaces as the task's.
pub(crate) fn spawn(
    server: ServerMachine,
    io: IoThreads,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    wake: Receiver<Wake>,
    writer: Option<Writer>,
) -> std::io::Result<tokio::task::JoinHandle<Option<String>>> {
    let (done, ended) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("expel-machine".into())
        .spawn(move || {
            let run = std::panic::AssertUnwindSafe(move || {
                let mut writer = writer;
                let why = machine_loop(server, io, shared, live, wake, &mut writer);
                if let Some(w) = writer {
                    w.finish();
                }
                why
            });
            let _ = done.send(std::panic::catch_unwind(run));
        })?;
    Ok(tokio::spawn(async move {
        match ended.await {
            Ok(Ok(why)) => why,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => Some("the machine thread ended without a word".into()),
        }
    }))
}

/// The machine's loop: ticks when they are due, what the I/O threads gathered whenever
/// it wakes. Returns `None` on shutdown, else why it stopped.
fn machine_loop(
    mut server: ServerMachine,
    mut io: IoThreads,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    wake: Receiver<Wake>,
    writer: &mut Option<Writer>,
) -> Option<String> {
    let m = shared.metrics.clone();
    let rate = server.sim().config().tick_rate;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let frame_every = u64::from((rate / live::FRAME_RATE).max(1));
    let mut longest = Duration::ZERO;
    let pool = server.workers();
    m.tick_threads
        .set(pool.as_ref().map_or(1, |p| p.current_num_threads()) as u64);
    // The workers' own schedstat files, asked of each of them once.
    let worker_stats = pool.map_or_else(Vec::new, |pool| {
        let each = pool.broadcast(|_| meter::thread_schedstat());
        each.into_iter().flatten().collect()
    });
    let max_players = shared.cfg.settings.max_players as u64;
    let mut load_meter = meter::LoadMeter::new(shared.port, Instant::now(), worker_stats);
    let mut hold = true;
    let mut up = Vec::new();
    let reason = loop {
        let due = server.poll_timeout();
        let now = Instant::now();
        if now < due {
            match wake.recv_timeout(due - now) {
                Ok(Wake::Up) | Err(RecvTimeoutError::Timeout) => {}
                Ok(Wake::Stall(d)) => {
                    warn!(
                        ms = d.as_millis() as u64,
                        "tick stalled on purpose (fault injection)"
                    );
                    std::thread::sleep(d);
                }
                Ok(Wake::Shutdown(why)) => break why,
                Ok(Wake::Ended { index, why }) => {
                    let why = why.unwrap_or_else(|| "it stopped".into());
                    return Some(format!("I/O thread {index} ended: {why}"));
                }
                Err(RecvTimeoutError::Disconnected) => break "server shutting down".into(),
            }
        }
        // What arrived, before the tick: the commands meet the ticks made for them.
        feed(&mut server, &mut io, &mut up);
        if server.poll_timeout() <= Instant::now() {
            let before = server.world().tick;
            let ran = server.stats().ticks;
            let started = Instant::now();
            io.ticking(true);
            server.handle_timeout(started);
            // Ticks run, not skipped ones: only those took time.
            let stepped = server.stats().ticks - ran;
            if stepped > 0 {
                // A late call steps every due tick at once: each is charged its share.
                let each = started.elapsed() / stepped as u32;
                for _ in 0..stepped {
                    m.tick(each.as_secs_f64());
                }
                if each > period {
                    m.overruns.inc_by(stepped);
                }
                longest = longest.max(each);
                if let Some(l) = load_meter.sample(Instant::now(), || io.schedstats()) {
                    m.udp_drops.inc_by(l.dropped);
                    server.handle_load(l);
                    let neighbour = load_meter.neighbour();
                    let percent = (neighbour * 100.0).round() as u64;
                    m.neighbour.set(percent);
                    m.machine_busy.set(load_meter.machine_busy());
                    let turn = if hold {
                        neighbour > NEIGHBOUR_IN
                    } else {
                        neighbour < NEIGHBOUR_GONE
                    };
                    if turn && io.shares_core() {
                        hold = !hold;
                        info!(
                            neighbour_percent = percent,
                            hold,
                            "a neighbour's share of the cores changed: the I/O threads {} while ticks run",
                            if hold { "hold off" } else { "run on" }
                        );
                        io.hold_off(hold);
                    }
                    let cap = server.stats().capacity.unwrap_or(max_players);
                    m.capacity.set(cap.min(max_players));
                }
                if let Some(game) = server.game_summary() {
                    m.set_game(game);
                }
                let world = server.world();
                m.players.set(world.players.len() as u64);
                if world.tick / frame_every != before / frame_every && live.watched() {
                    let ms = longest.as_secs_f64() * 1000.0;
                    live.publish(live::frame(server.sim(), world, &m, ms));
                    longest = Duration::ZERO;
                }
            }
        }
        hand_over(&mut server, &mut io, &shared, writer);
        io.ticking(false);
    };
    // Shutdown: every player is told why; the I/O threads close the rest, and those who
    // read their last words within the grace are closed by then too.
    server.shutdown(&reason);
    hand_over(&mut server, &mut io, &shared, writer);
    io.stop(&reason, Instant::now() + SHUTDOWN_GRACE);
    let end = Instant::now() + SHUTDOWN_GRACE + Duration::from_secs(1);
    while !io.all_ended() && Instant::now() < end {
        if let Ok(Wake::Ended { index, why }) = wake.recv_timeout(Duration::from_millis(20)) {
            if let Some(why) = why {
                warn!(index, %why, "I/O thread ended during shutdown");
            }
            io.ended(index);
        }
        feed(&mut server, &mut io, &mut up);
        hand_over(&mut server, &mut io, &shared, writer);
    }
    debug!("closed");
    None
}

/// Hands the machine what the I/O threads gathered, in order; each run of datagrams in
/// one batch, so that the players' inputs are judged over the tick's workers.
fn feed(server: &mut ServerMachine, io: &mut IoThreads, up: &mut Vec<Up>) {
    io.take_up(up);
    let mut rest = &up[..];
    while let Some(first) = rest.first() {
        let run = rest
            .iter()
            .position(|u| !matches!(u, Up::Datagram { .. }))
            .unwrap_or(rest.len());
        if run > 0 {
            server.handle_datagrams(rest[..run].iter().filter_map(|u| match u {
                Up::Datagram { conn, bytes, at } => Some((*conn, &bytes[..], *at)),
                _ => None,
            }));
            rest = &rest[run..];
            continue;
        }
        match first {
            Up::Connected { conn, room, at } => {
                server.connected(*conn, *at);
                server.set_max_datagram(*conn, *room);
            }
            Up::Control { conn, bytes, at } => server.handle_control(*conn, bytes, *at),
            Up::Datagram { .. } => {} // taken with its run, above
            Up::MapSent { conn, at } => server.handle_map_sent(*conn, *at),
            Up::Closed { conn, reason } => server.handle_closed(*conn, reason),
        }
        rest = &rest[1..];
    }
    up.clear();
}

/// Hands the machine's outputs to the I/O threads (queued, then handed over in one
/// batch each, as the machine wrote them), logs its events and copies its counters.
fn hand_over(
    server: &mut ServerMachine,
    io: &mut IoThreads,
    shared: &Shared,
    writer: &mut Option<Writer>,
) {
    let m = &shared.metrics;
    record(server, writer, m);
    let now = Instant::now();
    while let Some(out) = server.poll_output() {
        io.send(out.conn(), Down::Output(out, now));
    }
    while let Some(e) = server.poll_event() {
        match e {
            Event::Joined {
                conn,
                player,
                sending_map,
            } => {
                info!(%player, conn, sending_map, "joined");
                io.send(conn, Down::Joined { conn });
                shared.players.joined(player.0);
            }
            Event::Left { player, reason } => {
                info!(%player, %reason, "left");
                shared.players.left(player.0);
            }
            Event::Refused { conn, code, reason } => {
                info!(conn, code = code.label(), %reason, "refused")
            }
            Event::CaughtUp {
                from,
                ticks,
                behind,
                took,
            } => {
                let (behind_ms, took_ms) = (behind.as_millis() as u64, took.as_millis() as u64);
                let what = "the server ran late and caught up; nobody was judged for it";
                // A tick or two late is a neighbour's time slice: counted, not told.
                if behind >= LATE_TOLD {
                    warn!(from, ticks, behind_ms, took_ms, "{what}");
                } else {
                    debug!(from, ticks, behind_ms, took_ms, "{what}");
                }
            }
            Event::Violation {
                player,
                kind,
                evidence,
            } => {
                warn!(%player, kind = kind.name(), %evidence, "violation");
                m.flag(player.0, kind);
            }
        }
    }
    io.flush();
    m.absorb(server.stats());
}

/// Hands the recording's finished bytes to its writer; a writer that cannot take them
/// ends the recording (the match plays on).
fn record(server: &mut ServerMachine, writer: &mut Option<Writer>, m: &crate::Metrics) {
    let Some(w) = writer else {
        return;
    };
    let mut why = server.recording_failed().map(str::to_string);
    while let Some(bytes) = server.poll_record() {
        if let Err(e) = w.send(bytes) {
            why = Some(e.to_string());
            break;
        }
    }
    m.recording.set(u64::from(why.is_none()));
    if let Some(why) = why {
        warn!(%why, "the recording ended early: the match plays on");
        m.record_failures.inc();
        server.stop_recording();
        *writer = None;
    }
}

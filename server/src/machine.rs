//! The machine's thread: it owns the protocol machine ([`Server`]), runs its ticks on
//! time, feeds it what the I/O threads gathered and hands them what it says. It touches
//! no socket: between ticks it sleeps until a tick is due or an I/O thread has something
//! that should not wait (a join, a control message, a close).

use crate::io::{Down, IoThreads, Wake};
use crate::quic::Up;
use crate::{live, meter, Shared, SHUTDOWN_GRACE};
use expel_shared::protocol::server::{Event, Output, Server};
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

/// Whether a tick's work spreads over the machine's workers: only while a tick on one
/// thread, with the inputs taken for it, takes over a quarter of the period. The machine's
/// thread's load caps the players admitted: spread from there, it stays under about half
/// busy. Under that, one thread is cheaper, and a spread tick waits for every worker it
/// handed work to, which the system may not run at once when other processes share the
/// cores. The tick time is averaged over
/// about twenty ticks; spread, a tick takes about its time on one thread over the
/// workers, so it goes back to one thread only under a quarter of the period over the
/// workers (no flapping).
struct Spread {
    on: bool,
    workers: f64,
    /// Mean tick time (seconds), as ticks run now.
    mean: f64,
    period: f64,
}

impl Spread {
    /// Weight of the newest tick in the mean.
    const WEIGHT: f64 = 0.05;

    fn new(workers: usize, period: Duration) -> Self {
        Spread {
            on: false,
            workers: workers.max(1) as f64,
            mean: 0.0,
            period: period.as_secs_f64(),
        }
    }

    /// Takes one tick's time; returns the new setting when it changes.
    fn tick(&mut self, took: Duration) -> Option<bool> {
        self.mean += (took.as_secs_f64() - self.mean) * Self::WEIGHT;
        let quarter = self.period / 4.0;
        let on = if self.on {
            self.mean >= quarter / self.workers
        } else {
            self.mean > quarter
        };
        (on != self.on).then(|| {
            self.on = on;
            on
        })
    }
}

/// Runs [`machine_loop`] on a thread of its own (one of the tick's workers when there are
/// several, so the thread works on each tick rather than waiting for the others to be
/// scheduled). The handle is a task's, for the supervisor; a panic on the thread surfaces
/// as the task's.
pub(crate) fn spawn(
    server: Server,
    io: IoThreads,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    wake: Receiver<Wake>,
) -> std::io::Result<tokio::task::JoinHandle<Option<String>>> {
    let (done, ended) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("expel-machine".into())
        .spawn(move || {
            let run = std::panic::AssertUnwindSafe(move || {
                let workers = server.workers();
                let machine = move || machine_loop(server, io, shared, live, wake);
                match workers {
                    Some(pool) => pool.install(machine),
                    None => machine(),
                }
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
    mut server: Server,
    mut io: IoThreads,
    shared: Arc<Shared>,
    live: Arc<live::Live>,
    wake: Receiver<Wake>,
) -> Option<String> {
    let m = shared.metrics.clone();
    let rate = server.sim().config().tick_rate;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let frame_every = u64::from((rate / live::FRAME_RATE).max(1));
    let mut longest = Duration::ZERO;
    let workers = server.workers().map_or(1, |w| w.current_num_threads());
    let mut spread = (workers > 1).then(|| {
        server.set_spread(false);
        Spread::new(workers, period)
    });
    m.tick_threads.set(1);
    let max_players = shared.cfg.settings.max_players as u64;
    let mut load_meter = meter::LoadMeter::new(shared.port, Instant::now());
    let mut hold = true;
    let mut up = Vec::new();
    // Time spent taking inputs since the last tick.
    let mut fed = Duration::ZERO;
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
        fed += feed(&mut server, &mut io, &mut up);
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
                // The inputs taken for a tick spread with it: they count in its time.
                let work = each + std::mem::take(&mut fed) / stepped as u32;
                if let Some(on) = spread.as_mut().and_then(|s| s.tick(work)) {
                    debug!(on, "tick work spread over the workers");
                    server.set_spread(on);
                    m.tick_threads.set(if on { workers } else { 1 } as u64);
                }
                if let Some(l) = load_meter.sample(Instant::now(), || io.schedstats()) {
                    m.udp_drops.inc_by(l.dropped);
                    server.handle_load(l);
                    let neighbour = load_meter.neighbour();
                    let percent = (neighbour * 100.0).round() as u64;
                    m.neighbour.set(percent);
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
        carry_out(&mut server, &mut io, &shared);
        io.ticking(false);
    };
    // Shutdown: every player is told why; the I/O threads close the rest, and those who
    // read their last words within the grace are closed by then too.
    server.shutdown(&reason);
    carry_out(&mut server, &mut io, &shared);
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
        carry_out(&mut server, &mut io, &shared);
    }
    debug!("closed");
    None
}

/// Hands the machine what the I/O threads gathered, in order; each run of datagrams in
/// one batch, so that the players' inputs are judged over the tick's workers. Returns
/// the time those batches took (joins and control messages are not a tick's work).
fn feed(server: &mut Server, io: &mut IoThreads, up: &mut Vec<Up>) -> Duration {
    io.take_up(up);
    let mut inputs = Duration::ZERO;
    let mut rest = &up[..];
    while let Some(first) = rest.first() {
        let run = rest
            .iter()
            .position(|u| !matches!(u, Up::Datagram { .. }))
            .unwrap_or(rest.len());
        if run > 0 {
            let began = Instant::now();
            server.handle_datagrams(rest[..run].iter().filter_map(|u| match u {
                Up::Datagram { id, bytes, at } => Some((*id, &bytes[..], *at)),
                _ => None,
            }));
            inputs += began.elapsed();
            rest = &rest[run..];
            continue;
        }
        match first {
            Up::Connected { id, room, at } => {
                server.connected(*id, *at);
                server.set_max_datagram(*id, *room);
            }
            Up::Control { id, bytes, at } => server.handle_control(*id, bytes, *at),
            Up::Datagram { .. } => {} // taken with its run, above
            Up::MapSent { id, at } => server.handle_map_sent(*id, *at),
            Up::Closed { id, reason } => server.handle_closed(*id, reason),
        }
        rest = &rest[1..];
    }
    up.clear();
    inputs
}

/// Carries out the machine's outputs (queued for the I/O threads, then handed over in
/// one batch each), logs its events and copies its counters.
fn carry_out(server: &mut Server, io: &mut IoThreads, shared: &Shared) {
    let m = &shared.metrics;
    let now = Instant::now();
    while let Some(out) = server.poll_output() {
        match out {
            Output::Datagram { conn, bytes } => io.send(conn, Down::Datagram { id: conn, bytes }),
            Output::Control { conn, bytes } => io.send(conn, Down::Control { id: conn, bytes }),
            Output::Map { conn } => io.send(conn, Down::Map { id: conn, at: now }),
            Output::Close {
                conn,
                last,
                code,
                reason,
            } => io.send(
                conn,
                Down::Close {
                    id: conn,
                    last,
                    code: code.number().into(),
                    reason,
                },
            ),
        }
    }
    while let Some(e) = server.poll_event() {
        match e {
            Event::Joined {
                conn,
                player,
                sending_map,
            } => {
                info!(player, conn, sending_map, "joined");
                io.send(conn, Down::Joined { id: conn });
                shared.players.joined(player);
            }
            Event::Left { player, reason } => {
                info!(player, %reason, "left");
                shared.players.left(player);
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
                warn!(player, kind = kind.name(), %evidence, "violation");
                m.flag(player, kind);
            }
        }
    }
    io.flush();
    m.absorb(server.stats());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_spread_over_the_workers_only_while_they_are_long() {
        let period = Duration::from_micros(16_000);
        let mut s = Spread::new(2, period);
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        // Ticks under a quarter of the period stay on one thread.
        assert!((0..200).all(|_| s.tick(us(3500)).is_none()));
        // Longer ones (over 4 ms) spread, once the mean has moved.
        let turned = (0..200).position(|_| s.tick(ms(5)) == Some(true));
        assert!(turned.is_some_and(|i| i > 3), "{turned:?}");
        // Spread, a tick of 2.5 ms is one of about 5 on one thread: it stays spread...
        assert!((0..200).all(|_| s.tick(us(2500)).is_none()));
        // ...and goes back under 2 ms (4 ms over the two workers).
        assert!((0..200).any(|_| s.tick(us(1500)) == Some(false)));
        assert!((0..200).all(|_| s.tick(us(3500)).is_none()));
    }
}

//! Light bots on QUIC driven by hand: every bot's connection on a few shared sockets, all
//! of them on one task, on the same driver as the server's I/O threads ([`expel_quic`]).
//!
//! A [`Session`](expel_client::Session) owns a socket and an endpoint of its own; a
//! thousand of them would cost the bots' core more than the server costs its own, and a
//! load test would measure a server sent less than a real crowd sends. Here a datagram
//! goes from a shared socket through the endpoint into the bot's protocol machine in one
//! call chain, and its inputs go out the same way.
//!
//! For light bots (scripted honest inputs, no prediction) without a link conditioner or
//! reconnects; every other swarm plays on sessions.

use crate::{
    driver, BotOutcome, Recorder, Script, SwarmOptions, SwarmProgress, BEHAVIOUR_SEED,
    BOTS_PER_SOCKET,
};
use bytes::Bytes;
use expel_client::{bind_address, client_config, ClientError, TransportStats, HANDSHAKE_TIMEOUT};
use expel_core::{MoveCommand, PlayerState, Sim};
use expel_protocol::client::{ClientMachine, ClientOutput, ClientSettings, Status};
use expel_protocol::ALPN;
use expel_quic::{datagrams, ecn, Batch, Link, LinkEvent, Timers, Wire};
use quinn_proto::{DatagramEvent, Endpoint, EndpointConfig};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Receive buffers per receive call.
const BATCH: usize = 16;
/// Receive calls per socket before the timers are looked at again.
const BATCHES_PER_TURN: usize = 8;
/// After its goodbye, how long a bot waits for the server to close (as a session does).
const GOODBYE_WAIT: Duration = Duration::from_secs(1);
/// After its close, how long a connection gets to send the close frame.
const DRAIN_WAIT: Duration = Duration::from_secs(1);
type Driver = Box<dyn FnMut(u64, Option<&PlayerState>) -> Option<MoveCommand> + Send>;

/// Where a bot stands.
enum Stage {
    /// Waiting for a handshake slot.
    Waiting,
    /// The QUIC handshake, due by `by`.
    Handshake { by: Instant },
    /// Connected and the hello sent: waiting for the welcome and the map.
    Joining,
    /// Playing its script.
    Playing(Box<Play>),
    /// Said goodbye: the server closes, or `until` passes.
    Leaving { until: Instant },
    /// Closed: QUIC sends its close until drained, or `until` passes.
    Closing { until: Instant },
    /// Nothing more to do.
    Done,
}

/// What [`Swarm::advance`] found to do.
enum Next {
    Stay,
    Fail(ClientError),
    Joined,
    Finish,
    Close,
    Done,
}

/// A playing bot's script and measurements.
struct Play {
    script: Script<Driver>,
    recorder: Recorder,
    started: Instant,
    t0: TransportStats,
}

struct Bot {
    group: usize,
    link: Option<Link>,
    machine: Option<ClientMachine>,
    stage: Stage,
    /// The wake-up in the timer heap that is this bot's current one.
    armed: Option<Instant>,
    dirty: bool,
    outcome: BotOutcome,
}

impl Bot {
    /// Bot `i` needs a service.
    fn mark(&mut self, i: usize, dirty: &mut Vec<usize>) {
        if !self.dirty {
            self.dirty = true;
            dirty.push(i);
        }
    }
}

/// A socket and its endpoint, shared by up to [`BOTS_PER_SOCKET`] bots.
struct Group {
    wire: Wire,
    endpoint: Endpoint,
    /// Bot by connection handle (the endpoint's handles are dense).
    bots: Vec<Option<usize>>,
}

impl Group {
    fn new(server: SocketAddr) -> io::Result<Group> {
        let std = std::net::UdpSocket::bind(bind_address(server))?;
        // A burst of snapshots, one per bot of the group, lands at once.
        let wire = Wire::new(std, 1 << 20)?;
        let allow_mtud = wire.allow_mtud();
        Ok(Group {
            wire,
            endpoint: Endpoint::new(Arc::new(EndpointConfig::default()), None, allow_mtud, None),
            bots: Vec::new(),
        })
    }
}

struct Swarm {
    opts: SwarmOptions,
    config: quinn_proto::ClientConfig,
    groups: Vec<Group>,
    bots: Vec<Bot>,
    /// The next bot to start.
    next: usize,
    /// Bots between their first packet and joining.
    joining: usize,
    /// Bots not done.
    left: usize,
    /// The map and simulation the first bot to join received, for the rest.
    known: Option<(Arc<Vec<u8>>, Arc<Sim>)>,
    timers: Timers,
    dirty: Vec<usize>,
    deadline: Instant,
    progress: Arc<SwarmProgress>,
    batch: Batch,
    send_buf: Vec<u8>,
}

/// Runs a light swarm (see the module docs). Returns each bot's outcome, in bot order.
pub(crate) async fn swarm(opts: SwarmOptions, progress: Arc<SwarmProgress>) -> Vec<BotOutcome> {
    let deadline = Instant::now() + Duration::from_secs_f64(opts.seconds.max(0.0));
    let n = opts.tokens.len();
    let setup = client_config(&opts.trust, ALPN).and_then(|config| {
        let groups = (0..n.div_ceil(BOTS_PER_SOCKET))
            .map(|_| Group::new(opts.server))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| ClientError::Connect {
                addr: opts.server,
                detail: format!("making a socket: {e}"),
            })?;
        Ok((config, groups))
    });
    let (config, groups) = match setup {
        Ok(s) => s,
        Err(e) => {
            progress.failed.fetch_add(n as u64, Relaxed);
            return (0..n)
                .map(|i| BotOutcome::failed(i as u32, e.to_string()))
                .collect();
        }
    };
    let bots = (0..n)
        .map(|i| Bot {
            group: i / BOTS_PER_SOCKET,
            link: None,
            machine: None,
            stage: Stage::Waiting,
            armed: None,
            dirty: false,
            outcome: BotOutcome::new(i as u32, None),
        })
        .collect();
    let mut s = Swarm {
        opts,
        config,
        groups,
        bots,
        next: 0,
        joining: 0,
        left: n,
        known: None,
        timers: Timers::default(),
        dirty: Vec::new(),
        deadline,
        progress,
        batch: Batch::new(BATCH),
        send_buf: Vec::new(),
    };
    s.run().await;
    s.bots.into_iter().map(|b| b.outcome).collect()
}

impl Swarm {
    async fn run(&mut self) {
        while self.left > 0 {
            let now = Instant::now();
            self.receive(now);
            self.fire_timers(now);
            self.start_bots(now);
            while let Some(i) = self.dirty.pop() {
                self.service(i, now);
            }
            if self.left == 0 {
                break;
            }
            let wake = self
                .next_timer()
                .unwrap_or(now + Duration::from_millis(100));
            let groups = &self.groups;
            let readable = std::future::poll_fn(|cx| {
                for g in groups {
                    if g.wire.poll_recv_ready(cx).is_ready() {
                        return Poll::Ready(());
                    }
                }
                Poll::Pending
            });
            tokio::select! {
                _ = readable => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Starts handshakes while slots are free. The first bot joins alone: the rest reuse
    /// the map it received.
    fn start_bots(&mut self, now: Instant) {
        let slots = self.opts.concurrent_connects.max(1);
        while self.next < self.bots.len()
            && self.joining < slots
            && (self.known.is_some() || self.joining == 0)
        {
            let i = self.next;
            self.next += 1;
            let g = &mut self.groups[self.bots[i].group];
            match g
                .endpoint
                .connect(now, self.config.clone(), self.opts.server, "localhost")
            {
                Ok((h, conn)) => {
                    if g.bots.len() <= h.0 {
                        g.bots.resize(h.0 + 1, None);
                    }
                    g.bots[h.0] = Some(i);
                    let bot = &mut self.bots[i];
                    bot.link = Some(Link::new(h, conn));
                    bot.stage = Stage::Handshake {
                        by: now + HANDSHAKE_TIMEOUT,
                    };
                    self.joining += 1;
                    self.touch(i);
                }
                Err(e) => {
                    let e = ClientError::Connect {
                        addr: self.opts.server,
                        detail: e.to_string(),
                    };
                    self.fail(i, e, now);
                }
            }
        }
    }

    /// Takes what the sockets hold (a bounded amount each).
    fn receive(&mut self, now: Instant) {
        let mut batch = std::mem::replace(&mut self.batch, Batch::new(0));
        let mut response = Vec::new();
        for gi in 0..self.groups.len() {
            for _ in 0..BATCHES_PER_TURN {
                let n = match self.groups[gi].wire.recv(&mut batch) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                    Err(_) => break,
                };
                for k in 0..n {
                    let (meta, buf) = batch.get_mut(k);
                    datagrams(meta, buf, |one| {
                        let g = &mut self.groups[gi];
                        response.clear();
                        let event = g.endpoint.handle(
                            now,
                            meta.addr,
                            meta.dst_ip,
                            ecn(meta),
                            one,
                            &mut response,
                        );
                        match event {
                            Some(DatagramEvent::ConnectionEvent(h, event)) => {
                                let Some(i) = g.bots.get(h.0).copied().flatten() else {
                                    return;
                                };
                                let bot = &mut self.bots[i];
                                if let Some(link) = bot.link.as_mut() {
                                    link.conn_mut().handle_event(event);
                                    bot.mark(i, &mut self.dirty);
                                }
                            }
                            Some(DatagramEvent::Response(t)) => {
                                // Lost as UDP may lose it.
                                let _ = g.wire.send(&t, &response);
                            }
                            // A client accepts no connections.
                            Some(DatagramEvent::NewConnection(_)) | None => {}
                        }
                    });
                }
            }
        }
        self.batch = batch;
    }

    fn fire_timers(&mut self, now: Instant) {
        loop {
            let bots = &self.bots;
            let Some(i) = self.timers.pop_due(now, |i| bots[i].armed) else {
                break;
            };
            let bot = &mut self.bots[i];
            bot.armed = None;
            if let Some(link) = bot.link.as_mut() {
                link.handle_timeout(now);
            }
            self.touch(i);
        }
    }

    fn next_timer(&mut self) -> Option<Instant> {
        let bots = &self.bots;
        self.timers.next(|i| bots[i].armed)
    }

    fn touch(&mut self, i: usize) {
        self.bots[i].mark(i, &mut self.dirty);
    }

    /// A bot that could not join: counted, and its connection closed.
    fn fail(&mut self, i: usize, e: ClientError, now: Instant) {
        let bot = &mut self.bots[i];
        if matches!(bot.stage, Stage::Handshake { .. } | Stage::Joining) {
            self.joining -= 1;
        }
        bot.outcome.error = Some(e.to_string());
        self.progress.failed.fetch_add(1, Relaxed);
        self.close(i, now);
    }

    /// Closes the bot's connection (QUIC still sends the close).
    fn close(&mut self, i: usize, now: Instant) {
        let bot = &mut self.bots[i];
        match bot.link.as_mut() {
            Some(link) => {
                link.close(now, b"done");
                bot.stage = Stage::Closing {
                    until: now + DRAIN_WAIT,
                };
            }
            None => self.done(i),
        }
        self.touch(i);
    }

    fn done(&mut self, i: usize) {
        let bot = &mut self.bots[i];
        if matches!(bot.stage, Stage::Done) {
            return;
        }
        bot.stage = Stage::Done;
        if let Some(link) = bot.link.take() {
            if let Some(slot) = self.groups[bot.group].bots.get_mut(link.handle().0) {
                *slot = None;
            }
        }
        self.left -= 1;
        self.progress.finished.fetch_add(1, Relaxed);
    }

    /// Everything one bot has to do now: its connection's events into its machine, its
    /// stage onwards, its machine's outputs and its packets out, its next wake-up.
    fn service(&mut self, i: usize, now: Instant) {
        self.bots[i].dirty = false;
        self.events(i, now);
        self.advance(i, now);
        let bot = &mut self.bots[i];
        let Some(link) = bot.link.as_mut() else {
            return;
        };
        if let Some(m) = bot.machine.as_mut() {
            while let Some(out) = m.poll_output() {
                match out {
                    ClientOutput::Control(b) => link.send_control(&b),
                    ClientOutput::Datagram(b) => link.send_datagram(Bytes::from(b)),
                }
            }
        }
        let g = &mut self.groups[bot.group];
        // A transmit the socket cannot take now is lost, as UDP may lose it: QUIC sends
        // again (a bot has nothing to gain from waiting for room).
        link.flush(&mut g.endpoint, &g.wire, now, &mut self.send_buf, &mut None);
        let drained = link.is_drained();
        let wake = [
            link.poll_timeout(),
            match &bot.stage {
                Stage::Handshake { by } => Some(*by),
                Stage::Playing(_) => bot
                    .machine
                    .as_ref()
                    .and_then(ClientMachine::poll_timeout)
                    .map(|t| t.min(self.deadline)),
                Stage::Leaving { until } | Stage::Closing { until } => Some(*until),
                Stage::Waiting | Stage::Joining | Stage::Done => None,
            },
        ]
        .into_iter()
        .flatten()
        .min();
        if drained && matches!(bot.stage, Stage::Closing { .. }) {
            self.done(i);
            return;
        }
        self.timers.arm(i, wake, &mut bot.armed);
        let armed = self.bots.iter().enumerate();
        let armed = armed.filter_map(|(i, b)| Some((i, b.armed?)));
        self.timers.compact(self.bots.len(), armed);
    }

    /// The connection's events, into the bot's machine.
    fn events(&mut self, i: usize, now: Instant) {
        let Swarm {
            bots,
            groups,
            opts,
            known,
            ..
        } = self;
        let bot = &mut bots[i];
        let Some(link) = bot.link.as_mut() else {
            return;
        };
        let (machine, stage, outcome) = (&mut bot.machine, &mut bot.stage, &mut bot.outcome);
        link.poll_events(&mut groups[bot.group].endpoint, |event| match event {
            LinkEvent::Connected => {
                let settings = ClientSettings {
                    have_map: known.as_ref().map(|k| k.0.clone()),
                    sim: known.as_ref().map(|k| k.1.clone()),
                    buffer_ticks: opts.buffer_ticks,
                    light: true,
                    ..ClientSettings::new(opts.tokens[i].clone())
                };
                *machine = Some(ClientMachine::new(settings, now));
                *stage = Stage::Joining;
            }
            LinkEvent::Lost(code, why) => match machine.as_mut() {
                Some(m) => m.handle_closed(code, &why),
                // Lost in the handshake: `advance` says why.
                None => outcome.error = Some(why),
            },
            LinkEvent::Control(b) => {
                if let Some(m) = machine.as_mut() {
                    m.handle_control(&b, now);
                }
            }
            LinkEvent::Datagram(d) => {
                if let Some(m) = machine.as_mut() {
                    m.handle_datagram(&d, now);
                }
            }
        });
    }

    /// The bot's stage onwards: joined, failed, the script's next command, done.
    fn advance(&mut self, i: usize, now: Instant) {
        let addr = self.opts.server;
        let bot = &mut self.bots[i];
        let lost = bot.link.as_ref().is_some_and(Link::is_lost);
        let next = match &mut bot.stage {
            Stage::Handshake { by } if lost || now >= *by => {
                let detail = bot.outcome.error.take().unwrap_or_else(|| {
                    let t = bot.link.as_ref().map(Link::stats).unwrap_or_default();
                    format!(
                        "no handshake within {} s ({} datagrams sent, {} received)",
                        HANDSHAKE_TIMEOUT.as_secs(),
                        t.datagrams_out,
                        t.datagrams_in
                    )
                });
                Next::Fail(ClientError::Connect { addr, detail })
            }
            Stage::Joining => match bot.machine.as_ref().map(ClientMachine::status) {
                Some(Status::Playing) => Next::Joined,
                Some(Status::Ended(e)) => Next::Fail(ClientError::joining(e, addr)),
                _ => Next::Stay,
            },
            Stage::Playing(play) => {
                let (Some(m), Some(link)) = (bot.machine.as_mut(), bot.link.as_ref()) else {
                    return;
                };
                let ended = matches!(m.status(), Status::Ended(_));
                if now >= self.deadline || play.script.over(now) || ended {
                    Next::Finish
                } else {
                    m.set_rtt(link.rtt());
                    m.handle_timeout_with(now, &mut |tick, st| play.script.command(tick, st, now));
                    play.recorder.take(m.stats(), link.rtt());
                    Next::Stay
                }
            }
            Stage::Leaving { until } if lost || now >= *until => Next::Close,
            Stage::Closing { until } if now >= *until => Next::Done,
            _ => Next::Stay,
        };
        match next {
            Next::Stay => {}
            Next::Fail(e) => self.fail(i, e, now),
            Next::Joined => self.joined(i, now),
            Next::Finish => self.finish(i, now),
            Next::Close => self.close(i, now),
            Next::Done => self.done(i),
        }
    }

    fn joined(&mut self, i: usize, now: Instant) {
        self.joining -= 1;
        let bot = &mut self.bots[i];
        let (Some(m), Some(link)) = (bot.machine.as_ref(), bot.link.as_ref()) else {
            return;
        };
        let (Some(sim), Some(map), Some(welcome)) = (m.sim(), m.map(), m.welcome()) else {
            return;
        };
        if self.known.is_none() {
            self.known = Some((map.clone(), sim.clone()));
        }
        bot.outcome.player = Some(welcome.player.0);
        self.progress.connected.fetch_add(1, Relaxed);
        let commands: Driver = Box::new(driver(self.opts.behavior, i as u32, BEHAVIOUR_SEED, sim));
        bot.stage = Stage::Playing(Box::new(Play {
            script: Script::new(commands)
                .with_gunner(self.opts.fire.then(|| crate::Gunner::new(i as u32))),
            recorder: Recorder::of(m.stats()),
            started: now,
            t0: link.stats(),
        }));
    }

    /// The bot's time is up: its report, and its goodbye.
    fn finish(&mut self, i: usize, now: Instant) {
        let bot = &mut self.bots[i];
        // Should the bot not be playing after all, it just closes.
        let stage = std::mem::replace(&mut bot.stage, Stage::Leaving { until: now });
        let (Stage::Playing(play), Some(m), Some(link)) =
            (stage, bot.machine.as_mut(), bot.link.as_ref())
        else {
            return;
        };
        let play = *play;
        let report =
            play.recorder
                .report(m.stats(), m.status(), play.started, &play.t0, &link.stats());
        bot.outcome.report = Some(report);
        let by_server = matches!(m.status(), Status::Ended(e) if e.by_server());
        if by_server || link.is_lost() {
            bot.stage = Stage::Leaving { until: now };
        } else {
            m.leave("done");
            bot.stage = Stage::Leaving {
                until: now + GOODBYE_WAIT,
            };
        }
        self.touch(i);
    }
}

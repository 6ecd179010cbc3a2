//! A simulated network: the server's and clients' state machines in one thread on virtual
//! time, joined by conditioned queues. Minutes of play run in seconds, and a seed makes a
//! run repeat exactly, so protocol behaviour is tested without sockets or wall time.
//!
//! Datagrams go through a [`Conditioner`] each way (loss, delay, jitter, duplication). The
//! control stream is reliable and ordered, so it only takes the base delay. Virtual time
//! advances in fixed steps; everything due within a step happens at its end.

use super::client::ClientOutput;
use super::client::{ClientMachine, ClientSettings, End, Status};
use super::code::Code;
use super::conditioner::{Conditioner, Impairment};
use super::headroom::Load;
use super::join::map_frames;
use super::server::{ConnId, Event, Output, ServerMachine};
use crate::time::Instant;
use expel_core::movement::MoveCommand;
use std::collections::VecDeque;
use std::time::Duration;

/// How the network behaves.
#[derive(Clone, Copy, Debug)]
pub struct NetSettings {
    /// ClientMachine to server.
    pub up: Impairment,
    /// ServerMachine to client.
    pub down: Impairment,
    /// Seed of every link's randomness.
    pub seed: u64,
    /// Virtual time per step.
    pub step: Duration,
}

impl Default for NetSettings {
    fn default() -> Self {
        NetSettings {
            up: Impairment::default(),
            down: Impairment::default(),
            seed: 1,
            step: Duration::from_millis(1),
        }
    }
}

/// What travels on a control stream: bytes, then perhaps the close.
#[derive(Clone, Debug)]
enum Stream {
    Bytes(Vec<u8>),
    Close(Code, String),
}

/// One client and its link.
struct Peer {
    conn: ConnId,
    client: ClientMachine,
    up: Conditioner<Vec<u8>>,
    down: Conditioner<Vec<u8>>,
    ctl_up: VecDeque<(Instant, Vec<u8>)>,
    ctl_down: VecDeque<(Instant, Stream)>,
    /// The server closed its side.
    closed: bool,
    /// Until then the client's host is frozen: it reads and sends nothing.
    frozen_until: Option<Instant>,
    /// Until then what the client sends waits in a queue on the way.
    held_until: Option<Instant>,
    /// How long the host is busy once its map has arrived, before its first tick.
    slow_start: Option<Duration>,
    /// Packets the server sent it: what one look at the server's outputs had for it
    /// goes in one, as a QUIC shell's one pass over its connection packs it.
    packets: u64,
    /// The server's outputs of the present look had something for it.
    in_packet: bool,
}

/// The server, its clients and the links between them.
pub struct SimNet {
    server: ServerMachine,
    peers: Vec<Peer>,
    settings: NetSettings,
    now: Instant,
    events: Vec<Event>,
    /// What each tick costs the server's thread (zero: nothing), and until when it is
    /// busy with the last ones: meanwhile what arrives waits unread and no tick runs.
    tick_cost: Duration,
    /// What each tick costs per player in the world, on top.
    player_cost: Duration,
    busy_until: Instant,
    /// Datagrams that reached the server, kept until it next ticks or takes a control
    /// message (as its shell gathers them between ticks), with when each arrived.
    inbox: Vec<(ConnId, Vec<u8>, Instant)>,
    /// The server's work charged since the window began (see [`LOAD_WINDOW`]).
    busy: Duration,
    window_began: Instant,
}

/// How often the network reports the server's load to it, as a shell does.
const LOAD_WINDOW: Duration = Duration::from_millis(250);

/// ServerMachine events kept for the test to read; later ones are dropped.
const EVENTS_KEPT: usize = 10_000;

impl SimNet {
    /// A network around `server`, whose clock is at `now`.
    pub fn new(server: ServerMachine, now: Instant, settings: NetSettings) -> SimNet {
        SimNet {
            server,
            peers: Vec::new(),
            settings,
            now,
            events: Vec::new(),
            tick_cost: Duration::ZERO,
            player_cost: Duration::ZERO,
            busy_until: now,
            inbox: Vec::new(),
            busy: Duration::ZERO,
            window_began: now,
        }
    }

    /// From now on each tick the server steps holds its thread for `cost` (over the tick
    /// period: a server that falls behind, as an overloaded host's does), and each tick
    /// it catches up on (movement alone, no snapshots) a quarter of it; what arrives
    /// meanwhile waits unread, as in a socket's queue.
    pub fn set_tick_cost(&mut self, cost: Duration) {
        self.tick_cost = cost;
    }

    /// From now on each tick costs `cost` more per player in the world (a server whose
    /// capacity is its players' cost: see [`ServerMachine::handle_load`], which the network
    /// reports the load to every quarter second).
    pub fn set_player_cost(&mut self, cost: Duration) {
        self.player_cost = cost;
    }

    /// Holds the server's thread for `d` from now (a stall: a page fault storm, a
    /// neighbour taking the core): nothing is read and no tick runs until it is over.
    pub fn stall_server(&mut self, d: Duration) {
        self.busy_until = self.busy_until.max(self.now + d);
    }

    /// Connects a client (its transport handshake is taken as done); returns its index.
    pub fn connect(&mut self, settings: ClientSettings) -> usize {
        let i = self.peers.len();
        let conn = i as ConnId + 1;
        let seed = self.settings.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.peers.push(Peer {
            conn,
            client: ClientMachine::new(settings, self.now),
            up: Conditioner::new(self.settings.up, seed),
            down: Conditioner::new(self.settings.down, seed ^ 0xd0),
            ctl_up: VecDeque::new(),
            ctl_down: VecDeque::new(),
            closed: false,
            frozen_until: None,
            held_until: None,
            slow_start: None,
            packets: 0,
            in_packet: false,
        });
        self.server.connected(conn, self.now);
        i
    }

    /// Packets the server sent client `i` so far: each look at the server's outputs
    /// that had anything for it (a snapshot, control bytes, or both) counts one.
    pub fn packets_down(&self, i: usize) -> u64 {
        self.peers[i].packets
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The server.
    pub fn server(&self) -> &ServerMachine {
        &self.server
    }

    /// The server, to change (install a game's rules, send its messages).
    pub fn server_mut(&mut self) -> &mut ServerMachine {
        &mut self.server
    }

    /// The server's events so far (the first `EVENTS_KEPT`).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// ClientMachine `i`.
    pub fn client(&self, i: usize) -> &ClientMachine {
        &self.peers[i].client
    }

    /// ClientMachine `i`, to change (a tamper, a buffer).
    pub fn client_mut(&mut self, i: usize) -> &mut ClientMachine {
        &mut self.peers[i].client
    }

    /// How many clients were connected.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Runs for `d` of virtual time. Before each client's tick `input(i, client)` gives
    /// its command.
    pub fn run(
        &mut self,
        d: Duration,
        input: &mut impl FnMut(usize, &ClientMachine) -> MoveCommand,
    ) {
        let end = self.now + d;
        while self.now < end {
            self.now += self.settings.step;
            self.step(input);
        }
    }

    /// Freezes client `i`'s host for `d`, as a starved or suspended machine would be: what
    /// it is sent waits unread and it sends nothing; then it takes the backlog at once.
    pub fn freeze(&mut self, i: usize, d: Duration) {
        if let Some(p) = self.peers.get_mut(i) {
            p.frozen_until = Some(self.now + d);
        }
    }

    /// Makes client `i`'s host busy for `d` from the moment its map arrives, before its
    /// first tick, as building a big map's collision model (or a game's loading screen)
    /// would: meanwhile it reads and sends nothing.
    pub fn slow_start(&mut self, i: usize, d: Duration) {
        if let Some(p) = self.peers.get_mut(i) {
            p.slow_start = Some(d);
        }
    }

    /// Holds what client `i` sends for `d` and then delivers it all, in order, as a queue
    /// on the way would (a host that cannot get its packets out, a server that does not
    /// read them); the client itself runs on and hears the server meanwhile.
    pub fn hold(&mut self, i: usize, d: Duration) {
        if let Some(p) = self.peers.get_mut(i) {
            p.held_until = Some(self.now + d);
        }
    }

    /// Changes client `i`'s path each way from now on, as a queue building up on the way
    /// or a host falling behind would.
    pub fn set_links(&mut self, i: usize, up: Impairment, down: Impairment) {
        if let Some(p) = self.peers.get_mut(i) {
            p.up.set_link(up);
            p.down.set_link(down);
        }
    }

    fn step(&mut self, input: &mut impl FnMut(usize, &ClientMachine) -> MoveCommand) {
        let now = self.now;
        let up_delay = delay(self.settings.up);
        let down_delay = delay(self.settings.down);
        let server_free = now >= self.busy_until;
        for p in self.peers.iter_mut().filter(|_| server_free) {
            if p.ctl_up.front().is_some_and(|(at, _)| *at <= now) {
                deliver(&mut self.server, &mut self.inbox);
            }
            while p.ctl_up.front().is_some_and(|(at, _)| *at <= now) {
                if let Some((_, b)) = p.ctl_up.pop_front() {
                    self.server.handle_control(p.conn, &b, now);
                }
            }
            if p.held_until.is_some_and(|t| now < t) {
                continue;
            }
            while let Some(b) = p.up.pop(now) {
                if !p.closed {
                    self.inbox.push((p.conn, b, now));
                }
            }
        }
        if server_free && self.server.poll_timeout() <= now {
            deliver(&mut self.server, &mut self.inbox);
            let before = self.server.stats().ticks;
            self.server.handle_timeout(now);
            let stepped = self.server.stats().ticks - before;
            let caught_up = stepped.saturating_sub(1) as u32;
            let players = self.server.world().players.len() as u32;
            let tick = self.tick_cost + self.player_cost * players;
            let work = tick * stepped.min(1) as u32 + tick * caught_up / 4;
            self.busy += work;
            self.busy_until = now + work;
        }
        if now >= self.window_began + LOAD_WINDOW {
            let window = now - self.window_began;
            let busy = self.busy.as_secs_f64() / window.as_secs_f64();
            self.server.handle_load(Load { busy, dropped: 0 });
            self.busy = Duration::ZERO;
            self.window_began = now;
        }
        while let Some(out) = self.server.poll_output() {
            let conn = match &out {
                Output::Control { conn, .. }
                | Output::Map { conn }
                | Output::Datagram { conn, .. }
                | Output::Close { conn, .. } => *conn,
            };
            let Some(p) = (conn as usize)
                .checked_sub(1)
                .and_then(|i| self.peers.get_mut(i))
            else {
                continue;
            };
            let at = now + down_delay;
            p.in_packet = true;
            match out {
                Output::Control { bytes, .. } => p.ctl_down.push_back((at, Stream::Bytes(bytes))),
                Output::Map { .. } => {
                    for f in map_frames(&self.server.settings().map_bytes) {
                        p.ctl_down.push_back((at, Stream::Bytes(f)));
                    }
                    self.server.handle_map_sent(conn, now);
                }
                Output::Datagram { bytes, .. } => p.down.push(bytes, now),
                Output::Close {
                    last, code, reason, ..
                } => {
                    if !last.is_empty() {
                        p.ctl_down.push_back((at, Stream::Bytes(last)));
                    }
                    p.ctl_down
                        .push_back((at, Stream::Close(code, reason.clone())));
                    p.closed = true;
                    self.server.handle_closed(conn, &reason);
                }
            }
        }
        for p in &mut self.peers {
            p.packets += u64::from(std::mem::take(&mut p.in_packet));
        }
        while let Some(e) = self.server.poll_event() {
            if self.events.len() < EVENTS_KEPT {
                self.events.push(e);
            }
        }
        for (i, p) in self.peers.iter_mut().enumerate() {
            if p.frozen_until.is_some_and(|t| now < t) {
                continue;
            }
            while p.ctl_down.front().is_some_and(|(at, _)| *at <= now) {
                match p.ctl_down.pop_front() {
                    Some((_, Stream::Bytes(b))) => p.client.handle_control(&b, now),
                    Some((_, Stream::Close(code, reason))) => {
                        p.client.handle_closed(Some(code.number().into()), &reason)
                    }
                    None => {}
                }
            }
            if *p.client.status() == Status::Playing {
                if let Some(d) = p.slow_start.take() {
                    p.frozen_until = Some(now + d);
                    continue;
                }
            }
            while let Some(b) = p.down.pop(now) {
                p.client.handle_datagram(&b, now);
            }
            if p.client.poll_timeout().is_some_and(|t| t <= now) {
                let cmd = input(i, &p.client);
                p.client.input(cmd);
                p.client.handle_timeout(now);
            }
            while let Some(out) = p.client.poll_output() {
                match out {
                    ClientOutput::Control(b) => p.ctl_up.push_back((now + up_delay, b)),
                    ClientOutput::Datagram(b) => p.up.push(b, now),
                }
            }
            // A client that ended on its own (a goodbye, a protocol error) hangs up.
            if let (Status::Ended(e), false) = (p.client.status(), p.closed) {
                if !matches!(e, End::Left(_)) || p.ctl_up.is_empty() {
                    deliver(&mut self.server, &mut self.inbox);
                    p.closed = true;
                    self.server.handle_closed(p.conn, e.reason());
                }
            }
        }
    }
}

/// Hands the server the datagrams gathered since it last took them, in one batch.
fn deliver(server: &mut ServerMachine, inbox: &mut Vec<(ConnId, Vec<u8>, Instant)>) {
    server.handle_datagrams(inbox.iter().map(|(c, b, at)| (*c, &b[..], *at)));
    inbox.clear();
}

fn delay(link: Impairment) -> Duration {
    Duration::from_secs_f64(link.delay_ms.max(0.0) / 1000.0)
}

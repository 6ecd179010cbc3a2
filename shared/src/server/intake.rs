//! Datagrams in. A batch (what the shell gathered since it last called) is routed in
//! arrival order: counted, the game's messages taken, each input sent to its player.
//! Then each player's inputs pass its allowance and are decoded, judged and buffered
//! apart from everyone else's (over the tick's workers: the serial part, the routing,
//! is a few counters and a lookup a datagram), and what that found is applied in
//! player-id order. A player's inputs only touch its own state; the exception, a re-run
//! of its own prediction (under one budget for all), waits for the ordered pass, and the
//! player's later inputs with it. So the outcome is the batch's, whatever ran it on how
//! many threads.

use super::{kick_reason, wall::Wall, ConnId, MessageDrop, Player, ServerMachine, Stage, CLAIMS};
use crate::code::Code;
use crate::codec::decode;
use crate::messages::Channel;
use crate::time::Instant;
use crate::wire::{ClientDatagram, InputMsg, MovementAuthority};
use expel_core::movement::PlayerState;
use expel_core::sim::{PlayerId, Sim};
use expel_core::validate::{Violation, ViolationKind};
use std::time::Duration;

/// An input datagram routed to its player.
struct Arrival<'b> {
    bytes: &'b [u8],
    now: Instant,
    /// The server's newest absence as it stood when the datagram was routed (its end and
    /// length): the allowance credits it.
    absence: Option<(Instant, Duration)>,
}

impl Arrival<'_> {
    /// It came while the server was away, or was read late after an absence: its lead
    /// would tell the server's delay, not the client's.
    fn absent(&self) -> bool {
        self.absence.is_some_and(|(end, _)| end >= self.now)
    }
}

/// An input datagram and the player it was routed to.
type Routed<'b> = (PlayerId, Arrival<'b>);

/// What a player's inputs are judged against: the same for every player of a batch.
struct Intake<'a> {
    sim: &'a Sim,
    /// The tick the server steps next.
    next: u64,
    wall: Wall,
    /// The inputs a second clients are asked for (their allowance's rate).
    input_rate: u32,
    trusted: bool,
}

/// A teleport that the client's own prediction, re-run, may yet explain.
struct Suspect {
    tick: u64,
    state: PlayerState,
    ack: u64,
    violation: Violation,
}

/// What one player's inputs found, for the ordered pass.
#[derive(Default)]
struct Found {
    /// Arrivals taken so far.
    taken: usize,
    malformed: u64,
    /// Dropped undecoded, past the allowance.
    over_rate: u64,
    violations: Vec<Violation>,
    /// Why it is kicked, once its record passes the threshold (its later inputs are moot).
    kicked: Option<(Code, String)>,
    /// Taking stops here until the ordered pass has re-run the prediction.
    suspect: Option<Suspect>,
}

impl Found {
    fn violation(&mut self, s: &mut Player, v: Violation) {
        if s.validator.record(&v) {
            self.kicked = Some((Code::Violation(v.kind), kick_reason(&v)));
        }
        self.violations.push(v);
    }
}

/// The work of [`ServerMachine::handle_datagram`].
pub(super) fn handle_datagram(
    server: &mut ServerMachine,
    conn: ConnId,
    bytes: &[u8],
    now: Instant,
) {
    server.handle_datagrams([(conn, bytes, now)]);
}

/// The work of [`ServerMachine::handle_datagrams`].
pub(super) fn handle_datagrams<'b>(
    server: &mut ServerMachine,
    batch: impl IntoIterator<Item = (ConnId, &'b [u8], Instant)>,
) {
    let mut inputs: Vec<Routed<'b>> = Vec::new();
    for (conn, bytes, now) in batch {
        if let Some(routed) = route(server, conn, bytes, now) {
            inputs.push(routed);
        }
    }
    if !inputs.is_empty() {
        // Each player's in arrival order (a stable sort), players in id order.
        inputs.sort_by_key(|(player, _)| *player);
        take_inputs(server, &inputs);
    }
}

/// Counts a datagram and sees it through its connection: a game's message is taken at
/// once, an input for a player in the world is returned to be judged with the batch
/// (its allowance with it), and one before the world is held to the connection's
/// allowance and counted.
fn route<'b>(
    server: &mut ServerMachine,
    conn: ConnId,
    bytes: &'b [u8],
    now: Instant,
) -> Option<Routed<'b>> {
    server.wall.called(now);
    server.stats.datagrams_in += 1;
    server.stats.bytes_in += bytes.len() as u64;
    let rate = server.input_rate();
    let absence = server.wall.absence();
    let Some(c) = server.conns.get_mut(&conn) else {
        server.stats.malformed_datagrams += 1;
        return None;
    };
    if matches!(c.stage, Stage::Closing) {
        return None; // told to close: whatever it still sends is moot
    }
    // The game's messages have their own allowance: they never cost the inputs'.
    if bytes.first() == Some(&ClientDatagram::MESSAGE_TAG) {
        let player = match c.stage {
            Stage::Playing { player } => Some(player),
            _ => None,
        };
        match (decode::<ClientDatagram>("message", bytes), player) {
            (Ok(ClientDatagram::Message { seq, bytes }), Some(player)) => {
                super::messages::message_in(server, player, Channel::Unreliable, seq, bytes, now);
            }
            (Ok(ClientDatagram::Message { .. }), None) => {
                super::messages::message_dropped(
                    server,
                    Channel::Unreliable,
                    MessageDrop::NotPlaying,
                );
            }
            _ => server.stats.malformed_datagrams += 1,
        }
        return None;
    }
    if let Stage::Playing { player } = c.stage {
        let a = Arrival {
            bytes,
            now,
            absence,
        };
        return Some((player, a));
    }
    // Flooding is judged of players: before the world, the allowance only drops.
    let (admitted, _) = c.gate.pass(rate, absence, now, server.world.tick);
    let waiting = matches!(c.stage, Stage::Map { .. });
    if !admitted {
        server.stats.datagrams_over_rate += 1;
        return None;
    }
    // Decoded all the same: what is not an input is counted as malformed.
    let input = matches!(
        decode::<ClientDatagram>("input", bytes),
        Ok(ClientDatagram::Input(msg)) if msg.validate().is_ok()
    );
    // Inputs while the map is on its way have nothing to do yet; inputs before a
    // hello are out of turn.
    if !input || !waiting {
        server.stats.malformed_datagrams += 1;
    }
    None
}

/// Judges and buffers each player's routed inputs, in player order (see the module's
/// doc).
fn take_inputs(server: &mut ServerMachine, inputs: &[Routed<'_>]) {
    // Its own handle, so the context outlives the borrows of the ordered pass.
    let sim = server.sim.clone();
    let ctx = Intake {
        sim: &sim,
        next: server.world.tick + 1,
        wall: server.wall,
        input_rate: server.input_rate(),
        trusted: server.settings.movement == MovementAuthority::Client,
    };
    // Both in id order: one merge pairs each player with its run of inputs.
    let mut work: Vec<Taking> = Vec::with_capacity(inputs.len());
    let mut players = server.players.iter_mut().peekable();
    for run in inputs.chunk_by(|a, b| a.0 == b.0) {
        let id = run[0].0;
        while players.next_if(|(p, _)| **p < id).is_some() {}
        if let Some((_, s)) = players.next_if(|(p, _)| **p == id) {
            work.push(Taking {
                id,
                s,
                list: run,
                found: Found::default(),
            });
        }
    }
    server
        .scratch
        .spread_each(&mut work, |w| take(&ctx, w.id, w.s, w.list, &mut w.found));
    let found: Vec<(PlayerId, &[Routed], Found)> =
        work.into_iter().map(|w| (w.id, w.list, w.found)).collect();
    for (id, list, mut f) in found {
        loop {
            server.stats.malformed_datagrams += std::mem::take(&mut f.malformed);
            server.stats.datagrams_over_rate += std::mem::take(&mut f.over_rate);
            for v in std::mem::take(&mut f.violations) {
                server.count_violation(id, &v);
            }
            if let Some((code, reason)) = f.kicked.take() {
                if let Some(conn) = server.players.get(&id).map(|s| s.conn) {
                    server.kick(conn, code, reason);
                }
                break;
            }
            let (Some(sus), Some(s)) = (f.suspect.take(), server.players.get_mut(&id)) else {
                break;
            };
            // Flagged unless the client's own prediction, re-run, gives the same.
            let sent = (&s.snapshots, &s.commands);
            let own = server.replayer.own_prediction(
                &sim,
                id,
                sent,
                sus.ack,
                sus.tick,
                &sus.state,
                &server.world.movers,
                &mut server.stats,
            );
            if own.as_ref() != Some(&sus.state) {
                f.violation(s, sus.violation);
            }
            if f.kicked.is_none() {
                take(&ctx, id, s, list, &mut f);
            }
        }
    }
}

/// One player's inputs of a batch, as they are taken.
struct Taking<'a, 'l, 'b> {
    id: PlayerId,
    s: &'a mut Player,
    list: &'l [Routed<'b>],
    found: Found,
}

/// Takes a player's inputs from where it left off, until they run out, it is kicked, or
/// one waits for its prediction's re-run. Each passes the player's allowance first:
/// past it, it is dropped undecoded, and a player that keeps sending past it is flagged
/// for flooding.
fn take(ctx: &Intake, id: PlayerId, s: &mut Player, list: &[Routed], f: &mut Found) {
    while f.kicked.is_none() && f.suspect.is_none() {
        let Some((_, a)) = list.get(f.taken) else {
            return;
        };
        f.taken += 1;
        let (admitted, flood) = s.gate.pass(ctx.input_rate, a.absence, a.now, ctx.next - 1);
        if let Some(v) = flood {
            f.violation(s, v);
        }
        if !admitted || f.kicked.is_some() {
            f.over_rate += u64::from(!admitted);
            continue;
        }
        match decode::<ClientDatagram>("input", a.bytes) {
            Ok(ClientDatagram::Input(msg)) if msg.validate().is_ok() => {
                input(ctx, id, s, &msg, a, f);
            }
            _ => f.malformed += 1,
        }
    }
}

/// Judges and buffers one input message.
fn input(ctx: &Intake, id: PlayerId, s: &mut Player, msg: &InputMsg, a: &Arrival, f: &mut Found) {
    let next = ctx.next;
    // Commands are judged against the wall clock, which the server's lateness does not
    // hold back: an honest client keeps time with it. Its lead is told against it too,
    // so a server catching up never steers its clients' clocks.
    let clock = ctx.wall.tick(a.now);
    // Behind: more than the tick due now but not yet run. Then the commands are placed
    // against the clock's tick, and were not read as they came (nor just after an
    // absence): their lead would be the server's delay.
    let behind = clock > next;
    let due_next = if behind { clock + 1 } else { next };
    let timely = !behind && !a.absent();
    if let Some(v) = s.validator.input(&msg.batch(), next, clock) {
        let invalid = v.kind == ViolationKind::Invalid;
        f.violation(s, v);
        if invalid || f.kicked.is_some() {
            return; // refused, never clamped; or kicked for it
        }
    }
    s.last_input = a.now;
    s.commands.record(msg.ticked());
    s.inputs.receive(msg, due_next, timely);
    s.snapshots.ack(msg.ack);
    s.aim.trip(due_next, msg.ack);
    let stale = s.correcting || msg.ack < s.correction_snapshot;
    if ctx.trusted && !stale {
        // A claim per command; the first copy to arrive stands. One that acknowledges
        // no snapshot was made from the world the player entered.
        let seen = msg.ack.max(s.entered);
        for ((t, _), c) in msg.ticked().zip(&msg.claims) {
            if t >= next && s.expected.len() < CLAIMS {
                s.expected.entry(t).or_insert((*c, seen));
            }
        }
    } else if let (false, Some(p)) = (ctx.trusted, msg.predicted) {
        // The state the client predicted after its last command: checked against its
        // previous one now, compared when the server steps that tick. A jump is asked
        // of the client's own prediction, re-run in the ordered pass.
        let at = msg.batch().newest_tick();
        let mut asked = false;
        let v = s.validator.report(ctx.sim, id, at, &p, msg.ack, || {
            asked = true;
            None
        });
        if at >= next && s.expected.len() < CLAIMS {
            s.expected.insert(at, (p, msg.ack));
        }
        // The places before it, sent with a shot: where its shots leave from (the aim
        // takes ticks in order, each once).
        for ((t, _), c) in msg.ticked().zip(&msg.claims).filter(|((t, _), _)| *t < at) {
            s.aim.reported(t, *c, msg.ack);
        }
        s.aim.reported(at, p, msg.ack);
        match v {
            Some(violation) if asked => {
                f.suspect = Some(Suspect {
                    tick: at,
                    state: p,
                    ack: msg.ack,
                    violation,
                });
            }
            Some(v) => f.violation(s, v),
            None => {}
        }
    }
}

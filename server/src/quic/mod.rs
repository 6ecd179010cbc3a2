//! One I/O thread's QUIC, driven by hand: a `quinn-proto` endpoint, its connections and
//! the socket, all owned by the thread. A datagram goes from the socket through the
//! endpoint and its connection into the list of what the machine is to be told ([`Up`])
//! in one call chain, and the machine's snapshots go out the same way. No task, channel
//! or lock per connection: quinn's async layer spends a task wake, a mutex and a channel
//! hop per datagram each way.
//!
//! Per [`Peer`], the shell keeps: the handshake deadline, the control stream (its reads
//! go to the machine; its writes wait in a queue for the peer's flow-control credit,
//! each within the write deadline), the map transfer, the last words before a close, and
//! the admission slot a peer holds until it joins.

use crate::admission::{Admission, Pending};
use crate::metrics::IoWork;
use crate::udp::{CidGenerator, Doorman, UdpCounts};
use crate::{Decision, Limits, Metrics};
use bytes::{Bytes, BytesMut};
use expel_protocol::rate::TokenBucket;
use expel_protocol::server::ConnId;
use expel_protocol::Code;
use expel_quic::{datagrams, endpoint_events, transmit, Batch, Blocked, RecvMeta, Timers, Wire};
use quinn_proto::{
    ConnectionHandle, DatagramEvent, Dir, Endpoint, Event, StreamEvent, StreamId, Transmit, VarInt,
};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::Arc;
use std::time::Instant;
use tracing::debug;

mod control;
mod inbound;
use control::{read_control, write_control, Closing, Out, WriteError};

/// Receive calls per batch (each may carry several coalesced datagrams).
const BATCH: usize = 32;
/// Receive batches taken before the loop looks at its timers again, so a flood cannot
/// starve the tick.
const BATCHES_PER_TURN: usize = 16;
/// Packets a second a connection may send once it plays (its control writes done): a
/// client sends one input datagram per tick at most (240 at the highest tick rate) and
/// acknowledgements. Past it, packets are dropped before they are decrypted, the most a
/// flood costs; the machine's input allowance, well under this, flags the flooder.
const PACKET_RATE: f64 = 1000.0;

/// One QUIC connection and what the shell keeps for it.
struct Peer {
    conn: quinn_proto::Connection,
    /// The machine's id once the handshake is done; `None` again once the machine has
    /// been told the connection is gone.
    id: Option<ConnId>,
    /// While the handshake runs: when it must be done.
    handshake: Option<Instant>,
    /// The admission slot, held until the player joins or the connection ends.
    pending: Option<Pending>,
    stream: Option<StreamId>,
    writes: VecDeque<Out>,
    /// When the write at the head of the queue must be done.
    write_deadline: Option<Instant>,
    closing: Option<Closing>,
    /// `close` was called (or the connection was lost): nothing more goes out but what
    /// QUIC itself sends.
    closed: bool,
    /// The wake-up in the timer heap that is this peer's current one.
    armed: Option<Instant>,
    dirty: bool,
    /// A transmit the socket could not take, to send first.
    blocked: Blocked,
    /// What it may send (see [`PACKET_RATE`]).
    packets: TokenBucket,
    /// Datagrams taken from the connection, and of those it received the ones QUIC
    /// dropped before they were taken (counted so far): a burst past its receive buffer
    /// between two looks loses the oldest.
    datagrams_taken: u64,
    datagrams_overflowed: u64,
}

impl Peer {
    /// The machine's id while the machine still talks with this peer (not once it has
    /// asked for the close: what the peer sends while it reads its last words is not
    /// the machine's).
    fn talking(&self) -> Option<ConnId> {
        self.id.filter(|_| self.closing.is_none())
    }

    /// The earliest of the connection's own timer and the shell's deadlines.
    fn wake_at(&mut self) -> Option<Instant> {
        let deadlines = [
            self.conn.poll_timeout(),
            self.handshake,
            self.write_deadline.filter(|_| !self.writes.is_empty()),
            self.closing.as_ref().and_then(|c| c.linger),
        ];
        deadlines.into_iter().flatten().min()
    }
}

/// What the machine task needs from the rest of the server while driving QUIC.
pub(crate) struct Context<'a> {
    pub(crate) metrics: &'a Metrics,
    pub(crate) admission: &'a Admission,
    pub(crate) limits: &'a Limits,
    pub(crate) map: &'a [u8],
    /// Players the server holds at most (its refusal is the hello's, not the door's).
    pub(crate) max_players: u64,
}

/// What a connection did, for the machine: an I/O thread gathers these in the order they
/// happened, and the machine's thread takes them (each with when it happened).
#[derive(Debug)]
pub(crate) enum Up {
    /// The handshake is done; the peer's datagrams take `room` bytes.
    Connected {
        conn: ConnId,
        room: usize,
        at: Instant,
    },
    /// Bytes of the control stream.
    Control {
        conn: ConnId,
        bytes: Bytes,
        at: Instant,
    },
    /// A datagram.
    Datagram {
        conn: ConnId,
        bytes: Bytes,
        at: Instant,
    },
    /// The map's last frame is written.
    MapSent { conn: ConnId, at: Instant },
    /// The connection is gone.
    Closed { conn: ConnId, reason: String },
}

impl Up {
    /// Whether the machine should look now rather than at its next tick: anything but an
    /// input, which waits for the tick anyway.
    pub(crate) fn urgent(&self) -> bool {
        !matches!(self, Up::Datagram { .. })
    }
}

/// Wakes an I/O thread wherever it waits: parked between looks at its socket, or in its
/// runtime.
#[derive(Clone)]
pub(crate) struct Waker {
    pub(crate) thread: std::thread::Thread,
    pub(crate) notify: Arc<tokio::sync::Notify>,
}

impl Waker {
    pub(crate) fn wake(&self) {
        self.notify.notify_one();
        self.thread.unpark();
    }
}

/// A datagram another I/O thread received for a connection of this one.
pub(crate) struct Forwarded {
    addr: std::net::SocketAddr,
    dst_ip: Option<std::net::IpAddr>,
    data: BytesMut,
}

/// Where datagrams for other threads' connections go: each thread's queue of
/// [`Forwarded`] (bounded: a full one drops, as the network may) and how to wake it.
#[derive(Clone)]
pub(crate) struct Router {
    pub(crate) to: Vec<(std::sync::mpsc::SyncSender<Forwarded>, Waker)>,
}

/// The endpoint, the socket and every connection of one I/O thread.
pub(crate) struct Quic {
    wire: Wire,
    /// This thread's place among the I/O threads, the first byte of its connection ids.
    index: u8,
    router: Router,
    /// What the machine has yet to be told.
    up: Vec<Up>,
    endpoint: Endpoint,
    doorman: Doorman,
    /// Indexed by the endpoint's connection handle (dense, reused once drained).
    peers: Vec<Option<Peer>>,
    live: usize,
    /// The machine's ids to connection handles, for the machine's outputs.
    ids: BTreeMap<ConnId, usize>,
    next_id: ConnId,
    /// Wake-ups, by connection handle.
    timers: Timers,
    dirty: Vec<usize>,
    batch: Batch,
    send_buf: Vec<u8>,
    /// A transmit waits for the socket to become writable.
    send_blocked: bool,
    /// Of the socket's datagrams sent, those `expel_udp_sent` counts already.
    sent_counted: u64,
    accepting: bool,
    /// Connection attempts not yet looked at: their handshakes (the costliest thing a
    /// join does) run between ticks, a slice at a time (see [`Quic::admit_waiting`]).
    waiting: VecDeque<quinn_proto::Incoming>,
}

/// Connection attempts that may wait for their handshake; past them, the door refuses.
const WAITING_MAX: usize = 1024;

/// What makes a [`Quic`]: the bound socket and the endpoint's settings. Bound where the
/// server starts (so a taken address fails the start), made into a [`Quic`] on the
/// machine's own thread (so the socket belongs to that thread's reactor).
pub(crate) struct QuicParts {
    pub(crate) socket: std::net::UdpSocket,
    pub(crate) config: quinn_proto::EndpointConfig,
    pub(crate) server: Arc<quinn_proto::ServerConfig>,
    /// The endpoint's connection ids, which the doorman checks.
    pub(crate) ids: CidGenerator,
    pub(crate) counts: UdpCounts,
    /// This thread's place among the I/O threads.
    pub(crate) index: u8,
}

impl Quic {
    /// Makes the endpoint on the bound socket; needs a Tokio runtime.
    pub(crate) fn new(parts: QuicParts, router: Router) -> io::Result<Quic> {
        let QuicParts {
            socket: std,
            config,
            server,
            ids,
            counts,
            index,
        } = parts;
        // A tick's snapshots leave in one burst; inputs arrive while the tick runs.
        let wire = Wire::new(std, 4 << 20)?;
        let allow_mtud = wire.allow_mtud();
        Ok(Quic {
            wire,
            index,
            router,
            up: Vec::new(),
            endpoint: Endpoint::new(Arc::new(config), Some(server), allow_mtud, None),
            doorman: Doorman::new(ids, counts),
            peers: Vec::new(),
            live: 0,
            ids: BTreeMap::new(),
            next_id: 1,
            timers: Timers::default(),
            dirty: Vec::new(),
            batch: Batch::new(BATCH),
            send_buf: Vec::new(),
            send_blocked: false,
            sent_counted: 0,
            accepting: true,
            waiting: VecDeque::new(),
        })
    }

    /// When a connection next needs [`Quic::fire_timers`].
    pub(crate) fn next_timer(&mut self) -> Option<Instant> {
        let peers = &self.peers;
        self.timers
            .next(|h| peers.get(h).and_then(Option::as_ref).and_then(|p| p.armed))
    }

    /// Waits for the socket, then takes what it holds, or sends what waited for room;
    /// says which. Safe to drop while it waits (nothing is taken before the socket is
    /// ready).
    pub(crate) async fn io(&mut self, cx: &Context<'_>) -> io::Result<IoWork> {
        let readable = tokio::select! {
            r = self.wire.readable() => { r?; true }
            r = self.writable() => { r?; false }
        };
        if readable {
            self.receive(Instant::now(), cx)?;
            Ok(IoWork::Receive)
        } else {
            self.unblock();
            Ok(IoWork::Send)
        }
    }

    /// Resolves when a blocked transmit may go (never while none is blocked).
    async fn writable(&self) -> io::Result<()> {
        if self.send_blocked {
            self.wire.writable().await
        } else {
            std::future::pending().await
        }
    }

    /// After [`Quic::writable`]: the blocked peers try again.
    fn unblock(&mut self) {
        self.send_blocked = false;
        for h in 0..self.peers.len() {
            if self.peer(h).is_some_and(|p| p.blocked.is_some()) {
                self.touch(h);
            }
        }
    }

    /// Runs the connections whose timers are due.
    pub(crate) fn fire_timers(&mut self, now: Instant) {
        loop {
            let peers = &self.peers;
            let armed = |h: usize| peers.get(h).and_then(Option::as_ref).and_then(|p| p.armed);
            let Some(h) = self.timers.pop_due(now, armed) else {
                break;
            };
            let Some(p) = self.peer_mut(h) else { continue };
            p.armed = None;
            if p.conn.poll_timeout().is_some_and(|c| c <= now) {
                p.conn.handle_timeout(now);
            }
            self.touch(h);
        }
    }

    /// Sends the machine's datagram; a peer gone or a datagram too big is counted.
    pub(crate) fn send_datagram(&mut self, id: ConnId, bytes: Vec<u8>) -> bool {
        let Some(&h) = self.ids.get(&id) else {
            return false;
        };
        let Some(p) = self.peer_mut(h) else {
            return false;
        };
        let sent = p.conn.datagrams().send(Bytes::from(bytes), true).is_ok();
        self.touch(h);
        sent
    }

    /// Queues control frames for the peer (dropped if its control stream is not open).
    pub(crate) fn write(&mut self, id: ConnId, bytes: Vec<u8>) {
        self.queue(
            id,
            Out::Bytes {
                bytes,
                at: 0,
                by: None,
            },
        );
    }

    /// Queues the map transfer.
    pub(crate) fn send_map(&mut self, id: ConnId, now: Instant, cx: &Context) {
        let whole = cx.limits.map_deadline(now, cx.map.len());
        self.queue(id, Out::Map { next: 0, whole });
    }

    fn queue(&mut self, id: ConnId, out: Out) {
        let Some(&h) = self.ids.get(&id) else { return };
        let Some(p) = self.peer_mut(h) else { return };
        if p.stream.is_none() || p.closing.is_some() {
            return;
        }
        p.writes.push_back(out);
        self.touch(h);
    }

    /// The player joined: its connection no longer counts against admission.
    pub(crate) fn joined(&mut self, id: ConnId, cx: &Context) {
        if let Some(p) = self.ids.get(&id).copied().and_then(|h| self.peer_mut(h)) {
            p.pending = None;
        }
        cx.metrics.pending.set(cx.admission.pending() as u64);
    }

    /// Writes the last words, then closes with `code` and `reason` (together, so a peer
    /// that stops reading still gets the reason in the close frame). Nothing more goes
    /// out to the peer from the machine.
    pub(crate) fn close(&mut self, id: ConnId, last: Vec<u8>, code: u32, reason: String) {
        let Some(h) = self.ids.remove(&id) else {
            return;
        };
        let Some(p) = self.peer_mut(h) else { return };
        // Refused or leaving, it waits for nothing admission bounds: its slot goes to
        // the next comer now, not after its last words (a storm of refusals held them).
        p.pending = None;
        // After what is already queued: a frame cut short would garble the stream.
        if p.stream.is_some() {
            p.writes.push_back(Out::Bytes {
                bytes: last,
                at: 0,
                by: None,
            });
            p.writes.push_back(Out::Finish);
        }
        p.closing = Some(Closing {
            code,
            reason,
            linger: None,
        });
        self.touch(h);
    }

    /// Stops taking connections and closes those the machine does not know of yet (still
    /// in their handshake); the machine's shutdown closes the rest.
    pub(crate) fn stop_accepting(&mut self, reason: &str, now: Instant) {
        self.accepting = false;
        let mut response = Vec::new();
        while let Some(incoming) = self.waiting.pop_front() {
            let t = self.endpoint.refuse(incoming, &mut response);
            self.respond(&t, &response);
        }
        for h in 0..self.peers.len() {
            let Some(p) = self.peer_mut(h) else { continue };
            if p.closing.is_none() && !p.closed && p.id.is_none() {
                p.conn.close(
                    now,
                    Code::Shutdown.number().into(),
                    Bytes::copy_from_slice(reason.as_bytes()),
                );
                p.closed = true;
                self.touch(h);
            }
        }
    }

    /// Closes every connection at once (the end of a shutdown).
    pub(crate) fn close_all(&mut self, reason: &str, now: Instant) {
        for h in 0..self.peers.len() {
            let Some(p) = self.peer_mut(h) else { continue };
            if !p.closed {
                let code = (p.closing.as_ref()).map_or(Code::Shutdown.number().into(), |c| c.code);
                p.conn
                    .close(now, code.into(), Bytes::copy_from_slice(reason.as_bytes()));
                p.closed = true;
                self.touch(h);
            }
        }
    }

    /// Whether every connection has been closed.
    pub(crate) fn all_closed(&self) -> bool {
        self.peers.iter().flatten().all(|p| p.closed)
    }

    /// Services every connection that had something happen: its events for the machine,
    /// its queued writes, its packets out, its next wake-up.
    pub(crate) fn drive(&mut self, now: Instant, cx: &Context) {
        while let Some(h) = self.dirty.pop() {
            self.service(h, now, cx);
        }
        let sent = self.wire.datagrams_sent();
        cx.metrics.udp_sent.inc_by(sent - self.sent_counted);
        self.sent_counted = sent;
    }

    /// What the machine has yet to be told, oldest first.
    pub(crate) fn take_up(&mut self) -> Vec<Up> {
        std::mem::take(&mut self.up)
    }

    fn service(&mut self, h: usize, now: Instant, cx: &Context) {
        let m = cx.metrics;
        let stride = self.router.to.len().max(1) as ConnId;
        let index = ConnId::from(self.index);
        let Quic {
            peers,
            endpoint,
            ids,
            next_id,
            up,
            ..
        } = self;
        let Some(p) = peers.get_mut(h).and_then(Option::as_mut) else {
            return;
        };
        p.dirty = false;
        let handle = ConnectionHandle(h);
        endpoint_events(endpoint, handle, &mut p.conn);
        // What happened on the connection.
        while let Some(event) = p.conn.poll() {
            match event {
                Event::Connected => {
                    p.handshake = None;
                    // Ids are the thread's: the machine routes by `id % threads`.
                    let id = *next_id * stride + index;
                    *next_id += 1;
                    p.id = Some(id);
                    ids.insert(id, h);
                    m.connections.inc();
                    let room = p.conn.datagrams().max_size().unwrap_or(1200);
                    up.push(Up::Connected {
                        conn: id,
                        room,
                        at: now,
                    });
                }
                Event::ConnectionLost { reason } => {
                    if p.handshake.take().is_some() {
                        m.handshake_failures.inc();
                        debug!(error = %reason, "handshake failed");
                    }
                    p.closed = true;
                    // A peer closing while it reads its last words leaves for the
                    // machine's reason.
                    let why = match p.closing.take() {
                        Some(c) => c.reason,
                        None => format!("connection lost: {reason}"),
                    };
                    gone(p, ids, up, &why);
                }
                Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                    if p.stream.is_none() {
                        p.stream = p.conn.streams().accept(Dir::Bi);
                    }
                    read_control(p, ids, up, now);
                }
                Event::Stream(StreamEvent::Readable { .. }) => {
                    read_control(p, ids, up, now);
                }
                Event::DatagramReceived => take_datagrams(p, up, m, now),
                _ => {}
            }
        }
        let held = p.pending.is_some();
        if p.handshake.is_some_and(|d| d <= now) {
            m.handshake_timeouts.inc();
            p.handshake = None;
            p.pending = None;
            close_now(p, now, 0, "handshake timed out");
        }
        if !p.closed {
            let mut map_sent = false;
            match write_control(p, now, cx, &mut map_sent) {
                Ok(()) => {}
                Err(why) => {
                    let (code, reason) = match why {
                        WriteError::Lost => (Code::Malformed, "control stream failed"),
                        WriteError::Stalled => {
                            m.stalls.inc();
                            let why = "stalled: a write got no flow-control credit in time";
                            (Code::Stalled, why)
                        }
                    };
                    let (code, reason) = match p.closing.take() {
                        // The last words failed: the reason stands in the close frame.
                        Some(c) => (c.code, c.reason),
                        None => (code.number().into(), reason.to_string()),
                    };
                    close_now(p, now, code, &reason);
                    gone(p, ids, up, &reason);
                }
            }
            if map_sent {
                if let Some(id) = p.id {
                    up.push(Up::MapSent { conn: id, at: now });
                }
            }
            // Without a stream there are no last words to wait for.
            let stream = p.stream;
            let due = |c: &mut Closing| stream.is_none() || c.linger.is_some_and(|t| t <= now);
            if let Some(c) = p.closing.take_if(due) {
                close_now(p, now, c.code, &c.reason);
                gone(p, ids, up, &c.reason);
            }
        }
        if p.closed {
            p.pending = None;
        }
        if held && p.pending.is_none() {
            m.pending.set(cx.admission.pending() as u64);
        }
        // Packets out.
        let blocked = transmit(
            &mut p.conn,
            now,
            &self.wire,
            &mut self.send_buf,
            &mut p.blocked,
        );
        if blocked {
            self.send_blocked = true;
        }
        endpoint_events(endpoint, handle, &mut p.conn);
        if p.conn.is_drained() {
            gone(p, ids, up, "connection drained");
            self.peers[h] = None;
            self.live -= 1;
            return;
        }
        let wake = p.wake_at();
        self.timers.arm(h, wake, &mut p.armed);
        let armed = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(h, p)| Some((h, p.as_ref()?.armed?)));
        self.timers.compact(self.live, armed);
    }

    fn peer(&self, h: usize) -> Option<&Peer> {
        self.peers.get(h).and_then(Option::as_ref)
    }

    fn peer_mut(&mut self, h: usize) -> Option<&mut Peer> {
        self.peers.get_mut(h).and_then(Option::as_mut)
    }

    fn touch(&mut self, h: usize) {
        if let Some(p) = self.peers.get_mut(h).and_then(Option::as_mut) {
            if !p.dirty {
                p.dirty = true;
                self.dirty.push(h);
            }
        }
    }
}

/// Tells the machine the connection is gone (once).
/// Takes every datagram the connection holds up to the machine (from a player past its
/// hello), and counts those the connection dropped because we took them too late.
fn take_datagrams(p: &mut Peer, up: &mut Vec<Up>, m: &Metrics, now: Instant) {
    while let Some(d) = p.conn.datagrams().recv() {
        p.datagrams_taken += 1;
        if let Some(id) = p.talking() {
            up.push(Up::Datagram {
                conn: id,
                bytes: d,
                at: now,
            });
        }
    }
    // Emptied: what it received and we did not take, it dropped.
    let received = p.conn.stats().frame_rx.datagram;
    let lost = received.saturating_sub(p.datagrams_taken);
    if lost > p.datagrams_overflowed {
        m.datagrams_overflowed.inc_by(lost - p.datagrams_overflowed);
        p.datagrams_overflowed = lost;
    }
}

fn gone(p: &mut Peer, ids: &mut BTreeMap<ConnId, usize>, up: &mut Vec<Up>, reason: &str) {
    if let Some(id) = p.id.take() {
        ids.remove(&id);
        debug!(conn = id, %reason, "connection ended");
        up.push(Up::Closed {
            conn: id,
            reason: reason.to_string(),
        });
    }
}

fn close_now(p: &mut Peer, now: Instant, code: u32, reason: &str) {
    if !p.closed {
        p.conn.close(
            now,
            VarInt::from_u32(code),
            Bytes::copy_from_slice(reason.as_bytes()),
        );
        p.closed = true;
    }
    p.writes.clear();
    p.closing = None;
}

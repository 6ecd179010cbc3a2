//! The one quinn-proto driver all of Expel's QUIC runs on: the server's I/O threads, the
//! light bots and the client library's session each own [`Wire`]s (a UDP socket with
//! segmented sends and receives, and ECN), endpoints and connections, and pump them with
//! what is here: a receive [`Batch`] split into datagrams, the endpoint's events
//! ([`endpoint_events`]), a connection's packets out ([`transmit`]), the wake-ups of many
//! connections ([`Timers`]), and a client's connection with its control stream
//! ([`Link`]). What each does with a connection's events (the server's control stream and
//! admission, a client's protocol machine) stays with it.
//!
//! Driving quinn-proto by hand rather than through quinn's async layer spares a task
//! wake, a mutex and a channel hop per datagram each way.

use bytes::BytesMut;
use quinn_proto::{ConnectionHandle, Endpoint, Transmit};
use quinn_udp::{Transmit as UdpTransmit, UdpSocketState};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::Interest;

mod link;

pub use link::{close_reason, Link, LinkEvent, TransportStats, REFUSED_AT_THE_DOOR};
pub use quinn_udp::RecvMeta;

/// How many of its packets a peer may take from us before it must acknowledge them, and
/// how long it may wait: longer than a snapshot's or an input's period at 20 Hz and up,
/// so that acknowledgements ride in the packets each side sends on its clock anyway.
const ACK_AFTER_PACKETS: u32 = 16;
const ACK_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// What each side asks of the other's acknowledgements (the ACK frequency extension, which
/// quinn peers take; others ignore it): wait for a packet of your own rather than send a
/// bare ACK for every second packet of ours. quinn holds the delay asked to at most the
/// greater of the path's round trip and 25 ms; the client times its inputs so that each
/// side's next packet goes within that (see the client's input phase).
pub fn ack_frequency() -> quinn_proto::AckFrequencyConfig {
    let mut acks = quinn_proto::AckFrequencyConfig::default();
    acks.ack_eliciting_threshold(ACK_AFTER_PACKETS.into())
        .max_ack_delay(Some(ACK_DELAY));
    acks
}

/// Path MTU discovery: none. A session's datagram room is read once, at connect, from
/// QUIC's initial 1,200-byte MTU, and its snapshots are kept far under it by the client's
/// budget, so a larger MTU gains them nothing; probing for one cost each new player about
/// 5 KB down in its first seconds (four probes of up to 1,452 bytes), and the probes again
/// every ten minutes.
pub fn mtu_discovery() -> Option<quinn_proto::MtuDiscoveryConfig> {
    None
}

/// Bytes of one receive buffer: a coalesced (GRO) run of full-size datagrams.
pub const RECV_BUF: usize = 64 * 1024;

/// A UDP socket as QUIC uses it: several datagrams per system call each way where the
/// system can, and ECN marks.
pub struct Wire {
    socket: tokio::net::UdpSocket,
    state: UdpSocketState,
    /// Most packets the socket takes in one segmented send.
    gso: usize,
    /// Whether each packet names its source address (a socket on every address must
    /// reply from the one its peer wrote to); bound to one address, the kernel sends
    /// from it anyway, and naming it costs a check per packet.
    pick_source: bool,
    /// Datagrams the socket took so far (a segmented send counts each).
    sent: AtomicU64,
}

impl Wire {
    /// Takes a bound socket, asking the kernel for `buffer` bytes each way (a tick's
    /// burst must fit); needs a Tokio runtime.
    pub fn new(socket: std::net::UdpSocket, buffer: usize) -> io::Result<Wire> {
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into())?;
        let _ = state.set_recv_buffer_size((&socket).into(), buffer);
        let _ = state.set_send_buffer_size((&socket).into(), buffer);
        let pick_source = socket.local_addr()?.ip().is_unspecified();
        Ok(Wire {
            gso: state.max_gso_segments().max(1),
            socket: tokio::net::UdpSocket::from_std(socket)?,
            state,
            pick_source,
            sent: AtomicU64::new(0),
        })
    }

    /// Whether path MTU discovery may run (the socket does not let datagrams fragment).
    pub fn allow_mtud(&self) -> bool {
        !self.state.may_fragment()
    }

    /// Most packets one transmit may carry.
    pub fn gso(&self) -> usize {
        self.gso
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends one transmit now, or fails with `WouldBlock` when the socket is full.
    pub fn send(&self, t: &Transmit, bytes: &[u8]) -> io::Result<()> {
        let udp = UdpTransmit {
            destination: t.destination,
            ecn: t
                .ecn
                .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
            contents: &bytes[..t.size],
            segment_size: t.segment_size,
            src_ip: t.src_ip.filter(|_| self.pick_source),
        };
        let socket = &self.socket;
        socket.try_io(Interest::WRITABLE, || self.state.send(socket.into(), &udp))?;
        let datagrams = t.segment_size.map_or(1, |s| t.size.div_ceil(s.max(1)));
        self.sent.fetch_add(datagrams as u64, Relaxed);
        Ok(())
    }

    /// Datagrams the socket has taken so far.
    pub fn datagrams_sent(&self) -> u64 {
        self.sent.load(Relaxed)
    }

    /// Takes what the socket holds into `batch`, without waiting: how many of its
    /// buffers were filled (`WouldBlock` when none).
    pub fn recv(&self, batch: &mut Batch) -> io::Result<usize> {
        let Batch { buf, metas } = batch;
        let mut iovs: Vec<IoSliceMut> = buf.chunks_mut(RECV_BUF).map(IoSliceMut::new).collect();
        let socket = &self.socket;
        socket.try_io(Interest::READABLE, || {
            self.state.recv(socket.into(), &mut iovs, metas)
        })
    }

    /// Resolves when the socket may hold datagrams.
    pub async fn readable(&self) -> io::Result<()> {
        self.socket.readable().await
    }

    /// Resolves when the socket may take a send again.
    pub async fn writable(&self) -> io::Result<()> {
        self.socket.writable().await
    }

    /// [`Wire::readable`], polled (to wait on many sockets at once).
    pub fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.socket.poll_recv_ready(cx)
    }
}

/// Buffers for one receive call's worth of (possibly coalesced) datagrams.
pub struct Batch {
    buf: Vec<u8>,
    metas: Vec<RecvMeta>,
}

impl Batch {
    /// Room for `n` receives of [`RECV_BUF`] bytes each (none: a placeholder).
    pub fn new(n: usize) -> Batch {
        Batch {
            buf: vec![0; n * RECV_BUF],
            metas: vec![RecvMeta::default(); n],
        }
    }

    /// Receive `i` of the last [`Wire::recv`]: what the system said of it and its bytes
    /// (`meta.len` of them are the datagrams').
    pub fn get_mut(&mut self, i: usize) -> (&mut RecvMeta, &mut [u8]) {
        let buf = &mut self.buf[i * RECV_BUF..(i + 1) * RECV_BUF];
        (&mut self.metas[i], buf)
    }
}

/// The datagrams of one receive (several of `meta.stride` bytes each when the system
/// coalesced them), each in a buffer of its own: what quinn keeps of one (an out-of-order
/// stream chunk) pins only it. The last, usually the only one, goes whole (splitting it
/// off would make the buffer shared, an allocation per datagram).
pub fn datagrams(meta: &RecvMeta, buf: &[u8], mut each: impl FnMut(BytesMut)) {
    let mut data = BytesMut::from(&buf[..meta.len]);
    let stride = meta.stride.max(1);
    while data.len() > stride {
        each(data.split_to(stride));
    }
    if !data.is_empty() {
        each(data);
    }
}

/// A receive's ECN mark, as quinn-proto takes it.
pub fn ecn(meta: &RecvMeta) -> Option<quinn_proto::EcnCodepoint> {
    meta.ecn
        .and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8))
}

/// Hands the connection's events to the endpoint and the endpoint's answers back.
pub fn endpoint_events(
    endpoint: &mut Endpoint,
    h: ConnectionHandle,
    conn: &mut quinn_proto::Connection,
) {
    while let Some(e) = conn.poll_endpoint_events() {
        if let Some(back) = endpoint.handle_event(h, e) {
            conn.handle_event(back);
        }
    }
}

/// A transmit the socket could not take, to send before anything newer.
pub type Blocked = Option<(Transmit, Vec<u8>)>;

/// Sends what the connection has to send (first what `blocked` holds); returns true when
/// the socket was full, the transmit then waiting in `blocked`. Other send errors lose
/// the packet, as UDP may: QUIC sends again.
pub fn transmit(
    conn: &mut quinn_proto::Connection,
    now: Instant,
    wire: &Wire,
    buf: &mut Vec<u8>,
    blocked: &mut Blocked,
) -> bool {
    loop {
        let (t, bytes) = match blocked.take() {
            Some(b) => b,
            None => {
                buf.clear();
                match conn.poll_transmit(now, wire.gso(), buf) {
                    Some(t) => (t, std::mem::take(buf)),
                    None => return false,
                }
            }
        };
        match wire.send(&t, &bytes) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                *blocked = Some((t, bytes));
                return true;
            }
            _ => *buf = bytes,
        }
    }
}

/// The wake-ups of many connections, earliest first, each named by its owner's index.
/// An owner keeps the instant it is armed for; an entry that is not it is stale (the
/// wake-up moved) and is passed over.
#[derive(Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
}

impl Timers {
    /// Arms owner `i` for `wake` (its `armed` instant is kept up to date).
    pub fn arm(&mut self, i: usize, wake: Option<Instant>, armed: &mut Option<Instant>) {
        if wake != *armed {
            *armed = wake;
            if let Some(t) = wake {
                self.heap.push(Reverse((t, i)));
            }
        }
    }

    /// The earliest live wake-up; `armed(i)` says what owner `i` is armed for now.
    pub fn next(&mut self, armed: impl Fn(usize) -> Option<Instant>) -> Option<Instant> {
        while let Some(Reverse((t, i))) = self.heap.peek().copied() {
            if armed(i) == Some(t) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// The next owner due by `now`, taken off the heap (its armed instant is the
    /// caller's to clear); stale entries are dropped on the way.
    pub fn pop_due(
        &mut self,
        now: Instant,
        armed: impl Fn(usize) -> Option<Instant>,
    ) -> Option<usize> {
        while let Some(Reverse((t, i))) = self.heap.peek().copied() {
            if t > now {
                return None;
            }
            self.heap.pop();
            if armed(i) == Some(t) {
                return Some(i);
            }
        }
        None
    }

    /// Stale entries pile up while wake-ups move later: past eight per live owner (and a
    /// floor), the heap is rebuilt from what each is armed for.
    pub fn compact(&mut self, live: usize, armed: impl Iterator<Item = (usize, Instant)>) {
        if self.heap.len() > 8 * live + 1024 {
            self.heap = armed.map(|(i, t)| Reverse((t, i))).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timers_give_the_live_wake_ups_in_order_and_pass_over_moved_ones() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut armed = [None; 3];
        let mut timers = Timers::default();
        timers.arm(0, Some(at(30)), &mut armed[0]);
        timers.arm(1, Some(at(10)), &mut armed[1]);
        timers.arm(2, Some(at(20)), &mut armed[2]);
        // Owner 1 moves later: its first entry is stale.
        timers.arm(1, Some(at(40)), &mut armed[1]);
        assert_eq!(timers.next(|i| armed[i]), Some(at(20)));
        let mut due = Vec::new();
        while let Some(i) = timers.pop_due(at(35), |i| armed[i]) {
            armed[i] = None;
            due.push(i);
        }
        assert_eq!(due, [2, 0]);
        assert_eq!(timers.next(|i| armed[i]), Some(at(40)));
        assert_eq!(timers.pop_due(at(39), |i| armed[i]), None);
    }

    #[test]
    fn a_coalesced_receive_splits_into_its_datagrams() {
        let meta = RecvMeta {
            len: 25,
            stride: 10,
            ..RecvMeta::default()
        };
        let buf: Vec<u8> = (0..64).collect();
        let mut got = Vec::new();
        datagrams(&meta, &buf, |d| got.push(d.to_vec()));
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (0..10).collect::<Vec<u8>>());
        assert_eq!(got[2], (20..25).collect::<Vec<u8>>());
    }
}

//! One client connection to an Expel server, driven by hand: the control stream it opens
//! once connected, control bytes held until the stream's credit takes them, datagrams
//! both ways, and how it ended. The client library's session owns one on a socket of its
//! own; the light bots own many on a few shared sockets. Whoever owns it feeds it the
//! endpoint's events and its timeouts, and calls [`Link::flush`] after changing it.

use crate::{endpoint_events, transmit, Blocked, Wire};
use bytes::Bytes;
use quinn_proto::{
    ConnectionError, ConnectionHandle, Dir, Endpoint, Event, StreamEvent, StreamId,
    TransportErrorCode,
};
use std::time::{Duration, Instant};

/// Largest control-stream read handed on at once.
const READ_CHUNK: usize = 64 * 1024;

/// How a client tells a refusal at the server's door (QUIC's CONNECTION_REFUSED, before
/// any handshake): the server sheds joins so, cheaply, while its load is full or too many
/// joins are under way.
pub const REFUSED_AT_THE_DOOR: &str =
    "server full for its load: refused before the handshake (its load, or the joins under way)";

/// What a connection's events meant for its owner.
#[derive(Debug)]
pub enum LinkEvent {
    /// The handshake is done and the control stream open.
    Connected,
    /// Bytes of the server's control stream, in order.
    Control(Bytes),
    /// A datagram from the server.
    Datagram(Bytes),
    /// The connection ended: the server's application code and reason, or QUIC's.
    Lost(Option<u64>, String),
}

/// A hand-driven client connection (see the module docs).
pub struct Link {
    handle: ConnectionHandle,
    conn: quinn_proto::Connection,
    stream: Option<StreamId>,
    /// Control bytes the stream's credit has not taken yet.
    unsent: Vec<u8>,
    lost: bool,
}

impl Link {
    /// A connection `endpoint.connect` made.
    pub fn new(handle: ConnectionHandle, conn: quinn_proto::Connection) -> Link {
        Link {
            handle,
            conn,
            stream: None,
            unsent: Vec::new(),
            lost: false,
        }
    }

    /// The endpoint's name for the connection.
    pub fn handle(&self) -> ConnectionHandle {
        self.handle
    }

    /// The connection, for what the link does not wrap (its events and timeouts in).
    pub fn conn_mut(&mut self) -> &mut quinn_proto::Connection {
        &mut self.conn
    }

    /// Whether the connection ended (lost, or closed by either side).
    pub fn is_lost(&self) -> bool {
        self.lost
    }

    /// Whether the connection has nothing left to send, even its close.
    pub fn is_drained(&self) -> bool {
        self.conn.is_drained()
    }

    /// The round trip QUIC measures.
    pub fn rtt(&self) -> Duration {
        self.conn.rtt()
    }

    /// When the connection next needs [`Link::handle_timeout`].
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.conn.poll_timeout()
    }

    /// Runs the connection's timers due by `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
    }

    /// The bytes and datagrams each way so far.
    pub fn stats(&self) -> TransportStats {
        let s = self.conn.stats();
        TransportStats {
            bytes_in: s.udp_rx.bytes,
            bytes_out: s.udp_tx.bytes,
            datagrams_in: s.udp_rx.datagrams,
            datagrams_out: s.udp_tx.datagrams,
            rtt: self.conn.rtt(),
        }
    }

    /// The connection's events since the last call, handed to `each` (the endpoint's
    /// share of them handled on the way). Opens the control stream once connected.
    pub fn poll_events(&mut self, endpoint: &mut Endpoint, mut each: impl FnMut(LinkEvent)) {
        endpoint_events(endpoint, self.handle, &mut self.conn);
        while let Some(event) = self.conn.poll() {
            match event {
                Event::Connected => {
                    self.stream = self.conn.streams().open(Dir::Bi);
                    each(LinkEvent::Connected);
                }
                Event::ConnectionLost { reason } => {
                    self.lost = true;
                    let (code, why) = close_reason(&reason);
                    each(LinkEvent::Lost(code, why));
                }
                Event::Stream(StreamEvent::Readable { id }) if Some(id) == self.stream => {
                    let mut recv = self.conn.recv_stream(id);
                    let Ok(mut chunks) = recv.read(true) else {
                        continue;
                    };
                    while let Ok(Some(chunk)) = chunks.next(READ_CHUNK) {
                        each(LinkEvent::Control(chunk.bytes));
                    }
                    let _ = chunks.finalize();
                }
                Event::DatagramReceived => {
                    while let Some(d) = self.conn.datagrams().recv() {
                        each(LinkEvent::Datagram(d));
                    }
                }
                _ => {}
            }
        }
    }

    /// Queues control bytes for the stream (sent as its credit allows).
    pub fn send_control(&mut self, bytes: &[u8]) {
        self.unsent.extend_from_slice(bytes);
    }

    /// Sends a datagram (dropped, as UDP may drop it, when it does not fit or the
    /// connection is gone: the protocol repeats what matters).
    pub fn send_datagram(&mut self, bytes: Bytes) {
        let _ = self.conn.datagrams().send(bytes, true);
    }

    /// Closes with `reason` (QUIC then sends its close until drained).
    pub fn close(&mut self, now: Instant, reason: &[u8]) {
        if !self.lost {
            self.conn
                .close(now, 0u32.into(), Bytes::copy_from_slice(reason));
            self.lost = true;
        }
    }

    /// Writes queued control bytes as the stream takes them, sends the connection's
    /// packets through `wire` (a transmit the socket cannot take waits in `blocked`; with
    /// none given it is lost, as UDP may lose it), and hands the endpoint its events.
    pub fn flush(
        &mut self,
        endpoint: &mut Endpoint,
        wire: &Wire,
        now: Instant,
        buf: &mut Vec<u8>,
        blocked: &mut Blocked,
    ) {
        if let Some(s) = self.stream {
            while !self.unsent.is_empty() {
                match self.conn.send_stream(s).write(&self.unsent) {
                    Ok(n) => drop(self.unsent.drain(..n)),
                    Err(quinn_proto::WriteError::Blocked) => break,
                    Err(_) => {
                        self.unsent.clear();
                        break;
                    }
                }
            }
        }
        transmit(&mut self.conn, now, wire, buf, blocked);
        endpoint_events(endpoint, self.handle, &mut self.conn);
    }
}

/// A connection's traffic, UDP as sent and received (QUIC's own packets included).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TransportStats {
    /// UDP bytes received.
    pub bytes_in: u64,
    /// UDP bytes sent.
    pub bytes_out: u64,
    /// UDP datagrams received.
    pub datagrams_in: u64,
    /// UDP datagrams sent.
    pub datagrams_out: u64,
    /// QUIC's round-trip estimate.
    pub rtt: Duration,
}

/// What the closing of a connection says: the application's code and reason, or QUIC's
/// (a refusal at the door reads as [`REFUSED_AT_THE_DOOR`]).
pub fn close_reason(e: &ConnectionError) -> (Option<u64>, String) {
    match e {
        ConnectionError::ApplicationClosed(a) => (
            Some(a.error_code.into_inner()),
            String::from_utf8_lossy(&a.reason).into_owned(),
        ),
        ConnectionError::ConnectionClosed(c)
            if c.error_code == TransportErrorCode::CONNECTION_REFUSED =>
        {
            (None, REFUSED_AT_THE_DOOR.into())
        }
        other => (None, other.to_string()),
    }
}

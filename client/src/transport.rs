//! A session's QUIC: a socket of its own, its endpoint and the one connection, on the
//! driver the server and the light bots run on ([`expel_quic`]). Nothing runs between the
//! game's calls: no task, no channel. What arrives meanwhile waits in the kernel's socket
//! buffer (and past it is dropped, as the network may drop it), so a game that stops
//! updating holds a bounded amount of memory, and an update reads a bounded amount.

use crate::{bind_address, ClientError};
use bytes::Bytes;
use expel_quic::{datagrams, ecn, Batch, Blocked, Link, LinkEvent, TransportStats, Wire};
use quinn_proto::{DatagramEvent, Endpoint, EndpointConfig, RandomConnectionIdGenerator};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes the kernel may hold for the socket each way: a few ticks of snapshots.
const SOCKET_BUFFER: usize = 1 << 20;
/// Receive buffers per receive call.
const BATCH: usize = 4;
/// Most datagrams one receive buffer holds (the kernel coalesces at most 64).
const MOST_COALESCED: usize = 64;
/// Most datagrams one update reads: past them the socket is read on the next one.
pub(crate) const MOST_READ: usize = 1024;

pub(crate) struct Transport {
    wire: Wire,
    endpoint: Endpoint,
    link: Link,
    batch: Batch,
    send_buf: Vec<u8>,
    /// A transmit the socket could not take yet, sent before anything newer. (A socket
    /// just made is not writable until the runtime has looked at it: its first packet,
    /// dropped, would cost the handshake a whole retransmission timeout.)
    blocked: Blocked,
    /// Datagrams read this update.
    read: usize,
}

impl Transport {
    /// A socket for `server`, and the connection's first packet under way, to a server
    /// whose certificate names `name` (needs a Tokio runtime).
    pub(crate) fn connect(
        server: SocketAddr,
        name: &str,
        config: quinn_proto::ClientConfig,
        now: Instant,
    ) -> Result<Transport, ClientError> {
        let fail = |detail: String| ClientError::Connect {
            addr: server,
            detail,
        };
        let bind = bind_address(server);
        let socket =
            std::net::UdpSocket::bind(bind).map_err(|e| fail(format!("binding {bind}: {e}")))?;
        let wire = Wire::new(socket, SOCKET_BUFFER)
            .map_err(|e| fail(format!("setting up the socket: {e}")))?;
        // The endpoint holds this one connection on a socket of its own, so the server's
        // packets need not name it: a zero-length connection id spares 8 bytes of every
        // snapshot's datagram (the endpoint finds the connection by the server's address).
        let mut config_ep = EndpointConfig::default();
        config_ep.cid_generator(|| Box::new(RandomConnectionIdGenerator::new(0)));
        let config_ep = Arc::new(config_ep);
        let mut endpoint = Endpoint::new(config_ep, None, wire.allow_mtud(), None);
        let (h, conn) = endpoint
            .connect(now, config, server, name)
            .map_err(|e| fail(e.to_string()))?;
        let mut t = Transport {
            wire,
            endpoint,
            link: Link::new(h, conn),
            batch: Batch::new(BATCH),
            send_buf: Vec::new(),
            blocked: None,
            read: 0,
        };
        t.flush(now);
        Ok(t)
    }

    /// Takes in what the socket holds (a bounded amount), runs the connection's timers
    /// due by `now`, and hands its events to `each`.
    pub(crate) fn pump(&mut self, now: Instant, each: impl FnMut(LinkEvent)) {
        self.read = 0;
        while self.read + BATCH * MOST_COALESCED <= MOST_READ {
            let n = match self.wire.recv(&mut self.batch) {
                Ok(n) => n,
                // An ICMP error for an earlier send: the next receive goes on.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                Err(_) => break,
            };
            for k in 0..n {
                let (meta, buf) = self.batch.get_mut(k);
                let Transport {
                    wire,
                    endpoint,
                    link,
                    send_buf,
                    read,
                    ..
                } = self;
                datagrams(meta, buf, |one| {
                    *read += 1;
                    send_buf.clear();
                    match endpoint.handle(now, meta.addr, meta.dst_ip, ecn(meta), one, send_buf) {
                        Some(DatagramEvent::ConnectionEvent(h, event)) if h == link.handle() => {
                            link.conn_mut().handle_event(event);
                        }
                        // Lost as UDP may lose it.
                        Some(DatagramEvent::Response(t)) => {
                            let _ = wire.send(&t, send_buf);
                        }
                        // A client accepts no connections and has no other.
                        _ => {}
                    }
                });
            }
        }
        self.link.handle_timeout(now);
        self.link.poll_events(&mut self.endpoint, each);
    }

    /// Sends what the connection has to send (what the socket cannot take yet waits).
    pub(crate) fn flush(&mut self, now: Instant) {
        let (endpoint, wire, buf) = (&mut self.endpoint, &self.wire, &mut self.send_buf);
        self.link.flush(endpoint, wire, now, buf, &mut self.blocked);
    }

    /// Waits until `until`, the connection's next timer, something to read, or room to
    /// send what waits.
    pub(crate) async fn wait(&mut self, until: Instant) {
        let until = self.link.poll_timeout().map_or(until, |t| t.min(until));
        let blocked = self.blocked.is_some();
        tokio::select! {
            _ = self.wire.readable() => {}
            _ = self.wire.writable(), if blocked => {}
            _ = tokio::time::sleep_until(until.into()) => {}
        }
    }

    /// Runs the connection (its events unheeded) until `done` says so, for at most `most`.
    pub(crate) async fn settle(&mut self, most: Duration, done: fn(&Transport) -> bool) {
        let until = Instant::now() + most;
        while !done(self) && Instant::now() < until {
            self.wait(until).await;
            let now = Instant::now();
            self.pump(now, |_| {});
            self.flush(now);
        }
    }

    /// When the connection's next timer is due.
    pub(crate) fn poll_timeout(&mut self) -> Option<Instant> {
        self.link.poll_timeout()
    }

    /// Datagrams the last [`Transport::pump`] read.
    pub(crate) fn read(&self) -> usize {
        self.read
    }

    pub(crate) fn send_control(&mut self, bytes: &[u8]) {
        self.link.send_control(bytes);
    }

    pub(crate) fn send_datagram(&mut self, bytes: Bytes) {
        self.link.send_datagram(bytes);
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.link.is_lost()
    }

    pub(crate) fn is_drained(&self) -> bool {
        self.link.is_drained()
    }

    pub(crate) fn close(&mut self, now: Instant, reason: &[u8]) {
        self.link.close(now, reason);
        self.flush(now);
    }

    pub(crate) fn stats(&self) -> TransportStats {
        self.link.stats()
    }
}

//! Datagrams in: the socket read in batches, each datagram routed to the I/O thread that
//! owns its connection, and new connections admitted (or refused) at the door.

use super::*;

impl Quic {
    /// Takes what the socket holds (a bounded amount; [`Quic::io`] comes back while
    /// the socket says there is more).
    pub(super) fn receive(&mut self, now: Instant, cx: &Context) -> io::Result<()> {
        let mut batch = std::mem::replace(&mut self.batch, Batch::new(0));
        let got = self.receive_into(&mut batch, now, cx);
        self.batch = batch;
        got
    }

    fn receive_into(&mut self, batch: &mut Batch, now: Instant, cx: &Context) -> io::Result<()> {
        for _ in 0..BATCHES_PER_TURN {
            let n = match self.wire.recv(batch) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                // Undefined in QUIC, and an attacker can cause it.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                Err(e) => return Err(e),
            };
            for i in 0..n {
                let (meta, buf) = batch.get_mut(i);
                self.doorman.filter(buf, meta);
                datagrams(meta, buf, |d| self.route(now, meta, d, cx));
            }
        }
        // The socket still holds datagrams: the thread is behind its players' packets.
        cx.metrics.udp_backlogs.inc();
        Ok(())
    }

    /// One datagram to the thread whose connection it is: here, or handed over.
    fn route(&mut self, now: Instant, meta: &RecvMeta, data: BytesMut, cx: &Context) {
        let owner = self.doorman.owner(&data).map(usize::from);
        let f = Forwarded {
            addr: meta.addr,
            dst_ip: meta.dst_ip,
            data,
        };
        match owner {
            Some(o) if o != usize::from(self.index) && o < self.router.to.len() => {
                let (to, waker) = &self.router.to[o];
                cx.metrics.udp_forwarded.inc();
                if to.try_send(f).is_ok() {
                    waker.wake();
                }
            }
            _ => self.datagram(now, f, cx),
        }
    }

    /// One datagram into the endpoint, and what it says.
    pub(crate) fn datagram(&mut self, now: Instant, f: Forwarded, cx: &Context) {
        let mut response = Vec::new();
        // The players' ECN marks are not read: what they send is a few dozen bytes at a
        // fixed rate, nothing for congestion control to act on, and reading them would put
        // their counts in every acknowledgement, that is in nearly every snapshot (3 to 6
        // bytes each). Their congestion controllers see no marks and stop marking.
        match self
            .endpoint
            .handle(now, f.addr, f.dst_ip, None, f.data, &mut response)
        {
            Some(DatagramEvent::ConnectionEvent(h, event)) => {
                if let Some(p) = self.peer_mut(h.0) {
                    // While the handshake, the welcome or the map is under way, the
                    // peer's acknowledgements come as fast as the server sends.
                    let limited = p.id.is_some() && p.writes.is_empty();
                    if limited && !p.packets.take(now) {
                        cx.metrics.packets_over_rate.inc();
                        return;
                    }
                    p.conn.handle_event(event);
                    self.touch(h.0);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.waiting.len() < WAITING_MAX {
                    self.waiting.push_back(incoming);
                } else {
                    cx.metrics.incoming(Decision::RefuseTotal);
                    let t = self.endpoint.refuse(incoming, &mut response);
                    self.respond(&t, &response);
                }
            }
            Some(DatagramEvent::Response(t)) => self.respond(&t, &response),
            None => {}
        }
    }

    /// Whether connection attempts wait for [`Quic::admit_waiting`].
    pub(crate) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Looks at waiting connection attempts (their handshakes begin, or they are retried
    /// or refused) until `until`, and at one at least: a crowd joining at once costs the
    /// tick's thread its slices between ticks, not the ticks.
    pub(crate) fn admit_waiting(&mut self, cx: &Context, until: Instant) {
        while let Some(incoming) = self.waiting.pop_front() {
            let now = Instant::now();
            self.incoming(now, incoming, cx);
            if Instant::now() >= until {
                break;
            }
        }
    }

    /// A connection attempt: admission decides between a handshake, a stateless retry
    /// and a refusal.
    fn incoming(&mut self, now: Instant, incoming: quinn_proto::Incoming, cx: &Context) {
        let m = cx.metrics;
        let from = incoming.remote_address();
        let mut response = Vec::new();
        if !self.accepting {
            let t = self.endpoint.refuse(incoming, &mut response);
            self.respond(&t, &response);
            return;
        }
        // The join is shed here, before a handshake costs anything.
        if m.over_load(cx.max_players) {
            m.incoming(Decision::RefuseLoad);
            let t = self.endpoint.refuse(incoming, &mut response);
            self.respond(&t, &response);
            return;
        }
        let (decision, pending) = cx
            .admission
            .decide(from.ip(), incoming.remote_address_validated());
        m.incoming(decision);
        m.pending.set(cx.admission.pending() as u64);
        let t = match (decision, pending) {
            (Decision::Accept, Some(pending)) => {
                match self.endpoint.accept(incoming, now, &mut response, None) {
                    Ok((h, conn)) => {
                        self.add(h, conn, now, now + cx.limits.handshake_timeout, pending);
                        return;
                    }
                    Err(e) => {
                        m.handshake_failures.inc();
                        debug!(%from, error = %e.cause, "handshake failed");
                        match e.response {
                            Some(t) => t,
                            None => return,
                        }
                    }
                }
            }
            // Stateless: the peer must echo the token from its address.
            (Decision::Retry, _) => match self.endpoint.retry(incoming, &mut response) {
                Ok(t) => t,
                Err(e) => self.endpoint.refuse(e.into_incoming(), &mut response),
            },
            (d, _) => {
                debug!(%from, outcome = d.label(), "connection attempt refused");
                self.endpoint.refuse(incoming, &mut response)
            }
        };
        self.respond(&t, &response);
    }

    fn add(
        &mut self,
        h: ConnectionHandle,
        conn: quinn_proto::Connection,
        now: Instant,
        deadline: Instant,
        pending: Pending,
    ) {
        if self.peers.len() <= h.0 {
            self.peers.resize_with(h.0 + 1, || None);
        }
        self.peers[h.0] = Some(Peer {
            conn,
            id: None,
            handshake: Some(deadline),
            pending: Some(pending),
            stream: None,
            writes: VecDeque::new(),
            write_deadline: None,
            closing: None,
            closed: false,
            armed: None,
            dirty: false,
            blocked: None,
            packets: TokenBucket::new(PACKET_RATE, PACKET_RATE, now),
            datagrams_taken: 0,
            datagrams_overflowed: 0,
        });
        self.live += 1;
        self.touch(h.0);
    }

    /// Sends an endpoint's own answer (retry, refusal, reset, version negotiation); one
    /// the socket cannot take now is dropped, as QUIC allows.
    pub(super) fn respond(&self, t: &Transmit, bytes: &[u8]) {
        let _ = self.wire.send(t, bytes);
    }
}

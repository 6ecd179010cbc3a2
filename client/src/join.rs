//! Joining a server: the handshake, the hello, the welcome and the map, as a [`Joining`]
//! a frame loop updates (with the map's progress to show) or that [`connect`] awaits;
//! [`reconnect`] tries again while the server refuses for now.

use crate::transport::Transport;
use crate::{client_config, ClientError, ConnectOptions, Session, HANDSHAKE_TIMEOUT};
use expel_protocol::backoff::Backoff;
use expel_protocol::client::{ClientMachine, ClientOutput, ClientSettings, Status};
use expel_protocol::{Code, ALPN};
use expel_quic::{LinkEvent, REFUSED_AT_THE_DOOR};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A join under way. A game's frame loop calls [`Joining::update`] every frame (showing
/// [`Joining::status`] and [`Joining::map_progress`] meanwhile) until it says the player
/// is in, then takes the [`Session`]; [`connect`] does the same, awaiting in between.
pub struct Joining {
    addr: SocketAddr,
    machine: ClientMachine,
    transport: Transport,
    connected: bool,
    handshake_by: Instant,
    /// A blocking join's runtime (see [`connect_blocking`]).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Joining {
    /// Starts joining `addr`: the QUIC handshake and the hello go out from the first
    /// update. Needs a Tokio runtime's context (its I/O driver watches the socket);
    /// [`Joining::start_blocking`] brings its own.
    pub fn start(addr: SocketAddr, opts: &ConnectOptions) -> Result<Joining, ClientError> {
        let config = client_config(&opts.trust, ALPN)?;
        let started = Instant::now();
        let name = opts.server_name.as_deref().unwrap_or("localhost");
        let transport = Transport::connect(addr, name, config, started)?;
        let settings = ClientSettings {
            have_map: opts.have_map.clone(),
            sim: opts.sim.clone(),
            states: opts.states,
            ..ClientSettings::new(opts.token.clone())
        };
        Ok(Joining {
            addr,
            machine: ClientMachine::new(settings, started),
            transport,
            connected: false,
            // A server that is down answers nothing: give up long before QUIC's idle
            // timeout.
            handshake_by: started + HANDSHAKE_TIMEOUT,
            runtime: None,
        })
    }

    /// [`Joining::start`] for a loop that is not async: the join (and then the session)
    /// keeps a runtime of its own, whose one worker thread watches the socket between the
    /// game's updates. Refused inside a Tokio runtime (a runtime cannot be started or
    /// dropped within another): there, use [`Joining::start`].
    pub fn start_blocking(addr: SocketAddr, opts: &ConnectOptions) -> Result<Joining, ClientError> {
        let fail = |detail: String| ClientError::Connect { addr, detail };
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(fail(
                "a blocking connect inside a Tokio runtime: use connect(..).await there".into(),
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| fail(format!("starting a runtime: {e}")))?;
        let mut j = {
            let _in = rt.enter();
            Joining::start(addr, opts)?
        };
        j.runtime = Some(rt);
        Ok(j)
    }

    /// Where the join stands: connecting (handshake, hello), receiving the map, or in.
    pub fn status(&self) -> &Status {
        self.machine.status()
    }

    /// While the map arrives: bytes received and the map's size (`None` when the client
    /// holds the map, or before the welcome).
    pub fn map_progress(&self) -> Option<(u64, u64)> {
        self.machine.map_progress()
    }

    /// Moves what arrived and what is due by `now`. `Ok(true)`: the player is in, take
    /// the session ([`Joining::joined`]); `Ok(false)`: not yet; an error ends the join.
    pub fn update(&mut self, now: Instant) -> Result<bool, ClientError> {
        let fail = |detail: String| ClientError::Connect {
            addr: self.addr,
            detail,
        };
        let (machine, mut connected, mut lost) = (&mut self.machine, self.connected, None);
        self.transport.pump(now, |e| match e {
            LinkEvent::Connected => connected = true,
            LinkEvent::Control(b) => machine.handle_control(&b, now),
            // Snapshots may follow the map's last piece at once (the machine takes none
            // before).
            LinkEvent::Datagram(b) => machine.handle_datagram(&b, now),
            LinkEvent::Lost(code, why) => lost = Some((code, why)),
        });
        self.connected = connected;
        match lost {
            Some((_, why)) if !connected => {
                return Err(if why == REFUSED_AT_THE_DOOR {
                    ClientError::Refused {
                        code: Code::FullLoad,
                        detail: why,
                    }
                } else {
                    fail(why)
                });
            }
            Some((code, why)) => self.machine.handle_closed(code, &why),
            None => {}
        }
        // The hello waits in the link until the control stream opens.
        while let Some(out) = self.machine.poll_output() {
            if let ClientOutput::Control(b) = out {
                self.transport.send_control(&b);
            }
        }
        self.transport.flush(now);
        match self.machine.status() {
            Status::Playing => return Ok(true),
            Status::Ended(e) => return Err(ClientError::joining(e, self.addr)),
            Status::Connecting | Status::ReceivingMap => {}
        }
        if !connected && now >= self.handshake_by {
            return Err(fail(format!(
                "no handshake within {} s",
                HANDSHAKE_TIMEOUT.as_secs()
            )));
        }
        Ok(false)
    }

    /// Waits until `until`, QUIC's next timer, or something to read.
    pub async fn wait(&mut self, until: Instant) {
        let until = if self.connected {
            until
        } else {
            until.min(self.handshake_by)
        };
        self.transport.wait(until).await;
    }

    /// The session, once [`Joining::update`] said the player is in.
    pub fn joined(self) -> Result<Session, ClientError> {
        let m = &self.machine;
        let (Some(welcome), Some(sim), Some(map), Status::Playing) = (
            m.welcome().cloned(),
            m.sim().cloned(),
            m.map().cloned(),
            m.status(),
        ) else {
            return Err(ClientError::Protocol("not joined yet".into()));
        };
        Ok(Session {
            welcome,
            sim,
            map,
            machine: self.machine,
            transport: self.transport,
            link: None,
            runtime: self.runtime,
            last_update: Instant::now(),
        })
    }
}

/// Connects, says hello, and plays until the welcome and the map have arrived.
pub async fn connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<Session, ClientError> {
    let mut j = Joining::start(addr, opts)?;
    while !j.update(Instant::now())? {
        j.wait(Instant::now() + Duration::from_secs(1)).await;
    }
    j.joined()
}

/// [`connect`] for a game loop that is not async (see [`Joining::start_blocking`]).
pub fn connect_blocking(addr: SocketAddr, opts: &ConnectOptions) -> Result<Session, ClientError> {
    let mut j = Joining::start_blocking(addr, opts)?;
    loop {
        if j.update(Instant::now())? {
            return j.joined();
        }
        let rt = j.runtime.take().expect("a blocking join keeps its runtime");
        rt.block_on(j.wait(Instant::now() + Duration::from_secs(1)));
        j.runtime = Some(rt);
    }
}

/// First wait before joining again.
pub const RECONNECT_FIRST: Duration = Duration::from_millis(200);
/// The most any wait before joining again grows to.
pub const RECONNECT_CAP: Duration = Duration::from_secs(3);

/// Joins `addr` again after a session ended ([`End::worth_reconnecting`](expel_protocol::client::End::worth_reconnecting)): tries until
/// `within` has passed, waiting between tries with a jittered backoff (200 ms doubling to
/// 3 s; `seed` spreads a crowd) while the server is unreachable or refuses for now (full,
/// shutting down, our last connection not yet gone). Any other refusal ends it at once.
/// The token in `opts` must still be good (one with uses left, or a fresh one).
pub async fn reconnect(
    addr: SocketAddr,
    opts: &ConnectOptions,
    within: Duration,
    seed: u64,
) -> Result<Session, ClientError> {
    let until = Instant::now() + within;
    let mut backoff = Backoff::new(RECONNECT_FIRST, RECONNECT_CAP, seed);
    loop {
        match connect(addr, opts).await {
            Err(e) if e.is_transient() && Instant::now() < until => {
                let left = until.saturating_duration_since(Instant::now());
                tokio::time::sleep(backoff.next_delay().min(left)).await;
            }
            done => return done,
        }
    }
}

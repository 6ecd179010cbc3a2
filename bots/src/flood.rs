//! An input flood: one joined client that sends well-formed input datagrams far faster
//! than the protocol needs, one datagram per UDP packet, for the attack tests and the
//! flood bench. Each datagram carries the commands of the tick the client's clock is at
//! and enough before it (and claims for them) that two never fit one packet, so the
//! server pays for every datagram as a packet of its own. Its QUIC ignores congestion
//! (an attacker's client would): what the server drops does not slow it down.

use bytes::Bytes;
use expel_client::{bind_address, client_config, Trust};
use expel_core::{MoveCommand, PlayerState};
use expel_protocol::frame::{encode_frame, FrameDecoder};
use expel_protocol::{
    decode, encode, ClientControl, ClientDatagram, InputMsg, ServerControl, ALPN, VERSION,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Commands (and claims) per flood datagram: about 800 bytes, more than half of what a
/// QUIC packet carries.
const FLOOD_COMMANDS: usize = 20;

/// Bytes in flight the flooder's QUIC allows, whatever is lost: a window that never
/// shrinks, as an attacker's modified client would keep.
const FLOOD_WINDOW: u64 = 64 << 20;

/// Congestion control that controls nothing.
#[derive(Clone, Debug)]
struct Unlimited;

impl quinn::congestion::Controller for Unlimited {
    fn on_congestion_event(&mut self, _: Instant, _: Instant, _: bool, _: u64) {}
    fn on_mtu_update(&mut self, _: u16) {}
    fn window(&self) -> u64 {
        FLOOD_WINDOW
    }
    fn clone_box(&self) -> Box<dyn quinn::congestion::Controller> {
        Box::new(self.clone())
    }
    fn initial_window(&self) -> u64 {
        FLOOD_WINDOW
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

impl quinn::congestion::ControllerFactory for Unlimited {
    fn build(
        self: std::sync::Arc<Self>,
        _: Instant,
        _: u16,
    ) -> Box<dyn quinn::congestion::Controller> {
        Box::new(Unlimited)
    }
}

/// What a flood did.
#[derive(Clone, Debug)]
pub struct FloodOutcome {
    /// Datagrams handed to QUIC.
    pub sent: u64,
    /// Bytes of each.
    pub datagram_bytes: usize,
    /// Seconds it ran.
    pub seconds: f64,
    /// Why the server closed the connection, if it did.
    pub closed: Option<String>,
}

/// Joins `server` with `token` (the map is taken as known: `have_map`) and sends `rate`
/// input datagrams a second for `seconds`, or until the server closes the connection.
pub async fn flood(
    server: SocketAddr,
    trust: &Trust,
    token: String,
    have_map: [u8; 32],
    rate: f64,
    seconds: f64,
) -> Result<FloodOutcome, String> {
    let bind = bind_address(server);
    let mut ep = quinn::Endpoint::client(bind).map_err(|e| format!("binding {bind}: {e}"))?;
    let mut cfg = client_config(trust, ALPN).map_err(|e| e.to_string())?;
    let mut transport = quinn::TransportConfig::default();
    transport.congestion_controller_factory(std::sync::Arc::new(Unlimited));
    transport.datagram_send_buffer_size(4 << 20);
    cfg.transport_config(std::sync::Arc::new(transport));
    ep.set_default_client_config(cfg);
    let c = ep
        .connect(server, "localhost")
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut send, mut recv) = c.open_bi().await.map_err(|e| e.to_string())?;
    let hello = ClientControl::Hello {
        version: VERSION,
        token,
        have_map: Some(have_map),
    };
    send.write_all(&encode_frame(&hello))
        .await
        .map_err(|e| e.to_string())?;
    let mut dec = FrameDecoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    let welcome = loop {
        if let Some(f) = dec.next_frame().map_err(|e| e.to_string())? {
            match decode::<ServerControl>("control", &f).map_err(|e| e.to_string())? {
                ServerControl::Welcome(w) => break w,
                other => return Err(format!("not welcomed: {other:?}")),
            }
        }
        match recv.read(&mut buf).await.map_err(|e| e.to_string())? {
            Some(n) => dec.push(&buf[..n]),
            None => return Err("the control stream ended before a welcome".into()),
        }
    };
    // What the server writes from now on is read and dropped, so its writes never stall.
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(Some(_)) = recv.read(&mut buf).await {}
    });
    let tick_rate = f64::from(welcome.config.tick_rate);
    let claim = PlayerState {
        // Far from the origin: each coordinate takes its varint's full five bytes.
        origin: [i32::MAX - 1; 3],
        velocity: [i32::MAX - 1; 3],
        ..PlayerState::default()
    };
    let message = |tick: u64| {
        encode(&ClientDatagram::Input(InputMsg {
            ack: 0,
            first_tick: tick.saturating_sub(FLOOD_COMMANDS as u64 - 1).max(1),
            commands: vec![MoveCommand::default(); FLOOD_COMMANDS],
            predicted: None,
            claims: vec![claim; FLOOD_COMMANDS],
            views: Vec::new(),
        }))
    };
    let datagram_bytes = message(welcome.server_tick).len();
    let started = Instant::now();
    let mut sent = 0u64;
    let closed = loop {
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed >= seconds {
            break None;
        }
        let tick = welcome.server_tick + (elapsed * tick_rate) as u64 + 2;
        let bytes = Bytes::from(message(tick));
        // Paced: what the rate asks by now, a millisecond's worth at a time.
        let due = (elapsed * rate) as u64;
        let mut gone = None;
        while sent < due {
            if let Err(e) = c.send_datagram(bytes.clone()) {
                gone = Some(e);
                break;
            }
            sent += 1;
        }
        if let Some(e) = gone {
            break Some(c.close_reason().map_or(e.to_string(), |r| r.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    drain.abort();
    c.close(0u32.into(), b"flood over");
    Ok(FloodOutcome {
        sent,
        datagram_bytes,
        seconds,
        closed,
    })
}

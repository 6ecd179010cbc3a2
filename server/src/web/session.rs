//! One browser session's task: the WebTransport handshake and request, the control
//! stream the page opens, its datagrams into the machine (within a rate), and the
//! machine's outputs out, each control write within the write timeout and the map within
//! its transfer deadline. When it ends, however it ends, the machine is told once.

use super::{UpSink, SESSION_PATH};
use crate::admission::Pending;
use crate::quic::Up;
use crate::Shared;
use bytes::Bytes;
use expel_protocol::join::map_frames;
use expel_protocol::rate::TokenBucket;
use expel_protocol::server::{ConnId, Output};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tracing::debug;
use wtransport::endpoint::IncomingSession;
use wtransport::{Connection, RecvStream, SendStream};

/// Datagrams a second a session may send into the machine (a client sends at most one
/// input datagram a tick, 240 at the highest tick rate); past it they are dropped here.
const DATAGRAM_RATE: f64 = 300.0;
/// Largest control-stream read handed to the machine at once.
const READ_CHUNK: usize = 4096;
/// After its last words are written, how long a closing session gets to read them.
const LINGER: Duration = Duration::from_millis(500);
/// The datagram room of a session whose transport gives none.
const FALLBACK_ROOM: usize = 1100;

/// What the door hands a session.
pub(super) enum ToSession {
    /// One of the machine's outputs, and when the machine's thread handed it over.
    Output(Output, Instant),
    /// The player joined: its admission slot is free.
    Joined,
}

/// One session, before it runs.
pub(super) struct Session {
    conn: ConnId,
    shared: Arc<Shared>,
    sink: UpSink,
    /// Whether the machine was told it connected (shared with the door, which tells the
    /// machine of the close should this task panic).
    told: Arc<AtomicBool>,
    pending: Option<Pending>,
}

/// How a session ended, for the machine and the log.
struct Ended(String);

impl Session {
    pub(super) fn new(
        conn: ConnId,
        shared: &Arc<Shared>,
        sink: UpSink,
        told: Arc<AtomicBool>,
        pending: Pending,
    ) -> Session {
        Session {
            conn,
            shared: shared.clone(),
            sink,
            told,
            pending: Some(pending),
        }
    }

    /// Runs the session to its end.
    pub(super) async fn run(mut self, incoming: IncomingSession, rx: mpsc::Receiver<ToSession>) {
        let m = self.shared.metrics.clone();
        let why = match self.open(incoming).await {
            Ok((connection, send, recv)) => {
                m.web_sessions.inc();
                self.told.store(true, Relaxed);
                let room = connection.max_datagram_size().unwrap_or(FALLBACK_ROOM);
                self.sink.push(Up::Connected {
                    conn: self.conn,
                    room,
                    at: Instant::now(),
                });
                self.play(&connection, send, recv, rx).await.0
            }
            Err(Ended(why)) => {
                m.web_refused.inc();
                why
            }
        };
        debug!(conn = self.conn, %why, "web session ended");
        if self.told.swap(false, Relaxed) {
            self.sink.push(Up::Closed {
                conn: self.conn,
                reason: why,
            });
        }
        drop(self.pending.take());
        m.pending.set(self.shared.admission.pending() as u64);
    }

    /// The handshake, the request (only [`SESSION_PATH`]) and the control stream, all
    /// within the handshake timeout.
    async fn open(
        &self,
        incoming: IncomingSession,
    ) -> Result<(Connection, SendStream, RecvStream), Ended> {
        let limit = self.shared.cfg.limits.handshake_timeout;
        let steps = async {
            let request = incoming
                .await
                .map_err(|e| Ended(format!("handshake failed: {e}")))?;
            if request.path() != SESSION_PATH {
                let path = request.path().chars().take(64).collect::<String>();
                request.not_found().await;
                return Err(Ended(format!("asked for {path:?}, not {SESSION_PATH}")));
            }
            let connection = request
                .accept()
                .await
                .map_err(|e| Ended(format!("session not accepted: {e}")))?;
            let (send, recv) = connection
                .accept_bi()
                .await
                .map_err(|e| Ended(format!("no control stream: {e}")))?;
            Ok((connection, send, recv))
        };
        match timeout(limit, steps).await {
            Ok(r) => r,
            Err(_) => {
                self.shared.metrics.handshake_timeouts.inc();
                Err(Ended("the session did not open in time".into()))
            }
        }
    }

    /// Plays until the session ends: the control stream's reads and the datagrams go to
    /// the machine, the machine's outputs to the page.
    async fn play(
        &mut self,
        connection: &Connection,
        send: SendStream,
        mut recv: RecvStream,
        rx: mpsc::Receiver<ToSession>,
    ) -> Ended {
        let conn = self.conn;
        let sink = self.sink.clone();
        let m = self.shared.metrics.clone();
        // Set once the machine asked for the close: what the peer sends while it reads its
        // last words is not the machine's (as on the QUIC door).
        let closing = AtomicBool::new(false);
        let reads = async {
            let mut buf = vec![0u8; READ_CHUNK];
            let mut rate = TokenBucket::new(DATAGRAM_RATE, DATAGRAM_RATE, Instant::now());
            loop {
                tokio::select! {
                    r = recv.read(&mut buf) => match r {
                        Ok(Some(_)) if closing.load(Relaxed) => {}
                        Ok(Some(n)) => sink.push(Up::Control {
                            conn,
                            bytes: Bytes::copy_from_slice(&buf[..n]),
                            at: Instant::now(),
                        }),
                        Ok(None) => return Ended("control stream closed".into()),
                        Err(e) => return Ended(format!("control stream lost: {e}")),
                    },
                    d = connection.receive_datagram() => match d {
                        Ok(_) if closing.load(Relaxed) => {}
                        Ok(d) => {
                            let now = Instant::now();
                            if rate.take(now) {
                                sink.push(Up::Datagram {
                                    conn,
                                    bytes: d.payload(),
                                    at: now,
                                });
                            } else {
                                m.web_over_rate.inc();
                            }
                        }
                        Err(e) => return Ended(format!("connection lost: {e}")),
                    },
                }
            }
        };
        let writes = self.write(connection, send, rx, &closing);
        tokio::select! {
            e = reads => e,
            e = writes => e,
        }
    }

    /// The machine's outputs, in order, until it closes the session or the door drops it.
    async fn write(
        &mut self,
        connection: &Connection,
        mut send: SendStream,
        mut rx: mpsc::Receiver<ToSession>,
        closing: &AtomicBool,
    ) -> Ended {
        let cfg = &self.shared.cfg;
        let limit = cfg.limits.write_timeout;
        let m = &self.shared.metrics;
        while let Some(msg) = rx.recv().await {
            let out = match msg {
                ToSession::Joined => {
                    drop(self.pending.take());
                    m.pending.set(self.shared.admission.pending() as u64);
                    continue;
                }
                ToSession::Output(out, at) => (out, at),
            };
            match out {
                (Output::Datagram { bytes, .. }, _) => {
                    if connection.send_datagram(bytes).is_err() {
                        m.datagram_send_errors.inc();
                    }
                }
                (Output::Control { bytes, .. }, _) => {
                    if let Err(e) = write_within(&mut send, &bytes, limit).await {
                        return self.stalled(connection, e);
                    }
                }
                (Output::Map { .. }, at) => {
                    let map = &cfg.settings.map_bytes;
                    let whole = cfg.limits.map_deadline(at, map.len());
                    let frames = async {
                        for frame in map_frames(map) {
                            send.write_all(&frame).await.map_err(|e| e.to_string())?;
                        }
                        Ok::<(), String>(())
                    };
                    match tokio::time::timeout_at(whole.into(), frames).await {
                        Ok(Ok(())) => self.sink.push(Up::MapSent {
                            conn: self.conn,
                            at: Instant::now(),
                        }),
                        Ok(Err(e)) => return self.stalled(connection, e),
                        Err(_) => return self.stalled(connection, "the map took too long".into()),
                    }
                }
                (
                    Output::Close {
                        last, code, reason, ..
                    },
                    _,
                ) => {
                    // The last words (the code, for the page to show) on the control
                    // stream, then the close.
                    closing.store(true, Relaxed);
                    let said = async {
                        let _ = send.write_all(&last).await;
                        let _ = send.finish().await;
                    };
                    let _ = timeout(LINGER, said).await;
                    tokio::time::sleep(LINGER).await;
                    connection.close(u32::from(code.number()).into(), reason.as_bytes());
                    return Ended(reason);
                }
            }
        }
        connection.close(0u32.into(), b"dropped");
        Ended("dropped by the door".into())
    }

    /// A write that failed or took too long: the session is dropped, as a stalled QUIC
    /// connection is.
    fn stalled(&self, connection: &Connection, why: String) -> Ended {
        self.shared.metrics.stalls.inc();
        connection.close(0u32.into(), b"stalled");
        Ended(format!("stalled: {why}"))
    }
}

/// Writes `bytes` to the control stream within `limit`.
async fn write_within(send: &mut SendStream, bytes: &[u8], limit: Duration) -> Result<(), String> {
    match timeout(limit, send.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no flow-control credit in time".into()),
    }
}

//! A peer's control stream: its reads go to the machine as they come; its writes wait in
//! a queue for the peer's flow-control credit, each within the write deadline, the map
//! made frame by frame as it reaches the head of the queue, and the last words before a
//! close.

use super::{close_now, gone, Context, Peer, Up};
use expel_protocol::join::map_frame;
use expel_protocol::server::ConnId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// After its last words are written, how long a closing peer gets to read them before
/// the close frame (which can overtake them) goes out.
const LINGER: Duration = Duration::from_millis(500);
/// Largest control-stream read handed to the machine at once.
const READ_CHUNK: usize = 4096;

/// One write waiting for the peer's credit on the control stream.
pub(super) enum Out {
    /// Control frames, `at` bytes of them written; due within the write timeout, and by
    /// `by` when set.
    Bytes {
        bytes: Vec<u8>,
        at: usize,
        by: Option<Instant>,
    },
    /// The map, from its `next` frame on, all of it by `whole`: each frame is made when
    /// it reaches the head of the queue, as a write of its own.
    Map { next: usize, whole: Instant },
    /// Finish the stream (after the last words).
    Finish,
}

/// The close the machine asked for, carried out once the last words are written.
pub(super) struct Closing {
    pub(super) code: u32,
    pub(super) reason: String,
    /// Set once the words are written and the stream finished.
    pub(super) linger: Option<Instant>,
}

/// Reads what the control stream holds into the machine; its end, or a reset, ends the
/// connection.
pub(super) fn read_control(
    p: &mut Peer,
    ids: &mut BTreeMap<ConnId, usize>,
    up: &mut Vec<Up>,
    now: Instant,
) {
    let Some(s) = p.stream else { return };
    let talking = p.talking();
    let mut ended = None;
    {
        let mut recv = p.conn.recv_stream(s);
        let Ok(mut chunks) = recv.read(true) else {
            return;
        };
        loop {
            match chunks.next(READ_CHUNK) {
                Ok(Some(chunk)) => {
                    if let Some(id) = talking {
                        up.push(Up::Control {
                            conn: id,
                            bytes: chunk.bytes,
                            at: now,
                        });
                    }
                }
                Ok(None) => {
                    ended = Some("control stream closed".to_string());
                    break;
                }
                Err(quinn_proto::ReadError::Blocked) => break,
                Err(e) => {
                    ended = Some(format!("connection lost: {e}"));
                    break;
                }
            }
        }
        let _ = chunks.finalize();
    }
    if let Some(why) = ended {
        close_now(p, now, 0, &why);
        gone(p, ids, up, &why);
    }
}

pub(super) enum WriteError {
    Lost,
    Stalled,
}

/// Writes what the peer's credit allows of the queue; a write not done by its deadline
/// is a stall. Sets `map_sent` when the map's last frame is written.
pub(super) fn write_control(
    p: &mut Peer,
    now: Instant,
    cx: &Context,
    map_sent: &mut bool,
) -> Result<(), WriteError> {
    let Some(s) = p.stream else {
        p.writes.clear();
        return Ok(());
    };
    let timeout = cx.limits.write_timeout;
    loop {
        let Some(head) = p.writes.front_mut() else {
            p.write_deadline = None;
            return Ok(());
        };
        match head {
            Out::Map { next, whole } => {
                let (i, by) = (*next, Some(*whole));
                *next += 1;
                match map_frame(cx.map, i) {
                    Some(bytes) => p.writes.push_front(Out::Bytes { bytes, at: 0, by }),
                    None => {
                        *map_sent = true;
                        p.writes.pop_front();
                    }
                }
                continue;
            }
            Out::Bytes { bytes, at, by } => {
                let deadline = *p
                    .write_deadline
                    .get_or_insert_with(|| by.map_or(now + timeout, |b| b.min(now + timeout)));
                write_some(&mut p.conn.send_stream(s), bytes, at)?;
                if *at < bytes.len() {
                    return if deadline <= now {
                        Err(WriteError::Stalled)
                    } else {
                        Ok(())
                    };
                }
            }
            Out::Finish => {
                let _ = p.conn.send_stream(s).finish();
                if let Some(c) = &mut p.closing {
                    c.linger = Some(now + LINGER);
                }
            }
        }
        p.writes.pop_front();
        p.write_deadline = None;
    }
}

fn write_some(
    send: &mut quinn_proto::SendStream,
    bytes: &[u8],
    at: &mut usize,
) -> Result<(), WriteError> {
    while *at < bytes.len() {
        match send.write(&bytes[*at..]) {
            Ok(n) => *at += n,
            Err(quinn_proto::WriteError::Blocked) => return Ok(()),
            Err(_) => return Err(WriteError::Lost),
        }
    }
    Ok(())
}

//! Recordings of matches: what the server's machine took from outside its simulation,
//! kept so the match can be played again, bit for bit.
//!
//! The simulation and the rules are deterministic; what they took from the network is
//! not. A recording keeps exactly that, in the order the machine took it: the commands
//! each tick stepped (a missing one stays missing: the stand-in is the simulation's own),
//! who entered and left the world, the messages the rules read and the shots they had
//! judged as their shooters saw them, and each violation with its evidence. The world's
//! hash after each tick is kept too, so a replay says at which tick it first differs.
//!
//! [`Replay`] runs a fresh machine from a recording: its rules and simulation run as they
//! did, and each thing the original took from the network comes from the recording
//! instead ([`Tape`]).
//!
//! # The file
//!
//! [`MAGIC`], then blocks: `[length: u32 LE][check: 4 bytes][payload]`, the check the
//! first 4 bytes of the payload's BLAKE3. The first block holds the [`Header`]; each later
//! one holds [`Entry`]s (postcard), starting at a tick. A part that grew past its size
//! limit is followed by another (`NAME.1`, `NAME.2`, ...), which starts with the same
//! magic and header and goes on where the last stopped.

mod commands;
mod recorder;
mod replay;
mod tape;

pub use recorder::Recorder;
pub use replay::{Counted, Replay, ReplayError, Replayed};
pub use tape::{ShotEvidence, Tape};

use crate::messages::Channel;
use crate::shots::server::{SeenShot, ShotError};
use expel_core::movement::MoveConfig;
use serde::{Deserialize, Serialize};

/// What every recording starts with.
pub const MAGIC: &[u8; 8] = b"EXPELREC";
/// The format this build writes and reads.
pub const FORMAT: u16 = 1;
/// The largest block read or written: a reader never holds more than this of a file.
pub const MAX_BLOCK: usize = 8 << 20;
/// Payload bytes past which the recorder closes a block at the next tick.
pub const BLOCK_BYTES: usize = 32 << 10;
/// Ticks after which the recorder closes a block (so a crash loses about a second).
pub const BLOCK_TICKS: u64 = 64;
/// Finished bytes the recorder holds for the shell at most: past it, the recording stops
/// (a disk that cannot keep up never grows the server's memory).
pub const MAX_WAITING: usize = 64 << 20;
/// Ticks between the full world hashes kept (every tick keeps 16 bits of it).
pub const FULL_HASH_EVERY: u64 = 60;

/// What a recording was made of: enough to build the same simulation and rules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`FORMAT`] when written.
    pub format: u16,
    /// This recording's id (its parts share it).
    pub id: [u8; 16],
    /// The map's name and the BLAKE3 of its file.
    pub map_name: String,
    /// BLAKE3 of the map file's bytes.
    pub map_hash: [u8; 32],
    /// The movement it was simulated with (the tick rate among it).
    pub movement: MoveConfig,
    /// The rules' name (`"none"` without rules), as `expel serve --mode` names them.
    pub rules: String,
    /// Unix seconds when the recording began.
    pub started_unix: u64,
    /// Nearest other players per snapshot.
    pub interest: usize,
    /// Snapshots a second.
    pub snapshot_rate: u32,
    /// Input datagrams a second clients send (`None`: the protocol's default).
    pub input_rate: Option<u32>,
    /// Snapshot bytes a second per client.
    pub client_budget: usize,
    /// Most players at once.
    pub max_players: usize,
}

/// One thing the machine took from outside, or checked, in the order it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Entry {
    /// The tick about to be stepped, with one command or none for each player in the
    /// world (in id order; `players` of them), delta-coded against each one's last.
    Tick {
        /// The tick.
        tick: u64,
        /// Players in the world.
        players: u32,
        /// Their commands (see `commands.rs`).
        commands: Vec<u8>,
    },
    /// The world after the tick just stepped: its hash's low 16 bits, and the whole of
    /// it every [`FULL_HASH_EVERY`] ticks.
    Hash {
        /// The low 16 bits.
        short: u16,
        /// The whole hash, now and then.
        full: Option<u64>,
    },
    /// A player entered the world.
    Joined {
        /// The player.
        player: u32,
    },
    /// A player left the world.
    Left {
        /// The player.
        player: u32,
        /// Why.
        reason: String,
    },
    /// Ticks the server could not catch up on: their number passed, nothing moved.
    Skipped {
        /// How many.
        ticks: u64,
    },
    /// A violation, counted as the server judged it.
    Violation {
        /// The tick it was judged in (the world's last stepped tick).
        tick: u64,
        /// The player.
        player: u32,
        /// Its kind's name (`ViolationKind::name`).
        kind: String,
        /// The evidence.
        evidence: String,
    },
    /// A call of the rules into the machine whose result came from outside the
    /// simulation; the `effects` entries after it (violations, leaves) happened in it.
    Call {
        /// What was asked, and what it gave.
        call: Call,
        /// Entries that follow from it.
        effects: u32,
    },
    /// The recording ended (the server shut down).
    End {
        /// Why.
        reason: String,
    },
}

/// A call of the rules (see [`Entry::Call`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Call {
    /// The rules took a player's message.
    Message {
        /// From whom.
        player: u32,
        /// On which channel.
        channel: Channel,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// A message the rules could not read (counted against its sender).
    Malformed {
        /// Whose.
        player: u32,
    },
    /// A shot judged as its shooter saw the world.
    Shot {
        /// Who shot.
        shooter: u32,
        /// What the judgement gave.
        outcome: Result<SeenShot, ShotError>,
    },
    /// The rules refused a player's command.
    Refused {
        /// Whose.
        player: u32,
    },
    /// The rules took a player out of the game.
    Removed {
        /// Whom.
        player: u32,
    },
}

/// A recording that cannot be read: what is wrong and at which byte.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("recording, byte {offset}: {what}")]
pub struct RecordError {
    /// The byte offset in the file (parts counted one after another).
    pub offset: u64,
    /// What is wrong there.
    pub what: String,
}

impl RecordError {
    fn at(offset: u64, what: impl Into<String>) -> RecordError {
        RecordError {
            offset,
            what: what.into(),
        }
    }
}

/// A block's bytes: its length, check and payload (the entries deflated).
pub fn block(entries: &[u8]) -> Vec<u8> {
    let payload = miniz_oxide::deflate::compress_to_vec(entries, DEFLATE_LEVEL);
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&check(&payload));
    out.extend_from_slice(&payload);
    out
}

/// Deflate's level for blocks: most of the size for a fraction of the time of the
/// highest.
const DEFLATE_LEVEL: u8 = 6;

fn check(payload: &[u8]) -> [u8; 4] {
    let h = blake3::hash(payload);
    let mut c = [0; 4];
    c.copy_from_slice(&h.as_bytes()[..4]);
    c
}

/// The start of every part: the magic and the header's block.
pub fn start(header: &Header) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    // A header always encodes (plain data, no maps with non-string keys).
    let payload = postcard::to_allocvec(header).unwrap_or_default();
    out.extend_from_slice(&block(&payload));
    out
}

/// Reads a recording's blocks from bytes as they come (a file, its parts one after
/// another), never holding more than one block.
pub struct Blocks<R> {
    read: R,
    offset: u64,
}

impl<R: std::io::Read> Blocks<R> {
    /// Reads the magic and the header at the start of a part; `offset` is where the
    /// part starts among the whole recording's bytes.
    pub fn open(mut read: R, offset: u64) -> Result<(Header, Blocks<R>), RecordError> {
        let mut magic = [0u8; 8];
        read_exact(&mut read, &mut magic, offset, "the magic")?;
        if &magic != MAGIC {
            return Err(RecordError::at(offset, "not an Expel recording (no magic)"));
        }
        let mut blocks = Blocks {
            read,
            offset: offset + 8,
        };
        let (at, payload) = blocks
            .next_block()?
            .ok_or_else(|| RecordError::at(offset + 8, "the header is missing"))?;
        let header: Header = postcard::from_bytes(&payload)
            .map_err(|e| RecordError::at(at, format!("the header does not decode: {e}")))?;
        if header.format != FORMAT {
            return Err(RecordError::at(
                at,
                format!(
                    "format {} (this build reads format {FORMAT})",
                    header.format
                ),
            ));
        }
        Ok((header, blocks))
    }

    /// The offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next block's entries (inflated) and the offset of its first byte; `None` at a
    /// clean end.
    pub fn next_block(&mut self) -> Result<Option<(u64, Vec<u8>)>, RecordError> {
        let at = self.offset;
        let mut head = [0u8; 8];
        let mut got = 0;
        while got < head.len() {
            match self.read.read(&mut head[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(RecordError::at(at, "truncated inside a block's length")),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RecordError::at(at, format!("read failed: {e}"))),
            }
        }
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_BLOCK {
            return Err(RecordError::at(
                at,
                format!("a block of {len} bytes (at most {MAX_BLOCK})"),
            ));
        }
        let mut payload = vec![0; len];
        read_exact(&mut self.read, &mut payload, at + 8, "a block")?;
        if check(&payload)[..] != head[4..] {
            return Err(RecordError::at(
                at,
                "a block's check does not match (corrupt)",
            ));
        }
        self.offset = at + 8 + len as u64;
        let entries = miniz_oxide::inflate::decompress_to_vec_with_limit(&payload, MAX_BLOCK)
            .map_err(|e| RecordError::at(at, format!("a block does not inflate: {e}")))?;
        Ok(Some((at + 8, entries)))
    }
}

fn read_exact(
    read: &mut impl std::io::Read,
    buf: &mut [u8],
    at: u64,
    what: &str,
) -> Result<(), RecordError> {
    read.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => RecordError::at(at, format!("truncated in {what}")),
        _ => RecordError::at(at, format!("read failed in {what}: {e}")),
    })
}

/// The entries of a block (its inflated payload) that starts at byte `offset`, each
/// with that offset.
pub fn entries(payload: &[u8], offset: u64) -> Result<Vec<(u64, Entry)>, RecordError> {
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let inside = payload.len() - rest.len();
        let (e, more) = postcard::take_from_bytes::<Entry>(rest).map_err(|e| {
            let what = format!("the entry {inside} bytes into the block does not decode: {e}");
            RecordError::at(offset, what)
        })?;
        out.push((offset, e));
        rest = more;
    }
    Ok(out)
}

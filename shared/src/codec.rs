//! The protocol's version, its limits, and how any message becomes bytes and back
//! (postcard, refusing trailing bytes): what every part of the wire shares.

use thiserror::Error;

/// Protocol version carried in the hello; a server refuses any other. The ALPN names the
/// same number.
pub const VERSION: u16 = 15;
/// The QUIC application protocol name: `expel/` and [`VERSION`].
pub const ALPN: &[u8] = b"expel/15";
/// Commands repeated in every input datagram (the last N), so a lost datagram costs nothing.
pub const INPUT_REDUNDANCY: usize = 4;
/// Input datagrams a second a client sends by default (at most the tick rate): each
/// carries the commands since the one before. Quake 3's `cl_maxpackets` default; at a
/// 60 Hz tick it halves the packets a crowd sends, each packet's header, encryption and
/// system call, for a tick's more delay on every other command.
pub const DEFAULT_INPUT_RATE: u32 = 30;
/// Most commands one input datagram may carry.
pub const MAX_INPUT_COMMANDS: usize = 32;
/// Largest map a server sends or a client accepts.
pub const MAX_MAP_BYTES: u64 = 64 << 20;
/// Map transfer chunk size.
pub const MAP_CHUNK: usize = 32 * 1024;
/// Other players in a snapshot by default (the nearest).
pub const DEFAULT_INTEREST: usize = 32;
/// Movers within this distance of a player are in its snapshots.
pub const MOVER_INTEREST_RADIUS: f64 = 4096.0;

/// Bytes that do not form a valid message.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ProtocolError {
    /// Not decodable as the expected message.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// The decoder's complaint.
        detail: String,
    },
    /// A frame longer than allowed.
    #[error("frame of {0} bytes exceeds the limit of {1}")]
    FrameTooLong(usize, usize),
    /// Decodable, but inconsistent (a mask that does not match its values, too many
    /// commands, a map larger than allowed, ...).
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// Which message.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// Encodes a message with postcard.
pub fn encode<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    // Plain data into a Vec cannot fail. Most messages fit a datagram: reserve one, so
    // encoding does not grow the buffer byte by byte.
    postcard::to_extend(msg, Vec::with_capacity(1200)).unwrap_or_default()
}

/// Decodes a message with postcard; trailing bytes are an error.
pub fn decode<'a, T: serde::Deserialize<'a>>(
    what: &'static str,
    bytes: &'a [u8],
) -> Result<T, ProtocolError> {
    let malformed = |detail: String| ProtocolError::Malformed { what, detail };
    let (v, rest) = postcard::take_from_bytes(bytes).map_err(|e| malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(malformed(format!("{} trailing bytes", rest.len())));
    }
    Ok(v)
}

/// Ticks between a client's input datagrams at `tick_rate` when the server asks for
/// `input_rate` a second: the fewest that keep within it (at least one).
pub(crate) fn input_every(tick_rate: u32, input_rate: u32) -> u64 {
    u64::from(tick_rate.div_ceil(input_rate.max(1)).max(1))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_alpn_names_the_protocol_version() {
        assert_eq!(super::ALPN, format!("expel/{}", super::VERSION).as_bytes());
    }
}

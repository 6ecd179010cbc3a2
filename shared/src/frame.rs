//! Framing of the reliable control stream: each message is a 4-byte little-endian length
//! and that many bytes of postcard. The decoder takes bytes as they arrive and never
//! buffers more than one frame's limit.

use crate::codec::{encode, ProtocolError};

/// Longest control frame (map chunks are the largest messages).
pub const MAX_FRAME: usize = 64 * 1024;

/// Encodes one frame.
pub fn encode_frame<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    let body = encode(msg);
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Longest frame a client sends (a hello or a bye: a token, a hash, a reason).
pub const MAX_CLIENT_FRAME: usize = 4 * 1024;

/// Splits a byte stream into frames.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    limit: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::with_limit(MAX_FRAME)
    }
}

impl FrameDecoder {
    /// An empty decoder for frames up to [`MAX_FRAME`].
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty decoder for frames up to `limit` bytes (the server reads the client's
    /// small frames with [`MAX_CLIENT_FRAME`], so a peer cannot make it hold more).
    pub fn with_limit(limit: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            limit,
        }
    }

    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame's body, if one has arrived. A length over the limit is an
    /// error (the stream is unusable after it).
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, ProtocolError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.limit {
            return Err(ProtocolError::FrameTooLong(len, self.limit));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let body = self.buf[4..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(body))
    }

    /// Bytes held that do not yet form a frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

//! The on-disk form of a compiled model: a header that ties it to the exact map bytes it
//! was built from and to its own contents, then the model (postcard). Decoding checks all
//! of it and the model's structure, so a corrupted, truncated or swapped cache file is
//! refused with a reason (and rebuilt by the caller), never used.

use super::CollisionModel;
use thiserror::Error;

const MAGIC: &[u8; 8] = b"EXPELMDL";
const HEADER: usize = 8 + 4 + 32 + 32;

/// Why a cache file was refused.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CacheError {
    /// Not a cache file, or cut short.
    #[error("not an Expel model cache (bad magic or truncated header)")]
    NotCache,
    /// Written by another version of the model format.
    #[error("model format {0}, this build reads {want}", want = CollisionModel::FORMAT_VERSION)]
    Version(u32),
    /// Built from other map bytes.
    #[error("built from another map")]
    OtherMap,
    /// The contents do not match their checksum.
    #[error("contents corrupted (checksum mismatch)")]
    Corrupted,
    /// The contents do not decode.
    #[error("contents do not decode")]
    Decode(#[source] postcard::Error),
    /// The model fails its structural check.
    #[error("{0}")]
    Invalid(#[from] super::ModelError),
}

/// The work of [`CollisionModel::to_cache_bytes`].
pub(super) fn to_cache_bytes(model: &CollisionModel, source: &[u8; 32]) -> Vec<u8> {
    // Serializing plain data into a Vec cannot fail.
    let payload = postcard::to_allocvec(model).unwrap_or_default();
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&CollisionModel::FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(source);
    out.extend_from_slice(blake3::hash(&payload).as_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The work of [`CollisionModel::from_cache_bytes`].
pub(super) fn from_cache_bytes(
    bytes: &[u8],
    source: &[u8; 32],
) -> Result<CollisionModel, CacheError> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(CacheError::NotCache);
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != CollisionModel::FORMAT_VERSION {
        return Err(CacheError::Version(version));
    }
    if &bytes[12..44] != source {
        return Err(CacheError::OtherMap);
    }
    let payload = &bytes[HEADER..];
    if blake3::hash(payload).as_bytes() != &bytes[44..76] {
        return Err(CacheError::Corrupted);
    }
    let model: CollisionModel = postcard::from_bytes(payload).map_err(CacheError::Decode)?;
    model.validate()?;
    Ok(model)
}

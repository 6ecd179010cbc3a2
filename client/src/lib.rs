//! Expel client.

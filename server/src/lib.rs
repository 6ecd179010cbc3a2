//! Expel server.

//! Connecting: one server, the master of a Sentinel group, or a Redis Cluster.

pub(crate) mod cleanup;
mod client;
pub(crate) mod sentinel_url;

pub use client::Client;

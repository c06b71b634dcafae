//! Connecting: one server, the master of a Sentinel group, or a Redis Cluster.

mod client;
pub(crate) mod sentinel_url;

pub use client::Client;

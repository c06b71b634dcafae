//! The test kit of redis-lease: real `redis-server` processes with the module loaded, on free
//! loopback ports, and what tests need to talk to them.
//!
//! * `server`: `Server`, `Options`, connections with a read timeout (`conn`), signals.
//! * `module`: which module `.so` is loaded; a stale one (older than `src/`) is refused.
//! * `raw`: `r!` / `send!` (a command's raw reply), `recv`, `exec_args`, `resp`.
//! * `reply`: decoders of raw replies (`int`, `token`, `err`, `text`, `array`, `pairs`, ...).
//! * `poll`: bounded waiting (`eventually`, `until`) and the local clock (`now_ms`).
//! * `info`: `INFO` fields (`info_field`, `info_int`, `lease_info`).
//! * `state`: a key's holders, tokens and leader, comparable across servers and moments.
//! * `cmd`: the module's commands as typed calls; blocking requests on their own thread.
//! * `replica`, `aof`, `cluster`: replication, AOF files, a real Redis Cluster.
//! * `stats`: percentiles of measured samples.
//! * `fault`: servers with the fault-injection build of the module (`LEASE.FAULT`).
//! * `dump`: DUMP payloads of module values, decoded and crafted (RDB fields, CRC64).
//! * `socket`: a raw RESP2 client on a `TcpStream` (no retry can hide a lost reply).
//! * `sentinel`: sentinels on loopback with a test timing (`Sentinel`, `SentinelTiming`).
//! * `serverlog`: a server log without crashes, assertions or panics, and printable.
//! * `timed`: a blocking request whose reply comes with its arrival time; `crowd`: thousands of
//!   raw connections (parked waiters); `usage`: used memory and command time; `dataset`: two
//!   servers' datasets key by key.
//!
//! Tests usually `use redis_lease_testkit::prelude::*;`.

pub mod aof;
pub mod cluster;
pub mod cmd;
pub mod crowd;
pub mod dataset;
pub mod dump;
pub mod fault;
pub mod info;
pub mod module;
pub mod poll;
pub mod raw;
pub mod replica;
pub mod reply;
pub mod sentinel;
pub mod server;
pub mod serverlog;
pub mod socket;
pub mod state;
pub mod stats;
pub mod timed;
pub mod usage;

/// The redis-rs crate the kit is built on (the macros name it through here).
pub use redis;

pub use module::module_path;
pub use server::{free_port, server_binary, Options, Server};

/// Everything a test usually needs, for a glob import.
pub mod prelude {
    pub use crate::aof::*;
    pub use crate::cmd::*;
    pub use crate::fault::*;
    pub use crate::info::*;
    pub use crate::poll::*;
    pub use crate::raw::*;
    pub use crate::replica::*;
    pub use crate::reply::*;
    pub use crate::server::*;
    pub use crate::serverlog::*;
    pub use crate::socket::{Resp, Sock, REPLY_LIMIT};
    pub use crate::state::*;
    pub use crate::stats::*;
    pub use crate::{r, send};
    pub use redis::{Connection, Value};
}

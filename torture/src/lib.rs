//! The failover torture test of redis-lease (`make torture`; a short run in `cargo test`).
//!
//! On loopback: one master and two replicas with the module, three sentinels
//! (`down-after-milliseconds 1000`). Workers (tokio tasks, each with its own
//! `redis+sentinel://` client) contend for one write lock; inside each critical section they
//! write their fencing token to a resource that refuses lower tokens ([`resource`]). A fault
//! injector ([`faults`]) meanwhile `kill -9`s or `SIGSTOP`s the master right after a grant,
//! or freezes both replicas and kills the master, forcing real Sentinel failovers, and brings
//! the old master back as a replica. [`analysis`] then counts overlapping sections, stale
//! writes, and tokens repeated or going backwards; [`table`] prints the figures.
//!
//! * `group`: the Sentinel group (processes ours, stopped by pid).
//! * `workers`: the critical sections.
//! * `run`: one configuration, end to end.
//! * `cluster`: the cluster torture run (slots moving, failovers, a skewed clock).

pub mod analysis;
pub mod cluster;
pub mod faults;
pub mod group;
pub mod resource;
pub mod run;
pub mod table;
pub mod workers;

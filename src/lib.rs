//! redis-lease: native read-write locks (`RWLOCK.*`), leader election (`LEADER.*`) and
//! counting semaphores (`SEMAPHORE.*`) for Redis, with per-holder leases, fencing tokens and
//! waiting inside the server.
//!
//! The rules live in the pure `redis-lease-core` crate; this crate is the thin shell that
//! parses commands, calls the core, and makes Redis agree. Its layers, each using only the
//! ones below it:
//!
//! 1. pure: `clock`, `config`, `histogram`, `parse`, `text`, `validate`, `wire`, `index`, `registry`,
//!    `value`, `state` (no Redis types);
//! 2. the C API: `ffi` (every raw `RedisModule_*` call);
//! 3. services: `schedule` (the key index and the timer), `waiters` (parked clients),
//!    `ended` (hold times, the lapse log),
//!    `holdback` (quarantine, evicted leases, the lobby), `floor` (token floors in a Cluster),
//!    `orphans`;
//! 4. `commit` (the one commit path: run the core, make Redis agree), `visit`;
//! 5. entry points: `commands`, `apply`, `timer`, `reopen`, `datatype`, `events`, `info`,
//!    `table`;
//! 6. this file registers them.

#![deny(clippy::undocumented_unsafe_blocks)]
// Without the module registration (cut out of unit-test builds), the entry points look unused.
#![cfg_attr(test, allow(dead_code))]

mod clock;
mod config;
mod histogram;
mod index;
mod mainthread;
mod num;
mod parse;
mod registry;
mod slot;
mod state;
mod syntax;
mod text;
mod validate;
mod value;
mod wire;

mod ffi;

mod ended;
mod floor;
mod holdback;
mod orphans;
mod schedule;
mod waiters;

mod commit;
mod reopen;
mod visit;
mod waitgraph;

mod apply;
mod commands;
mod datatype;
mod events;
mod info;
mod table;
mod timer;

#[cfg(not(test))]
mod module {
    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, Context, RedisString, Status};

    use crate::config::*;
    use crate::datatype::{ELECTION_TYPE, RWLOCK_TYPE, SEMAPHORE_TYPE};
    use crate::ffi::ctx::{log_warning, Ctx};
    use crate::ffi::{info, server, timer};
    use crate::{datatype, events, holdback, schedule, table};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        let Some(ctx) = Ctx::from_module(ctx) else {
            return Status::Err;
        };
        if let Some(clock) = server::wall_clock() {
            crate::clock::use_server_clock(clock);
        }
        datatype::init();
        timer::init(&ctx);
        schedule::init(crate::timer::fire);
        info::register(&ctx, crate::info::write);
        let done = table::register(&ctx)
            .and_then(|()| server::init(&ctx, events::handlers()))
            .and_then(|()| crate::floor::init(&ctx));
        if let Err(e) = done {
            log_warning(&format!("lease: {e}"));
            return Status::Err;
        }
        // A server that starts makes no grant for the quarantine (its data may lack grants
        // it made before it stopped); loading, if any, starts it again when it ends.
        holdback::set_master(ctx.is_master());
        if ctx.is_master() {
            holdback::start_quarantine();
        }
        Status::Ok
    }

    redis_module! {
        name: "lease",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [RWLOCK_TYPE, ELECTION_TYPE, SEMAPHORE_TYPE],
        init: init,
        configurations: [
            i64: [
                ["max-ttl", &MAX_TTL, DEFAULT_MAX_TTL, 1, i64::MAX / 4, ConfigurationFlags::DEFAULT, None],
                ["max-waiters", &MAX_WAITERS, DEFAULT_MAX_WAITERS, 1, 100_000_000, ConfigurationFlags::DEFAULT, None],
                ["max-id-length", &MAX_ID_LENGTH, DEFAULT_MAX_ID_LENGTH, 1, ID_LENGTH_CEILING, ConfigurationFlags::DEFAULT, None],
                ["quarantine", &QUARANTINE, 0, 0, i64::MAX / 4, ConfigurationFlags::DEFAULT, Some(Box::new(|_, _, _| holdback::quarantine_set()))],
                ["max-hold", &MAX_HOLD, 0, 0, i64::MAX / 4, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [
                ["log-lapses", &LOG_LAPSES, false, ConfigurationFlags::DEFAULT, None],
            ],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}

//! redis-lease: native read-write locks (`RWLOCK.*`) and leader election (`LEADER.*`) for
//! Redis, with per-holder leases, fencing tokens and waiting inside the server.
//!
//! The rules live in the pure `redis-lease-core` crate; this crate is the thin shell that
//! parses commands, calls the core, and makes Redis agree (replication, AOF, expiry, keyspace
//! events, blocked clients, timers).

// Without the module registration (cut out of unit-test builds), the entry points look unused.
#![cfg_attr(test, allow(dead_code))]

mod apply;
mod blocking;
mod clock;
mod commands;
mod commit;
mod config;
mod docs;
mod events;
mod guard;
mod info;
mod key;
mod parse;
mod replicate;
mod state;
mod types;
mod wakeup;

#[cfg(not(test))]
mod module {
    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, Context, RedisString, Status};

    use crate::config::*;
    use crate::types::{ELECTION_TYPE, RWLOCK_TYPE};
    use crate::{apply, commands, docs, events, info, wakeup};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        wakeup::init(ctx);
        info::init(ctx);
        docs::init(ctx);
        events::init(ctx)
    }

    redis_module! {
        name: "lease",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [RWLOCK_TYPE, ELECTION_TYPE],
        init: init,
        // The optional ACL category ("blocking": these may wait) is set where the server has
        // RedisModule_SetCommandACLCategories (Redis 7.2+, Valkey) and skipped on 7.0.
        commands: [
            ["rwlock.rlock", commands::rlock, "write deny-oom", 1, 1, 1, "", "blocking"],
            ["rwlock.wlock", commands::wlock, "write deny-oom", 1, 1, 1, "", "blocking"],
            ["rwlock.unlock", commands::unlock, "write", 1, 1, 1, ""],
            ["rwlock.renew", commands::renew, "write fast", 1, 1, 1, ""],
            ["rwlock.info", commands::info, "readonly", 1, 1, 1, ""],
            ["leader.campaign", commands::campaign, "write deny-oom", 1, 1, 1, "", "blocking"],
            ["leader.renew", commands::leader_renew, "write fast", 1, 1, 1, ""],
            ["leader.resign", commands::resign, "write fast", 1, 1, 1, ""],
            ["leader.current", commands::current, "readonly fast", 1, 1, 1, ""],
            ["lease.apply", apply::apply, "write", 1, 1, 1, ""],
        ],
        event_handlers: [
            [@GENERIC: events::on_generic],
        ],
        configurations: [
            i64: [
                ["max-ttl", &MAX_TTL, DEFAULT_MAX_TTL, 1, i64::MAX / 4, ConfigurationFlags::DEFAULT, None],
                ["max-waiters", &MAX_WAITERS, DEFAULT_MAX_WAITERS, 1, 100_000_000, ConfigurationFlags::DEFAULT, None],
                ["max-id-length", &MAX_ID_LENGTH, DEFAULT_MAX_ID_LENGTH, 1, 1_048_576, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}

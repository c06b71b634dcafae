//! The contenders, behind one interface: what each can do (`Caps`), its raw commands for the
//! pipelined scenarios (`raw_lock` / `raw_unlock`, where it has fixed ones), and, for the ones
//! driven from Rust, a client that acquires and releases (`Client`). The Python peers run in
//! worker processes (`worker.rs`, `bench/peers/driver.py`) that run the same loop.
//!
//! - `floor`: `SET key owner NX PX ttl` + `DEL key`, the least any Redis lock can cost.
//! - `module`: the redis-lease module's `RWLOCK.*` / `LEADER.*`; waiting is `WAIT ms`, parked in
//!   the server.
//! - `seed`: the seed's client-side design: Lua scripts with EVALSHA; readers share a
//!   `KEY:readers` counter, a writer SETs `KEY` PX; waiting polls (100 ms, doubling to 1 s).
//!   Its semaphore mode is the client-side Lua semaphore built the same way: a sorted set of
//!   holders scored by their lease's end and a hash of their permits, polled alike.
//! - `rslock`: the Rust Redlock crate on one server: SET NX PX, unlock by a compare-and-delete
//!   script; waiting is its retry (3 tries, random 0-200 ms apart), repeated to the deadline.
//! - `redis-py`: redis-py's `Lock` (SET NX PX, polling every 0.1 s).
//! - `python-redis-lock`: SET NX EX; a waiter blocks in BLPOP on a signal list the release
//!   pushes to.
//! - `redis-rw-lock`: a readers-writer lock with writer priority built from python-redis-lock
//!   locks and counters.
//!
//! `Mode::Semaphore` (the module's `SEMAPHORE.*`, the seed's semaphore scripts) is the
//! semaphore scenario's mode; the worker loop and the scenarios' statistics do not depend on
//! the mode. No library peer has a semaphore (the driver has none).
//!
//! `Several` is how a client takes two keys at once for the transfers scenario: the module's
//! `RWLOCK.MLOCK`, or single write locks in sorted key order (module or seed).

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client as RedisClient, Script};

use crate::resp;
use crate::BenchResult;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    Floor,
    Module,
    Seed,
    Rslock,
    RedisPy,
    PythonRedisLock,
    RedisRwLock,
}

/// What a contender can do, for marking what it cannot.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub read_mode: bool,
    /// A counting semaphore with permits of several sizes.
    pub semaphore: bool,
    /// A waiter can give up at a deadline (redis-rw-lock's acquire blocks with no timeout).
    pub bounded_wait: bool,
    /// The lease unit: 1000 where the library takes whole seconds.
    pub ttl_unit_ms: u64,
    pub fencing_tokens: bool,
    /// How a waiter waits.
    pub wait: &'static str,
    pub language: &'static str,
}

impl Contender {
    /// Every contender, in the tables' column order.
    pub const ALL: [Contender; 7] = [
        Contender::Floor,
        Contender::Module,
        Contender::Seed,
        Contender::Rslock,
        Contender::RedisPy,
        Contender::PythonRedisLock,
        Contender::RedisRwLock,
    ];
    /// The locks (every contender but the floor).
    pub const LOCKS: [Contender; 6] = [
        Contender::Module,
        Contender::Seed,
        Contender::Rslock,
        Contender::RedisPy,
        Contender::PythonRedisLock,
        Contender::RedisRwLock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Contender::Floor => "floor",
            Contender::Module => "module",
            Contender::Seed => "seed",
            Contender::Rslock => "rslock",
            Contender::RedisPy => "redis-py",
            Contender::PythonRedisLock => "python-redis-lock",
            Contender::RedisRwLock => "redis-rw-lock",
        }
    }

    pub fn names() -> Vec<&'static str> {
        Contender::ALL.iter().map(|c| c.name()).collect()
    }

    pub fn is_python(self) -> bool {
        matches!(
            self,
            Contender::RedisPy | Contender::PythonRedisLock | Contender::RedisRwLock
        )
    }

    pub fn caps(self) -> Caps {
        let c = Caps {
            read_mode: false,
            semaphore: false,
            bounded_wait: true,
            ttl_unit_ms: 1,
            fencing_tokens: false,
            wait: "",
            language: "Rust",
        };
        match self {
            Contender::Floor => Caps {
                wait: "none (one try)",
                ..c
            },
            Contender::Module => Caps {
                read_mode: true,
                semaphore: true,
                fencing_tokens: true,
                wait: "parked in the server (WAIT ms), FIFO",
                ..c
            },
            Contender::Seed => Caps {
                read_mode: true,
                semaphore: true,
                wait: "polling, 100 ms doubling to 1 s",
                ..c
            },
            Contender::Rslock => Caps {
                wait: "retry: 3 tries 0-200 ms apart (random), repeated",
                ..c
            },
            Contender::RedisPy => Caps {
                wait: "polling every 100 ms",
                language: "Python",
                ..c
            },
            Contender::PythonRedisLock => Caps {
                ttl_unit_ms: 1000,
                wait: "BLPOP on a signal list pushed by the release",
                language: "Python",
                ..c
            },
            Contender::RedisRwLock => Caps {
                read_mode: true,
                bounded_wait: false,
                ttl_unit_ms: 1000,
                wait: "BLPOP (python-redis-lock) on several locks, writer priority",
                language: "Python",
                ..c
            },
        }
    }

    /// Why this contender cannot run `mode`, if it cannot.
    pub fn cannot(self, mode: Mode) -> Option<String> {
        match mode {
            Mode::Read if !self.caps().read_mode => Some("no read mode".into()),
            Mode::Leader if self != Contender::Module => Some("no leader election".into()),
            Mode::Semaphore { .. } if !self.caps().semaphore => Some("no semaphore".into()),
            _ => None,
        }
    }
}

/// Read, write, (module only, pipelined scenario) a leader campaign, or `permits` of a
/// semaphore of `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
    Leader,
    Semaphore { limit: u32, permits: u32 },
}

impl Mode {
    pub fn word(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
            Mode::Leader => "leader",
            Mode::Semaphore { .. } => "semaphore",
        }
    }
}

/// How a client takes several keys at once (scenario 8), each in write mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Several {
    /// One `RWLOCK.MLOCK numkeys key... owner ttl WAIT ms` (the module): all or nothing,
    /// queued on every key under one arrival order; released with one `RWLOCK.MUNLOCK`.
    Mlock,
    /// One write lock per key, taken in sorted key order (the usual client-side way to avoid
    /// a deadlock), each waiting to the same deadline; what was taken is given back when a
    /// later key is not granted in time. Released one by one.
    InOrder,
}

/// The seed design's scripts. A reader takes a hold when the write-lock key does not exist
/// (INCR the shared counter, PEXPIRE it to the ttl); its release DECRs, DELs at zero, else
/// PEXPIREs again. A writer SETs the key PX when neither key exists; its release DELs it.
///
/// The semaphore (the usual client-side one, with permits): `KEY` is a sorted set of holders
/// scored by the end of their lease (server time, ms), `KEY:permits` a hash of their permits.
/// An acquire drops the lapsed holders, sums the permits left and adds itself if its permits
/// fit (no queue: whoever polls when enough are free wins); both keys expire with the last
/// lease. The release removes the holder from both.
#[derive(Clone)]
pub struct Scripts {
    pub rlock: Script,
    pub runlock: Script,
    pub wlock: Script,
    pub sem_acquire: Script,
    pub sem_release: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            rlock: Script::new(
                "if redis.call('EXISTS', KEYS[1]) == 1 then return false end
                 redis.call('INCR', KEYS[2]) redis.call('PEXPIRE', KEYS[2], ARGV[1]) return 1",
            ),
            runlock: Script::new(
                "local n = redis.call('DECR', KEYS[1])
                 if n <= 0 then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
                 return 1",
            ),
            wlock: Script::new(
                "if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return false end
                 redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1",
            ),
            // KEYS: holders, permits; ARGV: owner, limit, ttl ms, permits.
            sem_acquire: Script::new(
                "local t = redis.call('TIME')
                 local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
                 for _, o in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
                   redis.call('HDEL', KEYS[2], o)
                 end
                 redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
                 local used = 0
                 for _, n in ipairs(redis.call('HVALS', KEYS[2])) do used = used + tonumber(n) end
                 local want = tonumber(ARGV[4])
                 if used + want > tonumber(ARGV[2]) then return false end
                 redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
                 redis.call('HSET', KEYS[2], ARGV[1], want)
                 local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
                 redis.call('PEXPIREAT', KEYS[1], last)
                 redis.call('PEXPIREAT', KEYS[2], last)
                 return 1",
            ),
            // KEYS: holders, permits; ARGV: owner.
            sem_release: Script::new(
                "redis.call('HDEL', KEYS[2], ARGV[1])
                 return redis.call('ZREM', KEYS[1], ARGV[1])",
            ),
        }
    }
}

impl Scripts {
    /// Loads the scripts into the server's cache (so a raw EVALSHA never misses).
    pub async fn load(&self, conn: &mut MultiplexedConnection) -> BenchResult<()> {
        for s in [
            &self.rlock,
            &self.runlock,
            &self.wlock,
            &self.sem_acquire,
            &self.sem_release,
        ] {
            let sha: String = s.prepare_invoke().load_async(conn).await?;
            if sha != s.get_hash() {
                return Err(format!("SCRIPT LOAD answered {sha}, not {}", s.get_hash()).into());
            }
        }
        Ok(())
    }
}

/// The seed's readers key for a lock key.
pub fn readers_key(key: &str) -> String {
    format!("{key}:readers")
}

/// The seed semaphore's hash of the holders' permits, for a semaphore key.
pub fn permits_key(key: &str) -> String {
    format!("{key}:permits")
}

/// The raw command of one lock attempt without waiting; `None` for the library peers (their
/// commands are whatever the library sends) and for modes a contender lacks.
pub fn raw_lock(
    c: Contender,
    s: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> Option<Vec<u8>> {
    let ttl = ttl_ms.to_string();
    let args: Vec<&str> = match (c, mode) {
        (Contender::Floor, Mode::Write) => vec!["SET", key, owner, "NX", "PX", &ttl],
        (Contender::Module, Mode::Read) => vec!["RWLOCK.RLOCK", key, owner, &ttl],
        (Contender::Module, Mode::Write) => vec!["RWLOCK.WLOCK", key, owner, &ttl],
        (Contender::Module, Mode::Leader) => vec!["LEADER.CAMPAIGN", key, owner, &ttl],
        (Contender::Seed, Mode::Read) => {
            let rk = readers_key(key);
            return Some(resp::encode_str(&[
                "EVALSHA",
                s.rlock.get_hash(),
                "2",
                key,
                &rk,
                &ttl,
            ]));
        }
        (Contender::Seed, Mode::Write) => {
            let rk = readers_key(key);
            return Some(resp::encode_str(&[
                "EVALSHA",
                s.wlock.get_hash(),
                "2",
                key,
                &rk,
                owner,
                &ttl,
            ]));
        }
        _ => return None,
    };
    Some(resp::encode_str(&args))
}

/// The raw command of one release (see `raw_lock`); its reply is `:1`.
pub fn raw_unlock(
    c: Contender,
    s: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> Option<Vec<u8>> {
    let args: Vec<String> = match (c, mode) {
        (Contender::Floor, Mode::Write) | (Contender::Seed, Mode::Write) => {
            vec!["DEL".into(), key.into()]
        }
        (Contender::Module, Mode::Read | Mode::Write) => {
            vec!["RWLOCK.UNLOCK".into(), key.into(), owner.into()]
        }
        (Contender::Module, Mode::Leader) => vec!["LEADER.RESIGN".into(), key.into(), owner.into()],
        (Contender::Seed, Mode::Read) => vec![
            "EVALSHA".into(),
            s.runlock.get_hash().into(),
            "1".into(),
            readers_key(key),
            ttl_ms.to_string(),
        ],
        _ => return None,
    };
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    Some(resp::encode_str(&a))
}

/// A multiplexed connection. `response_timeout: None` is for connections that block in
/// `WAIT`; every call on them is bounded with `tokio::time::timeout` instead.
pub async fn connect(
    client: &RedisClient,
    response_timeout: Option<Duration>,
) -> BenchResult<MultiplexedConnection> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(response_timeout);
    Ok(client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?)
}

/// The seed's client-side wait: first sleep 100 ms, doubling up to 1 s.
pub const SEED_FIRST_SLEEP: Duration = Duration::from_millis(100);
pub const SEED_MAX_SLEEP: Duration = Duration::from_secs(1);

/// A client of one in-process contender (the floor, the module, the seed, rslock), with a
/// connection of its own (a waiter parked in the server holds its connection).
pub enum Client {
    Raw {
        c: Contender,
        conn: MultiplexedConnection,
        scripts: Scripts,
    },
    Rslock {
        manager: rslock::LockManager,
        held: Option<rslock::Lock>,
    },
}

impl Client {
    pub async fn connect(
        c: Contender,
        client: &RedisClient,
        scripts: &Scripts,
    ) -> BenchResult<Client> {
        Ok(match c {
            Contender::Rslock => {
                let manager = rslock::LockManager::from_clients(vec![client.clone()]);
                Client::Rslock {
                    manager,
                    held: None,
                }
            }
            _ if c.is_python() => {
                return Err(format!("{} runs in a worker process", c.name()).into())
            }
            _ => Client::Raw {
                c,
                conn: connect(client, None).await?,
                scripts: scripts.clone(),
            },
        })
    }

    /// Acquires, waiting until `deadline` at the latest (a deadline now or past: one try).
    pub async fn acquire(
        &mut self,
        mode: Mode,
        key: &str,
        owner: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> BenchResult<bool> {
        match self {
            Client::Rslock { manager, held } => loop {
                match manager
                    .lock(key.as_bytes(), Duration::from_millis(ttl_ms))
                    .await
                {
                    Ok(l) => {
                        *held = Some(l);
                        return Ok(true);
                    }
                    Err(rslock::LockError::Unavailable) if Instant::now() < deadline => {}
                    Err(rslock::LockError::Unavailable) => return Ok(false),
                    Err(e) => return Err(format!("rslock: {e}").into()),
                }
            },
            Client::Raw { c, conn, scripts } => {
                let left = deadline.saturating_duration_since(Instant::now());
                let wait_ms = left.as_millis() as u64;
                let word = match mode {
                    Mode::Read => "RWLOCK.RLOCK",
                    Mode::Write => "RWLOCK.WLOCK",
                    Mode::Leader => "LEADER.CAMPAIGN",
                    Mode::Semaphore { .. } => "SEMAPHORE.ACQUIRE",
                };
                match c {
                    Contender::Module => {
                        let mut cmd = redis::cmd(word);
                        cmd.arg(key).arg(owner);
                        match mode {
                            Mode::Semaphore { limit, permits } => {
                                cmd.arg(limit).arg(ttl_ms).arg("PERMITS").arg(permits)
                            }
                            _ => cmd.arg(ttl_ms),
                        };
                        if wait_ms > 0 {
                            cmd.arg("WAIT").arg(wait_ms);
                        }
                        let bound = left + Duration::from_secs(5);
                        let r: Option<i64> = tokio::time::timeout(bound, cmd.query_async(conn))
                            .await
                            .map_err(|_| {
                                format!("{word} WAIT {wait_ms} gave no answer in {bound:?}")
                            })??;
                        Ok(matches!(r, Some(n) if n >= 1))
                    }
                    Contender::Floor => {
                        let r: Option<String> = redis::cmd("SET")
                            .arg(key)
                            .arg(owner)
                            .arg("NX")
                            .arg("PX")
                            .arg(ttl_ms)
                            .query_async(conn)
                            .await?;
                        Ok(r.is_some())
                    }
                    _ => {
                        let mut sleep = SEED_FIRST_SLEEP;
                        loop {
                            let mut inv = match mode {
                                Mode::Read => scripts.rlock.prepare_invoke(),
                                Mode::Semaphore { .. } => scripts.sem_acquire.prepare_invoke(),
                                _ => scripts.wlock.prepare_invoke(),
                            };
                            match mode {
                                Mode::Read => inv.key(key).key(readers_key(key)).arg(ttl_ms),
                                Mode::Semaphore { limit, permits } => inv
                                    .key(key)
                                    .key(permits_key(key))
                                    .arg(owner)
                                    .arg(limit)
                                    .arg(ttl_ms)
                                    .arg(permits),
                                _ => inv.key(key).key(readers_key(key)).arg(owner).arg(ttl_ms),
                            };
                            let r: Option<i64> = inv.invoke_async(conn).await?;
                            if r == Some(1) {
                                return Ok(true);
                            }
                            let now = Instant::now();
                            if now >= deadline {
                                return Ok(false);
                            }
                            tokio::time::sleep(sleep.min(deadline - now)).await;
                            sleep = (sleep * 2).min(SEED_MAX_SLEEP);
                        }
                    }
                }
            }
        }
    }

    /// Releases the hold taken by the last `acquire`. `Ok(true)` if something was released.
    pub async fn release(
        &mut self,
        mode: Mode,
        key: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> BenchResult<bool> {
        match self {
            Client::Rslock { manager, held } => match held.take() {
                Some(l) => {
                    manager.unlock(&l).await;
                    Ok(true)
                }
                None => Ok(false),
            },
            Client::Raw { c, conn, scripts } => {
                let n: i64 = match (*c, mode) {
                    (Contender::Module, Mode::Leader) => {
                        redis::cmd("LEADER.RESIGN")
                            .arg(key)
                            .arg(owner)
                            .query_async(conn)
                            .await?
                    }
                    (Contender::Module, Mode::Semaphore { .. }) => {
                        redis::cmd("SEMAPHORE.RELEASE")
                            .arg(key)
                            .arg(owner)
                            .query_async(conn)
                            .await?
                    }
                    (Contender::Seed, Mode::Semaphore { .. }) => {
                        scripts
                            .sem_release
                            .key(key)
                            .key(permits_key(key))
                            .arg(owner)
                            .invoke_async(conn)
                            .await?
                    }
                    (Contender::Module, _) => {
                        redis::cmd("RWLOCK.UNLOCK")
                            .arg(key)
                            .arg(owner)
                            .query_async(conn)
                            .await?
                    }
                    (Contender::Seed, Mode::Read) => {
                        scripts
                            .runlock
                            .key(readers_key(key))
                            .arg(ttl_ms)
                            .invoke_async(conn)
                            .await?
                    }
                    _ => redis::cmd("DEL").arg(key).query_async(conn).await?,
                };
                Ok(n >= 1)
            }
        }
    }

    /// Takes every one of `keys` for writing, the way `how` says, waiting until `deadline` at
    /// the latest; `Ok(false)` (nothing held) if not all were granted.
    pub async fn acquire_all(
        &mut self,
        how: Several,
        keys: &[String],
        owner: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> BenchResult<bool> {
        match (how, &mut *self) {
            (
                Several::Mlock,
                Client::Raw {
                    c: Contender::Module,
                    conn,
                    ..
                },
            ) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let wait_ms = left.as_millis() as u64;
                let mut cmd = redis::cmd("RWLOCK.MLOCK");
                cmd.arg(keys.len()).arg(keys).arg(owner).arg(ttl_ms);
                if wait_ms > 0 {
                    cmd.arg("WAIT").arg(wait_ms);
                }
                let bound = left + Duration::from_secs(5);
                let tokens: Option<Vec<i64>> = tokio::time::timeout(bound, cmd.query_async(conn))
                    .await
                    .map_err(|_| {
                        format!("RWLOCK.MLOCK WAIT {wait_ms} gave no answer in {bound:?}")
                    })??;
                Ok(tokens.is_some_and(|t| t.len() == keys.len()))
            }
            (Several::Mlock, _) => Err("only the module has a multi-key lock".into()),
            // rslock keeps one lock per client.
            (Several::InOrder, Client::Rslock { .. }) => Err("rslock: one key per client".into()),
            (Several::InOrder, _) => {
                let mut sorted: Vec<&String> = keys.iter().collect();
                sorted.sort();
                for (i, k) in sorted.iter().enumerate() {
                    if !self
                        .acquire(Mode::Write, k, owner, ttl_ms, deadline)
                        .await?
                    {
                        for taken in sorted[..i].iter().rev() {
                            self.release(Mode::Write, taken, owner, ttl_ms).await?;
                        }
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Gives back what `acquire_all` took. `Ok(true)` if every key was released.
    pub async fn release_all(
        &mut self,
        how: Several,
        keys: &[String],
        owner: &str,
        ttl_ms: u64,
    ) -> BenchResult<bool> {
        match (how, &mut *self) {
            (
                Several::Mlock,
                Client::Raw {
                    c: Contender::Module,
                    conn,
                    ..
                },
            ) => {
                let n: usize = redis::cmd("RWLOCK.MUNLOCK")
                    .arg(keys.len())
                    .arg(keys)
                    .arg(owner)
                    .query_async(conn)
                    .await?;
                Ok(n == keys.len())
            }
            (Several::Mlock, _) => Err("only the module has a multi-key lock".into()),
            (Several::InOrder, _) => {
                let mut all = true;
                for k in keys {
                    all &= self.release(Mode::Write, k, owner, ttl_ms).await?;
                }
                Ok(all)
            }
        }
    }
}

/// A 36-byte owner id (a UUIDv4 in its hyphenated text form, as the client crate uses).
pub fn new_owner() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Holds until `until`, precisely: a thread sleep on the blocking pool that wakes 200 µs
/// early and spins the rest (tokio's timer rounds up to whole milliseconds, which would turn a
/// 2 ms hold into 3 ms).
pub async fn hold_until(until: Instant) {
    let _ = tokio::task::spawn_blocking(move || {
        let early = Duration::from_micros(200);
        let now = Instant::now();
        if until > now + early {
            std::thread::sleep(until - now - early);
        }
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    })
    .await;
}

//! The two implementations under test, behind one small interface:
//!
//! - `Imp::Module`: the redis-lease module's `RWLOCK.*` commands; waiting is `WAIT ms`,
//!   parked inside the server.
//! - `Imp::Baseline`: the client-side design, written from the tracker's description: Lua
//!   scripts run with EVALSHA; readers share a `KEY:readers` counter, a writer SETs `KEY` with
//!   PX; waiting is a client loop (try, sleep 100 ms, double the sleep up to 1 s, until the
//!   deadline).

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, Script};

use crate::resp;
use crate::BenchResult;

/// A reader takes a hold when the write-lock key does not exist: INCR the shared counter and
/// PEXPIRE it to the ttl. KEYS: lock key, readers key. ARGV: ttl.
pub const BASELINE_RLOCK: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
";

/// A reader's release: DECR, DEL at zero, else PEXPIRE again. KEYS: readers key. ARGV: ttl.
pub const BASELINE_RUNLOCK: &str = r"
local n = redis.call('DECR', KEYS[1])
if n <= 0 then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 1
";

/// A writer takes the lock when neither the write-lock key nor the readers key exists.
/// KEYS: lock key, readers key. ARGV: owner, ttl.
pub const BASELINE_WLOCK: &str = r"
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return false end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Which implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Imp {
    Module,
    Baseline,
}

impl Imp {
    pub const BOTH: [Imp; 2] = [Imp::Module, Imp::Baseline];

    pub fn name(self) -> &'static str {
        match self {
            Imp::Module => "module",
            Imp::Baseline => "baseline",
        }
    }
}

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

/// The baseline's scripts (and their SHA1s, for raw EVALSHA).
#[derive(Clone)]
pub struct Scripts {
    pub rlock: Script,
    pub runlock: Script,
    pub wlock: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            rlock: Script::new(BASELINE_RLOCK),
            runlock: Script::new(BASELINE_RUNLOCK),
            wlock: Script::new(BASELINE_WLOCK),
        }
    }
}

impl Scripts {
    /// Loads the scripts into the server's script cache (so EVALSHA never misses).
    pub async fn load(&self, conn: &mut MultiplexedConnection) -> BenchResult<()> {
        for s in [&self.rlock, &self.runlock, &self.wlock] {
            let sha: String = s.prepare_invoke().load_async(conn).await?;
            if sha != s.get_hash() {
                return Err(
                    format!("SCRIPT LOAD answered {sha}, expected {}", s.get_hash()).into(),
                );
            }
        }
        Ok(())
    }
}

/// The baseline's readers key for a lock key.
pub fn readers_key(key: &str) -> String {
    format!("{key}:readers")
}

/// A new multiplexed connection. `response_timeout: None` is for connections that block in
/// `WAIT`; every call on them is bounded with `tokio::time::timeout` instead.
pub async fn connect(
    client: &Client,
    response_timeout: Option<Duration>,
) -> BenchResult<MultiplexedConnection> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(response_timeout);
    Ok(client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?)
}

/// Raw command bytes for one lock attempt without waiting (pipelined scenarios).
pub fn raw_lock(
    imp: Imp,
    scripts: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> Vec<u8> {
    let ttl = ttl_ms.to_string();
    match (imp, mode) {
        (Imp::Module, Mode::Read) => resp::encode_str(&["RWLOCK.RLOCK", key, owner, &ttl]),
        (Imp::Module, Mode::Write) => resp::encode_str(&["RWLOCK.WLOCK", key, owner, &ttl]),
        (Imp::Baseline, Mode::Read) => resp::encode_str(&[
            "EVALSHA",
            scripts.rlock.get_hash(),
            "2",
            key,
            &readers_key(key),
            &ttl,
        ]),
        (Imp::Baseline, Mode::Write) => resp::encode_str(&[
            "EVALSHA",
            scripts.wlock.get_hash(),
            "2",
            key,
            &readers_key(key),
            owner,
            &ttl,
        ]),
    }
}

/// Raw command bytes for one release (pipelined scenarios).
pub fn raw_unlock(
    imp: Imp,
    scripts: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> Vec<u8> {
    let ttl = ttl_ms.to_string();
    match (imp, mode) {
        (Imp::Module, _) => resp::encode_str(&["RWLOCK.UNLOCK", key, owner]),
        (Imp::Baseline, Mode::Read) => resp::encode_str(&[
            "EVALSHA",
            scripts.runlock.get_hash(),
            "1",
            &readers_key(key),
            &ttl,
        ]),
        (Imp::Baseline, Mode::Write) => resp::encode_str(&["DEL", key]),
    }
}

/// One attempt without waiting. `Ok(true)` if granted.
pub async fn try_lock(
    imp: Imp,
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> BenchResult<bool> {
    let r: Option<i64> = match (imp, mode) {
        (Imp::Module, Mode::Read) => {
            redis::cmd("RWLOCK.RLOCK")
                .arg(key)
                .arg(owner)
                .arg(ttl_ms)
                .query_async(conn)
                .await?
        }
        (Imp::Module, Mode::Write) => {
            redis::cmd("RWLOCK.WLOCK")
                .arg(key)
                .arg(owner)
                .arg(ttl_ms)
                .query_async(conn)
                .await?
        }
        (Imp::Baseline, Mode::Read) => {
            scripts
                .rlock
                .key(key)
                .key(readers_key(key))
                .arg(ttl_ms)
                .invoke_async(conn)
                .await?
        }
        (Imp::Baseline, Mode::Write) => {
            scripts
                .wlock
                .key(key)
                .key(readers_key(key))
                .arg(owner)
                .arg(ttl_ms)
                .invoke_async(conn)
                .await?
        }
    };
    Ok(matches!(r, Some(n) if n >= 1))
}

/// The baseline's client-side wait: first sleep 100 ms, doubling up to 1 s.
pub const BASELINE_FIRST_SLEEP: Duration = Duration::from_millis(100);
pub const BASELINE_MAX_SLEEP: Duration = Duration::from_secs(1);

/// Acquires, waiting until `deadline` at the latest. `Ok(true)` if granted.
///
/// The module waits inside the server (`WAIT ms`, the time left to the deadline; the
/// connection must be one of its own, as a blocked request holds it). The baseline polls.
#[allow(clippy::too_many_arguments)]
pub async fn acquire(
    imp: Imp,
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
    deadline: Instant,
) -> BenchResult<bool> {
    match imp {
        Imp::Module => {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait_ms = (left.as_millis() as u64).max(1);
            let name = match mode {
                Mode::Read => "RWLOCK.RLOCK",
                Mode::Write => "RWLOCK.WLOCK",
            };
            let mut c = redis::cmd(name);
            c.arg(key).arg(owner).arg(ttl_ms).arg("WAIT").arg(wait_ms);
            let bound = Duration::from_millis(wait_ms) + Duration::from_secs(5);
            let r: Option<i64> = tokio::time::timeout(bound, c.query_async(conn))
                .await
                .map_err(|_| {
                    format!("{name} ... WAIT {wait_ms} did not answer within {bound:?}")
                })??;
            Ok(matches!(r, Some(n) if n >= 1))
        }
        Imp::Baseline => {
            let mut sleep = BASELINE_FIRST_SLEEP;
            loop {
                if try_lock(imp, conn, scripts, mode, key, owner, ttl_ms).await? {
                    return Ok(true);
                }
                let now = Instant::now();
                if now >= deadline {
                    return Ok(false);
                }
                tokio::time::sleep(sleep.min(deadline - now)).await;
                sleep = (sleep * 2).min(BASELINE_MAX_SLEEP);
            }
        }
    }
}

/// Releases one hold. `Ok(true)` if something was released.
pub async fn release(
    imp: Imp,
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    mode: Mode,
    key: &str,
    owner: &str,
    ttl_ms: u64,
) -> BenchResult<bool> {
    let n: i64 = match (imp, mode) {
        (Imp::Module, _) => {
            redis::cmd("RWLOCK.UNLOCK")
                .arg(key)
                .arg(owner)
                .query_async(conn)
                .await?
        }
        (Imp::Baseline, Mode::Read) => {
            scripts
                .runlock
                .key(readers_key(key))
                .arg(ttl_ms)
                .invoke_async(conn)
                .await?
        }
        (Imp::Baseline, Mode::Write) => redis::cmd("DEL").arg(key).query_async(conn).await?,
    };
    Ok(n >= 1)
}

/// A 36-byte owner id (a UUIDv4 in its hyphenated text form, as the client crate uses).
pub fn new_owner() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Holds until `until`, precisely: a thread sleep on the blocking pool that wakes 200 µs
/// early and spins the rest (tokio's timer rounds up to whole milliseconds, which would turn a
/// 2 ms hold into 3 ms; a plain thread sleep overshoots by 50-100 µs).
pub async fn hold_until(until: Instant) {
    let _ = tokio::task::spawn_blocking(move || {
        let now = Instant::now();
        let early = Duration::from_micros(200);
        if until > now + early {
            std::thread::sleep(until - now - early);
        }
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    })
    .await;
}

//! The workers: threads, each with a cluster client of its own, contending two by two for a
//! lock key; inside each section they append their token to the lock's log key with
//! LEASE.EXEC (a fenced write inside Redis), while the slots move and masters fail over.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rand::Rng;
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::Value;

/// One critical section: from the grant's reply to the last check that the lease was still
/// valid (with `slack` to spare, counted from when the request was sent).
#[derive(Clone, Debug)]
pub struct Section {
    pub lock: usize,
    pub worker: usize,
    pub token: i64,
    pub entered: Instant,
    pub left: Instant,
}

/// What the workers counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub grants: AtomicU64,
    pub writes_ok: AtomicU64,
    pub writes_fenced: AtomicU64,
    /// Requests that got no reply within the client's response timeout.
    pub lost_replies: AtomicU64,
    /// Other errors (TRYAGAIN or CLUSTERDOWN past the client's retries, a node gone).
    pub errors: AtomicU64,
}

pub struct Shared {
    pub sections: Mutex<Vec<Section>>,
    pub counts: Counts,
    pub stop: AtomicBool,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub urls: Vec<String>,
    pub locks: Vec<String>,
    pub ttl: Duration,
    pub slack: Duration,
    pub reply_timeout: Duration,
}

/// The log key of lock `l` (same slot: the lock key is a hash tag).
pub fn log_key(lock: &str) -> String {
    format!("{lock}:log")
}

pub fn connect(plan: &Plan) -> ClusterConnection {
    ClusterClient::builder(plan.urls.clone())
        .response_timeout(plan.reply_timeout)
        .connection_timeout(Duration::from_secs(2))
        .retries(12)
        .min_retry_wait(20)
        .max_retry_wait(500)
        .build()
        .expect("cluster client")
        .get_connection()
        .expect("cluster connection")
}

fn count_error(c: &Counts, e: &redis::RedisError) {
    if e.is_timeout() {
        c.lost_replies.fetch_add(1, Ordering::Relaxed);
    } else {
        c.errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// One worker's loop, until `stop`; `pause` between sections (ms, a range): short for the
/// contended locks, long for a lock left without a holder (so no key) most of the time, whose
/// tokens only the floor carries across a move.
pub fn work(plan: Plan, lock: usize, worker: usize, pause: (u64, u64), shared: Arc<Shared>) {
    let mut conn = connect(&plan);
    let key = &plan.locks[lock];
    let log = log_key(key);
    let owner = format!("w{worker}");
    let ttl_ms = plan.ttl.as_millis() as u64;
    let mut rng = rand::rng();
    while !shared.stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let r: redis::RedisResult<Value> = redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg(&owner)
            .arg(ttl_ms)
            .query(&mut conn);
        let t = match r {
            Ok(Value::Int(t)) => t,
            Ok(_) => {
                sleep(Duration::from_millis(rng.random_range(10..40)));
                continue;
            }
            Err(e) => {
                count_error(&shared.counts, &e);
                sleep(Duration::from_millis(50));
                continue;
            }
        };
        shared.counts.grants.fetch_add(1, Ordering::Relaxed);
        let entered = Instant::now();
        let bound = sent + plan.ttl - plan.slack;
        let mut left = entered;
        for _ in 0..rng.random_range(1..=4) {
            let now = Instant::now();
            if now >= bound {
                break;
            }
            left = now;
            let w: redis::RedisResult<Value> = redis::cmd("LEASE.EXEC")
                .arg(key)
                .arg(t)
                .arg("RPUSH")
                .arg(&log)
                .arg(t)
                .query(&mut conn);
            match w {
                Ok(_) => {
                    shared.counts.writes_ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.code() == Some("FENCED") => {
                    shared.counts.writes_fenced.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    count_error(&shared.counts, &e);
                    break;
                }
            }
            sleep(Duration::from_millis(rng.random_range(5..25)));
        }
        shared.sections.lock().unwrap().push(Section {
            lock,
            worker,
            token: t,
            entered,
            left,
        });
        if let Err(e) = redis::cmd("RWLOCK.UNLOCK")
            .arg(key)
            .arg(&owner)
            .query::<Value>(&mut conn)
        {
            count_error(&shared.counts, &e);
        }
        sleep(Duration::from_millis(rng.random_range(pause.0..pause.1)));
    }
}

/// The tokens in lock `l`'s log, in the order the writes were accepted.
pub fn read_log(conn: &mut ClusterConnection, lock: &str) -> Vec<i64> {
    redis::cmd("LRANGE")
        .arg(log_key(lock))
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap_or_default()
}

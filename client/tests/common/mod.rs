//! Shared helpers: a real redis-server with the module (testkit), and short lease settings.
#![allow(dead_code)]

pub mod pty;
pub mod replica;
pub mod sentinel;

use std::time::{Duration, Instant};

use redis_lease_client::{Client, LeaseTiming, LockOptions, RetryPolicy};
use redis_lease_testkit::{Options, Server};

/// A server with the module and the DEBUG command enabled (for DEBUG SLEEP).
pub fn server() -> Server {
    Server::with(Options::default().arg("enable-debug-command", "yes"))
}

pub async fn connector(s: &Server) -> Client {
    Client::open(&s.url()).await.expect("connect")
}

pub fn opts(ttl_ms: u64) -> LockOptions {
    LockOptions {
        timing: LeaseTiming::new(Duration::from_millis(ttl_ms)).expect("valid ttl"),
        retry: RetryPolicy {
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(200),
            budget: Duration::from_secs(15),
        },
        ..Default::default()
    }
}

/// A plain async connection for test-side commands.
pub async fn raw(s: &Server) -> redis::aio::MultiplexedConnection {
    s.client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// Polls `f` every 20 ms until it is true or `limit` passes; answers whether it became true.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

//! A read-write lock protecting a read-modify-write of a shared counter.
//!
//! Needs a redis-server with the redis-lease module loaded:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-lease-client --example rwlock`

use std::time::Duration;

use redis::AsyncCommands;
use redis_lease_client::{Client, LockMode, Wait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = Client::open(&url).await?;
    let lock = client
        .rwlock("example:counter:lock")
        .with_ttl(Duration::from_secs(5))?;
    let data_client = redis::Client::open(url.as_str())?;

    let mut tasks = Vec::new();
    for worker in 0..4 {
        let lock = lock.clone();
        let mut data = data_client.get_multiplexed_async_connection().await?;
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                // Exclusive: one writer at a time, in arrival order.
                let guard = lock.write().await?;
                let v: i64 = data.get("example:counter").await.unwrap_or(0);
                // The guard's fencing token travels with the write it protects.
                let _: () = data.set("example:counter", v + 1).await?;
                let _: () = data.set("example:counter:fence", guard.token()).await?;
                guard.release().await?;
            }
            println!("worker {worker} done");
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for t in tasks {
        t.await?.map_err(|e| e.to_string())?;
    }

    // Readers share the lock.
    let a = lock.read().await?;
    let b = lock.try_read().await?.expect("readers share");
    let info = lock.info().await?;
    println!("{} readers hold {:?}", info.holders.len(), info.mode);
    a.release().await?;
    b.release().await?;

    // Write, then downgrade to keep reading what was written while other readers join.
    let mut guard = lock.write().await?;
    guard.downgrade().await?;
    let reader = lock
        .try_read()
        .await?
        .expect("readers join after the downgrade");
    println!("after the downgrade: {:?}", lock.info().await?.mode);
    reader.release().await?;
    // And back up: the only reader upgrades at once.
    assert!(guard.upgrade(Wait::No).await?);
    assert_eq!(guard.mode(), LockMode::Write);
    guard.release().await?;

    // A long critical section: the watchdog renews the lease; stop if it is lost.
    let guard = lock.write().await?;
    tokio::select! {
        reason = guard.lost() => eprintln!("lease lost ({reason}): stop working"),
        _ = tokio::time::sleep(Duration::from_secs(12)) => println!("12 s of work under a 5 s lease"),
    }
    guard.release().await?;

    let mut data = data_client.get_multiplexed_async_connection().await?;
    let v: i64 = data.get("example:counter").await?;
    println!("counter = {v}");
    Ok(())
}

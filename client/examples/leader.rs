//! Leader election: run several candidates, watch who leads, hand over on resignation.
//!
//! Needs a redis-server with the redis-lease module loaded:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-lease-client --example leader`

use std::time::Duration;

use redis_lease_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = Client::open(&url).await?;
    let key = "example:scheduler";

    // An observer reports every change of leader (keyspace notifications, no polling).
    let mut observer = client.observe(key, Default::default()).await?;
    let follow = tokio::spawn(async move {
        while let Ok(change) = observer.changed().await {
            match change {
                Some(l) => println!("observer: {} leads (term {})", l.candidate, l.term),
                None => println!("observer: nobody leads"),
            }
        }
    });

    let mut elections = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let election = client
            .elector(key)
            .with_candidate(name)
            .with_ttl(Duration::from_secs(2))?
            .start();
        elections.push(election);
    }

    // Each leader works a little, then resigns; the next candidate takes over at once.
    for _ in 0..3 {
        let i = loop {
            if let Some(i) = elections.iter().position(|e| e.is_leader()) {
                break i;
            }
            let mut rx = elections[0].watch();
            let _ = tokio::time::timeout(Duration::from_millis(100), rx.changed()).await;
        };
        let leader = elections.remove(i);
        println!(
            "{} leads in term {:?}",
            leader.candidate(),
            leader.leadership().term
        );
        tokio::select! {
            _ = leader.lost() => println!("{} lost its lease", leader.candidate()),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        leader.resign().await?;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    follow.abort();
    Ok(())
}

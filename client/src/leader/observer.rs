//! Who leads ([`LeaderInfo`]), and following every change ([`LeaderObserver`]).

use std::time::Duration;

use futures_util::stream::StreamExt;
use redis::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::connection::Client;
use crate::error::{Error, Result};
use crate::reply;
use crate::retry::{Backoff, RetryPolicy};

/// Who leads an election (the reply of `LEADER.CURRENT`).
///
/// ```
/// let l = redis_lease_client::LeaderInfo { candidate: "a".into(), term: 7, ttl: std::time::Duration::from_secs(1) };
/// assert_eq!(l.term, 7);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's candidate id.
    pub candidate: String,
    /// Its term (fencing token of the election).
    pub term: u64,
    /// Lease time it had left when read.
    pub ttl: Duration,
}

impl LeaderInfo {
    pub(super) fn parse(v: Value) -> Result<Option<LeaderInfo>> {
        if v == Value::Nil {
            return Ok(None);
        }
        let bad = || Error::Protocol("LEADER.CURRENT: expected [candidate, term, ttl]".into());
        let items = reply::array(v).ok_or_else(bad)?;
        if items.len() < 3 {
            return Err(bad());
        }
        Ok(Some(LeaderInfo {
            candidate: reply::text(&items[0]).ok_or_else(bad)?,
            term: reply::token(&items[1])?,
            ttl: Duration::from_millis(reply::int(&items[2]).unwrap_or(0).max(0) as u64),
        }))
    }
}

/// Settings of a [`LeaderObserver`].
///
/// ```
/// let o = redis_lease_client::ObserverOptions::default();
/// assert!(o.configure_notifications);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObserverOptions {
    /// Make sure the server publishes the needed keyspace notifications (`K` plus the module
    /// `d`, generic `g` and expiry `x` classes) by adding what is missing to
    /// `notify-keyspace-events` with `CONFIG SET` (default true). Turn it off where `CONFIG` is
    /// not allowed and configure the server yourself.
    pub configure_notifications: bool,
    /// Retry of transient failures (re-subscription after a lost connection retries forever,
    /// with this backoff).
    pub retry: RetryPolicy,
}

impl Default for ObserverOptions {
    fn default() -> Self {
        ObserverOptions {
            configure_notifications: true,
            retry: RetryPolicy::default(),
        }
    }
}

/// Follows who leads an election, without polling.
///
/// It subscribes to the key's keyspace channel (`__keyspace@<db>__:<key>`, on the node that owns
/// the key), then reads `LEADER.CURRENT`; every notification on the key (`leader.elect`,
/// `leader.resign`, `leader.lapse`, `expired`, `del`, ...) triggers a new read. After a lost
/// subscription it subscribes again and re-reads. Changes are reported when the
/// (candidate, term) pair differs from the last one reported; changes that happen faster than
/// a read can be coalesced (the latest state is always reported).
///
/// ```no_run
/// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
/// use redis_lease_client::LeaderObserver;
/// let mut obs = LeaderObserver::start(&client, "scheduler").await?;
/// println!("now: {:?}", obs.current());
/// loop {
///     match obs.changed().await? {
///         Some(l) => println!("{} leads, term {}", l.candidate, l.term),
///         None => println!("nobody leads"),
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderObserver {
    rx: watch::Receiver<Option<LeaderInfo>>,
    task: JoinHandle<()>,
}

impl LeaderObserver {
    /// Starts observing `key` with default options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let obs = redis_lease_client::LeaderObserver::start(&client, "jobs").await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(client: &Client, key: &str) -> Result<LeaderObserver> {
        LeaderObserver::start_with(client, key, ObserverOptions::default()).await
    }

    /// Starts observing `key`.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::{LeaderObserver, ObserverOptions};
    /// let opts = ObserverOptions { configure_notifications: false, ..Default::default() };
    /// let obs = LeaderObserver::start_with(&client, "jobs", opts).await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_with(
        client: &Client,
        key: &str,
        opts: ObserverOptions,
    ) -> Result<LeaderObserver> {
        if opts.configure_notifications {
            ensure_notifications(client, opts.retry).await?;
        }
        let events = client.key_events(key).await?;
        let first = client.current_leader(key).await?;
        let (tx, rx) = watch::channel(first);
        let task = tokio::spawn(observe(client.clone(), key.to_string(), opts, events, tx));
        Ok(LeaderObserver { rx, task })
    }

    /// The leader as last seen.
    ///
    /// ```no_run
    /// # fn f(o: &redis_lease_client::LeaderObserver) { println!("{:?}", o.current()); }
    /// ```
    pub fn current(&self) -> Option<LeaderInfo> {
        self.rx.borrow().clone()
    }

    /// A watch of the leader (it changes when the leader or term changes).
    ///
    /// ```no_run
    /// # fn f(o: &redis_lease_client::LeaderObserver) { let rx = o.watch(); }
    /// ```
    pub fn watch(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.rx.clone()
    }

    /// Waits for the next change of leader (or term) and answers the new state.
    ///
    /// ```no_run
    /// # async fn f(o: &mut redis_lease_client::LeaderObserver) -> redis_lease_client::Result<()> {
    /// let next = o.changed().await?;
    /// # Ok(()) }
    /// ```
    pub async fn changed(&mut self) -> Result<Option<LeaderInfo>> {
        self.rx
            .changed()
            .await
            .map_err(|_| Error::ObserverStopped)?;
        Ok(self.rx.borrow_and_update().clone())
    }
}

impl Drop for LeaderObserver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Adds the notification classes the observer needs to `notify-keyspace-events`.
/// (With retries of transient failures: just after a reconnection the first request may
/// fail, and an observer without the setting hears nothing.)
async fn ensure_notifications(conn: &Client, policy: RetryPolicy) -> Result<()> {
    let get = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .to_owned();
    let v = conn.query_retry(&get, None, policy).await?;
    let current = match v {
        Value::Map(pairs) => pairs.first().and_then(|(_, v)| reply::text(v)),
        Value::Array(items) => items.get(1).and_then(reply::text),
        _ => None,
    }
    .unwrap_or_default();
    let has = |c: char| current.contains(c) || ("g$lshzxetd".contains(c) && current.contains('A'));
    let missing: String = ['K', 'd', 'g', 'x']
        .into_iter()
        .filter(|c| !has(*c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let set = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(format!("{current}{missing}"))
        .to_owned();
    conn.query_retry(&set, None, policy).await?;
    Ok(())
}

async fn observe(
    conn: Client,
    key: String,
    opts: ObserverOptions,
    mut events: futures_util::stream::BoxStream<'static, String>,
    tx: watch::Sender<Option<LeaderInfo>>,
) {
    let publish = |l: Option<LeaderInfo>| {
        tx.send_if_modified(|cur| {
            let same = match (&*cur, &l) {
                (None, None) => true,
                (Some(a), Some(b)) => a.candidate == b.candidate && a.term == b.term,
                _ => false,
            };
            if !same {
                *cur = l;
            }
            !same
        });
    };
    // Sentinel: the master changed, so the subscription must move (a demoted master keeps
    // quiet). Never for one server or a cluster.
    let mut moved = conn.master_changes();
    loop {
        loop {
            tokio::select! {
                event = events.next() => {
                    if event.is_none() {
                        break;
                    }
                    if let Ok(l) = conn.current_leader(&key).await {
                        publish(l);
                    }
                }
                () = master_moved(&mut moved) => break,
            }
        }
        // The subscription is gone: subscribe again, then re-read what was missed.
        let mut backoff = Backoff::new_now(opts.retry);
        loop {
            match conn.key_events(&key).await {
                Ok(s) => {
                    if opts.configure_notifications {
                        // A restarted server, or the new master after a failover, may not
                        // have the setting. Set where the subscription now is: after it.
                        let _ = ensure_notifications(&conn, opts.retry).await;
                    }
                    events = s;
                    break;
                }
                Err(_) => {
                    let d = backoff.next_delay_now(None).unwrap_or(opts.retry.max_delay);
                    tokio::time::sleep(d).await;
                }
            }
        }
        if let Ok(l) = conn.current_leader(&key).await {
            publish(l);
        }
    }
}

/// Resolves when requests moved to another master (never without Sentinel).
async fn master_moved(moved: &mut Option<watch::Receiver<u64>>) {
    match moved {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await
            }
        }
        None => std::future::pending().await,
    }
}

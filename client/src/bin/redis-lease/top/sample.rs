//! What `redis-lease top` shows, read from every server: `INFO lease`, and each lease key's
//! `*.INFO` (found with `SCAN ... TYPE`), plus per-key grants counted from keyspace events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis_lease_client::{Client, Result};

/// The module's three key types, as `TYPE` names them.
const TYPES: [(&str, Kind); 3] = [
    ("lease-rwl", Kind::Lock),
    ("lease-sem", Kind::Semaphore),
    ("lease-ldr", Kind::Election),
];
/// Keys read per server per refresh, at most (a SCAN that finds more stops there).
const MAX_KEYS: usize = 500;
/// The keyspace events that are grants.
const GRANTS: [&str; 4] = [
    "rwlock.read",
    "rwlock.write",
    "leader.elect",
    "semaphore.acquire",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Lock,
    Semaphore,
    Election,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Semaphore => "semaphore",
            Kind::Election => "election",
        }
    }
}

/// One key as top shows it.
#[derive(Clone, Debug)]
pub struct Row {
    pub key: String,
    pub kind: Kind,
    pub holders: usize,
    /// The first holder (a leader), if any.
    pub holder: Option<String>,
    pub waiters: u64,
    pub oldest_wait: Option<Duration>,
    /// Grants per second since the last refresh (`None`: keyspace events are off).
    pub grants_per_s: Option<f64>,
}

/// One refresh of every server.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub servers: usize,
    /// `INFO lease` fields, summed over the servers (the maximum for `quarantine_ms`).
    pub info: HashMap<String, f64>,
    /// The wait histogram, per bucket (not cumulative), summed over the servers.
    pub wait_buckets: Vec<(String, u64)>,
    pub rows: Vec<Row>,
    /// Grants per second of the whole deployment, from `INFO` (None on the first refresh).
    pub grants_per_s: Option<f64>,
    /// Whether keyspace events give per-key grants.
    pub events: bool,
}

impl Sample {
    pub fn figure(&self, name: &str) -> f64 {
        self.info.get(name).copied().unwrap_or(0.0)
    }
}

/// One server: a client for its commands and the grants its keyspace events announced.
struct Node {
    client: Client,
    grants: Arc<Mutex<HashMap<String, u64>>>,
    events: bool,
}

/// Every server of a deployment, read once per refresh.
pub struct Sampler {
    nodes: Vec<Node>,
    last: Option<(Instant, f64, HashMap<String, u64>)>,
}

impl Sampler {
    /// Connects to the server at `url`, or to every master of its Cluster.
    pub async fn connect(url: &str) -> Result<Sampler> {
        let first = Client::open(url).await?;
        let mut urls = vec![url.to_string()];
        let cluster = first.query(redis::cmd("INFO").arg("cluster")).await?;
        let cluster = redis::from_redis_value::<String>(cluster).unwrap_or_default();
        if cluster.contains("cluster_enabled:1") {
            let nodes = first
                .query(&redis::cmd("CLUSTER").arg("NODES").to_owned())
                .await?;
            let nodes = redis::from_redis_value::<String>(nodes).unwrap_or_default();
            urls = masters(&nodes, url);
        }
        let mut out = Vec::new();
        for u in urls {
            let client = Client::open(&u).await?;
            out.push(Node::start(client, &u).await);
        }
        Ok(Sampler {
            nodes: out,
            last: None,
        })
    }

    pub async fn sample(&mut self) -> Result<Sample> {
        let mut s = Sample {
            servers: self.nodes.len(),
            ..Sample::default()
        };
        let mut buckets: Vec<(String, u64)> = Vec::new();
        let mut grants: HashMap<String, u64> = HashMap::new();
        for node in &self.nodes {
            let info = node.client.query(redis::cmd("INFO").arg("lease")).await?;
            let info = redis::from_redis_value::<String>(info).unwrap_or_default();
            add_info(&mut s.info, &mut buckets, &info);
            s.rows.extend(node.rows().await?);
            s.events |= node.events;
            let seen = node.grants.lock().map(|g| g.clone()).unwrap_or_default();
            grants.extend(seen);
        }
        s.wait_buckets = uncumulate(&buckets);
        let total: f64 = [
            "grants_read",
            "grants_write",
            "grants_leader",
            "grants_semaphore",
        ]
        .iter()
        .map(|f| s.figure(f))
        .sum();
        let now = Instant::now();
        if let Some((at, before, before_keys)) = &self.last {
            let secs = now.duration_since(*at).as_secs_f64().max(0.001);
            s.grants_per_s = Some((total - before).max(0.0) / secs);
            for r in &mut s.rows {
                if s.events {
                    let n = grants.get(&r.key).copied().unwrap_or(0);
                    let b = before_keys.get(&r.key).copied().unwrap_or(0);
                    r.grants_per_s = Some(n.saturating_sub(b) as f64 / secs);
                }
            }
        }
        self.last = Some((now, total, grants));
        // Busiest first: the most waiters, then the most grants, then the most holders.
        s.rows.sort_by(|a, b| {
            (b.waiters, b.grants_per_s.unwrap_or(0.0), b.holders)
                .partial_cmp(&(a.waiters, a.grants_per_s.unwrap_or(0.0), a.holders))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.key.cmp(&b.key))
        });
        Ok(s)
    }
}

impl Node {
    async fn start(client: Client, url: &str) -> Node {
        let grants = Arc::new(Mutex::new(HashMap::new()));
        let conf = client
            .query(
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg("notify-keyspace-events"),
            )
            .await
            .ok()
            .and_then(|v| redis::from_redis_value::<Vec<String>>(v).ok())
            .and_then(|v| v.get(1).cloned())
            .unwrap_or_default();
        // Module events on the keyspace channel: `K` and `d` (or `A`, which includes `d`).
        let events = conf.contains('K') && (conf.contains('d') || conf.contains('A'));
        if events {
            if let Ok(c) = redis::Client::open(url) {
                tokio::spawn(count_grants(c, grants.clone()));
            }
        }
        Node {
            client,
            grants,
            events,
        }
    }

    async fn rows(&self) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        for (ty, kind) in TYPES {
            for key in self.scan(ty).await? {
                rows.push(self.row(key, kind).await?);
            }
        }
        Ok(rows)
    }

    async fn scan(&self, ty: &str) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let cmd = redis::cmd("SCAN")
                .arg(cursor)
                .arg("TYPE")
                .arg(ty)
                .arg("COUNT")
                .arg(1000)
                .to_owned();
            let v = self.client.query(&cmd).await?;
            let (next, found): (u64, Vec<String>) = redis::from_redis_value(v).unwrap_or_default();
            keys.extend(found);
            cursor = next;
            if cursor == 0 || keys.len() >= MAX_KEYS {
                keys.truncate(MAX_KEYS);
                return Ok(keys);
            }
        }
    }

    async fn row(&self, key: String, kind: Kind) -> Result<Row> {
        let c = &self.client;
        let (holders, holder, waiters, queue) = match kind {
            Kind::Lock => {
                let i = c.rwlock(&key).info().await?;
                let first = i.holders.first().map(|h| h.owner.clone());
                (i.holders.len(), first, i.waiters, i.queue)
            }
            Kind::Semaphore => {
                let i = c.semaphore(&key, 1).info().await?;
                let first = i.holders.first().map(|h| h.owner.clone());
                (i.holders.len(), first, i.waiters, i.queue)
            }
            Kind::Election => {
                let i = c.election_info(&key).await?;
                let leader = i.leader.map(|l| l.candidate);
                (usize::from(leader.is_some()), leader, i.waiters, i.queue)
            }
        };
        Ok(Row {
            key,
            kind,
            holders,
            holder,
            waiters,
            oldest_wait: queue.iter().map(|w| w.waited).max(),
            grants_per_s: None,
        })
    }
}

/// Counts the grant events of every key until the connection ends.
async fn count_grants(client: redis::Client, grants: Arc<Mutex<HashMap<String, u64>>>) {
    let Ok(mut pubsub) = client.get_async_pubsub().await else {
        return;
    };
    if pubsub.psubscribe("__keyspace@*__:*").await.is_err() {
        return;
    }
    let mut messages = pubsub.on_message();
    while let Some(m) = messages.next().await {
        let event: String = m.get_payload().unwrap_or_default();
        if !GRANTS.contains(&event.as_str()) {
            continue;
        }
        let channel = m.get_channel_name();
        let Some((_, key)) = channel.split_once("__:") else {
            continue;
        };
        if let Ok(mut g) = grants.lock() {
            *g.entry(key.to_string()).or_default() += 1;
        }
    }
}

/// The masters of `CLUSTER NODES`, as URLs like `like` (its scheme and credentials).
fn masters(nodes: &str, like: &str) -> Vec<String> {
    let (scheme, rest) = like.split_once("://").unwrap_or(("redis", like));
    let auth = rest
        .split('/')
        .next()
        .and_then(|host| host.rsplit_once('@'))
        .map(|(a, _)| format!("{a}@"))
        .unwrap_or_default();
    nodes
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let flags = f.get(2)?;
            (flags.contains("master") && !flags.contains("fail")).then_some(())?;
            let addr = f.get(1)?.split('@').next()?;
            Some(format!("{scheme}://{auth}{addr}/"))
        })
        .collect()
}

/// Adds one server's `INFO lease` to the sums; histogram buckets go to `buckets`.
fn add_info(sum: &mut HashMap<String, f64>, buckets: &mut Vec<(String, u64)>, info: &str) {
    for line in info.lines() {
        let Some((name, value)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(name) = name.strip_prefix("lease_") else {
            continue;
        };
        if name == "wait_bucket_ms" {
            for (i, kv) in value.split(',').enumerate() {
                let Some((le, n)) = kv.split_once('=') else {
                    continue;
                };
                let n: u64 = n.parse().unwrap_or(0);
                match buckets.get_mut(i) {
                    Some(b) => b.1 += n,
                    None => buckets.push((le.to_string(), n)),
                }
            }
        } else if let Ok(v) = value.parse::<f64>() {
            let e = sum.entry(name.to_string()).or_default();
            *e = if name == "quarantine_ms" {
                e.max(v)
            } else {
                *e + v
            };
        }
    }
}

/// Per-bucket counts from cumulative ones.
fn uncumulate(b: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut prev = 0;
    b.iter()
        .map(|(le, n)| {
            let own = n.saturating_sub(prev);
            prev = *n;
            (le.clone(), own)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_sums_and_the_histogram_per_bucket() {
        let mut sum = HashMap::new();
        let mut b = Vec::new();
        let info = "# lease\r\nlease_holders:2\r\nlease_quarantine_ms:5\r\nlease_wait_bucket_ms:1=1,10=3,inf=4\r\n";
        add_info(&mut sum, &mut b, info);
        add_info(
            &mut sum,
            &mut b,
            &info.replace("quarantine_ms:5", "quarantine_ms:9"),
        );
        assert_eq!(sum["holders"], 4.0);
        assert_eq!(sum["quarantine_ms"], 9.0);
        let own = uncumulate(&b);
        assert_eq!(own, [("1".into(), 2), ("10".into(), 4), ("inf".into(), 2)]);
    }

    #[test]
    fn cluster_masters_keep_the_url_s_credentials() {
        let nodes = "a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-8000\n\
                     b 127.0.0.1:7001@17001 slave a 0 0 1 connected\n\
                     c 127.0.0.1:7002@17002 master,fail - 0 0 2 connected\n\
                     d 127.0.0.1:7003@17003 master - 0 0 3 connected 8001-16383\n";
        assert_eq!(
            masters(nodes, "redis://u:p@127.0.0.1:7000/"),
            ["redis://u:p@127.0.0.1:7000/", "redis://u:p@127.0.0.1:7003/"]
        );
    }
}

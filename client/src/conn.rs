//! The connection abstraction: one server (through a `ConnectionManager`) or a Redis Cluster.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    RedisError, RedisResult, Value,
};

use crate::{Error, Result};

/// How many idle dedicated connections (for blocking `WAIT` requests) are kept for reuse.
const MAX_IDLE_DEDICATED: usize = 8;

/// A handle on the redis deployment that holds the locks and elections: one server or a Redis
/// Cluster. Cheap to clone (clones share their connections).
///
/// Short requests (renewals, releases, `RWLOCK.INFO`, `LEADER.CURRENT`) go through one shared,
/// multiplexed, self-reconnecting connection (a [`ConnectionManager`] for one server, a
/// [`ClusterConnection`] for a cluster). Requests that wait inside the server (`WAIT ms`) each
/// get a dedicated connection from a small pool, so a parked request never holds up other
/// traffic, and their response timeout is the wait plus [`Connector::command_timeout`].
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use redis_lease_client::Connector;
///
/// let single = Connector::open("redis://127.0.0.1:6379/").await?;
/// let cluster = Connector::cluster(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connector {
    inner: Arc<Inner>,
    command_timeout: Duration,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.inner.backend {
            Backend::Single { .. } => "single",
            Backend::Cluster { .. } => "cluster",
        };
        f.debug_struct("Connector")
            .field("kind", &kind)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

struct Inner {
    backend: Backend,
    idle: Mutex<Vec<Dedicated>>,
}

// One per `Connector`, behind an `Arc`: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Single {
        client: Client,
        shared: ConnectionManager,
    },
    Cluster {
        client: ClusterClient,
        shared: ClusterConnection,
        /// Credentials and settings for direct connections to one node (keyspace events).
        template: Box<ConnectionInfo>,
    },
}

enum Dedicated {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// TCP settings for lock traffic: no Nagle delay, and keepalive probes so that a request parked
/// without a time limit (`WAIT 0`) notices a peer that vanished without closing the connection.
fn tuned(info: ConnectionInfo) -> ConnectionInfo {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    let tcp = info
        .tcp_settings()
        .clone()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    info.set_tcp_settings(tcp)
}

fn timeout_error(what: &'static str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what).into()
}

impl Connector {
    /// The default for [`Connector::command_timeout`]: 2 seconds.
    ///
    /// ```
    /// assert_eq!(redis_lease_client::Connector::DEFAULT_COMMAND_TIMEOUT.as_secs(), 2);
    /// ```
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

    /// Connects to one server given by a URL (`redis://[user:pass@]host:port/db`), with
    /// `TCP_NODELAY` and TCP keepalive probes (10 s idle, then every 5 s, 3 tries) on its
    /// connections. ([`Connector::from_client`] keeps the client's own TCP settings.)
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let conn = redis_lease_client::Connector::open("redis://127.0.0.1:6379/0").await?;
    /// # Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<Connector> {
        Connector::from_client(Client::open(tuned(url.into_connection_info()?))?).await
    }

    /// Connects to one server through a [`ConnectionManager`] made from `client` (it reconnects
    /// on its own after a connection loss). Fails if the server cannot be reached now.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = redis_lease_client::Connector::from_client(client).await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_client(client: Client) -> Result<Connector> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let shared = ConnectionManager::new_with_config(client.clone(), config).await?;
        Ok(Connector::from_manager(client, shared))
    }

    /// Uses an existing [`ConnectionManager`] for short requests; `client` (the one the manager
    /// was made from) opens the dedicated connections for waiting requests and keyspace events.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = client.get_connection_manager().await?;
    /// let conn = redis_lease_client::Connector::from_manager(client, manager);
    /// # Ok(()) }
    /// ```
    pub fn from_manager(client: Client, manager: ConnectionManager) -> Connector {
        Connector {
            inner: Arc::new(Inner {
                backend: Backend::Single {
                    client,
                    shared: manager,
                },
                idle: Mutex::new(Vec::new()),
            }),
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
        }
    }

    /// Connects to a Redis Cluster given some of its nodes. Every command is routed by its key
    /// (the module's commands have the key at position 1). The first node's settings
    /// (user, password) are also used for the direct connection that follows keyspace events
    /// on the node owning a key.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let conn = redis_lease_client::Connector::cluster([
    ///     "redis://127.0.0.1:7000/",
    ///     "redis://127.0.0.1:7001/",
    ///     "redis://127.0.0.1:7002/",
    /// ]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Connector> {
        let infos = nodes
            .into_iter()
            .map(|n| n.into_connection_info().map(tuned))
            .collect::<RedisResult<Vec<_>>>()?;
        let template = infos
            .first()
            .cloned()
            .ok_or_else(|| Error::InvalidArgument("no cluster node given".into()))?;
        let client = ClusterClient::builder(infos).build()?;
        let shared = client.get_async_connection().await?;
        Ok(Connector {
            inner: Arc::new(Inner {
                backend: Backend::Cluster {
                    client,
                    shared,
                    template: Box::new(template),
                },
                idle: Mutex::new(Vec::new()),
            }),
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
        })
    }

    /// The time limit of one short request (and the margin added to a waiting request's wait).
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let conn = redis_lease_client::Connector::open("redis://127.0.0.1/").await?;
    /// assert_eq!(conn.command_timeout(), redis_lease_client::Connector::DEFAULT_COMMAND_TIMEOUT);
    /// # Ok(()) }
    /// ```
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// Sets [`Connector::command_timeout`] (on this handle and its later clones).
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// use std::time::Duration;
    /// let conn = redis_lease_client::Connector::open("redis://127.0.0.1/").await?
    ///     .with_command_timeout(Duration::from_millis(500));
    /// # Ok(()) }
    /// ```
    pub fn with_command_timeout(mut self, timeout: Duration) -> Connector {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Whether this is a Redis Cluster connection.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let conn = redis_lease_client::Connector::open("redis://127.0.0.1/").await?;
    /// assert!(!conn.is_cluster());
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.backend, Backend::Cluster { .. })
    }

    /// Runs one command of arbitrary kind on the shared connection, with
    /// [`Connector::command_timeout`], without retries. Server error replies are errors.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let conn = redis_lease_client::Connector::open("redis://127.0.0.1/").await?;
    /// let v = conn.query(&redis::cmd("LEADER.CURRENT").arg("jobs")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn query(&self, cmd: &Cmd) -> Result<Value> {
        Ok(self.query_within(cmd, self.command_timeout).await?)
    }

    /// One short request on the shared connection, limited to `limit`.
    pub(crate) async fn query_within(&self, cmd: &Cmd, limit: Duration) -> RedisResult<Value> {
        let fut = async {
            match &self.inner.backend {
                Backend::Single { shared, .. } => {
                    let mut c = shared.clone();
                    c.send_packed_command(cmd).await
                }
                Backend::Cluster { shared, .. } => {
                    let mut c = shared.clone();
                    cmd.query_async::<Value>(&mut c).await
                }
            }
        };
        match tokio::time::timeout(limit, fut).await {
            Ok(r) => r.and_then(Value::extract_error),
            Err(_) => Err(timeout_error("no reply in time")),
        }
    }

    /// A request that may wait inside the server, on a connection of its own. `limit`: how long
    /// to wait for the reply (`None`: no limit).
    pub(crate) async fn query_dedicated(
        &self,
        cmd: &Cmd,
        limit: Option<Duration>,
    ) -> RedisResult<Value> {
        let popped = self.inner.idle.lock().unwrap().pop();
        let mut conn = match popped {
            Some(c) => c,
            None => {
                let connect = self.connect_dedicated();
                match tokio::time::timeout(self.command_timeout, connect).await {
                    Ok(c) => c?,
                    Err(_) => {
                        // Nothing was sent yet: report it like a refused connection.
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionRefused,
                            "connect timed out",
                        )
                        .into());
                    }
                }
            }
        };
        let fut = async {
            match &mut conn {
                Dedicated::Single(c) => c.send_packed_command(cmd).await,
                Dedicated::Cluster(c) => cmd.query_async::<Value>(c).await,
            }
        };
        let result = match limit {
            Some(l) => match tokio::time::timeout(l, fut).await {
                Ok(r) => r,
                Err(_) => Err(timeout_error("no reply in time")),
            },
            None => fut.await,
        };
        // Only a connection that answered (with a value or an error reply) is reused; one that
        // timed out may still have the request parked in the server, so it is closed.
        let reusable = match &result {
            Ok(_) => true,
            Err(e) => !e.is_io_error() && !e.is_unrecoverable_error(),
        };
        if reusable {
            let mut idle = self.inner.idle.lock().unwrap();
            if idle.len() < MAX_IDLE_DEDICATED {
                idle.push(conn);
            }
        }
        result.and_then(Value::extract_error)
    }

    async fn connect_dedicated(&self) -> RedisResult<Dedicated> {
        match &self.inner.backend {
            Backend::Single { client, .. } => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.command_timeout))
                    .set_response_timeout(None);
                let c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Dedicated::Single(c))
            }
            Backend::Cluster { client, .. } => {
                // The crate's own per-request limit (the wait plus a margin) applies; the
                // connection's limit is set far out of the way.
                let config = ClusterConfig::new()
                    .set_connection_timeout(self.command_timeout)
                    .set_response_timeout(Duration::from_secs(400 * 86400));
                let c = client.get_async_connection_with_config(config).await?;
                Ok(Dedicated::Cluster(c))
            }
        }
    }

    /// Subscribes to the keyspace notifications of `key` (on the node that owns it) and returns
    /// a stream that yields the event name of each notification. The stream ends when the
    /// subscription connection is lost.
    pub(crate) async fn key_events(&self, key: &str) -> Result<BoxStream<'static, String>> {
        let (client, db) = match &self.inner.backend {
            Backend::Single { client, .. } => (
                client.clone(),
                client.get_connection_info().redis_settings().db(),
            ),
            Backend::Cluster { template, .. } => {
                let (host, port) = self.node_of(key).await?;
                let info = (**template)
                    .clone()
                    .set_addr(ConnectionAddr::Tcp(host, port))
                    .set_redis_settings(template.redis_settings().clone().set_db(0));
                (Client::open(info)?, 0)
            }
        };
        let channel = format!("__keyspace@{db}__:{key}");
        let connect = async {
            let mut ps = client.get_async_pubsub().await?;
            ps.subscribe(&channel).await?;
            RedisResult::Ok(ps)
        };
        let ps = match tokio::time::timeout(self.command_timeout, connect).await {
            Ok(r) => r?,
            Err(_) => return Err(Error::Redis(timeout_error("subscribe timed out"))),
        };
        Ok(ps
            .into_on_message()
            .map(|m| m.get_payload::<String>().unwrap_or_default())
            .boxed())
    }

    /// The address of the master owning `key`'s slot (cluster only).
    async fn node_of(&self, key: &str) -> Result<(String, u16)> {
        let bad = |what: &str| Error::Protocol(format!("CLUSTER reply: {what}"));
        let slot = crate::reply::int(
            &self
                .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
                .await?,
        )
        .ok_or_else(|| bad("KEYSLOT"))?;
        let slots = self.query(redis::cmd("CLUSTER").arg("SLOTS")).await?;
        for range in crate::reply::array(slots).ok_or_else(|| bad("SLOTS"))? {
            let items = crate::reply::array(range).ok_or_else(|| bad("SLOTS range"))?;
            if items.len() < 3 {
                continue;
            }
            let lo = crate::reply::int(&items[0]).ok_or_else(|| bad("SLOTS start"))?;
            let hi = crate::reply::int(&items[1]).ok_or_else(|| bad("SLOTS end"))?;
            if (lo..=hi).contains(&slot) {
                let node =
                    crate::reply::array(items[2].clone()).ok_or_else(|| bad("SLOTS node"))?;
                if node.len() >= 2 {
                    let host = crate::reply::text(&node[0]).ok_or_else(|| bad("SLOTS host"))?;
                    let port = crate::reply::int(&node[1]).ok_or_else(|| bad("SLOTS port"))?;
                    return Ok((host, port as u16));
                }
            }
        }
        Err(Error::Protocol(format!("no node serves slot {slot}")))
    }
}

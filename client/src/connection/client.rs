//! The async entry point: one server, a master found through Redis Sentinel, or a Redis
//! Cluster, and the connections the locks and elections use.

use std::sync::Weak;
use std::sync::{Arc, Mutex, RwLock as StdRwLock};
use std::time::{Duration, Instant};

use futures_util::stream::{BoxStream, StreamExt};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo,
    Pipeline, RedisConnectionInfo, RedisError, RedisResult, ServerErrorKind, Value,
};
use tokio::sync::watch;

use crate::connection::cleanup::Cleanups;
use crate::connection::sentinel_url;
use crate::error::{Error, InvalidArgument, Result};
use crate::lease::LeaseTiming;
use crate::reply;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

/// How many idle dedicated connections (for blocking `WAIT` requests) are kept for reuse.
const MAX_IDLE_DEDICATED: usize = 8;

/// The least time a renewal gets before the lease's bound (a loaded machine's scheduling
/// delays alone can take a few milliseconds).
pub(crate) const MIN_RENEW_WINDOW: Duration = Duration::from_millis(10);

/// How soon after one lookup of the master another may ask the sentinels again.
const SENTINEL_LOOKUP_GAP: Duration = Duration::from_millis(50);

/// A handle on the redis deployment that holds the locks and elections: one server, the
/// master of a Sentinel-managed group, or a Redis Cluster. Cheap to clone (clones share their
/// connections). [`blocking::Client`](crate::blocking::Client) is the same for programs
/// without an async runtime.
///
/// Short requests (renewals, releases, `RWLOCK.INFO`, `LEADER.CURRENT`) go through one shared,
/// multiplexed, self-reconnecting connection (a [`ConnectionManager`] for one server, a
/// [`ClusterConnection`] for a cluster). Requests that wait inside the server (`WAIT ms`), and
/// grants and renewals that wait for replica acknowledgements (`WAIT numreplicas`), each get a
/// dedicated connection from a small pool, so a parked request never holds up other traffic;
/// their response timeout is the wait plus [`Client::command_timeout`].
///
/// **Sentinel.** With a `redis+sentinel://` URL the client asks the sentinels for the master,
/// and asks again whenever a request fails in a way a failover explains (a lost connection,
/// `READONLY`, `MASTERDOWN`, too few replica acknowledgements). Guards and elections carry on
/// through a failover: their renewals are retried until the lease's validity bound, and reach
/// the new master as soon as the sentinels name it.
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use redis_lease_client::Client;
///
/// let single = Client::open("redis://127.0.0.1:6379/").await?;
/// let sentinel = Client::open("redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster").await?;
/// let cluster = Client::cluster(["redis://127.0.0.1:7000/", "redis://127.0.0.1:7001/"]).await?;
/// let lock = single.rwlock("orders");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    command_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.inner.backend {
            Backend::Single(_) => "single",
            Backend::Sentinel(_) => "sentinel",
            Backend::Cluster { .. } => "cluster",
        };
        f.debug_struct("Client")
            .field("kind", &kind)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

struct Inner {
    backend: Backend,
    /// Idle dedicated connections, with the generation of the master they lead to.
    idle: Mutex<Vec<(u64, Dedicated)>>,
    /// Releases and resignations running in the background.
    cleanups: Arc<Cleanups>,
    /// The round trip of a `PING` measured when the client connected, in ns (0: unknown).
    round_trip_ns: std::sync::atomic::AtomicU64,
}

// One per `Client`, behind an `Arc`: the size difference does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Single(Arc<Master>),
    Sentinel(Box<SentinelGroup>),
    Cluster {
        client: ClusterClient,
        shared: ClusterConnection,
        /// Credentials and settings for direct connections to one node (keyspace events).
        template: Box<ConnectionInfo>,
    },
}

/// One master: a client for new connections, the shared connection, and which master it is
/// (a Sentinel group counts up at each change).
struct Master {
    client: redis::Client,
    shared: ConnectionManager,
    generation: u64,
}

/// A master found through Sentinel, and how to find the next one.
struct SentinelGroup {
    /// The sentinels, and when the master was last looked up (one lookup at a time).
    lookup: tokio::sync::Mutex<(Sentinel, Option<Instant>)>,
    service: String,
    node: SentinelNodeConnectionInfo,
    current: StdRwLock<Arc<Master>>,
    /// The generation of the current master, for those who must follow it (a subscription).
    changes: watch::Sender<u64>,
    /// The task that follows the sentinels' `+switch-master` announcements.
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        if let Some(task) = self
            .follower
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

impl SentinelGroup {
    fn current(&self) -> Arc<Master> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

enum Dedicated {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// What to send on a dedicated connection.
enum Request<'a> {
    Cmd(&'a Cmd),
    Pipe(&'a Pipeline, usize),
}

fn keepalive_tcp(tcp: TcpSettings) -> TcpSettings {
    use redis::io::tcp::socket2::TcpKeepalive;
    let keepalive = TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    tcp.set_nodelay(true).set_keepalive(keepalive)
}

/// TCP settings for lock traffic: no Nagle delay, and keepalive probes so that a request parked
/// without a time limit (`WAIT 0`) notices a peer that vanished without closing the connection.
fn tuned(info: ConnectionInfo) -> ConnectionInfo {
    let tcp = keepalive_tcp(info.tcp_settings().clone());
    info.set_tcp_settings(tcp)
}

fn timeout_error(what: &'static str) -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what).into()
}

fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(None)
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

/// Whether a failure may mean that the master changed (a Sentinel failover).
fn suggests_failover(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_unrecoverable_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
        || matches!(e.code(), Some("UNBLOCKED" | "READONLY" | "MASTERDOWN"))
}

/// `e` with `addr` in its text if it is an I/O error that does not name it yet.
fn located(e: RedisError, addr: &str) -> RedisError {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let io = std::error::Error::source(&e).and_then(|s| {
        s.downcast_ref::<std::io::Error>().or_else(|| {
            s.downcast_ref::<Shared>()
                .and_then(|a| a.downcast_ref::<std::io::Error>())
        })
    });
    match io {
        Some(io) if !io.to_string().contains(addr) => {
            std::io::Error::new(io.kind(), format!("{addr}: {io}")).into()
        }
        _ => e,
    }
}

impl Client {
    /// The default for [`Client::command_timeout`]: 2 seconds.
    ///
    /// ```
    /// assert_eq!(redis_lease_client::Client::DEFAULT_COMMAND_TIMEOUT.as_secs(), 2);
    /// ```
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

    /// Connects given a URL:
    /// * `redis://[user:pass@]host:port/db`: one server;
    /// * `redis+sentinel://[user:pass@]host:port[,host:port...]/service[/db][?sentinel_username=u&sentinel_password=p]`:
    ///   the master of `service`, found through the listed sentinels (port 26379 if none is
    ///   given); user, password and db are the data nodes', the query parameters the
    ///   sentinels'.
    ///
    /// Connections get `TCP_NODELAY` and TCP keepalive probes (10 s idle, then every 5 s,
    /// 3 tries). ([`Client::from_redis`] keeps the client's own TCP settings.)
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::Client::open("redis://127.0.0.1:6379/0").await?;
    /// # Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<Client> {
        if sentinel_url::is_sentinel(url) {
            let u = sentinel_url::parse(url)?;
            let mut sentinel_settings = RedisConnectionInfo::default();
            if let Some(user) = &u.sentinel_username {
                sentinel_settings = sentinel_settings.set_username(user);
            }
            if let Some(pass) = &u.sentinel_password {
                sentinel_settings = sentinel_settings.set_password(pass);
            }
            let sentinels = u
                .sentinels
                .iter()
                .map(|(host, port)| {
                    ConnectionAddr::Tcp(host.clone(), *port)
                        .into_connection_info()
                        .map(|i| tuned(i.set_redis_settings(sentinel_settings.clone())))
                })
                .collect::<RedisResult<Vec<_>>>()?;
            let mut data = RedisConnectionInfo::default().set_db(u.db);
            if let Some(user) = &u.username {
                data = data.set_username(user);
            }
            if let Some(pass) = &u.password {
                data = data.set_password(pass);
            }
            let node = SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(data)
                .set_tcp_settings(keepalive_tcp(TcpSettings::default()));
            return Client::sentinel(sentinels, &u.service, node).await;
        }
        Client::from_redis(redis::Client::open(tuned(url.into_connection_info()?))?).await
    }

    /// Connects to one server through a [`ConnectionManager`] made from `client` (it reconnects
    /// on its own after a connection loss). Fails if the server cannot be reached now.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let client = redis_lease_client::Client::from_redis(client).await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_redis(client: redis::Client) -> Result<Client> {
        let addr = client.get_connection_info().addr().to_string();
        let shared = ConnectionManager::new_with_config(client.clone(), manager_config())
            .await
            .map_err(|e| located(e, &addr))?;
        let c = Client::from_manager(client, shared);
        c.measure_round_trip().await;
        Ok(c)
    }

    /// Uses an existing [`ConnectionManager`] for short requests; `client` (the one the manager
    /// was made from) opens the dedicated connections for waiting requests and keyspace events.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let manager = client.get_connection_manager().await?;
    /// let client = redis_lease_client::Client::from_manager(client, manager);
    /// # Ok(()) }
    /// ```
    pub fn from_manager(client: redis::Client, manager: ConnectionManager) -> Client {
        Client::with_backend(Backend::Single(Arc::new(Master {
            client,
            shared: manager,
            generation: 0,
        })))
    }

    /// Connects to the master of `service` as the `sentinels` report it (and to each later
    /// master after a failover). `node` holds the data nodes' credentials, db and TCP settings.
    /// Fails if no sentinel names a reachable master now.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// use redis::sentinel::SentinelNodeConnectionInfo;
    /// let client = redis_lease_client::Client::sentinel(
    ///     ["redis://127.0.0.1:26379/", "redis://127.0.0.1:26380/"],
    ///     "mymaster",
    ///     SentinelNodeConnectionInfo::default(),
    /// ).await?;
    /// # Ok(()) }
    /// ```
    pub async fn sentinel<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        service: &str,
        node: SentinelNodeConnectionInfo,
    ) -> Result<Client> {
        let infos = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<RedisResult<Vec<_>>>()?;
        if infos.is_empty() {
            return Err(InvalidArgument::NoNodes.into());
        }
        let mut sentinel = Sentinel::build(infos.clone())?;
        let client = tokio::time::timeout(
            Self::DEFAULT_COMMAND_TIMEOUT * 2,
            sentinel.async_master_for(service, Some(&node)),
        )
        .await
        .map_err(|_| Error::Redis(timeout_error("no sentinel named a master in time")))??;
        let shared = ConnectionManager::new_with_config(client.clone(), manager_config()).await?;
        let group = SentinelGroup {
            lookup: tokio::sync::Mutex::new((sentinel, Some(Instant::now()))),
            service: service.to_string(),
            node,
            current: StdRwLock::new(Arc::new(Master {
                client,
                shared,
                generation: 0,
            })),
            changes: watch::channel(0).0,
            follower: Mutex::new(None),
        };
        let client = Client::with_backend(Backend::Sentinel(Box::new(group)));
        let follower = tokio::spawn(follow_switches(
            Arc::downgrade(&client.inner),
            infos,
            service.to_string(),
            client.command_timeout,
        ));
        if let Backend::Sentinel(g) = &client.inner.backend {
            *g.follower.lock().unwrap_or_else(|e| e.into_inner()) = Some(follower);
        }
        client.measure_round_trip().await;
        Ok(client)
    }

    /// Connects to a Redis Cluster given some of its nodes. Every command is routed by its key
    /// (the module's commands have the key at position 1). The first node's settings
    /// (user, password) are also used for the direct connection that follows keyspace events
    /// on the node owning a key.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::Client::cluster([
    ///     "redis://127.0.0.1:7000/",
    ///     "redis://127.0.0.1:7001/",
    ///     "redis://127.0.0.1:7002/",
    /// ]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Client> {
        let infos = nodes
            .into_iter()
            .map(|n| n.into_connection_info().map(tuned))
            .collect::<RedisResult<Vec<_>>>()?;
        let template = infos.first().cloned().ok_or(InvalidArgument::NoNodes)?;
        let client = ClusterClient::builder(infos).build()?;
        let shared = client.get_async_connection().await?;
        let c = Client::with_backend(Backend::Cluster {
            client,
            shared,
            template: Box::new(template),
        });
        c.measure_round_trip().await;
        Ok(c)
    }

    /// Times a `PING` on the shared connection: the fastest of three, the connection's own
    /// round trip (a slower one was the machine's scheduling, not the connection).
    async fn measure_round_trip(&self) {
        let mut fastest = Duration::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            if self
                .query_within(&redis::cmd("PING"), self.command_timeout)
                .await
                .is_err()
            {
                return;
            }
            fastest = fastest.min(t.elapsed());
        }
        let ns = u64::try_from(fastest.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .round_trip_ns
            .store(ns.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// The round trip of a request to the server, as measured when the client connected
    /// (the fastest of three `PING`s); `None` if it was not measured ([`Client::from_manager`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// println!("{:?}", client.round_trip());
    /// # }
    /// ```
    pub fn round_trip(&self) -> Option<Duration> {
        match self
            .inner
            .round_trip_ns
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Refuses a lease timing whose renewals could not keep up on this connection: a
    /// renewal, sent a renewal period after the last one, must be answered before the
    /// lease's bound, so that window must hold [`MIN_RENEW_WINDOW`] and four round trips.
    pub(crate) fn check_timing(&self, timing: &LeaseTiming) -> Result<()> {
        let window = timing
            .ttl()
            .saturating_sub(timing.margin())
            .saturating_sub(timing.renew_every());
        let rtt = self.round_trip().unwrap_or(Duration::ZERO);
        let need = MIN_RENEW_WINDOW.max(rtt * 4);
        if window < need {
            return Err(InvalidArgument::TtlTooShort {
                ttl: timing.ttl(),
                window,
                need,
                round_trip: rtt,
            }
            .into());
        }
        Ok(())
    }

    fn with_backend(backend: Backend) -> Client {
        Client {
            inner: Arc::new(Inner {
                backend,
                idle: Mutex::new(Vec::new()),
                cleanups: Cleanups::new(),
                round_trip_ns: std::sync::atomic::AtomicU64::new(0),
            }),
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
        }
    }

    /// Runs a clean-up (a release, a resignation) in the background: on the current runtime,
    /// or outside any on the one this client was made on. Answers false if there is none.
    pub(crate) fn spawn_cleanup(
        &self,
        f: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> bool {
        self.inner.cleanups.spawn(f)
    }

    /// Runs a watcher in the background (not counted by [`Client::settle`]).
    pub(crate) fn spawn_task(
        &self,
        f: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> bool {
        self.inner.cleanups.spawn_task(f)
    }

    /// Waits until the clean-ups this client runs in the background have ended, at most
    /// `within`; answers whether they all did. They are the releases of dropped guards, the
    /// resignations of dropped elections, and the releases of acquisitions cancelled while
    /// their outcome was unknown (a `select!` or timeout that dropped `lock.write()` after the
    /// request was sent). A program about to exit right after such a drop calls it, so that
    /// the releases are sent before the runtime stops (else those holds lapse after their ttl).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// use std::time::Duration;
    /// let lock = client.rwlock("jobs");
    /// tokio::select! {
    ///     _ = lock.write() => {}
    ///     _ = tokio::time::sleep(Duration::from_secs(1)) => {} // dropped: its clean-up starts
    /// }
    /// client.settle(Duration::from_secs(2)).await;
    /// # }
    /// ```
    pub async fn settle(&self, within: Duration) -> bool {
        self.inner.cleanups.settle(within).await
    }

    /// The time limit of one short request (and the margin added to a waiting request's wait).
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::Client::open("redis://127.0.0.1/").await?;
    /// assert_eq!(client.command_timeout(), redis_lease_client::Client::DEFAULT_COMMAND_TIMEOUT);
    /// # Ok(()) }
    /// ```
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// Sets [`Client::command_timeout`] (on this handle and its later clones).
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// use std::time::Duration;
    /// let client = redis_lease_client::Client::open("redis://127.0.0.1/").await?
    ///     .with_command_timeout(Duration::from_millis(500));
    /// # Ok(()) }
    /// ```
    pub fn with_command_timeout(mut self, timeout: Duration) -> Client {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Whether this is a Redis Cluster connection.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::Client::open("redis://127.0.0.1/").await?;
    /// assert!(!client.is_cluster());
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner.backend, Backend::Cluster { .. })
    }

    /// The address of the master requests go to now (`None` for a cluster).
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::Client::open("redis://127.0.0.1:6379/").await?;
    /// assert_eq!(client.master_addr().unwrap().to_string(), "127.0.0.1:6379");
    /// # Ok(()) }
    /// ```
    pub fn master_addr(&self) -> Option<ConnectionAddr> {
        self.master()
            .map(|m| m.client.get_connection_info().addr().clone())
    }

    /// Runs one command of arbitrary kind on the shared connection, with
    /// [`Client::command_timeout`], without retries. Server error replies are errors.
    ///
    /// ```no_run
    /// # async fn demo() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::Client::open("redis://127.0.0.1/").await?;
    /// let v = client.query(&redis::cmd("LEADER.CURRENT").arg("jobs")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn query(&self, cmd: &Cmd) -> Result<Value> {
        self.query_within(cmd, self.command_timeout)
            .await
            .map_err(crate::retry::refusal)
    }

    /// A short request with retries of transient failures until `deadline` (or the budget).
    pub(crate) async fn query_retry(
        &self,
        cmd: &Cmd,
        deadline: Option<Instant>,
        policy: RetryPolicy,
    ) -> Result<Value> {
        let mut backoff = Backoff::new_now(policy);
        loop {
            match self.query_within(cmd, self.command_timeout).await {
                Ok(v) => return Ok(v),
                Err(e) => match classify(e) {
                    Failure::Transient { err, .. } => match backoff.next_delay_now(deadline) {
                        Some(d) => tokio::time::sleep(d).await,
                        None => return Err(backoff.give_up_now(err)),
                    },
                    Failure::Fatal(e) => return Err(e),
                },
            }
        }
    }

    /// The current master of a single server or Sentinel group.
    fn master(&self) -> Option<Arc<Master>> {
        match &self.inner.backend {
            Backend::Single(m) => Some(m.clone()),
            Backend::Sentinel(g) => Some(g.current()),
            Backend::Cluster { .. } => None,
        }
    }

    fn generation(&self) -> u64 {
        self.master().map_or(0, |m| m.generation)
    }

    /// Whether the connection may resend a request by itself (the cluster client does, after
    /// a redirection or a reconnect): then a generated owner's release must sweep.
    pub(crate) fn resends(&self) -> bool {
        self.is_cluster()
    }

    /// One short request on the shared connection, limited to `limit`.
    pub(crate) async fn query_within(&self, cmd: &Cmd, limit: Duration) -> RedisResult<Value> {
        let master = self.master();
        let fut = async {
            match (&self.inner.backend, &master) {
                (Backend::Cluster { shared, .. }, _) => {
                    let mut c = shared.clone();
                    cmd.query_async::<Value>(&mut c).await
                }
                (_, Some(m)) => {
                    let mut c = m.shared.clone();
                    c.send_packed_command(cmd).await
                }
                (_, None) => unreachable!("a single server or Sentinel group has a master"),
            }
        };
        let result = match tokio::time::timeout(limit, fut).await {
            Ok(r) => r.and_then(Value::extract_error),
            Err(_) => Err(timeout_error("no reply in time")),
        };
        if let Err(e) = &result {
            self.after_failure(e, master.map_or(0, |m| m.generation))
                .await;
        }
        result.map_err(|e| self.located(e))
    }

    /// A request that may wait inside the server, on a connection of its own. `limit`: how long
    /// to wait for the reply (`None`: no limit).
    pub(crate) async fn query_dedicated(
        &self,
        cmd: &Cmd,
        limit: Option<Duration>,
    ) -> RedisResult<Value> {
        let mut v = self.dedicated(Request::Cmd(cmd), limit).await?;
        v.pop()
            .ok_or_else(|| timeout_error("no reply"))
            .and_then(Value::extract_error)
    }

    /// A pipeline on a connection of its own (so that a `WAIT numreplicas` counts the writes of
    /// the commands before it, and holds up nobody else). The replies are not checked for
    /// errors: each may be a [`Value::ServerError`].
    pub(crate) async fn pipe_dedicated(
        &self,
        pipe: &Pipeline,
        limit: Option<Duration>,
    ) -> RedisResult<Vec<Value>> {
        let n = pipe.cmd_iter().count();
        let generation = self.generation();
        let replies = self.dedicated(Request::Pipe(pipe, n), limit).await?;
        // An error reply inside (READONLY from a demoted master) may mean a failover too.
        if let Some(e) = replies.iter().find_map(|v| v.clone().extract_error().err()) {
            self.after_failure(&e, generation).await;
        }
        Ok(replies)
    }

    async fn dedicated(
        &self,
        req: Request<'_>,
        limit: Option<Duration>,
    ) -> RedisResult<Vec<Value>> {
        let generation = self.generation();
        let popped = {
            let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            // Connections to an earlier master are of no use any more.
            idle.retain(|(g, _)| *g == generation);
            idle.pop().map(|(_, c)| c)
        };
        let mut conn = match popped {
            Some(c) => c,
            None => {
                let connect = self.connect_dedicated();
                match tokio::time::timeout(self.command_timeout, connect).await {
                    Ok(Ok(c)) => c,
                    Ok(Err(e)) => {
                        self.after_failure(&e, generation).await;
                        return Err(self.located(e));
                    }
                    Err(_) => {
                        // Nothing was sent yet: report it like a refused connection.
                        let e: RedisError = std::io::Error::new(
                            std::io::ErrorKind::ConnectionRefused,
                            "connect timed out",
                        )
                        .into();
                        self.after_failure(&e, generation).await;
                        return Err(self.located(e));
                    }
                }
            }
        };
        let fut = async {
            match (&mut conn, &req) {
                (Dedicated::Single(c), Request::Cmd(cmd)) => {
                    c.send_packed_command(cmd).await.map(|v| vec![v])
                }
                (Dedicated::Single(c), Request::Pipe(p, n)) => {
                    c.send_packed_commands(p, 0, *n).await
                }
                (Dedicated::Cluster(c), Request::Cmd(cmd)) => {
                    cmd.query_async::<Value>(c).await.map(|v| vec![v])
                }
                (Dedicated::Cluster(c), Request::Pipe(p, n)) => {
                    c.req_packed_commands(p, 0, *n).await
                }
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
            let mut idle = self.inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < MAX_IDLE_DEDICATED {
                idle.push((generation, conn));
            }
        }
        if let Err(e) = &result {
            self.after_failure(e, generation).await;
        }
        result.map_err(|e| self.located(e))
    }

    /// A connection failure with the server's address in its text ("127.0.0.1:6379:
    /// Connection refused"), its kind kept (so a refusal is still known as one).
    pub(crate) fn located(&self, e: RedisError) -> RedisError {
        let Some(addr) = self.master_addr() else {
            return e;
        };
        located(e, &addr.to_string())
    }

    async fn connect_dedicated(&self) -> RedisResult<Dedicated> {
        match (&self.inner.backend, self.master()) {
            (Backend::Cluster { client, .. }, _) => {
                // The crate's own per-request limit (the wait plus a margin) applies; the
                // connection's limit is set far out of the way.
                let config = ClusterConfig::new()
                    .set_connection_timeout(self.command_timeout)
                    .set_response_timeout(Duration::from_secs(400 * 86400));
                let c = client.get_async_connection_with_config(config).await?;
                Ok(Dedicated::Cluster(c))
            }
            (_, Some(m)) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.command_timeout))
                    .set_response_timeout(None);
                let c = m
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Dedicated::Single(c))
            }
            (_, None) => unreachable!("a single server or Sentinel group has a master"),
        }
    }

    /// After a failure that a failover explains, looks up the master again (Sentinel only).
    async fn after_failure(&self, e: &RedisError, generation: u64) {
        if suggests_failover(e) {
            self.relocate(generation).await;
        }
    }

    /// Something suggests that the master requests went to is not the master any more (for
    /// example too few replicas acknowledged a write): looks it up again (Sentinel only).
    pub(crate) async fn suspect_master(&self) {
        self.relocate(self.generation()).await;
    }

    /// Asks the sentinels for the master, and moves every later request to it if it changed
    /// since `generation`. One lookup at a time, at most one per [`SENTINEL_LOOKUP_GAP`].
    async fn relocate(&self, generation: u64) {
        let Backend::Sentinel(group) = &self.inner.backend else {
            return;
        };
        let mut lookup = group.lookup.lock().await;
        if group.current().generation != generation {
            return; // another request moved already
        }
        if lookup.1.is_some_and(|t| t.elapsed() < SENTINEL_LOOKUP_GAP) {
            return;
        }
        let found = tokio::time::timeout(
            self.command_timeout,
            lookup.0.async_master_for(&group.service, Some(&group.node)),
        )
        .await;
        lookup.1 = Some(Instant::now());
        let Ok(Ok(client)) = found else {
            return; // no sentinel names a reachable master yet: the caller retries
        };
        let current = group.current();
        if client.get_connection_info().addr() == current.client.get_connection_info().addr() {
            return;
        }
        let connect = ConnectionManager::new_with_config(client.clone(), manager_config());
        let Ok(Ok(shared)) = tokio::time::timeout(self.command_timeout, connect).await else {
            return;
        };
        *group.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Master {
            client,
            shared,
            generation: generation + 1,
        });
        self.inner
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        group.changes.send_replace(generation + 1);
    }

    /// A watch that changes whenever requests move to another master (Sentinel only): a
    /// subscription must move with them, since a demoted master publishes nothing.
    pub(crate) fn master_changes(&self) -> Option<watch::Receiver<u64>> {
        match &self.inner.backend {
            Backend::Sentinel(g) => Some(g.changes.subscribe()),
            _ => None,
        }
    }

    /// Subscribes to the keyspace notifications of `key` (on the node that owns it) and returns
    /// a stream that yields the event name of each notification. The stream ends when the
    /// subscription connection is lost.
    pub(crate) async fn key_events(&self, key: &str) -> Result<BoxStream<'static, String>> {
        let client = match &self.inner.backend {
            Backend::Single(m) => m.client.clone(),
            Backend::Sentinel(g) => {
                // Subscribe where events are published now: a demoted master keeps quiet.
                self.relocate(g.current().generation).await;
                g.current().client.clone()
            }
            Backend::Cluster { template, .. } => {
                let (host, port) = self.node_of(key).await?;
                let info = (**template)
                    .clone()
                    .set_addr(ConnectionAddr::Tcp(host, port))
                    .set_redis_settings(template.redis_settings().clone().set_db(0));
                redis::Client::open(info)?
            }
        };
        let db = client.get_connection_info().redis_settings().db();
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
        let slot = reply::int(
            &self
                .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
                .await?,
        )
        .ok_or_else(|| bad("KEYSLOT"))?;
        let slots = self.query(redis::cmd("CLUSTER").arg("SLOTS")).await?;
        for range in reply::array(slots).ok_or_else(|| bad("SLOTS"))? {
            let items = reply::array(range).ok_or_else(|| bad("SLOTS range"))?;
            if items.len() < 3 {
                continue;
            }
            let lo = reply::int(&items[0]).ok_or_else(|| bad("SLOTS start"))?;
            let hi = reply::int(&items[1]).ok_or_else(|| bad("SLOTS end"))?;
            if (lo..=hi).contains(&slot) {
                let node = reply::array(items[2].clone()).ok_or_else(|| bad("SLOTS node"))?;
                if node.len() >= 2 {
                    let host = reply::text(&node[0]).ok_or_else(|| bad("SLOTS host"))?;
                    let port = reply::int(&node[1]).ok_or_else(|| bad("SLOTS port"))?;
                    return Ok((host, port as u16));
                }
            }
        }
        Err(Error::Protocol(format!("no node serves slot {slot}")))
    }
}

/// Follows the sentinels' `+switch-master` announcements (on one sentinel at a time, the next
/// one if it goes away), so that a client moves to the new master at once, even one that only
/// listens (a leader observer). Ends with the client.
async fn follow_switches(
    inner: Weak<Inner>,
    sentinels: Vec<ConnectionInfo>,
    service: String,
    timeout: Duration,
) {
    let client = |inner: &Weak<Inner>| {
        inner.upgrade().map(|inner| Client {
            inner,
            command_timeout: timeout,
        })
    };
    for info in sentinels.iter().cycle() {
        let subscribe = async {
            let mut ps = redis::Client::open(info.clone())?
                .get_async_pubsub()
                .await?;
            ps.subscribe("+switch-master").await?;
            RedisResult::Ok(ps.into_on_message())
        };
        if let Ok(Ok(mut switches)) = tokio::time::timeout(timeout, subscribe).await {
            // "<service> <old-ip> <old-port> <new-ip> <new-port>"
            while let Some(msg) = switches.next().await {
                let payload: String = msg.get_payload().unwrap_or_default();
                if payload.split(' ').next() != Some(service.as_str()) {
                    continue;
                }
                let Some(c) = client(&inner) else { return };
                // A lookup moments ago may have found the old master still named: try a
                // few times.
                let before = c.generation();
                for _ in 0..5 {
                    c.relocate(c.generation()).await;
                    if c.generation() != before {
                        break;
                    }
                    tokio::time::sleep(SENTINEL_LOOKUP_GAP * 2).await;
                }
            }
        }
        if inner.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod located_tests {
    use super::*;

    #[test]
    fn an_io_error_gets_the_address_and_keeps_its_kind() {
        let e: RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused").into();
        let l = located(e, "127.0.0.1:1");
        assert!(l.is_connection_refusal(), "{l:?}");
        assert!(
            l.to_string().contains("127.0.0.1:1: Connection refused"),
            "{l}"
        );
        // Once only, and never on a server's error reply.
        assert_eq!(located(l.clone(), "127.0.0.1:1").to_string(), l.to_string());
        let reply = crate::retry::tests::reply_error("ERR nope");
        assert!(!located(reply, "127.0.0.1:1")
            .to_string()
            .contains("127.0.0.1"));
    }
}

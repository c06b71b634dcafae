//! `redis-lease`: run a command while holding a redis-lease lock, semaphore permits or
//! leadership, and print state.

mod child;
mod out;
mod status;
mod top;
mod tty;

use std::ffi::OsString;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redis_lease_client::{
    Client, ElectionOptions, Error, LeaderInfo, LeaseTiming, LockGuard, LockMode, LockOptions,
    LossReason, SemaphoreGuard, Wait,
};

use child::Outcome;
use out::Closed;

/// Exit status when the lock was not acquired within --wait.
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lease (or leadership) was lost while CMD ran.
const EXIT_LOST: u8 = 3;
/// Exit status for other failures (redis unreachable, bad reply, command not found...).
pub const EXIT_FAILURE: u8 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "redis-lease",
    version,
    about = "Run commands under redis-lease locks, semaphores and leader elections; inspect their state",
    after_help = "Exit status of `lock`, `semaphore` and `elect`: CMD's own status (128+N if killed \
                  by signal N); 75 if the lock or permits were not acquired within --wait; 3 if the \
                  lease or leadership was lost while CMD ran (CMD was stopped); 1 on other errors."
)]
struct Cli {
    /// Redis URL: `redis://[user:pass@]host:port/db` for one server, or
    /// `redis+sentinel://[user:pass@]host:port[,host:port...]/service[/db]` for the master of a
    /// Sentinel group (followed through failovers).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        global = true
    )]
    url: String,

    /// Print progress to stderr.
    #[arg(short, long, global = true)]
    verbose: bool,

    #[command(subcommand)]
    command: Cmd,
}

/// Replica acknowledgement of grants and renewals.
#[derive(clap::Args, Debug, Clone, Copy)]
struct Replicas {
    /// Count a grant or renewal only once this many replicas acknowledged it (`WAIT N`); a
    /// grant that too few acknowledged is released and asked for again.
    #[arg(long, default_value_t = 0)]
    replicas: u32,
    /// Milliseconds each wait for replica acknowledgements may take.
    #[arg(long, default_value_t = 1_000)]
    replica_timeout: u64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run CMD while holding the lock on KEY; renew it meanwhile, release it when CMD ends.
    ///
    /// CMD gets REDIS_LEASE_KEY, REDIS_LEASE_OWNER, REDIS_LEASE_MODE and REDIS_LEASE_TOKEN
    /// (the fencing token) in its environment. If the lease is lost, CMD's process group gets
    /// SIGTERM, then SIGKILL after --grace, and redis-lease exits with status 3. At a terminal,
    /// CMD runs in the foreground: it can read the terminal and gets Ctrl-C and Ctrl-Z.
    Lock {
        /// Take a shared read lock instead of the exclusive write lock.
        #[arg(long)]
        read: bool,
        /// Lease ttl in milliseconds (renewed every third of it).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        ttl: u64,
        /// Wait at most this many milliseconds for the lock (0: do not wait). Default: no limit.
        #[arg(long)]
        wait: Option<u64>,
        /// Owner id (default: a fresh UUIDv4).
        #[arg(long)]
        owner: Option<String>,
        /// Milliseconds between SIGTERM and SIGKILL when the lease is lost.
        #[arg(long, default_value_t = 5_000)]
        grace: u64,
        #[command(flatten)]
        replicas: Replicas,
        /// The lock's key.
        key: String,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        cmd: Vec<OsString>,
    },
    /// Run CMD while holding PERMITS of the semaphore KEY (at most LIMIT held at once); renew
    /// them meanwhile, release them when CMD ends.
    ///
    /// Waiters are served in arrival order. CMD gets REDIS_LEASE_KEY, REDIS_LEASE_OWNER,
    /// REDIS_LEASE_PERMITS, REDIS_LEASE_LIMIT and REDIS_LEASE_TOKEN (the fencing token) in its
    /// environment. Lease loss, signals and the terminal are handled as by `lock`.
    Semaphore {
        /// How many permits the semaphore has (every user of KEY must name the same limit).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2_147_483_647))]
        limit: u32,
        /// How many permits to hold (1 to the limit).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        permits: u32,
        /// Lease ttl in milliseconds (renewed every third of it).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        ttl: u64,
        /// Wait at most this many milliseconds for the permits (0: do not wait). Default: no
        /// limit.
        #[arg(long)]
        wait: Option<u64>,
        /// Owner id (default: a fresh UUIDv4).
        #[arg(long)]
        owner: Option<String>,
        /// Milliseconds between SIGTERM and SIGKILL when the lease is lost.
        #[arg(long, default_value_t = 5_000)]
        grace: u64,
        #[command(flatten)]
        replicas: Replicas,
        /// The semaphore's key.
        key: String,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        cmd: Vec<OsString>,
    },
    /// Campaign for leadership of KEY and run CMD only while leader.
    ///
    /// CMD is started once elected, with REDIS_LEASE_KEY, REDIS_LEASE_CANDIDATE and
    /// REDIS_LEASE_TERM in its environment. When CMD ends, redis-lease resigns and exits with
    /// CMD's status. If leadership is lost, CMD's process group gets SIGTERM, then SIGKILL after
    /// --grace, and redis-lease exits with status 3.
    Elect {
        /// Lease ttl in milliseconds (renewed every third of it).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
        ttl: u64,
        /// Candidate id (default: a fresh UUIDv4).
        #[arg(long)]
        candidate: Option<String>,
        /// Milliseconds between SIGTERM and SIGKILL when leadership is lost.
        #[arg(long, default_value_t = 5_000)]
        grace: u64,
        #[command(flatten)]
        replicas: Replicas,
        /// The election's key.
        key: String,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        cmd: Vec<OsString>,
    },
    /// Print the state of KEY: a lock (RWLOCK.INFO), a semaphore (SEMAPHORE.INFO) or an
    /// election (LEADER.CURRENT), as its type says.
    Info {
        /// The key.
        key: String,
    },
    /// Print KEY's holders and its waiting requests in queue order (with how long each waited
    /// and may still wait), whatever its kind.
    Status {
        /// The key.
        key: String,
    },
    /// A live view of the server (or every master of its Cluster): the busiest keys, the
    /// INFO lease figures, the wait histogram; refreshed every second, `q` quits.
    Top {
        /// Print one frame as text (WIDTHxHEIGHT, e.g. 100x30) instead of the live view.
        #[arg(long, value_name = "WIDTHxHEIGHT", value_parser = size)]
        once: Option<(u16, u16)>,
    },
    /// Print who leads the election on KEY (LEADER.CURRENT).
    Leader {
        /// Keep running and print a line at every change (uses keyspace notifications).
        #[arg(long)]
        watch: bool,
        /// The election's key.
        key: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out::warn(format_args!("redis-lease: cannot start the runtime: {e}"));
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(Failure::Closed) => ExitCode::SUCCESS,
        Err(Failure::Lease(e)) => {
            out::warn(format_args!("redis-lease: {e}"));
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

enum Failure {
    /// Stdout was closed by its reader: end quietly.
    Closed,
    Lease(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Lease(e)
    }
}

impl From<Closed> for Failure {
    fn from(_: Closed) -> Self {
        Failure::Closed
    }
}

async fn run(cli: Cli) -> Result<u8, Failure> {
    let client = Client::open(&cli.url).await?;
    let verbose = cli.verbose;
    match cli.command {
        Cmd::Lock {
            read,
            ttl,
            wait,
            owner,
            grace,
            replicas,
            key,
            cmd,
        } => {
            let opts = LockOptions {
                timing: LeaseTiming::new(Duration::from_millis(ttl))?,
                replicas: replicas.replicas,
                replica_timeout: Duration::from_millis(replicas.replica_timeout),
                ..Default::default()
            };
            let mut lock = client.rwlock(&key).with_options(opts);
            if let Some(o) = owner {
                lock = lock.with_owner(o);
            }
            let mode = if read {
                LockMode::Read
            } else {
                LockMode::Write
            };
            let wait = wait_of(wait);
            let guard = tokio::select! {
                g = lock.acquire(mode, wait) => g?,
                code = child::terminated() => return Ok(code),
            };
            let Some(guard) = guard else {
                out::warn(format_args!(
                    "redis-lease: the {mode} lock on {key} was not acquired in time"
                ));
                return Ok(EXIT_NOT_ACQUIRED);
            };
            if verbose {
                out::warn(format_args!(
                    "redis-lease: holding the {mode} lock on {key} (token {}, owner {})",
                    guard.token(),
                    guard.owner()
                ));
            }
            let env = [
                ("REDIS_LEASE_KEY", key.clone()),
                ("REDIS_LEASE_OWNER", guard.owner().to_string()),
                ("REDIS_LEASE_MODE", mode.to_string()),
                ("REDIS_LEASE_TOKEN", guard.token().to_string()),
            ];
            Ok(run_held(
                guard,
                &format!("the lock on {key}"),
                &key,
                &cmd,
                &env,
                grace,
            )
            .await)
        }
        Cmd::Semaphore {
            limit,
            permits,
            ttl,
            wait,
            owner,
            grace,
            replicas,
            key,
            cmd,
        } => {
            let opts = LockOptions {
                timing: LeaseTiming::new(Duration::from_millis(ttl))?,
                replicas: replicas.replicas,
                replica_timeout: Duration::from_millis(replicas.replica_timeout),
                ..Default::default()
            };
            let mut sem = client.semaphore(&key, limit).with_options(opts);
            if let Some(o) = owner {
                sem = sem.with_owner(o);
            }
            let guard = tokio::select! {
                g = sem.acquire_with(permits, wait_of(wait)) => g?,
                code = child::terminated() => return Ok(code),
            };
            let Some(guard) = guard else {
                out::warn(format_args!(
                    "redis-lease: {permits} permit(s) of {key} were not acquired in time"
                ));
                return Ok(EXIT_NOT_ACQUIRED);
            };
            if verbose {
                out::warn(format_args!(
                    "redis-lease: holding {permits} of {limit} permits of {key} (token {}, owner {})",
                    guard.token(),
                    guard.owner()
                ));
            }
            let env = [
                ("REDIS_LEASE_KEY", key.clone()),
                ("REDIS_LEASE_OWNER", guard.owner().to_string()),
                ("REDIS_LEASE_PERMITS", permits.to_string()),
                ("REDIS_LEASE_LIMIT", limit.to_string()),
                ("REDIS_LEASE_TOKEN", guard.token().to_string()),
            ];
            let what = format!("the permits of {key}");
            Ok(run_held(guard, &what, &key, &cmd, &env, grace).await)
        }
        Cmd::Elect {
            ttl,
            candidate,
            grace,
            replicas,
            key,
            cmd,
        } => {
            let opts = ElectionOptions {
                timing: LeaseTiming::new(Duration::from_millis(ttl))?,
                replicas: replicas.replicas,
                replica_timeout: Duration::from_millis(replicas.replica_timeout),
                ..Default::default()
            };
            let mut elector = client.elector(&key).with_options(opts);
            if let Some(c) = candidate {
                elector = elector.with_candidate(c);
            }
            let election = elector.start();
            let term = tokio::select! {
                t = election.wait_leader() => t?,
                code = child::terminated() => {
                    let _ = election.resign().await;
                    return Ok(code);
                }
            };
            if verbose {
                out::warn(format_args!(
                    "redis-lease: elected leader of {key} (term {term}, candidate {})",
                    election.candidate()
                ));
            }
            let env = [
                ("REDIS_LEASE_KEY", key.clone()),
                ("REDIS_LEASE_CANDIDATE", election.candidate().to_string()),
                ("REDIS_LEASE_TERM", term.to_string()),
            ];
            let running = match child::spawn(&cmd, &env) {
                Ok(c) => c,
                Err(e) => {
                    out::warn(format_args!("redis-lease: cannot run {:?}: {e}", cmd[0]));
                    let _ = election.resign().await;
                    return Ok(127);
                }
            };
            let lost = election.lost();
            let held = || election.is_leader();
            let outcome = running
                .supervise(
                    async move {
                        lost.await;
                        "leadership could no longer be proven"
                    },
                    &held,
                    Duration::from_millis(grace),
                )
                .await;
            let _ = election.resign().await;
            match outcome {
                Outcome::Exited(code) => Ok(code),
                Outcome::Interrupted => child::die_of_sigint(),
                Outcome::Lost(what) => {
                    out::warn(format_args!(
                        "redis-lease: leadership of {key} was lost ({what}); the command was stopped"
                    ));
                    Ok(EXIT_LOST)
                }
            }
        }
        Cmd::Info { key } => {
            let kind = client.query(redis::cmd("TYPE").arg(&key)).await?;
            match redis::from_redis_value::<String>(kind)
                .unwrap_or_default()
                .as_str()
            {
                "lease-sem" => print_semaphore(&client, &key).await,
                "lease-ldr" => {
                    out::line(format_args!("key: {key}"))?;
                    out::line(format_args!("type: election"))?;
                    print_leader(&client.current_leader(&key).await?)?;
                    Ok(0)
                }
                _ => print_lock(&client, &key).await,
            }
        }
        Cmd::Status { key } => status::status(&client, &key).await,
        Cmd::Top { once } => top::top(&cli.url, once).await,
        Cmd::Leader { watch, key } => {
            let print = print_leader;
            if !watch {
                print(&client.current_leader(&key).await?)?;
                return Ok(0);
            }
            let mut obs = client.observe(&key, Default::default()).await?;
            print(&obs.current())?;
            let closed = out::closed();
            tokio::pin!(closed);
            loop {
                tokio::select! {
                    next = obs.changed() => print(&next?)?,
                    () = &mut closed => return Err(Failure::Closed),
                    code = child::terminated() => return Ok(code),
                }
            }
        }
    }
}

/// `--wait` as the library takes it: absent waits as long as it takes, 0 does not wait.
fn wait_of(ms: Option<u64>) -> Wait {
    match ms {
        None => Wait::Forever,
        Some(0) => Wait::No,
        Some(ms) => Wait::For(Duration::from_millis(ms)),
    }
}

/// A guard CMD runs under (a lock's or a semaphore's).
trait Hold {
    fn is_held(&self) -> bool;
    fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static;
    async fn release(self) -> Result<bool, Error>;
}

impl Hold for LockGuard {
    fn is_held(&self) -> bool {
        LockGuard::is_held(self)
    }
    fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        LockGuard::lost(self)
    }
    async fn release(self) -> Result<bool, Error> {
        LockGuard::release(self).await
    }
}

impl Hold for SemaphoreGuard {
    fn is_held(&self) -> bool {
        SemaphoreGuard::is_held(self)
    }
    fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static {
        SemaphoreGuard::lost(self)
    }
    async fn release(self) -> Result<bool, Error> {
        SemaphoreGuard::release(self).await
    }
}

/// Runs CMD while `guard` is held; stops it if the lease is lost; releases when it ends.
/// Answers the exit status. `what` names the hold in messages ("the lock on KEY").
async fn run_held(
    guard: impl Hold,
    what: &str,
    key: &str,
    cmd: &[OsString],
    env: &[(&str, String)],
    grace: u64,
) -> u8 {
    let running = match child::spawn(cmd, env) {
        Ok(c) => c,
        Err(e) => {
            out::warn(format_args!("redis-lease: cannot run {:?}: {e}", cmd[0]));
            let _ = guard.release().await;
            return 127;
        }
    };
    let held = || guard.is_held();
    let outcome = running
        .supervise(guard.lost(), &held, Duration::from_millis(grace))
        .await;
    match outcome {
        Outcome::Exited(code) => {
            if let Err(e) = guard.release().await {
                out::warn(format_args!("redis-lease: releasing {what} failed: {e}"));
            }
            code
        }
        Outcome::Interrupted => {
            if let Err(e) = guard.release().await {
                out::warn(format_args!("redis-lease: releasing {what} failed: {e}"));
            }
            child::die_of_sigint()
        }
        Outcome::Lost(why) => {
            out::warn(format_args!(
                "redis-lease: the lease on {key} was lost ({why}); the command was stopped"
            ));
            let _ = guard.release().await;
            EXIT_LOST
        }
    }
}

/// `100x30` as (100, 30).
fn size(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("expected WIDTHxHEIGHT (e.g. 100x30), got {s:?}");
    let (w, h) = s.split_once('x').ok_or_else(bad)?;
    let (w, h) = (w.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?);
    if w < 40 || h < 16 {
        return Err(format!("{s}: at least 40x16"));
    }
    Ok((w, h))
}

fn print_leader(l: &Option<LeaderInfo>) -> Result<(), Closed> {
    match l {
        Some(l) => out::line(format_args!(
            "{}\tterm={}\tttl={}ms",
            l.candidate,
            l.term,
            l.ttl.as_millis()
        )),
        None => out::line(format_args!("(none)")),
    }
}

async fn print_lock(client: &Client, key: &str) -> Result<u8, Failure> {
    let info = client.rwlock(key).info().await?;
    out::line(format_args!("key: {key}"))?;
    out::line(format_args!(
        "mode: {}",
        info.mode.map_or("none".to_string(), |m| m.to_string())
    ))?;
    out::line(format_args!("token: {}", info.token))?;
    out::line(format_args!("waiters: {}", info.waiters))?;
    out::line(format_args!("holders: {}", info.holders.len()))?;
    for h in &info.holders {
        out::line(format_args!(
            "  {}\t{}\tcount={}\tttl={}ms\ttoken={}",
            h.owner,
            h.mode,
            h.count,
            h.ttl.as_millis(),
            h.token
        ))?;
    }
    Ok(0)
}

async fn print_semaphore(client: &Client, key: &str) -> Result<u8, Failure> {
    // The limit only matters for acquisitions; INFO reads the key's own.
    let info = client.semaphore(key, 1).info().await?;
    out::line(format_args!("key: {key}"))?;
    out::line(format_args!("type: semaphore"))?;
    out::line(format_args!("limit: {}", info.limit))?;
    out::line(format_args!("used: {}", info.used))?;
    out::line(format_args!("token: {}", info.token))?;
    out::line(format_args!("waiters: {}", info.waiters))?;
    out::line(format_args!("holders: {}", info.holders.len()))?;
    for h in &info.holders {
        out::line(format_args!(
            "  {}\tpermits={}\tttl={}ms\ttoken={}",
            h.owner,
            h.permits,
            h.ttl.as_millis(),
            h.token
        ))?;
    }
    Ok(0)
}

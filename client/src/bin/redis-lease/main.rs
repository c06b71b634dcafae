//! `redis-lease`: run a command while holding a redis-lease lock, semaphore permits or
//! leadership, and print state.

mod child;
mod guard;
mod out;
mod status;
mod top;
mod tty;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redis_lease_client::{
    Client, ElectionOptions, Error, Guard, LeaderInfo, LeaseTiming, LockMode, LockOptions, Wait,
};

use child::Outcome;
use out::Closed;

/// Exit status when the lock was not acquired within --wait.
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lease (or leadership) was lost while CMD ran.
const EXIT_LOST: u8 = 3;
/// Exit status for other failures (redis unreachable, bad reply, an unreplicated grant...).
pub const EXIT_FAILURE: u8 = 1;
/// Exit status for a command line redis-lease cannot use (sysexits' EX_USAGE): nothing was
/// acquired and CMD did not run.
const EXIT_USAGE: u8 = 64;
/// Exit status when CMD cannot be started (not found, not executable), as a shell's.
const EXIT_CANNOT_RUN: u8 = 127;

#[derive(Parser, Debug)]
#[command(
    name = "redis-lease",
    version,
    about = "Run commands under redis-lease locks, semaphores and leader elections; inspect their state",
    after_help = "Durations (--ttl, --wait, --grace, --replica-timeout) take a unit: 500ms, 10s, \
                  2m, 1h30m; a bare number is milliseconds.\n\n\
                  Exit status of `lock`, `semaphore` and `elect`:\n  \
                  CMD's own status  CMD ran to its end (128+N if it was killed by signal N)\n  \
                  3    the lease or leadership was lost while CMD ran (CMD's process group was \
                  stopped)\n  \
                  64   usage error: the command line was refused; nothing was acquired, CMD did \
                  not run\n  \
                  75   the lock or permits were not acquired within --wait\n  \
                  127  CMD could not be started\n  \
                  128+N  redis-lease got signal N (SIGINT, SIGTERM, SIGHUP) while acquiring\n  \
                  1    any other failure (redis unreachable, the module not loaded, a grant too few \
                  replicas acknowledged)\n\
                  `info` and `leader` exit 0, 64 on a usage error, 1 on failure.\n\n\
                  Signals: SIGINT, SIGTERM and SIGHUP are forwarded to CMD's process group. If \
                  redis-lease itself dies (even by SIGKILL), CMD's whole process group is killed \
                  (SIGKILL) at once; processes CMD leaves running when it exits (in its group, or \
                  orphans that left it) are stopped (SIGTERM, SIGKILL after --grace) before the \
                  lease is released."
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
    /// How long each wait for replica acknowledgements may take (500ms, 2s...).
    #[arg(long, default_value = "1s", value_parser = duration)]
    replica_timeout: Duration,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run CMD while holding the lock on KEY (on every KEY at once, all or nothing, when
    /// several are given); renew it meanwhile, release it when CMD ends.
    ///
    /// CMD gets REDIS_LEASE_KEY, REDIS_LEASE_OWNER, REDIS_LEASE_MODE and REDIS_LEASE_TOKEN
    /// (the fencing token) in its environment; with several keys also REDIS_LEASE_KEYS and
    /// REDIS_LEASE_TOKENS (space-separated, in order; KEY and TOKEN are the first key's). If
    /// the lease is lost, CMD's process group gets
    /// SIGTERM, then SIGKILL after --grace, and redis-lease exits with status 3. At a terminal,
    /// CMD runs in the foreground: it can read the terminal and gets Ctrl-C and Ctrl-Z.
    Lock {
        /// Take a shared read lock instead of the exclusive write lock.
        #[arg(long)]
        read: bool,
        /// Lease ttl (10s, 500ms...; renewed every third of it).
        #[arg(long, default_value = "10s", value_parser = ttl)]
        ttl: Duration,
        /// Wait at most this long for the lock (30s, 500ms...; 0: do not wait). Default: no
        /// limit.
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// Owner id (default: a fresh UUIDv4).
        #[arg(long)]
        owner: Option<String>,
        /// Time between SIGTERM and SIGKILL when the lease is lost (5s, 500ms...).
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// Cap the hold at this long from its grant, renewals included (MAXHOLD; 10m, 1h...):
        /// at the cap the lease is lost and CMD is stopped (exit 3).
        #[arg(long, value_parser = duration)]
        max_hold: Option<Duration>,
        #[command(flatten)]
        replicas: Replicas,
        /// The lock's key, or several (up to 64, in one Cluster slot): all are taken at once or
        /// none (RWLOCK.MLOCK), and a wait keeps its place in every key's queue.
        #[arg(required = true, num_args = 1..=64)]
        keys: Vec<String>,
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
        /// Lease ttl (10s, 500ms...; renewed every third of it).
        #[arg(long, default_value = "10s", value_parser = ttl)]
        ttl: Duration,
        /// Wait at most this long for the permits (30s, 500ms...; 0: do not wait). Default: no
        /// limit.
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// Owner id (default: a fresh UUIDv4).
        #[arg(long)]
        owner: Option<String>,
        /// Time between SIGTERM and SIGKILL when the lease is lost (5s, 500ms...).
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
        /// Cap the hold at this long from its grant, renewals included (MAXHOLD; 10m, 1h...):
        /// at the cap the lease is lost and CMD is stopped (exit 3).
        #[arg(long, value_parser = duration)]
        max_hold: Option<Duration>,
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
        /// Lease ttl (10s, 500ms...; renewed every third of it).
        #[arg(long, default_value = "10s", value_parser = ttl)]
        ttl: Duration,
        /// Candidate id (default: a fresh UUIDv4).
        #[arg(long)]
        candidate: Option<String>,
        /// Time between SIGTERM and SIGKILL when leadership is lost (5s, 500ms...).
        #[arg(long, default_value = "5s", value_parser = duration)]
        grace: Duration,
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
    if std::env::args_os().nth(1).is_some_and(|a| a == guard::ARG) {
        return guard::run();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(EXIT_USAGE),
            };
        }
    };
    out::show_library_warnings();
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
            max_hold,
            replicas,
            keys,
            cmd,
        } => {
            let opts = LockOptions {
                timing: LeaseTiming::new(ttl)?,
                replicas: replicas.replicas,
                replica_timeout: replicas.replica_timeout,
                max_hold,
                ..Default::default()
            };
            let mode = if read {
                LockMode::Read
            } else {
                LockMode::Write
            };
            if keys.len() > 1 {
                if owner.is_some() || replicas.replicas > 0 {
                    out::warn(format_args!(
                        "redis-lease: --owner and --replicas take one key (several keys get a                          fresh owner and no replica acknowledgement)"
                    ));
                    return Ok(EXIT_USAGE);
                }
                let many = Many {
                    keys,
                    mode,
                    wait,
                    opts,
                    grace,
                    verbose,
                };
                return run_many(&client, many, &cmd).await;
            }
            let key = keys.into_iter().next().unwrap_or_default();
            let mut lock = client.rwlock(&key).with_options(opts);
            if let Some(o) = owner {
                lock = lock.with_owner(o);
            }
            let wait = wait_of(wait);
            let guard = tokio::select! {
                g = lock.acquire(mode, wait) => g?,
                code = child::terminated() => return Ok(interrupted(&client, code).await),
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
            max_hold,
            replicas,
            key,
            cmd,
        } => {
            let opts = LockOptions {
                timing: LeaseTiming::new(ttl)?,
                replicas: replicas.replicas,
                replica_timeout: replicas.replica_timeout,
                max_hold,
                ..Default::default()
            };
            let mut sem = client.semaphore(&key, limit).with_options(opts);
            if let Some(o) = owner {
                sem = sem.with_owner(o);
            }
            let guard = tokio::select! {
                g = sem.acquire(permits, wait_of(wait)) => g?,
                code = child::terminated() => return Ok(interrupted(&client, code).await),
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
                timing: LeaseTiming::new(ttl)?,
                replicas: replicas.replicas,
                replica_timeout: replicas.replica_timeout,
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
                    return Ok(EXIT_CANNOT_RUN);
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
                    grace,
                )
                .await;
            if matches!(outcome, Outcome::Lost(_)) {
                let _ = tokio::time::timeout(RELEASE_AFTER_LOSS, election.resign()).await;
            } else {
                let _ = election.resign().await;
            }
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

/// How long redis-lease tries to release a lease (or resign a leadership) it has lost, so that
/// the server frees it before its ttl would: a lost lease needs no release, so this is short.
const RELEASE_AFTER_LOSS: Duration = Duration::from_secs(1);

/// How long redis-lease, on a signal during an acquisition, lets the release of what may have
/// been granted run before it exits.
const RELEASE_ON_SIGNAL: Duration = Duration::from_secs(2);

/// A signal came during an acquisition, which was dropped: its clean-up (the release of a
/// grant whose outcome was unknown) runs before redis-lease exits with `code`.
/// `lock K1 K2 ... -- CMD`: what it asks for.
struct Many {
    keys: Vec<String>,
    mode: LockMode,
    wait: Option<Duration>,
    opts: LockOptions,
    grace: Duration,
    verbose: bool,
}

/// `lock K1 K2 ... -- CMD`: every key at once (RWLOCK.MLOCK), then as for one key. CMD gets
/// REDIS_LEASE_KEYS and REDIS_LEASE_TOKENS (space-separated, in the keys' order), and
/// REDIS_LEASE_KEY / REDIS_LEASE_TOKEN for the first key.
async fn run_many(client: &Client, m: Many, cmd: &[OsString]) -> Result<u8, Failure> {
    let lock = client.rwlock_many(m.keys.clone())?.with_options(m.opts);
    let all = m.keys.join(" ");
    let mode = m.mode;
    let guard = tokio::select! {
        g = lock.acquire(mode, wait_of(m.wait)) => g?,
        code = child::terminated() => return Ok(interrupted(client, code).await),
    };
    let Some(guard) = guard else {
        out::warn(format_args!(
            "redis-lease: the {mode} locks on {all} were not acquired in time"
        ));
        return Ok(EXIT_NOT_ACQUIRED);
    };
    let tokens: Vec<String> = guard.tokens().iter().map(u64::to_string).collect();
    if m.verbose {
        out::warn(format_args!(
            "redis-lease: holding the {mode} locks on {all} (tokens {}, owner {})",
            tokens.join(" "),
            guard.owner()
        ));
    }
    let env = [
        ("REDIS_LEASE_KEYS", all.clone()),
        ("REDIS_LEASE_TOKENS", tokens.join(" ")),
        ("REDIS_LEASE_KEY", guard.key().to_string()),
        ("REDIS_LEASE_TOKEN", guard.token().to_string()),
        ("REDIS_LEASE_OWNER", guard.owner().to_string()),
        ("REDIS_LEASE_MODE", mode.to_string()),
    ];
    let what = format!("the locks on {all}");
    let first = guard.key().to_string();
    Ok(run_held(guard, &what, &first, cmd, &env, m.grace).await)
}

async fn interrupted(client: &Client, code: u8) -> u8 {
    if !client.settle(RELEASE_ON_SIGNAL).await {
        out::warn(format_args!(
            "redis-lease: the release of the interrupted acquisition did not finish within {}s; \
             what was granted lapses with its ttl",
            RELEASE_ON_SIGNAL.as_secs()
        ));
    }
    code
}

/// `--wait` as the library takes it: absent waits as long as it takes, 0 does not wait.
fn wait_of(wait: Option<Duration>) -> Wait {
    match wait {
        None => Wait::Forever,
        Some(d) if d.is_zero() => Wait::No,
        Some(d) => Wait::For(d),
    }
}

/// A lease ttl on the command line: a duration a lease can be renewed within.
fn ttl(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    LeaseTiming::new(d).map_err(|e| e.to_string())?;
    Ok(d)
}

/// A duration on the command line: a number and a unit (`500ms`, `10s`, `2m`, `1h30m`), or
/// a bare number of milliseconds.
fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| format!("{t:?}: {e}"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("{t:?} is not a duration ({e}); write it as 500ms, 10s, 2m or 1h30m"))
}

/// Runs CMD while `guard` is held; stops it if the lease is lost; releases when it ends.
/// Answers the exit status. `what` names the hold in messages ("the lock on KEY").
async fn run_held(
    guard: impl Guard,
    what: &str,
    key: &str,
    cmd: &[OsString],
    env: &[(&str, String)],
    grace: Duration,
) -> u8 {
    let running = match child::spawn(cmd, env) {
        Ok(c) => c,
        Err(e) => {
            out::warn(format_args!("redis-lease: cannot run {:?}: {e}", cmd[0]));
            let _ = guard.release().await;
            return EXIT_CANNOT_RUN;
        }
    };
    let held = || guard.is_held();
    let outcome = running.supervise(guard.lost(), &held, grace).await;
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
            // The hold is gone or about to lapse: one short try to free it early, no more.
            let _ = tokio::time::timeout(RELEASE_AFTER_LOSS, guard.release()).await;
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
        out::line(format_args!("  {}", status::lock_holder(h)))?;
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
        out::line(format_args!("  {}", status::semaphore_holder(h)))?;
    }
    Ok(0)
}

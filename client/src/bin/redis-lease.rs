//! `redis-lease`: run a command while holding a redis-lease lock or leadership, and print state.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redis_lease_client::{Connector, Error, LeaderElector, LeaderObserver, LockMode, RwLock, Wait};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

/// Exit status when the lock was not acquired within --wait.
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lease (or leadership) was lost while CMD ran.
const EXIT_LOST: u8 = 3;
/// Exit status for other failures (redis unreachable, bad reply, command not found...).
const EXIT_FAILURE: u8 = 1;

#[derive(Parser, Debug)]
#[command(
    name = "redis-lease",
    version,
    about = "Run commands under redis-lease locks and leader elections; inspect their state",
    after_help = "Exit status of `lock` and `elect`: CMD's own status (128+N if killed by signal N); \
                  75 if the lock was not acquired within --wait; 3 if the lease or leadership was \
                  lost while CMD ran (CMD was stopped); 1 on other errors."
)]
struct Cli {
    /// Redis server URL, `redis://[user:pass@]host:port/db`.
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

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run CMD while holding the lock on KEY; renew it meanwhile, release it when CMD ends.
    ///
    /// CMD gets REDIS_LEASE_KEY, REDIS_LEASE_OWNER, REDIS_LEASE_MODE and REDIS_LEASE_TOKEN
    /// (the fencing token) in its environment. If the lease is lost, CMD's process group gets
    /// SIGTERM, then SIGKILL after --grace, and redis-lease exits with status 3.
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
        /// The lock's key.
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
        /// The election's key.
        key: String,
        /// The command to run, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        cmd: Vec<OsString>,
    },
    /// Print the state of the lock on KEY (RWLOCK.INFO).
    Info {
        /// The lock's key.
        key: String,
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
            eprintln!("redis-lease: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("redis-lease: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

async fn run(cli: Cli) -> Result<u8, Error> {
    let conn = Connector::open(&cli.url).await?;
    let verbose = cli.verbose;
    match cli.command {
        Cmd::Lock {
            read,
            ttl,
            wait,
            owner,
            grace,
            key,
            cmd,
        } => {
            let mut lock = RwLock::new(&conn, &key).with_ttl(Duration::from_millis(ttl));
            if let Some(o) = owner {
                lock = lock.with_owner(o);
            }
            let mode = if read {
                LockMode::Read
            } else {
                LockMode::Write
            };
            let wait = match wait {
                None => Wait::Forever,
                Some(0) => Wait::No,
                Some(ms) => Wait::For(Duration::from_millis(ms)),
            };
            let guard = tokio::select! {
                g = lock.acquire(mode, wait) => g?,
                code = terminated() => return Ok(code),
            };
            let Some(guard) = guard else {
                eprintln!("redis-lease: the {mode} lock on {key} was not acquired in time");
                return Ok(EXIT_NOT_ACQUIRED);
            };
            if verbose {
                eprintln!(
                    "redis-lease: holding the {mode} lock on {key} (token {}, owner {})",
                    guard.token(),
                    guard.owner()
                );
            }
            let env = [
                ("REDIS_LEASE_KEY", key.clone()),
                ("REDIS_LEASE_OWNER", guard.owner().to_string()),
                ("REDIS_LEASE_MODE", mode.to_string()),
                ("REDIS_LEASE_TOKEN", guard.token().to_string()),
            ];
            let child = match spawn(&cmd, &env) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("redis-lease: cannot run {:?}: {e}", cmd[0]);
                    let _ = guard.release().await;
                    return Ok(127);
                }
            };
            let outcome = supervise(child, guard.lost(), Duration::from_millis(grace)).await;
            match outcome {
                Outcome::Exited(code) => {
                    if let Err(e) = guard.release().await {
                        eprintln!("redis-lease: releasing the lock on {key} failed: {e}");
                    }
                    Ok(code)
                }
                Outcome::Lost(what) => {
                    eprintln!(
                        "redis-lease: the lease on {key} was lost ({what}); the command was stopped"
                    );
                    let _ = guard.release().await;
                    Ok(EXIT_LOST)
                }
            }
        }
        Cmd::Elect {
            ttl,
            candidate,
            grace,
            key,
            cmd,
        } => {
            let mut elector = LeaderElector::new(&conn, &key).with_ttl(Duration::from_millis(ttl));
            if let Some(c) = candidate {
                elector = elector.with_candidate(c);
            }
            let election = elector.start();
            let term = tokio::select! {
                t = election.wait_leader() => t?,
                code = terminated() => {
                    let _ = election.resign().await;
                    return Ok(code);
                }
            };
            if verbose {
                eprintln!(
                    "redis-lease: elected leader of {key} (term {term}, candidate {})",
                    election.candidate()
                );
            }
            let env = [
                ("REDIS_LEASE_KEY", key.clone()),
                ("REDIS_LEASE_CANDIDATE", election.candidate().to_string()),
                ("REDIS_LEASE_TERM", term.to_string()),
            ];
            let child = match spawn(&cmd, &env) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("redis-lease: cannot run {:?}: {e}", cmd[0]);
                    let _ = election.resign().await;
                    return Ok(127);
                }
            };
            let lost = election.lost();
            let outcome = supervise(
                child,
                async move {
                    lost.await;
                    "leadership could no longer be proven"
                },
                Duration::from_millis(grace),
            )
            .await;
            let _ = election.resign().await;
            match outcome {
                Outcome::Exited(code) => Ok(code),
                Outcome::Lost(what) => {
                    eprintln!(
                        "redis-lease: leadership of {key} was lost ({what}); the command was stopped"
                    );
                    Ok(EXIT_LOST)
                }
            }
        }
        Cmd::Info { key } => {
            let info = RwLock::new(&conn, &key).info().await?;
            println!("key: {key}");
            println!(
                "mode: {}",
                info.mode.map_or("none".to_string(), |m| m.to_string())
            );
            println!("token: {}", info.token);
            println!("waiters: {}", info.waiters);
            println!("holders: {}", info.holders.len());
            for h in &info.holders {
                println!(
                    "  {}\t{}\tcount={}\tttl={}ms\ttoken={}",
                    h.owner,
                    h.mode,
                    h.count,
                    h.ttl.as_millis(),
                    h.token
                );
            }
            Ok(0)
        }
        Cmd::Leader { watch, key } => {
            let print = |l: &Option<redis_lease_client::LeaderInfo>| match l {
                Some(l) => println!(
                    "{}\tterm={}\tttl={}ms",
                    l.candidate,
                    l.term,
                    l.ttl.as_millis()
                ),
                None => println!("(none)"),
            };
            if !watch {
                print(&redis_lease_client::current_leader(&conn, &key).await?);
                return Ok(0);
            }
            let mut obs = LeaderObserver::start(&conn, &key).await?;
            print(&obs.current());
            loop {
                tokio::select! {
                    next = obs.changed() => print(&next?),
                    code = terminated() => return Ok(code),
                }
            }
        }
    }
}

enum Outcome {
    /// CMD ended with this exit code.
    Exited(u8),
    /// The lease was lost (CMD was stopped).
    Lost(String),
}

fn spawn(cmd: &[OsString], env: &[(&str, String)]) -> std::io::Result<Child> {
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    for (k, v) in env {
        c.env(k, v);
    }
    // CMD (and whatever it starts) gets a process group of its own, so that stopping it reaches
    // all of it; and it is killed if redis-lease itself dies.
    c.process_group(0);
    #[cfg(target_os = "linux")]
    unsafe {
        c.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c.kill_on_drop(false);
    c.spawn()
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => EXIT_FAILURE,
    }
}

fn signal_group(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id() {
        // The child leads its own process group (process_group(0)).
        unsafe {
            libc::kill(-(pid as libc::pid_t), sig);
        }
    }
}

/// Waits for CMD to end, forwarding SIGINT/SIGTERM/SIGHUP to it; stops it if `lost` resolves.
async fn supervise<L, R>(mut child: Child, lost: L, grace: Duration) -> Outcome
where
    L: std::future::Future<Output = R>,
    R: std::fmt::Display,
{
    let mut sigint = signal(SignalKind::interrupt()).ok();
    let mut sigterm = signal(SignalKind::terminate()).ok();
    let mut sighup = signal(SignalKind::hangup()).ok();
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                return Outcome::Exited(status.map(exit_code).unwrap_or(EXIT_FAILURE));
            }
            what = &mut lost => {
                signal_group(&child, libc::SIGTERM);
                if tokio::time::timeout(grace, child.wait()).await.is_err() {
                    signal_group(&child, libc::SIGKILL);
                    let _ = child.wait().await;
                }
                return Outcome::Lost(what.to_string());
            }
            _ = recv(&mut sigint) => signal_group(&child, libc::SIGINT),
            _ = recv(&mut sigterm) => signal_group(&child, libc::SIGTERM),
            _ = recv(&mut sighup) => signal_group(&child, libc::SIGHUP),
        }
    }
}

/// Resolves with 128+N when redis-lease gets SIGINT, SIGTERM or SIGHUP (before CMD runs).
async fn terminated() -> u8 {
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = recv(&mut int) => 128 + 2,
        _ = recv(&mut term) => 128 + 15,
        _ = recv(&mut hup) => 128 + 1,
    }
}

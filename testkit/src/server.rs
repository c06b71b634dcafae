//! A real `redis-server` with the module loaded, on a free loopback port, in its own temporary
//! directory, stopped (by pid) when dropped; and connections to it.
//!
//! Environment: `REDIS_SERVER` names the server binary (default `redis-server`; Valkey's
//! `valkey-server` works too); `REDIS_LEASE_MODULE` the module (see `crate::module`);
//! `REDIS_LEASE_SLOW` (valgrind) waits longer for a start; `REDIS_LEASE_GRACEFUL` stops
//! servers with SHUTDOWN so that valgrind reports leaks.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Connection;

use crate::module::checked_module;

/// The server binary.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// A free TCP port on 127.0.0.1 (the OS picks it; a race with another process is possible,
/// so `Server::start` retries on a failed start).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// How to start a server.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Extra `--name value` arguments for redis-server (e.g. `["--appendonly", "yes"]`).
    pub args: Vec<String>,
    /// Arguments after the module path on the `loadmodule` line (e.g. `["max-ttl", "5000"]`).
    pub module_args: Vec<String>,
    /// Start without the module.
    pub no_module: bool,
    /// Extra environment variables for the server process (e.g. `LD_PRELOAD` for a shim).
    pub env: Vec<(String, String)>,
}

impl Options {
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.extend(value.split(' ').map(str::to_string));
        self
    }
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }
    pub fn module_arg(mut self, name: &str, value: &str) -> Self {
        self.module_args.push(name.to_string());
        self.module_args.push(value.to_string());
        self
    }
}

/// A running redis-server. Dropping it kills the process (by its pid) and removes its directory.
pub struct Server {
    pub port: u16,
    pub opts: Options,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Server {
    /// A server with the module and default settings.
    pub fn start() -> Server {
        Server::with(Options::default())
    }

    pub fn with(opts: Options) -> Server {
        if !opts.no_module {
            // Refuse a missing or stale module before starting anything.
            checked_module();
        }
        let dir = tempfile::Builder::new()
            .prefix("redis-lease-test-")
            .tempdir()
            .expect("tempdir");
        let mut s = Server {
            port: 0,
            opts,
            child: None,
            dir,
        };
        let mut last_err = String::new();
        // A port found free may be taken before the server binds it: try a few.
        for _ in 0..5 {
            s.port = free_port();
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("redis-server did not start: {last_err}");
    }

    /// The directory holding the server's RDB/AOF files and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A new synchronous connection (no read timeout: see `conn` for tests).
    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    /// A new synchronous connection to database `db`.
    pub fn conn_db(&self, db: i64) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/{db}", self.port))
            .expect("client")
            .get_connection()
            .expect("connect")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("redis.log")).unwrap_or_default()
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new(server_binary());
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg("redis.log")
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--protected-mode")
            .arg("yes")
            // Stalls of 100 ms or more (a busy disk, a slow fork) show in LATENCY LATEST,
            // which a reply that does not come in time reports.
            .arg("--latency-monitor-threshold")
            .arg("100");
        if !self.opts.no_module {
            cmd.arg("--loadmodule").arg(checked_module());
            cmd.args(&self.opts.module_args);
        }
        cmd.args(&self.opts.args);
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", server_binary()))?;
        self.child = Some(child);
        // Under valgrind a server takes far longer to start.
        let limit = if std::env::var_os("REDIS_LEASE_SLOW").is_some() {
            120
        } else {
            20
        };
        self.wait_ready(Duration::from_secs(limit))
    }

    /// Waits until the server answers PING (and is done loading).
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!(
                        "redis-server exited ({status}); log:\n{}",
                        self.log()
                    ));
                }
            }
            if let Ok(mut c) = self
                .client()
                .get_connection_with_timeout(Duration::from_millis(500))
            {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "redis-server not ready in {limit:?}; log:\n{}",
                    self.log()
                ));
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server with SIGKILL (no shutdown save) and waits for it to exit.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server the polite way: `SHUTDOWN` (with `NOSAVE` unless `save`).
    pub fn shutdown(&mut self, save: bool) {
        if let Ok(mut c) = self.client().get_connection() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN")
                .arg(if save { "SAVE" } else { "NOSAVE" })
                .query(&mut c);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (after `kill9` or `shutdown`),
    /// optionally with other options.
    pub fn restart(&mut self, opts: Option<Options>) {
        self.kill9();
        if let Some(o) = opts {
            self.opts = o;
        }
        self.spawn()
            .unwrap_or_else(|e| panic!("restart failed: {e}"));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Under valgrind (REDIS_LEASE_GRACEFUL=1) a clean SHUTDOWN lets it report leaks.
        if std::env::var_os("REDIS_LEASE_GRACEFUL").is_some() {
            self.shutdown(false);
        }
        self.kill9();
    }
}

/// How long a test waits for any one reply before failing.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection with a read timeout, so a reply that never comes fails the test instead of
/// hanging it.
pub fn conn(s: &Server) -> Connection {
    let c = s.conn();
    c.set_read_timeout(Some(READ_TIMEOUT))
        .expect("read timeout");
    c
}

/// Like `conn`, to database `db`.
pub fn conn_db(s: &Server, db: i64) -> Connection {
    let c = s.conn_db(db);
    c.set_read_timeout(Some(READ_TIMEOUT))
        .expect("read timeout");
    c
}

/// Options with DEBUG enabled (Redis 7 refuses DEBUG otherwise) and a full sync that starts
/// at once (Redis 7 waits 5 s for more replicas by default).
pub fn debug_opts() -> Options {
    Options::default()
        .arg("enable-debug-command", "yes")
        .arg("repl-diskless-sync-delay", "0")
}

/// A server started with `debug_opts`.
pub fn debug_server() -> Server {
    Server::with(debug_opts())
}

/// Sends a signal to a server process (SIGSTOP / SIGCONT), by its pid.
pub fn signal(s: &Server, sig: &str) {
    let pid = s.pid().expect("server running");
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Whether a process still runs (not exited, not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

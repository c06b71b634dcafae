//! The redis-lease benchmark harness.
//!
//! Starts its own `redis-server` with the module (through `redis-lease-testkit`, on a free
//! 127.0.0.1 port) and runs every scenario against every contender that can run it: the
//! `SET NX PX` floor, the module, the seed's Lua design, and the libraries a user would pick
//! instead (rslock in process; redis-py's Lock, python-redis-lock and redis-rw-lock in
//! worker processes, from a venv `scripts/bench-peers.sh` makes). It writes the data as CSV,
//! one markdown table made from it, and a chart.
//!
//! Every loop is bounded by count and by time; the only server touched is the one this
//! harness starts (and kills, by pid, when done), and the only processes it ends are its own
//! workers.

pub mod chart;
pub mod contender;
pub mod machine;
pub mod permits;
pub mod report;
pub mod resp;
pub mod s1_throughput;
pub mod s2_handoff;
pub mod s3_flood;
pub mod s4_lapse;
pub mod s5_scale;
pub mod s6_semaphore;
pub mod s7_growth;
pub mod s8_transfers;
pub mod waiting;
pub mod worker;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redis_lease_testkit::{Options, Server};

pub use contender::Contender;
pub use machine::process_cpu;
pub use report::{Row, Val};

pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub type BenchResult<T> = Result<T, BenchError>;

/// How much to run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// A few operations per scenario and contender, for `make test`.
    Smoke,
    /// The full benchmark, with durations and trial counts multiplied by `scale` (1 = full).
    Full { scale: f64 },
}

/// What the command line asks for.
#[derive(Clone, Debug)]
pub struct Config {
    pub out: PathBuf,
    pub mode: Mode,
    /// Scenario numbers to run (1..=8); empty = all.
    pub only: Vec<u32>,
    /// Other servers to run scenarios 1a, 2, 5 and 7 on as well: (label, binary).
    pub servers: Vec<(String, PathBuf)>,
    /// Wait at most this long for other processes to quiet down before starting.
    pub wait_idle: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            out: PathBuf::from("bench/out"),
            mode: Mode::Full { scale: 1.0 },
            only: Vec::new(),
            servers: Vec::new(),
            wait_idle: None,
        }
    }
}

/// The sizes every scenario runs with (from the mode).
#[derive(Clone, Debug)]
pub struct Settings {
    pub s1_conns: usize,
    pub s1_pipeline_pairs: usize,
    pub s1_secs: f64,
    pub s1_max_pairs: u64,
    pub s1_rounds: usize,
    pub s1_seq_clients: usize,
    pub s1_seq_secs: f64,
    pub s1_seq_rounds: usize,
    pub s2_writers: Vec<usize>,
    pub s2_hold: Duration,
    pub s2_secs: f64,
    pub s2_grace: Duration,
    pub s2_max_grants: u64,
    pub s3_readers: usize,
    pub s3_hold: Duration,
    pub s3_trials: usize,
    pub s3_bound: Duration,
    pub s4_ttl: Duration,
    pub s4_trials: usize,
    pub s5_readers: Vec<usize>,
    pub s5_waiters: Vec<usize>,
    pub s5_waiter_note: Option<String>,
    /// How long the seed's pollers run before their cost is measured (all arrived and backed
    /// off to the longest sleep).
    pub s5_poll_warm: Duration,
    pub s5_secs: f64,
    pub s5_pairs: u64,
    pub s5_mem_locks: usize,
    pub s6_workers: Vec<usize>,
    pub s6_limit: u32,
    /// The permits worker `i` asks for: `s6_mix[i % len]`.
    pub s6_mix: Vec<u32>,
    pub s6_hold: Duration,
    pub s6_secs: f64,
    pub s6_grace: Duration,
    pub s6_max_grants: u64,
    /// Held locks at each step of the growth scenario.
    pub s7_held: Vec<usize>,
    /// (parked requests, over how many keys).
    pub s7_parked: Vec<(usize, usize)>,
    /// Hand-offs sampled per parked case.
    pub s7_handoffs: usize,
    /// Leases ending in the same second.
    pub s7_lapses: usize,
    /// How many parked requests the open-files limit allows.
    pub s7_room: usize,
    pub s8_workers: Vec<usize>,
    /// Accounts to move value between (each case runs every worker count with every size).
    pub s8_accounts: Vec<usize>,
    pub s8_secs: f64,
    pub s8_grace: Duration,
    pub s8_max_transfers: u64,
}

impl Settings {
    pub fn for_mode(mode: Mode) -> Settings {
        let full = Settings {
            s1_conns: 50,
            s1_pipeline_pairs: 8,
            s1_secs: 1.5,
            s1_max_pairs: 20_000_000,
            s1_rounds: 3,
            s1_seq_clients: 4,
            s1_seq_secs: 1.0,
            s1_seq_rounds: 3,
            s2_writers: vec![2, 8, 32],
            s2_hold: Duration::from_millis(2),
            s2_secs: 3.0,
            s2_grace: Duration::from_secs(3),
            s2_max_grants: 1_000_000,
            s3_readers: 8,
            s3_hold: Duration::from_millis(20),
            s3_trials: 10,
            s3_bound: Duration::from_secs(2),
            s4_ttl: Duration::from_millis(200),
            s4_trials: 10,
            s5_readers: vec![1, 100, 10_000],
            s5_waiters: vec![1, 100, 10_000],
            s5_waiter_note: None,
            s5_poll_warm: Duration::from_millis(2600),
            s5_secs: 1.0,
            s5_pairs: 2_000_000,
            s5_mem_locks: 100_000,
            s6_workers: vec![8, 32],
            s6_limit: 4,
            s6_mix: vec![1, 1, 2, 3],
            s6_hold: Duration::from_millis(5),
            s6_secs: 3.0,
            s6_grace: Duration::from_secs(3),
            s6_max_grants: 1_000_000,
            s7_held: vec![10_000, 100_000, 1_000_000],
            s7_parked: vec![(1000, 100), (10_000, 100), (10_000, 10_000)],
            s7_handoffs: 200,
            s7_lapses: 100_000,
            s7_room: usize::MAX,
            s8_workers: vec![8, 32],
            s8_accounts: vec![16, 4],
            s8_secs: 3.0,
            s8_grace: Duration::from_secs(3),
            s8_max_transfers: 1_000_000,
        };
        match mode {
            Mode::Smoke => Settings {
                s1_conns: 4,
                s1_secs: 0.3,
                s1_max_pairs: 160,
                s1_rounds: 1,
                s1_seq_clients: 2,
                s1_seq_secs: 0.3,
                s1_seq_rounds: 1,
                s2_writers: vec![2, 8],
                s2_secs: 0.1,
                s2_grace: Duration::from_millis(1500),
                s2_max_grants: 20,
                s3_trials: 1,
                s3_bound: Duration::from_millis(300),
                s4_trials: 1,
                s5_readers: vec![1, 50],
                s5_waiters: vec![1, 20],
                s5_poll_warm: Duration::from_millis(300),
                s5_secs: 0.3,
                s5_pairs: 32,
                s5_mem_locks: 100,
                s6_workers: vec![8],
                s6_secs: 0.1,
                s6_grace: Duration::from_millis(1500),
                s6_max_grants: 20,
                s7_held: vec![1000, 10_000],
                s7_parked: vec![(100, 10), (200, 200)],
                s7_handoffs: 10,
                s7_lapses: 2000,
                // The contended case only: where a lock that let two in would lose updates.
                s8_workers: vec![8],
                s8_accounts: vec![4],
                s8_secs: 0.2,
                s8_grace: Duration::from_millis(600),
                s8_max_transfers: 5000,
                ..full
            },
            Mode::Full { scale } => {
                let s = scale.clamp(0.01, 100.0);
                let n = |x: usize| ((x as f64 * s).round() as usize).max(1);
                Settings {
                    s1_secs: full.s1_secs * s,
                    s1_rounds: n(3).min(5),
                    s1_seq_secs: full.s1_seq_secs * s,
                    s1_seq_rounds: n(3).min(5),
                    s2_secs: full.s2_secs * s,
                    s3_trials: n(10),
                    s4_trials: n(10),
                    s5_secs: full.s5_secs * s,
                    s6_secs: full.s6_secs * s,
                    s8_secs: full.s8_secs * s,
                    ..full
                }
            }
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "1a: {} conns x {} pairs per pipeline, {:.2} s per run, {} rounds; 1b: {} clients, \
             {:.2} s per run, {} rounds; 2: writers {:?}, hold {:?}, window {:.2} s; 3: {} readers, hold {:?}, {} \
             trials, bound {:?}; 4: ttl {:?}, {} trials; 5: readers {:?}, waiters {:?}, {} locks \
             for memory; 6: workers {:?}, limit {}, permits {:?} in turn, hold {:?}, window {:.2} s; \
             7: held {:?}, parked (requests, keys) {:?}, {} lapses; 8: workers {:?}, accounts {:?}, \
             window {:.2} s",
            self.s1_conns,
            self.s1_pipeline_pairs,
            self.s1_secs,
            self.s1_rounds,
            self.s1_seq_clients,
            self.s1_seq_secs,
            self.s1_seq_rounds,
            self.s2_writers,
            self.s2_hold,
            self.s2_secs,
            self.s3_readers,
            self.s3_hold,
            self.s3_trials,
            self.s3_bound,
            self.s4_ttl,
            self.s4_trials,
            self.s5_readers,
            self.s5_waiters,
            self.s5_mem_locks,
            self.s6_workers,
            self.s6_limit,
            self.s6_mix,
            self.s6_hold,
            self.s6_secs,
            self.s7_held,
            self.s7_parked,
            self.s7_lapses,
            self.s8_workers,
            self.s8_accounts,
            self.s8_secs
        )
    }
}

/// What the scenarios share.
pub struct Ctx {
    pub port: u16,
    pub client: redis::Client,
    pub scripts: contender::Scripts,
    /// Median round trip of a PING.
    pub rtt: Duration,
    pub server_pid: Option<u32>,
    /// The Python with the peers installed (or why there is none).
    pub python: Result<PathBuf, String>,
    /// The workspace root (for bench/peers/driver.py and scripts/).
    pub root: PathBuf,
}

/// Everything a run produced.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub about: Vec<String>,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    /// The report as markdown (what the binary prints, and results.md).
    pub fn markdown(&self) -> String {
        let mut s = String::from("# redis-lease benchmark results\n\n");
        for l in &self.about {
            s.push_str(&format!("- {l}\n"));
        }
        s.push_str(&report::markdown(&self.rows, &Contender::names()));
        s.push_str("\n### The contenders\n\n");
        for n in &self.notes {
            s.push_str(&format!("- {n}\n"));
        }
        s
    }

    /// Writes results.csv, results.md and chart.svg into `dir`.
    pub fn write(&self, dir: &Path) -> BenchResult<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.csv"), report::csv(&self.rows))?;
        std::fs::write(dir.join("results.md"), self.markdown())?;
        std::fs::write(dir.join("chart.svg"), chart::svg(&self.rows, &self.about))?;
        Ok(())
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// The venv Python with the peers (`scripts/bench-peers.sh` creates it when missing), or
/// `$REDIS_LEASE_BENCH_PYTHON`.
fn peers_python(root: &Path) -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("REDIS_LEASE_BENCH_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let out = std::process::Command::new(root.join("scripts/bench-peers.sh"))
        .output()
        .map_err(|e| format!("scripts/bench-peers.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scripts/bench-peers.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Raises this process's open-files limit to its hard limit (the server, started after,
/// inherits it). Returns the soft limit in force afterwards.
fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        let want = libc::rlimit {
            rlim_cur: r.rlim_max,
            rlim_max: r.rlim_max,
        };
        if r.rlim_cur < r.rlim_max && libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
            return want.rlim_cur;
        }
    }
    r.rlim_cur
}

pub(crate) fn start_server(maxclients: usize) -> BenchResult<Server> {
    let module = redis_lease_testkit::module_path();
    if !module.exists() {
        return Err(format!(
            "the module {} is not built (run `make` first)",
            module.display()
        )
        .into());
    }
    let opts = Options::default().arg("maxclients", &maxclients.to_string());
    std::panic::catch_unwind(|| Server::with(opts)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("could not start redis-server with the module: {msg}").into()
    })
}

async fn prepare(
    client: &redis::Client,
    scripts: &contender::Scripts,
) -> BenchResult<(Duration, String)> {
    let mut c = contender::connect(client, Some(Duration::from_secs(5))).await?;
    scripts.load(&mut c).await?;
    let mut v = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut c).await?;
        v.push(t.elapsed());
    }
    v.sort();
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
    // Valkey answers redis_version 7.2.4 for compatibility, and its own in valkey_version.
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .or_else(|| info.lines().find_map(|l| l.strip_prefix("redis_version:")))
        .unwrap_or("?")
        .trim()
        .to_string();
    Ok((v[v.len() / 2], version))
}

async fn command(client: &redis::Client, name: &str) -> BenchResult<String> {
    let mut c = contender::connect(client, Some(Duration::from_secs(5))).await?;
    Ok(redis::cmd(name).query_async(&mut c).await?)
}

fn the_contenders() -> Vec<String> {
    Contender::ALL
        .iter()
        .map(|c| {
            let k = c.caps();
            format!(
                "**{}** ({}): waiting: {}; read mode: {}; semaphore: {}; bounded wait: {}; lease unit: {}; fencing tokens: {}",
                c.name(),
                k.language,
                k.wait,
                if k.read_mode { "yes" } else { "no" },
                match c {
                    Contender::Module => "yes (SEMAPHORE.*, FIFO, permits of any size)",
                    Contender::Seed => "yes (client-side Lua: sorted set of holders + permits hash, polling, no queue)",
                    _ => "no",
                },
                if k.bounded_wait { "yes" } else { "no (acquire blocks until granted)" },
                if k.ttl_unit_ms == 1 { "1 ms" } else { "whole seconds" },
                if k.fencing_tokens { "yes" } else { "no" },
            )
        })
        .collect()
}

/// One scenario's rows (`all`: scenario 1 with its one-at-a-time part, 1b).
fn scenario(rt: &tokio::runtime::Runtime, ctx: &Ctx, st: &Settings, n: u32, all: bool) -> Vec<Row> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match n {
        1 => {
            let mut r = s1_throughput::run_pipelined(ctx, st);
            if all {
                r.extend(rt.block_on(s1_throughput::run_sequential(ctx, st)));
            }
            r
        }
        2 => rt.block_on(s2_handoff::run(ctx, st)),
        3 => rt.block_on(s3_flood::run(ctx, st)),
        4 => rt.block_on(s4_lapse::run(ctx, st)),
        5 => rt.block_on(s5_scale::run(ctx, st)),
        6 => rt.block_on(s6_semaphore::run(ctx, st)),
        7 => rt.block_on(s7_growth::run(ctx, st)),
        _ => rt.block_on(s8_transfers::run(ctx, st)),
    }));
    r.unwrap_or_else(|_| {
        vec![Row::new(&n.to_string(), "scenario failed", "-", "")
            .val("module", Val::Error("the harness panicked".into()))]
    })
}

/// The scenarios that run on the other servers too.
pub const ON_EVERY_SERVER: [u32; 4] = [1, 2, 5, 7];

/// Scenarios 1a, 2, 5 and 7 on another server (`REDIS_SERVER` set to its binary while they
/// run), their rows' scenarios prefixed with its label, and one row per server of the
/// module's ratios to the floor in 1a.
fn other_server(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    st: &Settings,
    root: &Path,
    label: &str,
    binary: &Path,
    maxclients: usize,
) -> BenchResult<Vec<Row>> {
    let before = std::env::var_os("REDIS_SERVER");
    std::env::set_var("REDIS_SERVER", binary);
    let started = start_server(maxclients);
    match before {
        Some(b) => std::env::set_var("REDIS_SERVER", b),
        None => std::env::remove_var("REDIS_SERVER"),
    }
    let server = started?;
    let client = server.client();
    let scripts = contender::Scripts::default();
    let (rtt, version) = rt.block_on(prepare(&client, &scripts))?;
    let ctx = Ctx {
        port: server.port,
        client,
        scripts,
        rtt,
        server_pid: server.pid(),
        python: peers_python(root),
        root: root.to_path_buf(),
    };
    let mut rows = Vec::new();
    for n in ON_EVERY_SERVER {
        if !(cfg.only.is_empty() || cfg.only.contains(&n)) {
            continue;
        }
        eprintln!("[bench] {label} ({version}): scenario {n} ...");
        let _ = rt.block_on(command(&ctx.client, "FLUSHALL"));
        // Scenario 7 starts servers of its own: the same binary.
        std::env::set_var("REDIS_SERVER", binary);
        let r = scenario(rt, &ctx, st, n, false);
        std::env::remove_var("REDIS_SERVER");
        rows.extend(r.into_iter().map(|mut r| {
            r.scenario = format!("{label} {version} · {}", r.scenario);
            r
        }));
    }
    Ok(rows)
}

/// Per server, the module's pairs against the floor in scenario 1a (`default`: the label of
/// the server the other scenarios ran on).
fn per_server(rows: &[Row], default: &str) -> Vec<Row> {
    rows.iter()
        .filter(|r| r.metric == "vs floor")
        .map(|r| {
            let server = match r.scenario.split_once(" · ") {
                Some((label, _)) => label,
                None => default,
            };
            Row::new("9 per server: module vs floor in 1a", server, &r.case, "x")
                .val("module", r.get("module").clone())
        })
        .collect()
}

/// Runs the benchmark. Progress goes to stderr; the report is returned (and not written).
pub fn run(cfg: &Config) -> BenchResult<Report> {
    let mut about = Vec::new();
    if let Some(limit) = cfg.wait_idle {
        if let Some(s) = machine::wait_idle(limit).filter(|s| *s >= 0.10) {
            about.push(format!(
                "not idle: other processes used {:.0}% of the CPUs before the start",
                s * 100.0
            ));
        }
    }
    let t_start = Instant::now();
    let load_start = machine::loadavg();
    let root = workspace_root();
    let mut st = Settings::for_mode(cfg.mode);
    // Every parked waiter needs a socket here and a client slot in the server.
    let room = raise_nofile().saturating_sub(400) as usize;
    if st.s5_waiters.iter().any(|&w| w > room) {
        st.s5_waiters = st.s5_waiters.iter().map(|&w| w.min(room)).collect();
        st.s5_waiters.dedup();
        st.s5_waiter_note = Some(format!(
            "the open-files limit allows only {room} waiters here"
        ));
    }
    st.s7_room = room;
    let maxclients = st.s5_waiters.iter().max().copied().unwrap_or(0) + 1000;
    let server = start_server(maxclients)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = server.client();
    let scripts = contender::Scripts::default();
    let (rtt, version) = rt.block_on(prepare(&client, &scripts))?;
    about.extend(machine::describe(&root, &version));
    let ctx = Ctx {
        port: server.port,
        client,
        scripts,
        rtt,
        server_pid: server.pid(),
        python: peers_python(&root),
        root,
    };
    let mut rows = Vec::new();
    let mut loads = Vec::new();
    let mut max_share: f64 = 0.0;
    for n in 1..=8u32 {
        if !(cfg.only.is_empty() || cfg.only.contains(&n)) {
            continue;
        }
        eprintln!("[bench] scenario {n} ...");
        let t = Instant::now();
        let other = machine::OtherLoad::start(&ctx.server_pid.into_iter().collect::<Vec<_>>());
        // Async: a blocking connect here would fail with EINTR when a worker process exits.
        let _ = rt.block_on(command(&ctx.client, "FLUSHALL"));
        rows.extend(scenario(&rt, &ctx, &st, n, true));
        let share = other.share().unwrap_or(0.0) * 100.0;
        eprintln!(
            "[bench] scenario {n} done in {:.1} s (others used {share:.0}% of the CPUs)",
            t.elapsed().as_secs_f64()
        );
        loads.push(format!("{n}: {share:.0}%"));
        max_share = max_share.max(share);
        let alive = rt.block_on(command(&ctx.client, "PING"));
        if let Err(e) = alive {
            let log = server.log();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            return Err(format!(
                "redis-server died during scenario {n} ({e}): {}",
                tail.join(" | ")
            )
            .into());
        }
    }
    drop(server);
    for (label, binary) in &cfg.servers {
        match other_server(&rt, cfg, &st, &ctx.root, label, binary, maxclients) {
            Ok(r) => rows.extend(r),
            Err(e) => about.push(format!("{label} ({}) did not run: {e}", binary.display())),
        }
    }
    if !cfg.servers.is_empty() {
        let ratios = per_server(&rows, &format!("redis-server {version}"));
        rows.extend(ratios);
    }
    if max_share >= 10.0 {
        about.insert(
            0,
            format!(
                "**not idle**: other processes used up to {max_share:.0}% of the CPUs during a scenario, \
                 which skews every figure (rerun on an idle machine)"
            ),
        );
    }
    about.push(format!(
        "load average (1/5/15 min): {load_start} at the start, {} at the end; CPU share used by other processes during each scenario: {}",
        machine::loadavg(),
        loads.join(", ")
    ));
    let mode = match cfg.mode {
        Mode::Smoke => "smoke".to_string(),
        Mode::Full { scale: 1.0 } => "full".to_string(),
        Mode::Full { scale } => format!("scaled x{scale}"),
    };
    about.push(format!(
        "mode: {mode}; loopback PING round trip (median): {:.1} µs; finished in {:.0} s",
        rtt.as_secs_f64() * 1e6,
        t_start.elapsed().as_secs_f64()
    ));
    about.push(format!("settings: {}", st.describe()));
    if let Err(e) = &ctx.python {
        about.push(format!("the Python peers did not run: {e}"));
    }
    Ok(Report {
        about,
        rows,
        notes: the_contenders(),
    })
}

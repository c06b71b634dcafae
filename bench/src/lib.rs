//! The redis-lease benchmark harness.
//!
//! Starts its own `redis-server` with the module (through `redis-lease-testkit`, on a free
//! 127.0.0.1 port), runs every scenario against the module and against a baseline written
//! from the client-side design (Lua scripts + client polling), and reports a table (text,
//! markdown, CSV) and an SVG chart of the key comparison.
//!
//! Every loop is bounded by count and by time, and the only server touched is the one this
//! harness starts (and kills, by pid, when done).

pub mod chart;
pub mod locks;
pub mod report;
pub mod resp;
pub mod s1_throughput;
pub mod s2_handoff;
pub mod s3_flood;
pub mod s4_lapse;
pub mod s5_scale;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use redis_lease_testkit::{Options, Server};

pub use report::{Row, Val};

pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub type BenchResult<T> = Result<T, BenchError>;

/// How much to run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// A few hundred operations per scenario, for `make test`: well under 30 s.
    Smoke,
    /// The full benchmark, with durations and counts multiplied by `scale` (1.0 = full).
    Full { scale: f64 },
}

/// What the command line asks for.
#[derive(Clone, Debug)]
pub struct Config {
    pub out: PathBuf,
    pub mode: Mode,
    /// Scenario numbers to run (1..=5); empty = all.
    pub only: Vec<u32>,
    /// Start the server without the module (to check the baseline and the harness alone;
    /// every module figure is then an error).
    pub no_module: bool,
    /// Wait at most this long for other processes to quiet down before starting.
    pub wait_idle: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            out: PathBuf::from("bench/out"),
            mode: Mode::Full { scale: 1.0 },
            only: Vec::new(),
            no_module: false,
            wait_idle: None,
        }
    }
}

/// The sizes every scenario runs with (derived from the mode).
#[derive(Clone, Debug)]
pub struct Settings {
    pub s1_conns: usize,
    pub s1_pipeline_pairs: usize,
    pub s1_secs: f64,
    pub s1_max_pairs: u64,
    pub s1_rounds: usize,
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
    /// How long the baseline's pollers run before their cost is measured (so that they have
    /// all arrived and backed off to the longest sleep).
    pub s5_poll_warm: Duration,
    pub s5_secs: f64,
    pub s5_pairs: u64,
    pub s5_mem_locks: usize,
}

impl Settings {
    pub fn for_mode(mode: Mode) -> Settings {
        match mode {
            Mode::Smoke => Settings {
                s1_conns: 4,
                s1_pipeline_pairs: 8,
                s1_secs: 2.0,
                s1_max_pairs: 160,
                s1_rounds: 1,
                s2_writers: vec![2, 8, 32],
                s2_hold: Duration::from_millis(2),
                s2_secs: 0.05,
                s2_grace: Duration::from_millis(1500),
                s2_max_grants: 20,
                s3_readers: 8,
                s3_hold: Duration::from_millis(20),
                s3_trials: 1,
                s3_bound: Duration::from_millis(300),
                s4_ttl: Duration::from_millis(200),
                s4_trials: 1,
                s5_readers: vec![1, 50],
                s5_waiters: vec![1, 20],
                s5_waiter_note: None,
                s5_poll_warm: Duration::from_millis(300),
                s5_secs: 1.0,
                s5_pairs: 32,
                s5_mem_locks: 100,
            },
            Mode::Full { scale } => {
                let s = scale.clamp(0.01, 100.0);
                let n = |x: f64| (x * s).round().max(1.0) as usize;
                Settings {
                    s1_conns: 50,
                    s1_pipeline_pairs: 8,
                    s1_secs: 1.5 * s,
                    s1_max_pairs: 20_000_000,
                    s1_rounds: n(3.0).min(5),
                    s2_writers: vec![2, 8, 32],
                    s2_hold: Duration::from_millis(2),
                    s2_secs: 3.0 * s,
                    s2_grace: Duration::from_secs(3),
                    s2_max_grants: 1_000_000,
                    s3_readers: 8,
                    s3_hold: Duration::from_millis(20),
                    s3_trials: n(10.0),
                    s3_bound: Duration::from_secs(2),
                    s4_ttl: Duration::from_millis(200),
                    s4_trials: n(10.0),
                    s5_readers: vec![1, 100, 10_000],
                    s5_waiters: vec![1, 100, 10_000],
                    s5_waiter_note: None,
                    s5_poll_warm: Duration::from_millis(2600),
                    s5_secs: 1.0 * s,
                    s5_pairs: 2_000_000,
                    s5_mem_locks: 100_000,
                }
            }
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "s1: {} conns x {} lock+unlock pairs per pipeline, {:.2} s per run, {} rounds; \
             s2: writers {:?}, hold {:?}, window {:.2} s; s3: {} readers, hold {:?}, {} trials, \
             bound {:?}; s4: ttl {:?}, {} trials; s5: readers {:?}, waiters {:?}, {:.2} s per \
             level, {} locks for memory",
            self.s1_conns,
            self.s1_pipeline_pairs,
            self.s1_secs,
            self.s1_rounds,
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
            self.s5_secs,
            self.s5_mem_locks
        )
    }
}

/// What the scenarios share.
pub struct Ctx {
    pub port: u16,
    pub client: redis::Client,
    pub scripts: locks::Scripts,
    /// Median round trip of a PING on a multiplexed connection.
    pub rtt: Duration,
    /// The server's pid (for its CPU time).
    pub server_pid: Option<u32>,
}

/// CPU time (user + system) a process has used so far, from /proc.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Some(Duration::from_nanos((utime + stime) * 1_000_000_000 / hz))
}

/// The numbers the chart draws.
#[derive(Clone, Debug, Default)]
pub struct ChartData {
    /// Scenario 1: (label, pairs/s, kind: 0 floor, 1 module, 2 baseline).
    pub s1: Vec<(String, Option<f64>, u8)>,
    /// Scenario 2, one point per writer count.
    pub s2: Vec<HandoffPoint>,
    /// Scenarios 3 and 4: (label, module ms, baseline ms, target ms).
    pub s34: Vec<(String, Val, Val, f64)>,
}

/// Scenario 2 at one writer count: [module, baseline] figures.
#[derive(Clone, Debug, Default)]
pub struct HandoffPoint {
    pub writers: usize,
    pub p99: [Val; 2],
    pub max: [Val; 2],
    pub fairness: [Val; 2],
    /// The p99 target, ms.
    pub target_ms: f64,
}

/// Where and on what the run happened.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    pub nproc: usize,
    pub cpu: String,
    pub redis_version: String,
    pub server_binary: String,
    pub module_path: String,
    pub module_build: String,
    pub module_list: String,
    pub workspace_head: String,
    pub date: String,
    /// /proc/loadavg when the run started and when it ended (other work on the machine skews
    /// every figure).
    pub load_start: String,
    pub load_end: String,
    /// Per scenario: the share of the CPUs that other processes used while it ran.
    pub other_load: Vec<String>,
}

/// Busy and total CPU time of the whole machine so far, in clock ticks (from /proc/stat).
pub fn machine_cpu() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

/// CPU time used by this process and the server so far.
fn own_cpu(server_pid: Option<u32>) -> Duration {
    let me = process_cpu(std::process::id()).unwrap_or_default();
    me + server_pid.and_then(process_cpu).unwrap_or_default()
}

/// Measures, from `start()` to `share()`, how much of the machine's CPU time went to other
/// processes than this one and the server (a benchmark on a busy machine measures little).
pub struct OtherLoad {
    machine: Option<(u64, u64)>,
    own: Duration,
    server_pid: Option<u32>,
}

impl OtherLoad {
    pub fn start(server_pid: Option<u32>) -> OtherLoad {
        OtherLoad {
            machine: machine_cpu(),
            own: own_cpu(server_pid),
            server_pid,
        }
    }

    /// The share of all CPUs' time (0..1) that other processes used.
    pub fn share(&self) -> Option<f64> {
        let (b0, t0) = self.machine?;
        let (b1, t1) = machine_cpu()?;
        if t1 <= t0 {
            return None;
        }
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = if hz > 0 { hz as f64 } else { 100.0 };
        let busy = (b1 - b0) as f64 / hz;
        let total = (t1 - t0) as f64 / hz;
        let own = (own_cpu(self.server_pid) - self.own).as_secs_f64();
        Some(((busy - own) / total).clamp(0.0, 1.0))
    }
}

/// Waits (at most `limit`) until other processes use less than 10% of the machine's CPUs over
/// two seconds. Returns the last share seen.
pub fn wait_idle(limit: Duration) -> Option<f64> {
    let until = Instant::now() + limit;
    loop {
        let l = OtherLoad::start(None);
        std::thread::sleep(Duration::from_secs(2));
        let share = l.share();
        match share {
            Some(s) if s < 0.10 => return share,
            None => return None,
            _ => {}
        }
        if Instant::now() >= until {
            return share;
        }
        eprintln!(
            "[bench] waiting for an idle machine: other processes use {:.0}% of the CPUs",
            share.unwrap_or(0.0) * 100.0
        );
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

impl Machine {
    pub fn lines(&self) -> Vec<String> {
        vec![
            format!("date: {}", self.date),
            format!("machine: nproc {}, CPU {}", self.nproc, self.cpu),
            format!(
                "server: {} (redis_version {})",
                self.server_binary, self.redis_version
            ),
            format!("module: {} ({})", self.module_path, self.module_build),
            format!("MODULE LIST: {}", self.module_list),
            format!("workspace: {}", self.workspace_head),
            format!(
                "load average (1/5/15 min): {} at the start, {} at the end; CPU share used by \
                 other processes during each scenario: {}",
                self.load_start,
                self.load_end,
                if self.other_load.is_empty() {
                    "-".to_string()
                } else {
                    self.other_load.join(", ")
                }
            ),
        ]
    }
}

/// Everything a run produced.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub machine: Machine,
    pub settings: String,
    pub mode: String,
    pub rtt_us: f64,
    pub rows: Vec<Row>,
    pub chart: ChartData,
    pub notes: Vec<String>,
    pub elapsed_s: f64,
}

impl Report {
    /// The whole report as plain text (what the binary prints).
    pub fn text(&self) -> String {
        let mut s = String::new();
        s.push_str("redis-lease benchmark: module vs client-side baseline\n");
        for l in self.machine.lines() {
            s.push_str(&l);
            s.push('\n');
        }
        s.push_str(&format!(
            "mode: {}; loopback PING round trip (median): {:.1} µs\nsettings: {}\n\n",
            self.mode, self.rtt_us, self.settings
        ));
        s.push_str(&report::text_table(&self.rows));
        s.push('\n');
        for l in report::target_summary(&self.rows) {
            s.push_str(&l);
            s.push('\n');
        }
        if !self.notes.is_empty() {
            s.push_str("\nnotes:\n");
            for n in &self.notes {
                s.push_str(&format!("- {n}\n"));
            }
        }
        s.push_str(&format!("\nfinished in {:.1} s\n", self.elapsed_s));
        s
    }

    /// The report as markdown: machine, settings, table, notes.
    pub fn markdown(&self) -> String {
        let mut s = String::from("# redis-lease benchmark results\n\n");
        for l in self.machine.lines() {
            s.push_str(&format!("- {l}\n"));
        }
        s.push_str(&format!(
            "- mode: {}; loopback PING round trip (median): {:.1} µs\n- settings: {}\n\n",
            self.mode, self.rtt_us, self.settings
        ));
        s.push_str(&report::markdown_table(&self.rows));
        let summary = report::target_summary(&self.rows);
        if let Some((head, rest)) = summary.split_first() {
            s.push_str(&format!(
                "\n{}{}:\n\n",
                head[..1].to_uppercase(),
                &head[1..]
            ));
            for l in rest {
                s.push_str(&format!("- {l}\n"));
            }
        }
        if !self.notes.is_empty() {
            s.push_str("\nNotes:\n\n");
            for n in &self.notes {
                s.push_str(&format!("- {n}\n"));
            }
        }
        s.push_str(&format!("\nFinished in {:.1} s.\n", self.elapsed_s));
        s
    }

    /// Writes results.csv, results.md, results.txt and chart.svg into `dir`.
    pub fn write(&self, dir: &Path) -> BenchResult<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("results.csv"), report::csv(&self.rows))?;
        std::fs::write(dir.join("results.md"), self.markdown())?;
        std::fs::write(dir.join("results.txt"), self.text())?;
        chart::draw(&self.chart, &self.machine, &dir.join("chart.svg"))?;
        Ok(())
    }
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A reply flattened to words (for `MODULE LIST`).
fn flat(v: &redis::Value) -> String {
    use redis::Value as V;
    match v {
        V::Nil => "nil".into(),
        V::Int(n) => n.to_string(),
        V::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        V::SimpleString(s) => s.clone(),
        V::Okay => "OK".into(),
        V::Array(a) | V::Set(a) => {
            format!("[{}]", a.iter().map(flat).collect::<Vec<_>>().join(" "))
        }
        V::Map(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{} {}", flat(k), flat(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => format!("{other:?}"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

fn machine_info(conn: &mut redis::Connection) -> Machine {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(conn)
        .unwrap_or_default();
    let redis_version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_string();
    let module = redis_lease_testkit::module_path();
    let module_path = module.display().to_string();
    let mut build = Vec::new();
    if let Ok(md) = std::fs::metadata(&module) {
        build.push(format!("{} bytes", md.len()));
    }
    if let Some(t) = sh("date", &["-u", "-r", &module_path, "+%Y-%m-%dT%H:%M:%SZ"]) {
        build.push(format!("built {t}"));
    }
    if let Some(h) = sh("sha256sum", &[&module_path]) {
        build.push(format!(
            "sha256 {}",
            h.split_whitespace()
                .next()
                .unwrap_or("")
                .get(..16)
                .unwrap_or("")
        ));
    }
    let ml: redis::Value = redis::cmd("MODULE")
        .arg("LIST")
        .query(conn)
        .unwrap_or(redis::Value::Nil);
    let module_list = flat(&ml).chars().take(200).collect();
    let root = workspace_root();
    let root_s = root.display().to_string();
    let head = sh("git", &["-C", &root_s, "log", "-1", "--format=%h %s"]).unwrap_or_default();
    let dirty = sh(
        "git",
        &[
            "-C",
            &root_s,
            "status",
            "--porcelain",
            "--",
            "src",
            "core",
            "Cargo.toml",
        ],
    )
    .map(|s| s.lines().count())
    .unwrap_or(0);
    let workspace_head = if dirty > 0 {
        format!("HEAD {head} (+{dirty} uncommitted changes in the module's sources)")
    } else {
        format!("HEAD {head}")
    };
    Machine {
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        cpu,
        redis_version,
        server_binary: sh(&redis_lease_testkit::server_binary(), &["--version"])
            .unwrap_or_else(redis_lease_testkit::server_binary),
        module_path,
        module_build: build.join(", "),
        module_list,
        workspace_head,
        date: sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_default(),
        load_start: loadavg(),
        load_end: String::new(),
        other_load: Vec::new(),
    }
}

/// Raises this process's open-files limit to its hard limit (the server, started after,
/// inherits it). Returns the soft limit in force afterwards.
fn raise_nofile() -> u64 {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit {
                rlim_cur: r.rlim_max,
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
        r.rlim_cur
    }
}

fn start_server(maxclients: usize, no_module: bool) -> BenchResult<Server> {
    let module = redis_lease_testkit::module_path();
    if !no_module && !module.exists() {
        return Err(format!(
            "the module {} is not built (run `make` or `cargo build --release` first)",
            module.display()
        )
        .into());
    }
    let mut opts = Options::default().arg("maxclients", &maxclients.to_string());
    opts.no_module = no_module;
    std::panic::catch_unwind(|| Server::with(opts)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("could not start redis-server with the module: {msg}").into()
    })
}

async fn measure_rtt(client: &redis::Client) -> BenchResult<Duration> {
    let mut c = locks::connect(client, Some(Duration::from_secs(5))).await?;
    let mut v = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query_async(&mut c).await?;
        v.push(t.elapsed());
    }
    v.sort();
    Ok(v[v.len() / 2])
}

fn alive(server: &Server) -> bool {
    server
        .client()
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).ok())
        .is_some()
}

fn scenario_error_row(n: u32, e: &str) -> Row {
    Row::new(&format!("{n}"), "scenario failed", "-", "")
        .vals(Val::Text(format!("error: {e}")), Val::Missing)
}

/// Runs the benchmark. Progress goes to stderr; the report is returned (and not written).
pub fn run(cfg: &Config) -> BenchResult<Report> {
    let mut notes = Vec::new();
    if let Some(limit) = cfg.wait_idle {
        if let Some(s) = wait_idle(limit) {
            if s >= 0.10 {
                notes.push(format!(
                    "the machine did not become idle within {limit:?}: other processes used {:.0}% of the CPUs before the start",
                    s * 100.0
                ));
            }
        }
    }
    let t_start = Instant::now();
    let nofile = raise_nofile();
    let mut st = Settings::for_mode(cfg.mode);
    // Every parked waiter needs a socket here and a client slot in the server.
    let room = nofile.saturating_sub(400) as usize;
    if let Some(&max_w) = st.s5_waiters.iter().max() {
        if max_w > room {
            st.s5_waiters = st.s5_waiters.iter().map(|&w| w.min(room)).collect();
            st.s5_waiters.dedup();
            st.s5_waiter_note = Some(format!(
                "open-files limit {nofile} allows only {room} waiters here, not {max_w}"
            ));
        }
    }
    let maxclients = st.s5_waiters.iter().max().copied().unwrap_or(0) + 1000;
    let mut server = start_server(maxclients, cfg.no_module)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut machine = {
        let mut c = server.client().get_connection()?;
        let m = machine_info(&mut c);
        let mc: i64 = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxclients")
            .query::<Vec<String>>(&mut c)
            .ok()
            .and_then(|v| v.get(1).and_then(|s| s.parse().ok()))
            .unwrap_or(0);
        if (mc as usize) < maxclients {
            notes.push(format!(
                "the server runs with maxclients {mc} (asked for {maxclients})"
            ));
        }
        m
    };
    let client = server.client();
    let scripts = locks::Scripts::default();
    let rtt = rt.block_on(async {
        let mut c = locks::connect(&client, Some(Duration::from_secs(5))).await?;
        scripts.load(&mut c).await?;
        measure_rtt(&client).await
    })?;
    let mut ctx = Ctx {
        port: server.port,
        client,
        scripts,
        rtt,
        server_pid: server.pid(),
    };
    let mut chart = ChartData::default();
    let mut rows = Vec::new();
    let want = |n: u32| cfg.only.is_empty() || cfg.only.contains(&n);
    for n in 1..=5u32 {
        if !want(n) {
            continue;
        }
        eprintln!("[bench] scenario {n} ...");
        let t = Instant::now();
        let other = OtherLoad::start(ctx.server_pid);
        if let Ok(mut c) = server.client().get_connection() {
            let _: redis::RedisResult<String> = redis::cmd("FLUSHALL").query(&mut c);
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match n {
            1 => s1_throughput::run(&ctx, &st, &mut chart),
            2 => rt.block_on(s2_handoff::run(&ctx, &st, &mut chart)),
            3 => rt.block_on(s3_flood::run(&ctx, &st, &mut chart)),
            4 => rt.block_on(s4_lapse::run(&ctx, &st, &mut chart)),
            _ => rt.block_on(s5_scale::run(&ctx, &st)),
        }));
        match r {
            Ok(r) => rows.extend(r),
            Err(_) => rows.push(scenario_error_row(n, "the harness panicked")),
        }
        let share = other.share();
        eprintln!(
            "[bench] scenario {n} done in {:.1} s (other processes used {:.0}% of the CPUs)",
            t.elapsed().as_secs_f64(),
            share.unwrap_or(0.0) * 100.0
        );
        if let Some(s) = share {
            machine.other_load.push(format!("{n}: {:.0}%", s * 100.0));
        }
        if !alive(&server) {
            let log = server.log();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let msg = format!(
                "redis-server died during scenario {n}; log tail: {}",
                tail.join(" | ")
            );
            eprintln!("[bench] {msg}");
            notes.push(msg);
            server = start_server(maxclients, cfg.no_module)?;
            ctx.port = server.port;
            ctx.client = server.client();
            ctx.server_pid = server.pid();
            rt.block_on(async {
                let mut c = locks::connect(&ctx.client, Some(Duration::from_secs(5))).await?;
                ctx.scripts.load(&mut c).await
            })?;
        }
    }
    notes.push(
        "baseline = Lua scripts with EVALSHA (readers: INCR/PEXPIRE a KEY:readers counter when \
         KEY is absent; writer: SET KEY PX when KEY and KEY:readers are absent; release: \
         DECR/DEL or DEL); baseline waiting = client loop sleeping 100 ms, doubling to 1 s"
            .into(),
    );
    notes.push("module waiting = `WAIT ms` parked in the server, one connection per waiter".into());
    drop(server);
    machine.load_end = loadavg();
    let mode = match cfg.mode {
        Mode::Smoke => "smoke".to_string(),
        Mode::Full { scale: 1.0 } => "full".to_string(),
        Mode::Full { scale } => format!("scaled x{scale}"),
    };
    Ok(Report {
        machine,
        settings: st.describe(),
        mode,
        rtt_us: rtt.as_secs_f64() * 1e6,
        rows,
        chart,
        notes,
        elapsed_s: t_start.elapsed().as_secs_f64(),
    })
}

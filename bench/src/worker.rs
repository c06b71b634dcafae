//! Workers: one client of one contender running one `Job`, either as a tokio task in this
//! process (the module, the seed, rslock, the floor) or as a Python process running
//! `bench/peers/driver.py` (the Python peers). Both speak the same protocol (the job, then
//! `go T` / `stop` lines in; `ready`, `grant`, `done` events out), run the same loop, and time
//! everything on CLOCK_MONOTONIC, so one scenario's code measures every contender alike.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::contender::{hold_until, new_owner, Client, Contender, Mode};
use crate::{BenchResult, Ctx};

/// CLOCK_MONOTONIC in seconds: the clock of `Instant` and of Python's `time.monotonic()`.
pub fn now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The `Instant` of a monotonic time `t` (seconds).
pub fn instant_at(t: f64) -> Instant {
    let (i, n) = (Instant::now(), now());
    if t >= n {
        i + Duration::from_secs_f64(t - n)
    } else {
        i.checked_sub(Duration::from_secs_f64(n - t)).unwrap_or(i)
    }
}

/// What one worker does: after `go + offset_s`, acquire (each acquire waiting until `wait_s`
/// after it asked, at most to `hard_s`), hold `hold_ms` (< 0: never release, the holder that
/// dies), release; once, or again (`repeat`) until `stop_s` or `max_grants`. At `hard_s`
/// everything ends and what was recorded is reported.
#[derive(Clone, Debug, Serialize)]
pub struct Job {
    pub lib: &'static str,
    pub port: u16,
    pub key: String,
    pub mode: &'static str,
    pub ttl_ms: u64,
    pub hold_ms: f64,
    pub repeat: bool,
    pub offset_s: f64,
    pub stop_s: f64,
    pub wait_s: f64,
    pub hard_s: f64,
    pub max_grants: u64,
    /// Send a `grant` event at the first grant.
    pub announce: bool,
    /// Record every request's times (else only count grants).
    pub record: bool,
    /// Semaphore mode: the semaphore's limit and this worker's permits per hold.
    pub limit: u32,
    pub permits: u32,
}

impl Job {
    /// One acquire, waiting up to `wait_s`, no hold, ending by `wait_s + 5 s`.
    pub fn once(c: Contender, ctx: &Ctx, key: &str, mode: Mode, wait_s: f64) -> Job {
        let (limit, permits) = match mode {
            Mode::Semaphore { limit, permits } => (limit, permits),
            _ => (0, 1),
        };
        Job {
            lib: c.name(),
            port: ctx.port,
            key: key.into(),
            mode: mode.word(),
            limit,
            permits,
            ttl_ms: 10_000,
            hold_ms: 0.0,
            repeat: false,
            offset_s: 0.0,
            stop_s: wait_s + 5.0,
            wait_s,
            hard_s: wait_s + 5.0,
            max_grants: 1 << 40,
            announce: false,
            record: true,
        }
    }

    /// Acquire, hold, release, again, until `secs` (each acquire waiting up to `grace` past
    /// the window).
    pub fn repeat(
        c: Contender,
        ctx: &Ctx,
        key: &str,
        mode: Mode,
        hold_ms: f64,
        secs: f64,
        grace: f64,
    ) -> Job {
        Job {
            repeat: true,
            hold_ms,
            stop_s: secs,
            hard_s: secs + grace,
            ..Job::once(c, ctx, key, mode, secs + grace)
        }
    }
}

/// What a worker did.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Report {
    /// When each request was sent, and when it was granted (`None`: not before its deadline).
    #[serde(default)]
    pub asked: Vec<f64>,
    #[serde(default)]
    pub granted: Vec<Option<f64>>,
    /// Each hold, grant to release sent, seconds.
    #[serde(default)]
    pub holds: Vec<f64>,
    pub grants: u64,
    pub error: Option<String>,
    /// The worker process's own CPU time (Python peers), seconds.
    #[serde(default)]
    pub cpu_s: Option<f64>,
}

impl Report {
    /// Every request's wait in ms (a request never served: the time it waited, a lower bound)
    /// and whether it was served.
    pub fn waits(&self) -> impl Iterator<Item = (f64, bool)> + '_ {
        self.asked.iter().zip(&self.granted).map(|(a, g)| match g {
            Some(g) => ((g - a) * 1e3, true),
            None => (f64::NAN, false),
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(tag = "ev", rename_all = "lowercase")]
pub enum Event {
    Ready,
    Grant { asked: f64, at: f64 },
    Done(Report),
}

/// A running worker.
pub struct Worker {
    pub who: Contender,
    lines: mpsc::UnboundedSender<String>,
    events: mpsc::UnboundedReceiver<Result<Event, String>>,
    child: Option<Child>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Worker {
    pub async fn spawn(ctx: &Ctx, who: Contender, job: Job) -> BenchResult<Worker> {
        let (lines, lines_rx) = mpsc::unbounded_channel();
        let (ev_tx, events) = mpsc::unbounded_channel();
        let mut w = Worker {
            who,
            lines,
            events,
            child: None,
            task: None,
        };
        if who.is_python() {
            w.child = Some(spawn_python(ctx, job, lines_rx, ev_tx).await?);
        } else {
            let client = ctx.client.clone();
            let scripts = ctx.scripts.clone();
            w.task = Some(tokio::spawn(async move {
                rust_worker(who, client, scripts, job, lines_rx, ev_tx).await
            }));
        }
        Ok(w)
    }

    pub async fn next(&mut self, limit: Duration) -> BenchResult<Event> {
        let who = self.who.name();
        match tokio::time::timeout(limit, self.events.recv()).await {
            Err(_) => Err(format!("{who}: no word from a worker within {limit:?}").into()),
            Ok(None) => Err(format!("{who}: a worker ended without a report").into()),
            Ok(Some(Err(e))) => Err(format!("{who}: {e}").into()),
            Ok(Some(Ok(ev))) => Ok(ev),
        }
    }

    pub fn go(&self, at: f64) {
        let _ = self.lines.send(format!("go {at}"));
    }

    pub fn stop(&self) {
        let _ = self.lines.send("stop".into());
    }

    /// Waits for the report (skipping a `grant` event).
    pub async fn done(&mut self, limit: Duration) -> BenchResult<Report> {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if let Event::Done(r) = self.next(left).await? {
                return match &r.error {
                    Some(e) => Err(format!("{}: {e}", self.who.name()).into()),
                    None => Ok(r),
                };
            }
        }
    }

    /// Ends the worker at once, as a crash would: the process gets SIGKILL (it is our child,
    /// by its pid), the task is dropped with its connection.
    pub fn kill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns a worker per job, all of one contender, and waits until every one is ready.
pub async fn start(ctx: &Ctx, who: Contender, jobs: Vec<Job>) -> BenchResult<Vec<Worker>> {
    let mut ws = Vec::new();
    for j in jobs {
        ws.push(Worker::spawn(ctx, who, j).await?);
    }
    for w in &mut ws {
        match w.next(Duration::from_secs(30)).await? {
            Event::Ready => {}
            other => return Err(format!("{}: {other:?} before ready", who.name()).into()),
        }
    }
    Ok(ws)
}

/// Every worker's report (waiting at most `limit` in all).
pub async fn finish(ws: &mut [Worker], limit: Duration) -> BenchResult<Vec<Report>> {
    let until = Instant::now() + limit;
    let mut out = Vec::new();
    for w in ws.iter_mut() {
        out.push(
            w.done(until.saturating_duration_since(Instant::now()))
                .await?,
        );
    }
    Ok(out)
}

/// Ends the workers and reaps their processes (so that their CPU time counts as this run's,
/// not as other processes', in the load figures).
pub async fn end(ws: Vec<Worker>) {
    for mut w in ws {
        w.kill();
        if let Some(mut c) = w.child.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.wait()).await;
        }
    }
}

async fn spawn_python(
    ctx: &Ctx,
    job: Job,
    mut lines: mpsc::UnboundedReceiver<String>,
    events: mpsc::UnboundedSender<Result<Event, String>>,
) -> BenchResult<Child> {
    let python = ctx.python.as_ref().map_err(|e| e.clone())?;
    let mut child = Command::new(python)
        .arg("-u")
        .arg(ctx.root.join("bench/peers/driver.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", python.display()))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut stderr = child.stderr.take().ok_or("no stderr")?;
    stdin
        .write_all(format!("{}\n", serde_json::to_string(&job)?).as_bytes())
        .await?;
    tokio::spawn(async move {
        while let Some(l) = lines.recv().await {
            if stdin.write_all(format!("{l}\n").as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let err_text = Arc::new(Mutex::new(String::new()));
    let et = err_text.clone();
    let err_task = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        *et.lock().unwrap() = s;
    });
    tokio::spawn(async move {
        let mut out = BufReader::new(stdout).lines();
        let mut done = false;
        while let Ok(Some(l)) = out.next_line().await {
            let ev =
                serde_json::from_str::<Event>(&l).map_err(|e| format!("driver said {l:?}: {e}"));
            done |= matches!(ev, Ok(Event::Done(_)));
            let _ = events.send(ev);
        }
        if !done {
            let _ = tokio::time::timeout(Duration::from_secs(2), err_task).await;
            let tail: String = err_text
                .lock()
                .unwrap()
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ");
            let _ = events.send(Err(format!("the driver exited without a report: {tail}")));
        }
    });
    Ok(child)
}

/// What the loop has recorded so far (reported as is when the hard limit cuts it short).
#[derive(Default)]
struct Rec {
    rep: Report,
    pending: Option<f64>,
}

async fn rust_worker(
    who: Contender,
    client: redis::Client,
    scripts: crate::contender::Scripts,
    job: Job,
    mut lines: mpsc::UnboundedReceiver<String>,
    events: mpsc::UnboundedSender<Result<Event, String>>,
) {
    let mode = match job.mode {
        "read" => Mode::Read,
        "semaphore" => Mode::Semaphore {
            limit: job.limit,
            permits: job.permits,
        },
        _ => Mode::Write,
    };
    let mut cl = match Client::connect(who, &client, &scripts).await {
        Ok(c) => c,
        Err(e) => {
            let _ = events.send(Err(e.to_string()));
            return;
        }
    };
    if let Client::Rslock { manager, .. } = &cl {
        // It connects at first use: do that before the clock starts.
        let _ = manager.query_redis_for_key_value(b"bench:connect").await;
    }
    let _ = events.send(Ok(Event::Ready));
    let go = loop {
        match lines.recv().await {
            Some(l) => {
                if let Some(t) = l.strip_prefix("go ").and_then(|t| t.parse::<f64>().ok()) {
                    break t;
                }
            }
            None => return,
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    tokio::spawn(async move {
        while let Some(l) = lines.recv().await {
            if l == "stop" {
                s.store(true, Ordering::Relaxed);
            }
        }
    });
    let mut rec = Rec::default();
    let hard = instant_at(go + job.hard_s);
    let r = tokio::time::timeout_at(
        hard.into(),
        run_job(&mut cl, &job, mode, go, &stop, &events, &mut rec),
    )
    .await;
    if let Some(p) = rec.pending.filter(|_| job.record) {
        rec.rep.asked.push(p);
        rec.rep.granted.push(None);
    }
    if let Ok(Err(e)) = r {
        rec.rep.error = Some(e.to_string());
    }
    let _ = events.send(Ok(Event::Done(rec.rep)));
}

/// The loop every worker runs (`driver.py` has the same one in Python).
async fn run_job(
    cl: &mut Client,
    job: &Job,
    mode: Mode,
    go: f64,
    stop: &AtomicBool,
    events: &mpsc::UnboundedSender<Result<Event, String>>,
    rec: &mut Rec,
) -> BenchResult<()> {
    tokio::time::sleep_until(instant_at(go + job.offset_s).into()).await;
    let (hard, stop_at) = (go + job.hard_s, go + job.stop_s);
    let owner = new_owner();
    let stopped = || stop.load(Ordering::Relaxed);
    while !stopped() && now() < stop_at && rec.rep.grants < job.max_grants {
        let asked = now();
        rec.pending = Some(asked);
        let deadline = instant_at((asked + job.wait_s).min(hard));
        let ok = cl
            .acquire(mode, &job.key, &owner, job.ttl_ms, deadline)
            .await?;
        let at = now();
        rec.pending = None;
        if job.record {
            rec.rep.asked.push(asked);
            rec.rep.granted.push(ok.then_some(at));
        }
        if !ok {
            break;
        }
        rec.rep.grants += 1;
        if job.announce && rec.rep.grants == 1 {
            let _ = events.send(Ok(Event::Grant { asked, at }));
        }
        if job.hold_ms < 0.0 {
            // The holder that dies: it never releases (the harness kills it).
            while !stopped() && now() < hard {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            break;
        }
        if job.hold_ms > 0.0 {
            hold_until(instant_at(at + job.hold_ms / 1e3)).await;
        }
        if job.record {
            rec.rep.holds.push(now() - at);
        }
        if !cl.release(mode, &job.key, &owner, job.ttl_ms).await? {
            return Err(format!("{}: the release of a granted lock answered 0", job.lib).into());
        }
        if !job.repeat {
            break;
        }
    }
    Ok(())
}

//! The Rust client's conformance driver: JSON lines on stdin/stdout (conformance/PROTOCOL.md),
//! each request done through the client's public async API. Run by conformance/harness.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_lease_client::{
    Client, Error, LeaseStatus, LockGuard, LockMode, LossReason, SemaphoreGuard, Wait,
};
use serde_json::{json, Map, Value};

/// stdout, one whole line at a time (events come from other tasks).
#[derive(Clone)]
struct Out(Arc<Mutex<std::io::Stdout>>);

impl Out {
    fn emit(&self, v: &Value) {
        let mut o = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(o, "{v}");
        let _ = o.flush();
    }
}

enum Held {
    Lock(LockGuard),
    Sem(SemaphoreGuard),
}

impl Held {
    fn status(&self) -> LeaseStatus {
        match self {
            Held::Lock(g) => g.status(),
            Held::Sem(g) => g.status(),
        }
    }
    fn token(&self) -> u64 {
        match self {
            Held::Lock(g) => g.token(),
            Held::Sem(g) => g.token(),
        }
    }
    fn lost(&self) -> impl std::future::Future<Output = LossReason> + Send + 'static {
        let f: std::pin::Pin<Box<dyn std::future::Future<Output = LossReason> + Send>> = match self
        {
            Held::Lock(g) => Box::pin(g.lost()),
            Held::Sem(g) => Box::pin(g.lost()),
        };
        f
    }
    async fn release(self) -> redis_lease_client::Result<bool> {
        match self {
            Held::Lock(g) => g.release().await,
            Held::Sem(g) => g.release().await,
        }
    }
}

fn reason(r: LossReason) -> &'static str {
    match r {
        LossReason::Expired => "expired",
        LossReason::Revoked => "revoked",
        _ => "failed",
    }
}

fn redis_kind(e: &redis::RedisError) -> &'static str {
    if e.is_connection_refusal() || e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
        "connection"
    } else {
        "other"
    }
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::Redis(r) => redis_kind(r),
        Error::Unavailable { last, .. } => match redis_kind(last) {
            "connection" => "connection",
            _ => "unavailable",
        },
        Error::ModuleNotLoaded(_) => "module_not_loaded",
        Error::TtlRefused { .. } => "ttl_too_long",
        Error::Deadlock(_) => "deadlock",
        Error::LockGone(_) => "lock_gone",
        Error::Fenced(_) => "fenced",
        Error::LimitMismatch { .. } => "limit",
        Error::PermitsMismatch { .. } => "permits",
        Error::Protocol(_) => "protocol",
        Error::InvalidArgument(_) => "invalid",
        Error::LeaseLost(_) => "lease_lost",
        _ => "other",
    }
}

fn wait_of(v: &Value) -> Wait {
    match v.get("wait_ms").and_then(Value::as_u64) {
        None => Wait::Forever,
        Some(0) => Wait::No,
        Some(ms) => Wait::For(Duration::from_millis(ms)),
    }
}

fn fail(kind: &str, message: impl std::fmt::Display) -> Value {
    json!({"ok": false, "error": {"kind": kind, "message": message.to_string()}})
}

struct Driver {
    out: Out,
    client: Option<Client>,
    held: HashMap<String, Held>,
    n: u64,
}

impl Driver {
    async fn handle(&mut self, req: &Value) -> Result<Value, Value> {
        let op = req.get("op").and_then(Value::as_str).unwrap_or("");
        let err = |e: Error| fail(kind(&e), e);
        match op {
            "hello" => Ok(
                json!({"client": "rust", "version": env!("CARGO_PKG_VERSION"),
                                  "capabilities": ["sentinel"]}),
            ),
            "connect" => {
                let url = req["url"].as_str().unwrap_or_default();
                self.client = Some(Client::open(url).await.map_err(err)?);
                Ok(json!({}))
            }
            "acquire" => self.acquire(req).await,
            "status" => {
                let h = self.get(req)?;
                Ok(match h.status() {
                    LeaseStatus::Held { .. } => json!({"held": true, "reason": null}),
                    LeaseStatus::Lost(r) => json!({"held": false, "reason": reason(r)}),
                    LeaseStatus::Released => json!({"held": false, "reason": "released"}),
                })
            }
            "wait_lost" => {
                let h = self.get(req)?;
                let limit = Duration::from_millis(req["timeout_ms"].as_u64().unwrap_or(0));
                let t = Instant::now();
                let got = tokio::time::timeout(limit, h.lost()).await;
                let ms = t.elapsed().as_millis() as u64;
                Ok(match got {
                    Ok(r) => json!({"lost": true, "reason": reason(r), "elapsed_ms": ms}),
                    Err(_) => json!({"lost": false, "elapsed_ms": ms}),
                })
            }
            "end" | "release" => {
                let id = req["handle"].as_str().unwrap_or_default().to_string();
                let h = self
                    .held
                    .remove(&id)
                    .ok_or_else(|| fail("other", "no such handle"))?;
                let released = h.release().await.map_err(err)?;
                if op == "release" {
                    Ok(json!({"released": released}))
                } else if released {
                    Ok(json!({}))
                } else {
                    // release() answering false is this client's word that the hold was lost.
                    Err(fail(
                        "lease_lost",
                        "release answered false: the server no longer counted the hold",
                    ))
                }
            }
            _ => Err(fail("unsupported", format!("op {op:?}"))),
        }
    }

    fn get(&self, req: &Value) -> Result<&Held, Value> {
        let id = req["handle"].as_str().unwrap_or_default();
        self.held
            .get(id)
            .ok_or_else(|| fail("other", "no such handle"))
    }

    async fn acquire(&mut self, req: &Value) -> Result<Value, Value> {
        let client = self
            .client
            .as_ref()
            .ok_or_else(|| fail("other", "not connected"))?;
        let err = |e: Error| fail(kind(&e), e);
        let key = req["key"].as_str().unwrap_or_default().to_string();
        let ttl = Duration::from_millis(req["ttl_ms"].as_u64().unwrap_or(0));
        let owner = req.get("owner").and_then(Value::as_str);
        let wait = wait_of(req);
        let held = match req["kind"].as_str().unwrap_or_default() {
            m @ ("read" | "write") => {
                let mut lock = client.rwlock(key).with_ttl(ttl).map_err(err)?;
                if let Some(o) = owner {
                    lock = lock.with_owner(o);
                }
                let mode = if m == "read" {
                    LockMode::Read
                } else {
                    LockMode::Write
                };
                lock.acquire(mode, wait).await.map_err(err)?.map(Held::Lock)
            }
            "semaphore" => {
                let limit = req["limit"].as_u64().unwrap_or(1) as u32;
                let mut sem = client.semaphore(key, limit).with_ttl(ttl).map_err(err)?;
                if let Some(o) = owner {
                    sem = sem.with_owner(o);
                }
                let permits = req.get("permits").and_then(Value::as_u64).unwrap_or(1) as u32;
                sem.acquire_with(permits, wait)
                    .await
                    .map_err(err)?
                    .map(Held::Sem)
            }
            k => return Err(fail("unsupported", format!("kind {k:?}"))),
        };
        let Some(h) = held else {
            return Ok(json!({"granted": false}));
        };
        self.n += 1;
        let id = format!("h{}", self.n);
        let token = h.token();
        // The Rust client's on_lost: the guard's lost() future, awaited by a task.
        let (out, lost, hid) = (self.out.clone(), h.lost(), id.clone());
        tokio::spawn(async move {
            let r = lost.await;
            out.emit(&json!({"event": "lost", "handle": hid, "reason": reason(r)}));
        });
        self.held.insert(id.clone(), h);
        Ok(json!({"handle": id, "token": token}))
    }
}

#[tokio::main]
async fn main() {
    let out = Out(Arc::new(Mutex::new(std::io::stdout())));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut d = Driver {
        out: out.clone(),
        client: None,
        held: HashMap::new(),
        n: 0,
    };
    while let Some(line) = rx.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let req: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                out.emit(&fail("other", format!("bad request: {e}")));
                continue;
            }
        };
        if req.get("op").and_then(Value::as_str) == Some("quit") {
            break;
        }
        let mut reply = match d.handle(&req).await {
            Ok(v) => {
                let mut m: Map<String, Value> = v.as_object().cloned().unwrap_or_default();
                m.insert("ok".into(), Value::Bool(true));
                Value::Object(m)
            }
            Err(v) => v,
        };
        reply["id"] = req.get("id").cloned().unwrap_or(Value::Null);
        out.emit(&reply);
    }
    // Leave held guards held: the harness decides what the end looks like.
    std::process::exit(0);
}

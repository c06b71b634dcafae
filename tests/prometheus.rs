//! `INFO lease` in Prometheus, the ecosystem's way: Debian's `prometheus-redis-exporter` runs
//! monitoring/lease.lua (its `-script` option) against a real server, and Debian's
//! `prometheus` scrapes the exporter with monitoring/prometheus.yml's relabeling and answers a
//! `histogram_quantile` query over the wait histogram. Both binaries come from
//! `scripts/deps.sh test`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

/// A process this test started, stopped (by its own pid) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn binary(name: &str) -> String {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&found.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "{name} is missing: run scripts/deps.sh test (Debian package {name})"
    );
    path
}

/// `GET path` on 127.0.0.1:port: the body of a 200 reply, None on any failure.
fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_string()))
}

fn exporter(redis: &Server) -> (Proc, u16) {
    let port = free_port();
    let child = Command::new(binary("prometheus-redis-exporter"))
        .arg("-redis.addr")
        .arg(format!("redis://127.0.0.1:{}", redis.port))
        .arg("-script")
        .arg(repo().join("monitoring/lease.lua"))
        .arg("-web.listen-address")
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the exporter");
    let p = Proc(child);
    until(Duration::from_secs(20), "the exporter answers", || {
        get(port, "/metrics").is_some()
    });
    (p, port)
}

/// `redis_script_values{key="k"} v` lines of a scrape, by key.
fn script_values(metrics: &str) -> std::collections::HashMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("redis_script_values{key=\""))
        .filter_map(|l| {
            let (k, rest) = l.split_once("\"} ")?;
            Some((k.to_string(), rest.trim().parse().ok()?))
        })
        .collect()
}

/// Waits: three of ~50 ms that time out, one of ~300 ms that is granted.
fn make_waits(s: &Server) {
    let mut c = conn(s);
    token(&r!(c, "RWLOCK.WLOCK", "k", "holder", 60_000));
    for i in 0..3 {
        assert!(is_nil(&r!(
            c,
            "RWLOCK.WLOCK",
            "k",
            format!("t{i}"),
            1000,
            "WAIT",
            50
        )));
    }
    let granted = spawn_wait(s, &["RWLOCK.WLOCK", "k", "late", "1000", "WAIT", "20000"]);
    await_lease_waiters(&mut c, 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "holder")), 1);
    assert!(granted.join().unwrap().unwrap().is_some());
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "late")), 1);
}

#[test]
fn redis_exporter_exports_every_lease_field_with_the_script() {
    let s = Server::start();
    make_waits(&s);
    let mut c = conn(&s);
    let (_exp, port) = exporter(&s);
    let metrics = get(port, "/metrics").expect("a scrape");
    let got = script_values(&metrics);
    // Every field of INFO lease is there, with its value (the histograms one key per bucket).
    let info: String = redis::cmd("INFO").arg("lease").query(&mut c).unwrap();
    let mut fields = 0;
    for line in info.lines().filter(|l| l.starts_with("lease_")) {
        let (name, value) = line.split_once(':').unwrap();
        if value.contains('=') {
            for kv in value.split(',') {
                let (k, v) = kv.split_once('=').unwrap();
                let k = if k == "inf" { "+Inf" } else { k };
                let key = format!("{name}_le_{k}");
                assert_eq!(got.get(&key), Some(&v.parse().unwrap()), "{key}");
                fields += 1;
            }
        } else if value.parse::<f64>().is_err() {
            // Text (lease_acl_categories): no gauge can hold it.
            assert!(!got.contains_key(name), "{name}");
        } else if !["lease_quarantine_ms", "lease_index_bytes", "lease_timers"].contains(&name) {
            // (Gauges that may move between the two reads are only checked to be there.)
            let v: f64 = value.parse().unwrap();
            assert_eq!(got.get(name), Some(&v), "{name} in {metrics}");
            fields += 1;
        } else {
            assert!(got.contains_key(name), "{name}");
        }
    }
    assert!(fields > 30, "only {fields} fields checked");
    assert_eq!(got["lease_wait_count"], 4.0);
    assert_eq!(got["lease_wait_bucket_ms_le_100"], 3.0);
    assert_eq!(got["lease_wait_bucket_ms_le_1000"], 4.0);
    assert_eq!(got["lease_grants_write"], 2.0);
    assert_eq!(got["lease_wait_timeouts"], 3.0);
}

#[test]
fn prometheus_scrapes_the_exporter_and_answers_histogram_quantile() {
    let s = Server::start();
    make_waits(&s);
    let (_exp, exp_port) = exporter(&s);
    let dir = s.dir().join("prometheus");
    std::fs::create_dir_all(&dir).unwrap();
    let rules = std::fs::read_to_string(repo().join("monitoring/prometheus.yml")).unwrap();
    // The repository's config, pointed at this test's exporter and scraping every second.
    let config = rules
        .replace("127.0.0.1:9121", &format!("127.0.0.1:{exp_port}"))
        .replace("scrape_interval: 15s", "scrape_interval: 1s");
    assert_ne!(
        config, rules,
        "monitoring/prometheus.yml names its target 127.0.0.1:9121"
    );
    let path = dir.join("prometheus.yml");
    std::fs::write(&path, config).unwrap();
    let port = free_port();
    let _prom = Proc(
        Command::new(binary("prometheus"))
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    // The answer's results: {"status":"success","data":{"result":[{"value":[t,"v"]},...]}}.
    let results = |q: &str| -> Option<Vec<serde_json::Value>> {
        let body = get(port, &format!("/api/v1/query?query={}", urlencode(q)))?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        assert_eq!(v["status"], "success", "{q}: {body}");
        v["data"]["result"].as_array().cloned()
    };
    let query = |q: &str| -> Option<f64> {
        let r = results(q)?;
        r.first()?["value"][1].as_str()?.parse().ok()
    };
    let t0 = Instant::now();
    let p50 = "histogram_quantile(0.5, sum by (le) (lease_wait_ms_bucket))";
    let mut got = None;
    while t0.elapsed() < Duration::from_secs(45) && got.is_none() {
        got = query(p50);
        std::thread::sleep(Duration::from_millis(250));
    }
    let p50 = got.unwrap_or_else(|| panic!("no answer to {p50} in {:?}", t0.elapsed()));
    // 3 waits <= 100 ms, 1 <= 1000 ms: Prometheus interpolates p50 in (10, 100], p99 in (100, 1000].
    assert!(p50 > 10.0 && p50 <= 100.0, "p50 {p50}");
    let p99 = query("histogram_quantile(0.99, sum by (le) (lease_wait_ms_bucket))").unwrap();
    assert!(p99 > 100.0 && p99 <= 1000.0, "p99 {p99}");
    assert_eq!(query("lease_wait_ms_count"), Some(4.0));
    assert_eq!(query("lease_grants_write"), Some(2.0));
    assert!(query("lease_wait_ms_sum").unwrap() >= 450.0);
    // Every query of the Grafana dashboard answers, with data, over a range Prometheus has.
    let dash = std::fs::read_to_string(repo().join("monitoring/grafana-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&dash).unwrap();
    until(
        Duration::from_secs(30),
        "three scrapes (rate() needs two)",
        || query("count_over_time(lease_keys[1m])").is_some_and(|n| n >= 3.0),
    );
    let mut exprs = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let q = target["expr"].as_str().unwrap();
            let q = q
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*");
            let r = results(&q).unwrap_or_default();
            assert!(!r.is_empty(), "{}: {q} answers nothing", panel["title"]);
            exprs += 1;
        }
    }
    assert!(exprs >= 9, "{exprs}");
    println!(
        "Prometheus answered after {:?}: p50 {p50} ms, p99 {p99} ms",
        t0.elapsed()
    );
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

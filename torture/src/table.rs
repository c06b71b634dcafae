//! The figures of the runs side by side, as a Markdown table.

use std::time::Duration;

use crate::faults::FaultKind;
use crate::run::Report;

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// A row: its name and how to show a run's figure.
type Row = (&'static str, Box<dyn Fn(&Report) -> String>);

/// One row per figure, one column per run.
pub fn table(reports: &[Report]) -> String {
    let rows: Vec<Row> = vec![
        ("run time", Box::new(|r| secs(Some(r.elapsed)))),
        (
            "load average (1 min) at start / end",
            Box::new(|r| format!("{} / {}", r.load.0, r.load.1)),
        ),
        (
            "failovers forced (kill -9 / SIGSTOP / frozen link / lagging replica promoted)",
            Box::new(|r| {
                let by: Vec<String> = FaultKind::ALL
                    .iter()
                    .map(|k| r.faults.forced_by(*k).to_string())
                    .collect();
                format!("{} ({})", r.faults.forced(), by.join(" / "))
            }),
        ),
        (
            "faults without a failover",
            Box::new(|r| (r.faults.faults.len() - r.faults.forced()).to_string()),
        ),
        (
            "failover time, median / max",
            Box::new(|r| {
                format!(
                    "{} / {}",
                    secs(r.faults.median_failover()),
                    secs(r.faults.max_failover())
                )
            }),
        ),
        (
            "sentinel +switch-master / +tilt",
            Box::new(|r| format!("{} / {}", r.switches, r.tilts)),
        ),
        (
            "grants by a SIGSTOPped master after it was continued (split brain)",
            Box::new(|r| r.faults.split_brain_grants.to_string()),
        ),
        (
            "sections entered",
            Box::new(|r| r.figures.sections.to_string()),
        ),
        (
            "sections completed / lease lost / fenced",
            Box::new(|r| {
                format!(
                    "{} / {} / {}",
                    r.figures.completed, r.figures.lost, r.figures.fenced
                )
            }),
        ),
        (
            "**overlapping sections** (pairs)",
            Box::new(|r| format!("**{}**", r.figures.overlaps)),
        ),
        (
            "**stale writes accepted** / refused",
            Box::new(|r| {
                format!(
                    "**{}** / {}",
                    r.figures.stale_accepted, r.figures.stale_refused
                )
            }),
        ),
        (
            "**tokens repeated / going backwards**",
            Box::new(|r| {
                format!(
                    "**{} / {}**",
                    r.figures.token_repeats, r.figures.token_backwards
                )
            }),
        ),
        (
            "acquisitions: granted / not replicated / unavailable / other errors",
            Box::new(|r| {
                let w = &r.workers;
                format!(
                    "{} / {} / {} / {}",
                    w.granted, w.not_replicated, w.unavailable, w.other_errors
                )
            }),
        ),
        (
            "longest time nobody was inside",
            Box::new(|r| secs(Some(r.figures.longest_gap))),
        ),
    ];
    let mut out = String::from("| |");
    for r in reports {
        out.push_str(&format!(" {} |", r.config.name));
    }
    out.push_str("\n|---|");
    for _ in reports {
        out.push_str("--:|");
    }
    out.push('\n');
    for (name, f) in rows {
        out.push_str(&format!("| {name} |"));
        for r in reports {
            out.push_str(&format!(" {} |", f(r)));
        }
        out.push('\n');
    }
    out
}

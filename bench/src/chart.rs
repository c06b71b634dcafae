//! The chart: fourteen panels of grouped bars drawn from the result rows, one bar per contender
//! (and per variant of one, as "module 2 WLOCKs", in a lighter shade of its colour), as plain
//! SVG. A contender that cannot run a case gets "n/a" where its bar would be; a lower bound (a
//! waiter never served) is drawn pale with "≥".

use std::fmt::Write as _;

use crate::contender::Contender;
use crate::report::{columns, fmt_num, Row, Val};

const COLORS: [&str; 7] = [
    "#999999", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];
/// The same, lighter: a variant of the contender.
const LIGHT: [&str; 7] = [
    "#c7c7c7", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
];
const W: f64 = 1400.0;
const PANEL_H: f64 = 330.0;
const TOP: f64 = 90.0;

/// One panel: which rows (each a group of bars, with its label), on what scale, with which
/// target line and which whisker (e.g. the max above a p99 bar).
struct Panel {
    title: &'static str,
    pick: fn(&Row) -> Option<String>,
    whisker: Option<&'static str>,
    log: bool,
    target: fn(&Row) -> Option<f64>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn pick(sc: &'static str, metric: &'static str, r: &Row) -> bool {
    r.scenario.starts_with(sc) && r.metric == metric
}

fn first_word(case: &str) -> String {
    case.split(',').next().unwrap_or(case).to_string()
}

/// "8 workers, limit 4, hold 5 ms: PERMITS 3 (2 workers)" -> "8w 3p"; "...: all" -> "8w all".
fn semaphore_label(case: &str) -> String {
    let n = case.split(' ').next().unwrap_or("?");
    let tail = case.rsplit(": ").next().unwrap_or("");
    match tail.strip_prefix("PERMITS ") {
        Some(p) => format!("{n}w {}p", p.split(' ').next().unwrap_or("?")),
        None => format!("{n}w {tail}"),
    }
}

/// A column's colour: its contender's, lighter for a variant of it.
fn color(name: &str) -> &'static str {
    let names = Contender::names();
    match names.iter().position(|n| *n == name) {
        Some(i) => COLORS[i],
        None => names
            .iter()
            .position(|n| name.strip_prefix(n).is_some_and(|t| t.starts_with(' ')))
            .map_or("#17becf", |i| LIGHT[i]),
    }
}

/// "8 workers, 16 accounts" -> "8w 16a".
fn transfer_label(case: &str) -> String {
    let n: Vec<&str> = case.split(' ').collect();
    match (n.first(), n.get(2)) {
        (Some(w), Some(a)) => format!("{w}w {a}a"),
        _ => case.to_string(),
    }
}

/// The number after the last "= " of a target ("<= N x (hold + 1 ms) = 40 ms" -> 40).
fn target_number(r: &Row) -> Option<f64> {
    r.target
        .rsplit("= ")
        .next()
        .and_then(|t| t.trim_end_matches(" ms").parse().ok())
}

const PANELS: [Panel; 14] = [
    Panel {
        title: "1a uncontended, pipelined: pairs/s",
        pick: |r| pick("1a", "pairs/s", r).then(|| r.case.clone()),
        whisker: None,
        log: false,
        target: |_| None,
    },
    Panel {
        title: "1b one request at a time: server CPU per grant (µs, log)",
        pick: |r| {
            pick("1b", "server CPU per grant", r).then(|| {
                if r.case.contains(" read ") {
                    "read".into()
                } else {
                    "write".into()
                }
            })
        },
        whisker: None,
        log: true,
        target: |_| None,
    },
    Panel {
        title: "1b one request at a time: grants/s (log)",
        pick: |r| {
            pick("1b", "grants/s", r).then(|| {
                if r.case.contains(" read ") {
                    "read".into()
                } else {
                    "write".into()
                }
            })
        },
        whisker: None,
        log: true,
        target: |_| None,
    },
    Panel {
        title: "2 contended hand-off: wait p99, whisker to max (ms, log)",
        pick: |r| pick("2", "wait p99", r).then(|| first_word(&r.case)),
        whisker: Some("wait max"),
        log: true,
        target: target_number,
    },
    Panel {
        title: "2 contended hand-off: wait p99 by time spent waiting, open waits counted (ms, log)",
        pick: |r| pick("2", "wait p99 by time waited", r).then(|| first_word(&r.case)),
        whisker: None,
        log: true,
        target: target_number,
    },
    Panel {
        title: "2 contended hand-off: fairness (fewest / most grants per worker)",
        pick: |r| pick("2", "min/max grants per worker", r).then(|| first_word(&r.case)),
        whisker: None,
        log: false,
        target: |_| Some(0.8),
    },
    Panel {
        title: "3 writer under reader flood, 4 lease lapse: worst case (ms, log)",
        pick: |r| {
            if pick("3", "writer wait max", r) {
                Some("3 writer wait max".into())
            } else if pick("4", "served after deadline max", r) {
                Some("4 served after lease deadline, max".into())
            } else {
                None
            }
        },
        whisker: None,
        log: true,
        target: |r| r.scenario.starts_with('4').then_some(10.0),
    },
    Panel {
        title: "6 semaphore: wait p99 by workers (w), permits (p), whisker to max (ms, log)",
        pick: |r| pick("6", "wait p99", r).then(|| semaphore_label(&r.case)),
        whisker: Some("wait max"),
        log: true,
        target: target_number,
    },
    Panel {
        title: "6 semaphore: share of grants / fair share by workers (w), permits (p)",
        pick: |r| pick("6", "grant share / fair share", r).then(|| semaphore_label(&r.case)),
        whisker: None,
        log: false,
        target: |_| Some(0.8),
    },
    Panel {
        title: "7 growth: server µs per lock+unlock pair, by locks held (flat = O(1))",
        pick: |r| pick("7", "server µs/pair", r).then(|| first_word(&r.case)),
        whisker: None,
        log: false,
        target: |_| None,
    },
    Panel {
        title: "7 growth: used_memory per lock (B), by locks held",
        pick: |r| pick("7", "used_memory per lock", r).then(|| first_word(&r.case)),
        whisker: None,
        log: false,
        target: |_| None,
    },
    Panel {
        title: "7 growth: hand-off p99 (ms), by parked requests / keys",
        pick: |r| pick("7", "hand-off p99", r).then(|| growth_label(&r.case)),
        whisker: None,
        log: false,
        target: |_| None,
    },
    Panel {
        title: "8 transfers: wait p99 by workers (w) and accounts (a), whisker to max (ms, log)",
        pick: |r| pick("8", "wait p99", r).then(|| transfer_label(&r.case)),
        whisker: Some("wait max"),
        log: true,
        target: target_number,
    },
    Panel {
        title: "8 transfers: transfers/s by workers (w) and accounts (a)",
        pick: |r| pick("8", "transfers/s", r).then(|| transfer_label(&r.case)),
        whisker: None,
        log: false,
        target: |_| None,
    },
];

/// "10000 parked over 100 keys (100 per key)" -> "10000 / 100 keys".
fn growth_label(case: &str) -> String {
    let mut w = case.split(' ');
    match (w.next(), w.nth(2)) {
        (Some(n), Some(k)) => format!("{n} / {k} keys"),
        _ => case.to_string(),
    }
}

/// The whole chart.
pub fn svg(rows: &[Row], about: &[String]) -> String {
    let names = columns(rows, &Contender::names());
    let h = TOP + PANELS.len().div_ceil(2) as f64 * PANEL_H + 20.0;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(
        s,
        r##"<text x="20" y="28" font-size="20">redis-lease module vs the SET NX PX floor, the seed design and the lock libraries</text><text x="20" y="48" fill="#555">{}</text>"##,
        esc(&about
            .iter()
            .filter(|l| l.starts_with("machine") || l.starts_with("server"))
            .cloned()
            .collect::<Vec<_>>()
            .join("; "))
    );
    let mut x = 20.0;
    for n in &names {
        let _ = write!(
            s,
            r#"<rect x="{x}" y="62" width="14" height="14" fill="{}"/><text x="{}" y="74">{}</text>"#,
            color(n),
            x + 18.0,
            esc(n)
        );
        x += 30.0 + 7.5 * n.len() as f64;
    }
    let _ = write!(
        s,
        r##"<line x1="{x}" y1="69" x2="{}" y2="69" stroke="#c00" stroke-width="2" stroke-dasharray="5,3"/><text x="{}" y="74">target</text>"##,
        x + 24.0,
        x + 30.0
    );
    for (i, p) in PANELS.iter().enumerate() {
        let (px, py) = ((i % 2) as f64 * W / 2.0, TOP + (i / 2) as f64 * PANEL_H);
        panel(
            &mut s,
            p,
            rows,
            px + 10.0,
            py,
            W / 2.0 - 20.0,
            PANEL_H - 10.0,
        );
    }
    s.push_str("</svg>\n");
    s
}

#[allow(clippy::too_many_arguments)]
fn panel(s: &mut String, p: &Panel, rows: &[Row], x0: f64, y0: f64, w: f64, h: f64) {
    let names = columns(rows, &Contender::names());
    let groups: Vec<(String, &Row)> = rows
        .iter()
        .filter_map(|r| (p.pick)(r).map(|l| (l, r)))
        .collect();
    let series: Vec<usize> = (0..names.len())
        .filter(|&i| {
            groups
                .iter()
                .any(|(_, r)| r.vals.iter().any(|(w, _)| *w == names[i]))
        })
        .collect();
    let whisker = |r: &Row, who: &str| -> Option<f64> {
        let m = p.whisker?;
        rows.iter()
            .find(|x| x.scenario == r.scenario && x.case == r.case && x.metric == m)?
            .get(who)
            .num()
    };
    let mut vals: Vec<f64> = Vec::new();
    for (_, r) in &groups {
        for &i in &series {
            vals.extend(r.get(&names[i]).num());
            vals.extend(whisker(r, &names[i]));
        }
        vals.extend((p.target)(r));
    }
    vals.retain(|v| v.is_finite() && (!p.log || *v > 0.0));
    let _ = write!(
        s,
        r#"<text x="{x0}" y="{}" font-size="14">{}</text>"#,
        y0 + 16.0,
        esc(p.title)
    );
    let (l, t, b) = (x0 + 55.0, y0 + 30.0, y0 + h - 40.0);
    let r_edge = x0 + w;
    if vals.is_empty() || series.is_empty() {
        let _ = write!(s, r#"<text x="{l}" y="{}">no data</text>"#, t + 40.0);
        return;
    }
    let max = vals.iter().cloned().fold(f64::MIN, f64::max);
    let (lo, hi) = if p.log {
        let min = vals.iter().cloned().fold(f64::MAX, f64::min);
        (
            min.log10().floor(),
            max.log10().ceil().max(min.log10().floor() + 1.0),
        )
    } else {
        (0.0, if max > 0.0 { max * 1.1 } else { 1.0 })
    };
    let y = |v: f64| -> f64 {
        let f = if p.log {
            (v.max(1e-12).log10() - lo) / (hi - lo)
        } else {
            v / hi
        };
        b - f.clamp(0.0, 1.0) * (b - t)
    };
    // Axis and grid.
    let ticks: Vec<f64> = if p.log {
        (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        let raw = hi / 5.0;
        let mag = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * mag)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        (0..)
            .map(|k| k as f64 * step)
            .take_while(|v| *v <= hi)
            .collect()
    };
    for tv in ticks {
        let ty = y(tv);
        let _ = write!(
            s,
            r##"<line x1="{l}" y1="{ty}" x2="{r_edge}" y2="{ty}" stroke="#e5e5e5"/><text x="{}" y="{}" text-anchor="end" fill="#555">{}</text>"##,
            l - 4.0,
            ty + 4.0,
            fmt_num(tv)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{l}" y1="{b}" x2="{r_edge}" y2="{b}" stroke="#333"/>"##
    );
    let gw = (r_edge - l) / groups.len() as f64;
    let bw = gw * 0.8 / series.len() as f64;
    for (g, (label, r)) in groups.iter().enumerate() {
        let gx = l + g as f64 * gw + gw * 0.1;
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            gx + gw * 0.4,
            b + 16.0,
            esc(label)
        );
        for (k, &i) in series.iter().enumerate() {
            let bx = gx + k as f64 * bw;
            let v = r.get(&names[i]);
            match v.num() {
                Some(n) => {
                    let by = y(n);
                    let pale = matches!(v, Val::AtLeast(_));
                    let _ = write!(
                        s,
                        r#"<rect x="{bx:.1}" y="{by:.1}" width="{:.1}" height="{:.1}" fill="{}" fill-opacity="{}"><title>{}: {}</title></rect>"#,
                        bw * 0.9,
                        (b - by).max(0.5),
                        color(&names[i]),
                        if pale { 0.35 } else { 1.0 },
                        esc(&names[i]),
                        esc(&v.render(&r.unit))
                    );
                    let _ = write!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}{}</text>"#,
                        bx + bw * 0.45,
                        by - 3.0,
                        if pale { "≥" } else { "" },
                        fmt_num(n)
                    );
                    if let Some(wv) = whisker(r, &names[i]) {
                        let _ = write!(
                            s,
                            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#222"/>"##,
                            bx + bw * 0.45,
                            by,
                            y(wv)
                        );
                    }
                }
                None if matches!(v, Val::Missing) => {}
                None => {
                    let _ = write!(
                        s,
                        r#"<text x="{:.1}" y="{:.1}" font-size="9" fill="{}" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
                        bx + bw * 0.6,
                        b - 3.0,
                        color(&names[i]),
                        bx + bw * 0.6,
                        b - 3.0,
                        if matches!(v, Val::Cannot(_)) {
                            "n/a"
                        } else {
                            "error"
                        }
                    );
                }
            }
        }
        if let Some(tv) = (p.target)(r) {
            let ty = y(tv);
            let _ = write!(
                s,
                r##"<line x1="{gx:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#c00" stroke-width="2" stroke-dasharray="5,3"/>"##,
                gx + gw * 0.8
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semaphore_groups_are_labelled_by_workers_and_permits() {
        assert_eq!(
            semaphore_label("8 workers, limit 4, hold 5 ms: PERMITS 3 (2 workers)"),
            "8w 3p"
        );
        assert_eq!(
            semaphore_label("32 workers, limit 4, hold 5 ms: all"),
            "32w all"
        );
        let r = Row {
            target: "<= N x (hold + 1 ms) = 48 ms".into(),
            ..Row::default()
        };
        assert_eq!(target_number(&r), Some(48.0));
    }

    #[test]
    fn transfers_are_labelled_and_a_variant_is_its_contenders_lighter_colour() {
        assert_eq!(transfer_label("32 workers, 4 accounts"), "32w 4a");
        assert_eq!(color("module"), COLORS[1]);
        assert_eq!(color("module 2 WLOCKs"), LIGHT[1]);
        assert_eq!(color("someone else"), "#17becf");
    }
}

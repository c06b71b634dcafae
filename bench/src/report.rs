//! Result rows and what is made from them: the CSV (the data, one line per figure) and one
//! markdown table per scenario (what the binary prints and results.md holds).

use std::fmt::Write as _;

/// A measured value (or why there is none).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Val {
    Num(f64),
    /// A lower bound: the measurement hit its time limit (e.g. a waiter never served).
    AtLeast(f64),
    /// The contender lacks what the scenario needs (e.g. a read mode).
    Cannot(String),
    /// An error while measuring.
    Error(String),
    #[default]
    Missing,
}

impl Val {
    pub fn num(&self) -> Option<f64> {
        match self {
            Val::Num(x) | Val::AtLeast(x) => Some(*x),
            _ => None,
        }
    }

    pub fn of<T>(r: &Result<T, String>, f: impl Fn(&T) -> Val) -> Val {
        match r {
            Ok(x) => f(x),
            Err(e) => Val::Error(e.clone()),
        }
    }

    pub fn render(&self, unit: &str) -> String {
        let unit = match unit {
            "" => String::new(),
            "x" => "×".into(),
            u => format!(" {u}"),
        };
        match self {
            Val::Num(x) => format!("{}{unit}", fmt_num(*x)),
            Val::AtLeast(x) => format!("≥ {}{unit}", fmt_num(*x)),
            Val::Cannot(why) => format!("cannot: {why}"),
            Val::Error(e) => format!("error: {}", e.chars().take(80).collect::<String>()),
            Val::Missing => "—".into(),
        }
    }

    fn csv(&self) -> String {
        match self {
            Val::Num(x) => format!("{x}"),
            Val::AtLeast(x) => format!(">={x}"),
            Val::Cannot(why) => format!("cannot: {why}"),
            Val::Error(e) => format!("error: {e}"),
            Val::Missing => String::new(),
        }
    }
}

/// About three significant digits, thousands separated.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() {
        format!("{x}")
    } else if a.round() >= 1000.0 {
        let d = (x.round() as i64).abs().to_string();
        let mut s: String = d
            .chars()
            .enumerate()
            .flat_map(|(i, c)| {
                (i > 0 && (d.len() - i).is_multiple_of(3))
                    .then_some(',')
                    .into_iter()
                    .chain([c])
            })
            .collect();
        if x < 0.0 {
            s.insert(0, '-');
        }
        s
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{x:.3}")
    }
}

/// What names a table's column: a contender, or a variant of one (e.g. "module 2 WLOCKs").
pub trait Column {
    fn column(&self) -> &str;
}

impl Column for crate::contender::Contender {
    fn column(&self) -> &str {
        self.name()
    }
}

impl Column for &str {
    fn column(&self) -> &str {
        self
    }
}

/// One metric of one case, for every contender that ran it.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub scenario: String,
    pub case: String,
    pub metric: String,
    pub unit: String,
    /// (contender, value), in the contenders' order.
    pub vals: Vec<(String, Val)>,
    /// The target in words ("" if information only), and who meets it.
    pub target: String,
    pub met: Vec<(String, bool)>,
    pub note: String,
}

impl Row {
    pub fn new(scenario: &str, case: &str, metric: &str, unit: &str) -> Row {
        Row {
            scenario: scenario.into(),
            case: case.into(),
            metric: metric.into(),
            unit: unit.into(),
            ..Row::default()
        }
    }

    pub fn val(mut self, who: &str, v: Val) -> Row {
        self.vals.push((who.into(), v));
        self
    }

    pub fn get(&self, who: &str) -> &Val {
        self.vals
            .iter()
            .find(|(w, _)| w == who)
            .map(|(_, v)| v)
            .unwrap_or(&Val::Missing)
    }

    /// Judges every measured value (a value that is an error does not meet it; one that
    /// cannot be measured is not judged).
    pub fn target(self, text: &str, ok: impl Fn(f64) -> bool) -> Row {
        self.target_by(text, |_, x| ok(x))
    }

    /// As `target`, with a judgement that depends on the contender.
    pub fn target_by(mut self, text: &str, ok: impl Fn(&str, f64) -> bool) -> Row {
        self.target = text.into();
        self.met = self
            .vals
            .iter()
            .filter(|(_, v)| !matches!(v, Val::Cannot(_) | Val::Missing))
            .map(|(w, v)| (w.clone(), v.num().is_some_and(|x| ok(w, x))))
            .collect();
        self
    }

    /// Keeps the judgement for these contenders only (a target that is theirs alone).
    pub fn judged_for(mut self, who: &[&str]) -> Row {
        self.met.retain(|(w, _)| who.contains(&w.as_str()));
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }

    pub fn met_by(&self, who: &str) -> Option<bool> {
        self.met.iter().find(|(w, _)| w == who).map(|(_, m)| *m)
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub const CSV_HEAD: &str = "scenario,case,metric,unit,contender,value,target,target_met,note";

/// The data: one line per row and contender.
pub fn csv(rows: &[Row]) -> String {
    let mut out = format!("{CSV_HEAD}\n");
    for r in rows {
        for (who, v) in &r.vals {
            let met = r.met_by(who).map(|m| m.to_string()).unwrap_or_default();
            let f = [
                &r.scenario,
                &r.case,
                &r.metric,
                &r.unit,
                who,
                &v.csv(),
                &r.target,
                &met,
                &r.note,
            ];
            let f: Vec<String> = f.iter().map(|s| csv_field(s)).collect();
            out.push_str(&f.join(","));
            out.push('\n');
        }
    }
    out
}

/// The columns that appear in `rows`, in `order`, each followed by its variants (a name that
/// starts with it and a space, as "module 2 WLOCKs" after "module"), then any other name:
/// no value is left out of a table.
pub fn columns<'a>(rows: impl IntoIterator<Item = &'a Row>, order: &[&str]) -> Vec<String> {
    let mut seen: Vec<&str> = Vec::new();
    for (w, _) in rows.into_iter().flat_map(|r| &r.vals) {
        if !seen.contains(&w.as_str()) {
            seen.push(w);
        }
    }
    let mut out: Vec<String> = Vec::new();
    for base in order {
        let variant = |w: &&&str| w.strip_prefix(base).is_some_and(|t| t.starts_with(' '));
        if seen.contains(base) {
            out.push(base.to_string());
        }
        out.extend(seen.iter().filter(variant).map(|w| w.to_string()));
    }
    let rest: Vec<String> = seen
        .iter()
        .filter(|w| !out.iter().any(|o| o == *w))
        .map(|w| w.to_string())
        .collect();
    out.extend(rest);
    out
}

/// One markdown table per scenario, a column per contender that appears in it (`columns`).
/// A judged value is followed by ✓ or ✗.
pub fn markdown(rows: &[Row], order: &[&str]) -> String {
    let mut out = String::new();
    let mut scenarios: Vec<&str> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for sc in scenarios {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.scenario == sc).collect();
        let who = columns(rs.iter().copied(), order);
        let _ = writeln!(out, "\n### {sc}\n");
        let _ = writeln!(
            out,
            "| case | metric | {} | target | note |",
            who.join(" | ")
        );
        let _ = writeln!(out, "|---|---|{}---|---|", "--:|".repeat(who.len()));
        for r in rs {
            let cells: Vec<String> = who
                .iter()
                .map(|w| {
                    let w = w.as_str();
                    let mark = match r.met_by(w) {
                        Some(true) => " ✓",
                        Some(false) => " ✗",
                        None => "",
                    };
                    format!("{}{mark}", r.get(w).render(&r.unit))
                })
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                r.case,
                r.metric,
                cells.join(" | "),
                r.target,
                r.note
            );
        }
    }
    out
}

/// Percentile (nearest rank) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile(&s, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_judges_and_writes_both_outputs() {
        assert_eq!(fmt_num(1234567.0), "1,234,567");
        assert_eq!(fmt_num(-1234.0), "-1,234");
        assert_eq!(fmt_num(12.345), "12.3");
        assert_eq!(fmt_num(0.1234), "0.123");
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
        let r = Row::new("s", "c", "m", "ms")
            .val("module", Val::Num(1.0))
            .val("seed", Val::Num(5.0))
            .val("redis-py", Val::Cannot("no read mode".into()))
            .target("<= 2", |x| x <= 2.0);
        assert_eq!(r.met_by("module"), Some(true));
        assert_eq!(r.met_by("seed"), Some(false));
        assert_eq!(r.met_by("redis-py"), None);
        let c = csv(std::slice::from_ref(&r));
        assert!(c.contains("s,c,m,ms,module,1,<= 2,true,"));
        assert!(c.contains("s,c,m,ms,redis-py,cannot: no read mode,<= 2,,"));
        let md = markdown(&[r], &["module", "seed", "rslock", "redis-py"]);
        assert!(md.contains("| case | metric | module | seed | redis-py | target | note |"));
        assert!(md.contains("| 1.00 ms ✓ | 5.00 ms ✗ | cannot: no read mode |"));
        // A variant goes right after its contender; a name not in the order goes last.
        let v = Row::new("s", "c", "m", "")
            .val("other", Val::Num(1.0))
            .val("seed", Val::Num(1.0))
            .val("module 2 WLOCKs", Val::Num(1.0))
            .val("module", Val::Num(1.0))
            .val("modules", Val::Num(1.0));
        assert_eq!(
            columns(&[v], &["module", "seed"]),
            ["module", "module 2 WLOCKs", "seed", "other", "modules"]
        );
    }
}

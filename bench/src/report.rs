//! Result rows, and the text table, markdown table and CSV made from them.

use std::fmt::Write as _;

/// A measured value (or why there is none).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Val {
    Num(f64),
    /// A lower bound: the measurement hit its time limit (e.g. a waiter never served).
    AtLeast(f64),
    Text(String),
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

    pub fn render(&self, unit: &str) -> String {
        match self {
            Val::Num(x) => format!("{}{}", fmt_num(*x), unit_suffix(unit)),
            Val::AtLeast(x) => format!("≥ {}{}", fmt_num(*x), unit_suffix(unit)),
            Val::Text(t) if t.chars().count() > 60 => {
                format!("{}…", t.chars().take(59).collect::<String>())
            }
            Val::Text(t) => t.clone(),
            Val::Missing => "—".to_string(),
        }
    }

    pub fn csv(&self) -> String {
        match self {
            Val::Num(x) => format!("{x}"),
            Val::AtLeast(x) => format!(">={x}"),
            Val::Text(t) => t.clone(),
            Val::Missing => String::new(),
        }
    }
}

fn unit_suffix(unit: &str) -> String {
    match unit {
        "" => String::new(),
        "x" => "×".to_string(),
        u => format!(" {u}"),
    }
}

/// Formats a number with about three significant digits and thousands separators.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    let s = if a.round() >= 1000.0 {
        let r = x.round() as i64;
        let digits = r.abs().to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        if r < 0 {
            format!("-{out}")
        } else {
            out
        }
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else if a == 0.0 {
        "0".to_string()
    } else {
        format!("{x:.3}")
    };
    s
}

/// One line of the results: one metric of one case, for both implementations.
#[derive(Clone, Debug)]
pub struct Row {
    pub scenario: String,
    pub case: String,
    pub metric: String,
    pub unit: String,
    pub module: Val,
    pub baseline: Val,
    /// The target, in words ("" if the row is information only).
    pub target: String,
    pub module_met: Option<bool>,
    pub baseline_met: Option<bool>,
    pub note: String,
    /// A reference figure that belongs to neither implementation (the `SET NX PX` floor): its
    /// value is in `module`, and the CSV names it `floor`.
    pub reference: bool,
}

impl Row {
    pub fn new(scenario: &str, case: &str, metric: &str, unit: &str) -> Row {
        Row {
            scenario: scenario.to_string(),
            case: case.to_string(),
            metric: metric.to_string(),
            unit: unit.to_string(),
            module: Val::Missing,
            baseline: Val::Missing,
            target: String::new(),
            module_met: None,
            baseline_met: None,
            note: String::new(),
            reference: false,
        }
    }

    /// Marks the row as a reference figure (see `reference`).
    pub fn reference(mut self) -> Row {
        self.reference = true;
        self
    }

    pub fn vals(mut self, module: Val, baseline: Val) -> Row {
        self.module = module;
        self.baseline = baseline;
        self
    }

    /// Sets a target and judges both values with `ok` (a value that is missing or an error
    /// does not meet it).
    pub fn target(mut self, text: &str, ok: impl Fn(f64) -> bool) -> Row {
        self.target = text.to_string();
        self.module_met = Some(self.module.num().is_some_and(&ok));
        self.baseline_met = Some(self.baseline.num().is_some_and(&ok));
        self
    }

    /// A target that only applies to the module (e.g. a ratio against the baseline).
    pub fn module_target(mut self, text: &str, ok: impl Fn(f64) -> bool) -> Row {
        self.target = text.to_string();
        self.module_met = Some(self.module.num().is_some_and(&ok));
        self.baseline_met = None;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }
}

fn met(m: Option<bool>) -> &'static str {
    match m {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "",
    }
}

const HEAD: [&str; 9] = [
    "scenario",
    "case",
    "metric",
    "module",
    "baseline",
    "target",
    "module met",
    "baseline met",
    "note",
];

fn cells(r: &Row) -> [String; 9] {
    [
        r.scenario.clone(),
        r.case.clone(),
        r.metric.clone(),
        r.module.render(&r.unit),
        r.baseline.render(&r.unit),
        r.target.clone(),
        met(r.module_met).to_string(),
        met(r.baseline_met).to_string(),
        r.note.clone(),
    ]
}

/// A plain-text table for the terminal.
pub fn text_table(rows: &[Row]) -> String {
    let all: Vec<[String; 9]> = rows.iter().map(cells).collect();
    let mut w = HEAD.map(|h| h.chars().count());
    for c in &all {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.chars().count());
        }
    }
    let line = |c: &[String]| {
        let mut s = String::new();
        for (i, x) in c.iter().enumerate() {
            let pad = w[i] - x.chars().count();
            if i == 3 || i == 4 {
                s.push_str(&" ".repeat(pad));
                s.push_str(x);
            } else {
                s.push_str(x);
                if i + 1 < c.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if i + 1 < c.len() {
                s.push_str("  ");
            }
        }
        s.trim_end().to_string()
    };
    let mut out = String::new();
    let head: Vec<String> = HEAD.iter().map(|s| s.to_string()).collect();
    out.push_str(&line(&head));
    out.push('\n');
    let total: usize = w.iter().sum::<usize>() + 2 * (w.len() - 1);
    out.push_str(&"-".repeat(total.min(200)));
    out.push('\n');
    let mut last = String::new();
    for (r, c) in rows.iter().zip(&all) {
        if !last.is_empty() && r.scenario != last {
            out.push('\n');
        }
        last = r.scenario.clone();
        out.push_str(&line(c));
        out.push('\n');
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A markdown table.
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", HEAD.join(" | "));
    let _ = writeln!(out, "|---|---|---|--:|--:|---|---|---|---|");
    for r in rows {
        let c = cells(r).map(|s| md_escape(&s));
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// CSV, one line per row and implementation.
pub fn csv(rows: &[Row]) -> String {
    let mut out =
        String::from("scenario,case,metric,unit,implementation,value,target,target_met,note\n");
    for r in rows {
        let imps = if r.reference {
            vec![("floor", &r.module, r.module_met)]
        } else {
            vec![
                ("module", &r.module, r.module_met),
                ("baseline", &r.baseline, r.baseline_met),
            ]
        };
        for (imp, v, m) in imps {
            if *v == Val::Missing {
                continue;
            }
            let fields = [
                r.scenario.clone(),
                r.case.clone(),
                r.metric.clone(),
                r.unit.clone(),
                imp.to_string(),
                v.csv(),
                r.target.clone(),
                m.map(|b| b.to_string()).unwrap_or_default(),
                r.note.clone(),
            ];
            let f: Vec<String> = fields.iter().map(|s| csv_field(s)).collect();
            out.push_str(&f.join(","));
            out.push('\n');
        }
    }
    out
}

/// Which targets the module meets: a summary line and one line per target.
pub fn target_summary(rows: &[Row]) -> Vec<String> {
    let judged: Vec<&Row> = rows.iter().filter(|r| r.module_met.is_some()).collect();
    let met = judged.iter().filter(|r| r.module_met == Some(true)).count();
    let mut out = vec![format!(
        "targets met by the module: {met} of {}",
        judged.len()
    )];
    for r in judged {
        out.push(format!(
            "{} {}: {} / {}: {} (target {})",
            if r.module_met == Some(true) {
                "met   "
            } else {
                "MISSED"
            },
            r.scenario,
            r.case,
            r.metric,
            r.module.render(&r.unit),
            r.target
        ));
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
    fn formats() {
        assert_eq!(fmt_num(1234567.0), "1,234,567");
        assert_eq!(fmt_num(12.345), "12.3");
        assert_eq!(fmt_num(0.1234), "0.123");
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 99.0), 4.0);
        let r = Row::new("s", "c", "m", "ms")
            .vals(Val::Num(1.0), Val::Num(5.0))
            .target("<= 2", |x| x <= 2.0);
        assert_eq!(r.module_met, Some(true));
        assert_eq!(r.baseline_met, Some(false));
        assert!(csv(std::slice::from_ref(&r)).contains("s,c,m,ms,module,1,<= 2,true,"));
        assert!(markdown_table(&[r]).contains("| yes | NO |"));
    }
}

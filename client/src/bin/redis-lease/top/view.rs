//! One frame of `redis-lease top`: the deployment's figures, the busiest keys, the wait
//! histogram.

use std::time::Duration;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Bar, BarChart, BarGroup, Block, Paragraph, Row, Table};
use ratatui::Frame;

use super::sample::Sample;

pub fn draw(f: &mut Frame, s: &Sample, url: &str) {
    let [head, keys, chart, foot] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Min(5),
        Constraint::Length(9),
        Constraint::Length(1),
    ])
    .areas(f.area());
    figures(f, head, s, url);
    busiest(f, keys, s);
    waits(f, chart, s);
    let hint = if s.events {
        "q quits · refreshed every second"
    } else {
        "q quits · refreshed every second · per-key grants/s need notify-keyspace-events Kd"
    };
    f.render_widget(Paragraph::new(hint), foot);
}

fn int(s: &Sample, name: &str) -> u64 {
    s.figure(name).max(0.0) as u64
}

fn figures(f: &mut Frame, area: Rect, s: &Sample, url: &str) {
    let grants = s
        .grants_per_s
        .map_or("-".to_string(), |g| format!("{g:.1}"));
    let count = int(s, "wait_count");
    let avg = if count > 0 {
        format!("{:.1}ms", s.figure("wait_sum_ms") / count as f64)
    } else {
        "-".to_string()
    };
    let lines = vec![
        Line::from(format!(
            "keys {}  holders {}  waiters {}  grants/s {grants}  lapses {}  timeouts {}",
            int(s, "keys"),
            int(s, "holders"),
            int(s, "waiters"),
            int(s, "lapses"),
            int(s, "wait_timeouts"),
        )),
        Line::from(format!(
            "waits ended {count}  avg {avg}  max {}ms  evictions {}  quarantine {}ms  stalls {}",
            int(s, "wait_ms_max"),
            int(s, "evictions"),
            int(s, "quarantine_ms"),
            int(s, "stalls"),
        )),
    ];
    let servers = if s.servers == 1 {
        "1 server".to_string()
    } else {
        format!("{} servers", s.servers)
    };
    let title = format!(" redis-lease top · {url} · {servers} ");
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".to_string(), |d| format!("{}ms", d.as_millis()))
}

fn busiest(f: &mut Frame, area: Rect, s: &Sample) {
    let header = Row::new([
        "KEY",
        "KIND",
        "HOLDERS",
        "WAITERS",
        "OLDEST WAIT",
        "GRANTS/S",
        "HELD BY",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let shown = usize::from(area.height.saturating_sub(3));
    let rows = s.rows.iter().take(shown).map(|r| {
        Row::new([
            r.key.clone(),
            r.kind.word().to_string(),
            r.holders.to_string(),
            r.waiters.to_string(),
            ms(r.oldest_wait),
            r.grants_per_s
                .map_or("-".to_string(), |g| format!("{g:.1}")),
            r.holder.clone().unwrap_or_default(),
        ])
    });
    let widths = [
        Constraint::Fill(3),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(11),
        Constraint::Length(8),
        Constraint::Fill(2),
    ];
    let title = format!(
        " busiest keys ({} of {}) ",
        s.rows.len().min(shown),
        s.rows.len()
    );
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(title));
    f.render_widget(table, area);
}

fn waits(f: &mut Frame, area: Rect, s: &Sample) {
    let bars: Vec<Bar> = s
        .wait_buckets
        .iter()
        .map(|(le, n)| {
            let label = if le == "inf" {
                ">10s".to_string()
            } else {
                format!("≤{le}ms")
            };
            Bar::default()
                .value(*n)
                .label(Line::from(label))
                .text_value(n.to_string())
        })
        .collect();
    let chart = BarChart::default()
        .block(Block::bordered().title(" waits ended, by time waited "))
        .data(BarGroup::default().bars(&bars))
        .bar_width(9)
        .bar_gap(2);
    f.render_widget(chart, area);
}

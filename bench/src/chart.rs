//! The key comparison as one SVG: uncontended throughput (scenario 1), contended hand-off
//! waits (scenario 2), and the two latency targets (scenarios 3 and 4), module against the
//! baseline. Drawn with plotters' SVG backend only (text is SVG `<text>`, no font files).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::{fmt_num, Val};
use crate::{BenchResult, ChartData, Machine};

const MODULE: RGBColor = RGBColor(31, 119, 180);
const BASELINE: RGBColor = RGBColor(255, 127, 14);
const FLOOR: RGBColor = RGBColor(150, 150, 150);
const TARGET: RGBColor = RGBColor(200, 30, 30);
const FONT: &str = "sans-serif";

fn err<E: std::fmt::Debug>(e: E) -> crate::BenchError {
    format!("chart: {e:?}").into()
}

pub fn draw(data: &ChartData, machine: &Machine, path: &Path) -> BenchResult<()> {
    let root = SVGBackend::new(path, (1400, 980)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(70);
    top.draw_text(
        "redis-lease module vs client-side Lua baseline",
        &(FONT, 24).into_font().color(&BLACK),
        (20, 10),
    )
    .map_err(err)?;
    top.draw_text(
        &format!(
            "{} cores, {}; redis {}",
            machine.nproc, machine.cpu, machine.redis_version
        ),
        &(FONT, 14).into_font().color(&RGBColor(90, 90, 90)),
        (20, 42),
    )
    .map_err(err)?;
    // Legend.
    let mut x = 760;
    for (c, label) in [
        (MODULE, "redis-lease module"),
        (BASELINE, "Lua baseline"),
        (FLOOR, "SET NX PX + DEL floor"),
    ] {
        top.draw(&Rectangle::new([(x, 14), (x + 16, 30)], c.filled()))
            .map_err(err)?;
        top.draw_text(label, &(FONT, 14).into_font().color(&BLACK), (x + 22, 15))
            .map_err(err)?;
        x += 22 + 8 * label.len() as i32 + 16;
    }
    top.draw(&PathElement::new(
        vec![(760, 50), (776, 50)],
        TARGET.stroke_width(3),
    ))
    .map_err(err)?;
    top.draw_text("target", &(FONT, 14).into_font().color(&BLACK), (782, 43))
        .map_err(err)?;
    top.draw(&PathElement::new(
        vec![(860, 42), (860, 58)],
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    top.draw_text(
        "worst wait (max)",
        &(FONT, 14).into_font().color(&BLACK),
        (868, 43),
    )
    .map_err(err)?;

    let panels = body.split_evenly((2, 2));
    throughput(&panels[0], data)?;
    let groups: Vec<Group> = data
        .s2
        .iter()
        .map(|p| Group {
            label: format!("{} writers", p.writers),
            vals: p.p99.clone(),
            whisker: Some(p.max.clone()),
            target: p.target_ms,
        })
        .collect();
    grouped(
        &panels[1],
        "2: contended hand-off, wait p99 and max (ms, log)",
        &groups,
        true,
    )?;
    let groups: Vec<Group> = data
        .s2
        .iter()
        .map(|p| Group {
            label: format!("{} writers", p.writers),
            vals: p.fairness.clone(),
            whisker: None,
            target: 0.8,
        })
        .collect();
    grouped(
        &panels[2],
        "2: contended hand-off, fairness (fewest / most grants per worker)",
        &groups,
        false,
    )?;
    let groups: Vec<Group> = data
        .s34
        .iter()
        .map(|(l, m, b, t)| {
            let short = if l.starts_with("writer") {
                "3: writer under reader flood"
            } else {
                "4: served after lease deadline"
            };
            Group {
                label: short.to_string(),
                vals: [m.clone(), b.clone()],
                whisker: None,
                target: *t,
            }
        })
        .collect();
    grouped(&panels[3], "3, 4: worst-case wait (ms, log)", &groups, true)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One group of bars: module and baseline.
pub struct Group {
    pub label: String,
    pub vals: [Val; 2],
    /// A thin line from the bar up to this value (e.g. the max above a p99 bar).
    pub whisker: Option<[Val; 2]>,
    pub target: f64,
}

fn grouped(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    groups: &[Group],
    log: bool,
) -> BenchResult<()> {
    if log {
        let vals = groups
            .iter()
            .flat_map(|g| {
                let w = g.whisker.clone().unwrap_or_default();
                [
                    g.vals[0].num(),
                    g.vals[1].num(),
                    w[0].num(),
                    w[1].num(),
                    Some(g.target),
                ]
            })
            .flatten()
            .filter(|v| *v > 0.0);
        let (lo, hi) = vals.fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let lo = if lo.is_finite() {
            10f64.powf((lo / 3.0).log10().floor())
        } else {
            0.1
        };
        let hi = 10f64.powf((hi.max(1.0) * 3.0).log10().ceil());
        draw_groups(area, title, groups, (lo..hi).log_scale(), lo, hi)
    } else {
        draw_groups(area, title, groups, 0f64..1.15, 0.0, 1.15)
    }
}

fn draw_groups<Y>(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    groups: &[Group],
    y: Y,
    lo: f64,
    hi: f64,
) -> BenchResult<()>
where
    Y: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    Y::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let n = groups.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 17))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, y)
        .map_err(err)?;
    let labels: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| fmt_num(*y))
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    for (i, g) in groups.iter().enumerate() {
        let x = i as f64;
        for (k, (color, x0)) in [(MODULE, x - 0.38), (BASELINE, x + 0.02)]
            .into_iter()
            .enumerate()
        {
            let val = &g.vals[k];
            let x1 = x0 + 0.36;
            let xm = (x0 + x1) / 2.0;
            let mut label_at = lo;
            match val.num() {
                Some(v) if v > lo => {
                    let top = v.min(hi);
                    label_at = top;
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x0, lo), (x1, top)],
                            color.filled(),
                        )))
                        .map_err(err)?;
                }
                Some(_) => {}
                None => {
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((x0, lo))
                                + Text::new("n/a", (2, -16), (FONT, 13).into_font()),
                        ))
                        .map_err(err)?;
                    continue;
                }
            }
            let text = val.render("");
            if let Some(w) = &g.whisker {
                if let (Some(top), Some(v)) = (w[k].num(), val.num()) {
                    if top > v {
                        let top = top.min(hi);
                        chart
                            .draw_series(std::iter::once(PathElement::new(
                                vec![(xm, v.max(lo)), (xm, top)],
                                BLACK.stroke_width(1),
                            )))
                            .map_err(err)?;
                        chart
                            .draw_series(std::iter::once(PathElement::new(
                                vec![(xm - 0.05, top), (xm + 0.05, top)],
                                BLACK.stroke_width(1),
                            )))
                            .map_err(err)?;
                        // The max gets its own label where it is well above the bar.
                        if top >= 3.0 * v.max(lo) {
                            chart
                                .draw_series(std::iter::once(
                                    EmptyElement::at((x0, top))
                                        + Text::new(
                                            format!("max {}", w[k].render("")),
                                            (0, -16),
                                            (FONT, 12).into_font(),
                                        ),
                                ))
                                .map_err(err)?;
                        } else {
                            label_at = top;
                        }
                    }
                }
            }
            chart
                .draw_series(std::iter::once(
                    EmptyElement::at((x0, label_at))
                        + Text::new(text, (0, -16), (FONT, 12).into_font()),
                ))
                .map_err(err)?;
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x - 0.45, g.target), (x + 0.45, g.target)],
                TARGET.stroke_width(3),
            )))
            .map_err(err)?;
    }
    Ok(())
}

fn throughput(area: &DrawingArea<SVGBackend, Shift>, data: &ChartData) -> BenchResult<()> {
    let n = data.s1.len().max(1);
    let max = data
        .s1
        .iter()
        .filter_map(|(_, v, _)| *v)
        .fold(1.0, f64::max)
        / 1000.0;
    let mut chart = ChartBuilder::on(area)
        .caption("1: uncontended, pipelined (k pairs/s)", (FONT, 17))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(150)
        .build_cartesian_2d(0f64..max * 1.25, -0.5f64..n as f64 - 0.5)
        .map_err(err)?;
    let labels: Vec<String> = data.s1.iter().map(|(l, _, _)| l.clone()).collect();
    let floor = data
        .s1
        .iter()
        .find(|(_, _, k)| *k == 0)
        .and_then(|(_, v, _)| *v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| {
            let i = y.round();
            if (y - i).abs() < 1e-6 && i >= 0.0 {
                // Top to bottom in the order given.
                labels.get(n - 1 - i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("thousand lock+unlock pairs per second")
        .label_style((FONT, 13))
        .draw()
        .map_err(err)?;
    if let Some(f) = floor {
        let t = 0.85 * f / 1000.0;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(t, -0.5), (t, n as f64 - 0.5)],
                TARGET.stroke_width(2),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((t, n as f64 - 0.5))
                    + Text::new(
                        "0.85 x floor",
                        (4, 2),
                        (FONT, 12).into_font().color(&TARGET),
                    ),
            ))
            .map_err(err)?;
    }
    for (i, (_, v, kind)) in data.s1.iter().enumerate() {
        let y = (n - 1 - i) as f64;
        let color = match kind {
            0 => FLOOR,
            1 => MODULE,
            _ => BASELINE,
        };
        match v {
            Some(v) => {
                let k = v / 1000.0;
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y - 0.35), (k, y + 0.35)],
                        color.filled(),
                    )))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((k, y))
                            + Text::new(fmt_num(k), (4, -7), (FONT, 13).into_font()),
                    ))
                    .map_err(err)?;
            }
            None => {
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((0.0, y))
                            + Text::new("n/a (error)", (4, -7), (FONT, 13).into_font()),
                    ))
                    .map_err(err)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HandoffPoint;

    /// Draws a chart from made-up figures (set `BENCH_CHART_SAMPLE=path.svg` to keep it).
    #[test]
    fn draws_sample_chart() {
        let mut d = ChartData {
            s1: vec![
                ("SET NX PX+DEL".into(), Some(480_000.0), 0),
                ("module RLOCK+UNLOCK".into(), Some(220_000.0), 1),
                ("baseline RLOCK+UNLOCK".into(), None, 2),
            ],
            ..Default::default()
        };
        for (n, mp, bp, bm) in [(2, 2.4, 0.16, 1505.0), (32, 70.0, 3901.0, 3901.0)] {
            d.s2.push(HandoffPoint {
                writers: n,
                p99: [Val::Num(mp), Val::AtLeast(bp)],
                max: [Val::Num(mp * 1.1), Val::AtLeast(bm)],
                fairness: [Val::Num(0.98), Val::Num(0.0)],
                target_ms: n as f64 * 3.0,
            });
        }
        d.s34 = vec![
            ("writer".into(), Val::Num(19.0), Val::AtLeast(2000.0), 21.0),
            (
                "lapse".into(),
                Val::Text("error: x".into()),
                Val::Num(104.0),
                10.0,
            ),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = std::env::var("BENCH_CHART_SAMPLE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| dir.path().join("chart.svg"));
        draw(&d, &Machine::default(), &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.contains("max ≥ 3,901")
                || svg.contains("max &#8805; 3,901")
                || svg.contains("3,901")
        );
        assert!(svg.contains("n/a"));
    }
}

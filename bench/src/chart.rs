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
    let root = SVGBackend::new(path, (1500, 560)).into_drawing_area();
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
    let mut x = 900;
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
        vec![(900, 50), (916, 50)],
        TARGET.stroke_width(3),
    ))
    .map_err(err)?;
    top.draw_text("target", &(FONT, 14).into_font().color(&BLACK), (922, 43))
        .map_err(err)?;

    let panels = body.split_evenly((1, 3));
    throughput(&panels[0], data)?;
    let groups: Vec<(String, Val, Val, f64)> = data
        .s2
        .iter()
        .map(|(n, m, b, t)| (format!("{n} writers"), m.clone(), b.clone(), *t))
        .collect();
    grouped_log(
        &panels[1],
        "2: contended hand-off, wait p99 (ms, log)",
        &groups,
    )?;
    let groups: Vec<(String, Val, Val, f64)> = data
        .s34
        .iter()
        .map(|(l, m, b, t)| {
            let short = if l.starts_with("writer") {
                "3: writer vs reader flood"
            } else {
                "4: after lease deadline"
            };
            (short.to_string(), m.clone(), b.clone(), *t)
        })
        .collect();
    grouped_log(&panels[2], "3, 4: worst-case wait (ms, log)", &groups)?;
    root.present().map_err(err)?;
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

fn grouped_log(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    groups: &[(String, Val, Val, f64)],
) -> BenchResult<()> {
    let n = groups.len().max(1);
    let vals = groups
        .iter()
        .flat_map(|(_, m, b, t)| [m.num(), b.num(), Some(*t)])
        .flatten()
        .filter(|v| *v > 0.0);
    let (lo, hi) = vals.fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let lo = if lo.is_finite() {
        10f64.powf((lo / 3.0).log10().floor())
    } else {
        0.1
    };
    let hi = 10f64.powf((hi.max(1.0) * 3.0).log10().ceil());
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 17))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, (lo..hi).log_scale())
        .map_err(err)?;
    let labels: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
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
    for (i, (_, m, b, t)) in groups.iter().enumerate() {
        let x = i as f64;
        for (val, color, x0) in [(m, MODULE, x - 0.38), (b, BASELINE, x + 0.02)] {
            let x1 = x0 + 0.36;
            match val.num() {
                Some(v) if v > 0.0 => {
                    let top = v.clamp(lo, hi);
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x0, lo), (x1, top)],
                            color.filled(),
                        )))
                        .map_err(err)?;
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((x0, top))
                                + Text::new(val.render(""), (2, -16), (FONT, 13).into_font()),
                        ))
                        .map_err(err)?;
                }
                _ => {
                    chart
                        .draw_series(std::iter::once(
                            EmptyElement::at((x0, lo))
                                + Text::new("n/a", (2, -16), (FONT, 13).into_font()),
                        ))
                        .map_err(err)?;
                }
            }
        }
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x - 0.45, *t), (x + 0.45, *t)],
                TARGET.stroke_width(3),
            )))
            .map_err(err)?;
    }
    Ok(())
}

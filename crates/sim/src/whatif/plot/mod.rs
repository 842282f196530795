//! The replay as an SVG: nodes per group, pending pods, requested against allocatable
//! CPU and memory over time, with scale-ups and removals marked.
//!
//! Drawn with `plotters`' SVG backend alone: text is written as SVG `<text>` for the
//! viewer to render, so no font files or system libraries are needed.

use std::collections::BTreeSet;
use std::error::Error;
use std::ops::Range;
use std::path::Path;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::report::{Mark, Sample, Timeline};

#[derive(Debug, thiserror::Error)]
#[error("plot {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 300;
const TITLE_HEIGHT: u32 = 50;
/// Points kept per series: at most four per pixel column, so the file stays small for
/// a week-long replay and the drawing loses nothing visible.
const COLUMNS: usize = 1100;
/// More marks than this are drawn without their labels, which would overlap.
const MAX_MARK_LABELS: usize = 40;
const FONT: &str = "sans-serif";
const GIB: f64 = (1u64 << 30) as f64;

/// Colours of the node groups, in order; repeats after eight groups.
const GROUP_COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];
const SCALE_UP: RGBColor = RGBColor(0, 150, 60);
const REMOVAL: RGBColor = RGBColor(210, 40, 40);
const PENDING: RGBColor = RGBColor(230, 120, 0);
const REQUESTED: RGBColor = RGBColor(31, 119, 180);
const ALLOCATABLE: RGBColor = RGBColor(40, 40, 40);

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<Ticked, Ticked>>;

/// Writes the SVG of `timeline` to `path`.
pub fn plot_svg(timeline: &Timeline, title: &str, path: &Path) -> Result<(), PlotError> {
    let fail = |message: String| PlotError {
        path: path.display().to_string(),
        message,
    };
    let svg = render_svg(timeline, title).map_err(|e| fail(format!("drawing failed: {e}")))?;
    std::fs::write(path, svg).map_err(|e| fail(format!("cannot write the file: {e}")))
}

/// The SVG document of `timeline`, as text.
pub fn render_svg(timeline: &Timeline, title: &str) -> Result<String, Box<dyn Error>> {
    let mut svg = String::new();
    {
        let height = TITLE_HEIGHT + 4 * PANEL_HEIGHT;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let body = root.titled(title, (FONT, 26))?;
        let panels = body.split_evenly((4, 1));
        let x = time_axis(timeline);
        nodes_panel(&panels[0], timeline, &x)?;
        pending_panel(&panels[1], timeline, &x)?;
        resource_panel(
            &panels[2],
            timeline,
            &x,
            ["CPU: requested against allocatable", "cores", "CPU"],
            |s| s.cpu_requested_m as f64 / 1000.0,
            |s| s.cpu_allocatable_m as f64 / 1000.0,
        )?;
        resource_panel(
            &panels[3],
            timeline,
            &x,
            ["Memory: requested against allocatable", "GiB", "memory"],
            |s| s.mem_requested_bytes as f64 / GIB,
            |s| s.mem_allocatable_bytes as f64 / GIB,
        )?;
        root.present()?;
    }
    Ok(svg)
}

/// An axis whose grid lines and labels fall on the given round values (plotters' own
/// choice for `f64` is 1-2-5 steps, which for hours gives 20 h, 50 h).
#[derive(Clone)]
struct Ticked {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// `0..end` with ticks every `step` (and `end` rounded up to one when `round_end`).
fn ticked(end: f64, step: f64, round_end: bool) -> Ticked {
    let end = if round_end {
        (end / step).ceil() * step
    } else {
        end
    };
    let count = (end / step + 1e-9).floor() as usize;
    Ticked {
        inner: (0f64..end).into(),
        ticks: (0..=count).map(|i| i as f64 * step).collect(),
    }
}

/// Hours since the start, ticks on round minutes, hours or days, at most 12 steps.
fn time_axis(timeline: &Timeline) -> Ticked {
    let last_sample = timeline.samples.last().map_or(0, |s| s.t_s);
    let last_mark = timeline.marks.iter().map(|(t, _)| *t).max().unwrap_or(0);
    let end_h = (last_sample.max(last_mark) as f64 / 3600.0).max(1.0 / 60.0);
    let steps = [
        1.0 / 60.0,
        5.0 / 60.0,
        0.25,
        0.5,
        1.0,
        2.0,
        3.0,
        6.0,
        12.0,
        24.0,
        48.0,
        168.0,
    ];
    let step = steps
        .iter()
        .copied()
        .find(|s| end_h / s <= 12.0)
        .unwrap_or_else(|| (end_h / 12.0 / 168.0).ceil() * 168.0);
    ticked(end_h, step, false)
}

/// From 0 to a round value above `max` with room to spare, ticks on a 1-2-5 step
/// (whole numbers only when `whole`), at most about 6 steps.
fn value_axis(max: f64, whole: bool) -> Ticked {
    let max = if max.is_finite() && max > 0.0 {
        max * 1.1
    } else {
        1.0
    };
    let raw = max / 6.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let mut step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    if whole {
        step = step.max(1.0).round();
    }
    ticked(max, step, true)
}

/// `45m`, `6h`, `6h30`, `2d`, `2d 6h`: time since the start of the replay.
fn format_hours(h: f64) -> String {
    let minutes = (h * 60.0).round().max(0.0) as u64;
    let (d, hh, mm) = (minutes / 1440, minutes / 60 % 24, minutes % 60);
    match (d, hh, mm) {
        (0, 0, 0) => "0".into(),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m:02}"),
        (d, 0, 0) => format!("{d}d"),
        (d, h, 0) => format!("{d}d {h}h"),
        (d, h, m) => format!("{d}d {h}h{m:02}"),
    }
}

/// `4`, `2.5`, `0.25`: no trailing zeros.
fn format_value(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A step line: each sample's value holds until the next sample.
fn steps(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(samples.len() * 2);
    let mut last: Option<f64> = None;
    for s in samples {
        let (t, v) = (s.t_s as f64 / 3600.0, value(s));
        if let Some(prev) = last {
            if prev == v {
                continue;
            }
            out.push((t, prev));
        }
        out.push((t, v));
        last = Some(v);
    }
    if let (Some(end), Some(v)) = (samples.last(), last) {
        let t = end.t_s as f64 / 3600.0;
        if out.last().is_some_and(|p| p.0 < t) {
            out.push((t, v));
        }
    }
    decimate(out, samples)
}

/// Keeps, per pixel column, the first, lowest, highest and last point in time order:
/// what a viewer would see of all of them.
fn decimate(points: Vec<(f64, f64)>, samples: &[Sample]) -> Vec<(f64, f64)> {
    if points.len() <= 4 * COLUMNS {
        return points;
    }
    let end = samples
        .last()
        .map_or(1.0, |s| s.t_s as f64 / 3600.0)
        .max(1e-9);
    let column = |x: f64| ((x / end) * COLUMNS as f64) as usize;
    let mut out = Vec::with_capacity(4 * COLUMNS + 4);
    let mut i = 0;
    while i < points.len() {
        let c = column(points[i].0);
        let mut j = i;
        while j < points.len() && column(points[j].0) == c {
            j += 1;
        }
        let group = &points[i..j];
        let lo = (0..group.len()).min_by(|a, b| group[*a].1.total_cmp(&group[*b].1));
        let hi = (0..group.len()).max_by(|a, b| group[*a].1.total_cmp(&group[*b].1));
        let mut keep: Vec<usize> = [Some(0), lo, hi, Some(group.len() - 1)]
            .into_iter()
            .flatten()
            .collect();
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().map(|k| group[k]));
        i = j;
    }
    out
}

/// `colour` at `alpha` over white, opaque: stacked bands then cover what is below.
fn tint(colour: RGBColor, alpha: f64) -> RGBColor {
    let mix = |c: u8| (255.0 - (255.0 - f64::from(c)) * alpha).round() as u8;
    RGBColor(mix(colour.0), mix(colour.1), mix(colour.2))
}

fn chart<'a, 'b>(
    area: &'a Area<'b>,
    caption: &str,
    x: &Ticked,
    y: Ticked,
    y_desc: &str,
) -> Result<Chart<'a, 'b>, Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .margin(8)
        .margin_right(20)
        .caption(caption, (FONT, 18))
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(x.clone(), y)?;
    chart
        .configure_mesh()
        .x_desc("time since the start of the replay")
        .y_desc(y_desc)
        .x_label_formatter(&|h| format_hours(*h))
        .y_label_formatter(&|v| format_value(*v))
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.1))
        .draw()?;
    Ok(chart)
}

/// Scale-ups (green, `+n group`) and removals (red, `-n`) as vertical lines across the
/// panel; with `labelled`, in the legend and with their labels (while few enough to
/// read, staggered over three rows).
fn draw_marks(
    chart: &mut Chart<'_, '_>,
    timeline: &Timeline,
    labelled: bool,
) -> Result<(), Box<dyn Error>> {
    let top = chart.y_range().end;
    let line = |t: f64, colour: RGBColor| {
        PathElement::new(vec![(t, 0.0), (t, top)], colour.mix(0.45).stroke_width(1))
    };
    let ups = timeline.marks.iter().filter_map(|(t, m)| match m {
        Mark::ScaleUp { .. } => Some(line(*t as f64 / 3600.0, SCALE_UP)),
        Mark::Removal { .. } => None,
    });
    let ups = chart.draw_series(ups)?;
    if labelled {
        ups.label("scale-up")
            .legend(|(x, y)| PathElement::new(vec![(x + 6, y - 7), (x + 6, y + 7)], SCALE_UP));
    }
    let removals = timeline.marks.iter().filter_map(|(t, m)| match m {
        Mark::Removal { .. } => Some(line(*t as f64 / 3600.0, REMOVAL)),
        Mark::ScaleUp { .. } => None,
    });
    let removals = chart.draw_series(removals)?;
    if labelled {
        removals
            .label("removal")
            .legend(|(x, y)| PathElement::new(vec![(x + 6, y - 7), (x + 6, y + 7)], REMOVAL));
    }
    let labels = merged_marks(&timeline.marks, chart.x_range().end);
    if labelled && labels.len() <= MAX_MARK_LABELS {
        let texts = labels.iter().enumerate().map(|(i, (t, m))| {
            let (text, colour) = match m {
                Mark::ScaleUp { group, count } => (format!("+{count} {group}"), SCALE_UP),
                Mark::Removal { nodes } => (format!("-{nodes}"), REMOVAL),
            };
            let row = (i % 3) as f64;
            Text::new(
                text,
                (*t as f64 / 3600.0, top * (1.0 - 0.07 * row)),
                (FONT, 12).into_font().color(&colour),
            )
        });
        chart.draw_series(texts)?;
    }
    Ok(())
}

/// The marks to label: a run of marks of the same kind (and group) less than a
/// two-hundredth of the time axis apart is one label with their counts added (the
/// cycles of one scale-up or removal sit on top of each other otherwise).
fn merged_marks(marks: &[(u64, Mark)], end_h: f64) -> Vec<(u64, Mark)> {
    let near = (end_h * 3600.0 / 200.0) as u64;
    let mut out: Vec<(u64, Mark)> = Vec::new();
    for (t, m) in marks {
        let merged = out.iter_mut().rev().find_map(|(t0, m0)| {
            if t.saturating_sub(*t0) > near {
                return None;
            }
            match (m0, m) {
                (
                    Mark::ScaleUp {
                        group: g0,
                        count: c0,
                    },
                    Mark::ScaleUp { group, count },
                ) if g0 == group => {
                    *c0 += count;
                    Some(())
                }
                (Mark::Removal { nodes: n0 }, Mark::Removal { nodes }) => {
                    *n0 += nodes;
                    Some(())
                }
                _ => None,
            }
        });
        if merged.is_none() {
            out.push((*t, m.clone()));
        }
    }
    out
}

fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), Box<dyn Error>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 13))
        .draw()?;
    Ok(())
}

/// Nodes per group, stacked (the top edge is the total), with every action marked.
fn nodes_panel(area: &Area<'_>, timeline: &Timeline, x: &Ticked) -> Result<(), Box<dyn Error>> {
    let groups: Vec<&String> = timeline
        .samples
        .iter()
        .flat_map(|s| s.nodes.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let count = |s: &Sample, upto: usize| -> f64 {
        groups[..=upto]
            .iter()
            .map(|g| f64::from(s.nodes.get(*g).copied().unwrap_or(0)))
            .sum()
    };
    let max_total = timeline
        .samples
        .iter()
        .map(|s| s.nodes.values().map(|n| f64::from(*n)).sum::<f64>())
        .fold(0.0, f64::max);
    let y = value_axis(max_total.max(1.0), true);
    let mut chart = chart(area, "Nodes per group (stacked)", x, y, "nodes")?;
    // Top layer first (the cumulative count up to the last group), then the lower ones
    // over it, so each band shows one group.
    for (i, group) in groups.iter().enumerate().rev() {
        let colour = GROUP_COLOURS[i % GROUP_COLOURS.len()];
        let points = steps(&timeline.samples, |s| count(s, i));
        chart
            .draw_series(AreaSeries::new(points, 0.0, tint(colour, 0.4)).border_style(colour))?
            .label(group.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    draw_marks(&mut chart, timeline, true)?;
    legend(&mut chart)?;
    Ok(())
}

fn pending_panel(area: &Area<'_>, timeline: &Timeline, x: &Ticked) -> Result<(), Box<dyn Error>> {
    let max = timeline
        .samples
        .iter()
        .map(|s| f64::from(s.pending_pods))
        .fold(0.0, f64::max);
    let y = value_axis(max.max(1.0), true);
    let mut chart = chart(area, "Pending pods", x, y, "pods")?;
    let points = steps(&timeline.samples, |s| f64::from(s.pending_pods));
    chart
        .draw_series(AreaSeries::new(points, 0.0, tint(PENDING, 0.4)).border_style(PENDING))?
        .label("pending pods")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], PENDING.filled()));
    draw_marks(&mut chart, timeline, false)?;
    legend(&mut chart)?;
    Ok(())
}

/// `[caption, unit, resource]`: e.g. `CPU requested` is drawn as an area under
/// `CPU allocatable` as a line.
fn resource_panel(
    area: &Area<'_>,
    timeline: &Timeline,
    x: &Ticked,
    [caption, unit, resource]: [&str; 3],
    requested: impl Fn(&Sample) -> f64,
    allocatable: impl Fn(&Sample) -> f64,
) -> Result<(), Box<dyn Error>> {
    let max = timeline
        .samples
        .iter()
        .map(|s| requested(s).max(allocatable(s)))
        .fold(0.0, f64::max);
    let y = value_axis(max, false);
    let mut chart = chart(area, caption, x, y, unit)?;
    let req = steps(&timeline.samples, &requested);
    chart
        .draw_series(AreaSeries::new(req, 0.0, tint(REQUESTED, 0.35)).border_style(REQUESTED))?
        .label(format!("{resource} requested"))
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], REQUESTED.filled()));
    let alloc = steps(&timeline.samples, &allocatable);
    chart
        .draw_series(LineSeries::new(alloc, ALLOCATABLE.stroke_width(2)))?
        .label(format!("{resource} allocatable"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], ALLOCATABLE.stroke_width(2)));
    draw_marks(&mut chart, timeline, false)?;
    legend(&mut chart)?;
    Ok(())
}

#[cfg(test)]
mod tests;

//! Line charts rendered as standalone SVG, written by hand (no
//! dependencies): one coloured polyline (or step function) per series over
//! linear or logarithmic axes, with a legend and labelled dashed vertical
//! markers, e.g. the CDF of LRU stack distances at several granularities
//! with lines at the L1, L2 and GPU memory capacities.

use crate::frame::{
    self, fmt_value, linear_tick_label, log_minor_ticks, log_ticks, snapped_log10, PALETTE, PLOT_H,
};
use crate::html::escape;
use crate::svg::{decimals_for, n, nice_ticks, truncate_label};
use std::fmt::Write as _;
use std::path::Path;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct LineSeries {
    /// Name shown in the legend and in the line's tooltip.
    pub name: String,
    /// `(x, y)` points, joined in the order given (normally ascending x).
    /// Points with a non-finite coordinate, or one that is not strictly
    /// positive on a log axis, are skipped.
    pub points: Vec<(f64, f64)>,
    /// Draws the line dashed (its legend swatch too).
    pub dashed: bool,
}

impl LineSeries {
    /// A solid line.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        LineSeries {
            name: name.into(),
            points,
            dashed: false,
        }
    }
}

/// A line chart: x and y axes (each linear or log10), one coloured line per
/// series with a legend, and optional dashed vertical markers.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// Title above the chart.
    pub title: String,
    /// X axis label, used as is.
    pub x_label: String,
    /// Y axis label, used as is.
    pub y_label: String,
    /// The lines, each with a distinct colour and a legend entry.
    pub series: Vec<LineSeries>,
    /// Logarithmic (base 10) x axis with a tick per decade.
    pub log_x: bool,
    /// Logarithmic (base 10) y axis with a tick per decade.
    pub log_y: bool,
    /// Draws every series as a step function: from each point horizontally
    /// to the next point's x, then vertically to its y (a CDF sampled at
    /// bucket edges, a rate per epoch starting at x).
    pub step: bool,
    /// Dashed vertical lines at these x values, each with its label
    /// written along it (e.g. `"L2"`, `"GPU memory"`). The x axis extends to
    /// show them; unusable values (non-finite, not positive on a log axis)
    /// are skipped.
    pub vertical_markers: Vec<(f64, String)>,
    /// Fixed y axis range `(lo, hi)` instead of one fitted to the data;
    /// lines outside it are clipped. Ignored unless `lo < hi`, both finite
    /// (and positive on a log axis).
    pub y_range: Option<(f64, f64)>,
}

// ---- layout constants (pixels) ----
// The frame's own (font, plot height, legend, palette) are in `frame`.
const PLOT_W: f64 = 600.0;
/// Below the plot: tick labels and the x axis label.
const MARGIN_BOTTOM: f64 = 58.0;
const MAX_MARKER_CHARS: usize = 30;
/// Width of a legend swatch.
const SWATCH_W: f64 = 22.0;
/// Keeps the axis arithmetic finite for absurd magnitudes.
const LIMIT: f64 = 1e300;
/// Columns of the plot that large series are reduced to; each keeps at
/// most four points (first, minimum, maximum, last).
const DECIMATE_COLUMNS: usize = 500;
/// Most points drawn per series.
pub(crate) const MAX_POINTS: usize = 4 * DECIMATE_COLUMNS;
/// Drawn coordinates stay within this many plot sizes of the plot, so that
/// clipped lines keep their slope and the numbers stay small.
const OVERDRAW: f64 = 100.0;

/// One axis.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Axis {
    /// Linear from `lo` to `hi`, a tick at every multiple of `step` in it.
    Linear { lo: f64, hi: f64, step: f64 },
    /// Logarithmic from `10^lo` to `10^hi`, a labelled tick every `every`
    /// decades.
    Log { lo: i32, hi: i32, every: i32 },
}

impl Axis {
    /// The axis fitted to values in `[lo, hi]` (already usable: finite,
    /// clamped, positive on a log axis); `None` for no values.
    fn fitted(log: bool, extent: Option<(f64, f64)>) -> Axis {
        match (log, extent) {
            (true, Some((lo, hi))) => {
                let lo = snapped_log10(lo).floor().clamp(-400.0, 400.0) as i32;
                let hi = snapped_log10(hi).ceil().clamp(-400.0, 400.0) as i32;
                Axis::log(lo, hi.max(lo + 1))
            }
            (true, None) => Axis::log(0, 1),
            (false, Some((lo, hi))) => {
                let (lo, hi, step) = nice_ticks(lo, hi);
                Axis::Linear { lo, hi, step }
            }
            (false, None) => Axis::Linear {
                lo: 0.0,
                hi: 1.0,
                step: 0.2,
            },
        }
    }

    /// A log axis over decades `lo..hi`, at most about 10 labelled.
    fn log(lo: i32, hi: i32) -> Axis {
        let every = ((hi - lo + 9) / 10).max(1);
        let span = hi - lo;
        Axis::Log {
            lo,
            hi: lo + (span + every - 1) / every * every,
            every,
        }
    }

    /// The axis over exactly `[lo, hi]`, if that is a usable range.
    fn fixed(log: bool, (lo, hi): (f64, f64)) -> Option<Axis> {
        if !(lo.is_finite() && hi.is_finite() && lo < hi) || (log && lo <= 0.0) {
            return None;
        }
        if log {
            // Whole decades only; a tick per decade needs them.
            let lo = snapped_log10(lo).floor().clamp(-400.0, 400.0) as i32;
            let hi = snapped_log10(hi).ceil().clamp(-400.0, 400.0) as i32;
            Some(Axis::log(lo, hi.max(lo + 1)))
        } else {
            let (lo, hi) = (lo.clamp(-LIMIT, LIMIT), hi.clamp(-LIMIT, LIMIT));
            let (_, _, step) = nice_ticks(lo, hi);
            Some(Axis::Linear { lo, hi, step })
        }
    }

    /// Position of `v`: 0 at the start of the axis, 1 at its end (not
    /// clamped to them, but to [`OVERDRAW`] axis lengths either side).
    fn frac(&self, v: f64) -> f64 {
        let f = match *self {
            Axis::Linear { lo, hi, .. } => (v.clamp(-LIMIT, LIMIT) - lo) / (hi - lo),
            Axis::Log { lo, hi, .. } => {
                if v.is_nan() || v <= 0.0 {
                    return -OVERDRAW;
                }
                let (lo, hi) = (f64::from(lo), f64::from(hi));
                (v.clamp(1.0 / LIMIT, LIMIT).log10() - lo) / (hi - lo)
            }
        };
        if f.is_nan() {
            0.0
        } else {
            f.clamp(-OVERDRAW, 1.0 + OVERDRAW)
        }
    }

    /// Labelled ticks as (axis position, label).
    fn ticks(&self) -> Vec<(f64, String)> {
        match *self {
            Axis::Linear { lo, hi, step } => {
                let decimals = decimals_for(step);
                let scientific = frame::scientific(lo, hi, decimals);
                let first = (lo / step - 1e-9).ceil();
                let last = (hi / step + 1e-9).floor();
                let count = (last - first).clamp(0.0, 50.0) as usize;
                (0..=count)
                    .map(|i| {
                        let v = (first + i as f64) * step;
                        (self.frac(v), linear_tick_label(v, decimals, scientific))
                    })
                    .filter(|(f, _)| (-1e-9..=1.0 + 1e-9).contains(f))
                    .collect()
            }
            Axis::Log { lo, hi, every } => log_ticks(lo, hi, every),
        }
    }

    /// Unlabelled minor tick positions (2..9 times each decade on a log axis
    /// showing few decades).
    fn minor_ticks(&self) -> Vec<f64> {
        match *self {
            Axis::Log { lo, hi, every } => log_minor_ticks(lo, hi, every, 12),
            Axis::Linear { .. } => Vec::new(),
        }
    }
}

/// Whether `v` can be placed on an axis.
fn usable(v: f64, log: bool) -> bool {
    v.is_finite() && (!log || v > 0.0)
}

/// `v` clamped into the range an axis handles.
fn clamp_value(v: f64, log: bool) -> f64 {
    if log {
        v.clamp(1.0 / LIMIT, LIMIT)
    } else {
        v.clamp(-LIMIT, LIMIT)
    }
}

/// Reduces `points` to at most [`MAX_POINTS`], keeping their order: each
/// run of consecutive points in the same one of [`DECIMATE_COLUMNS`] columns
/// (by `column`) keeps its first, lowest, highest and last point, so that
/// spikes stay visible; what is still too many (x not ascending) is then
/// sampled evenly, keeping the last point.
fn decimate(points: &[(f64, f64)], column: impl Fn(f64) -> i64) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let mut out = Vec::with_capacity(MAX_POINTS);
    let mut rest = points;
    while let Some(&(x0, _)) = rest.first() {
        let col = column(x0);
        let len = rest
            .iter()
            .position(|&(x, _)| column(x) != col)
            .unwrap_or(rest.len());
        let (run, tail) = rest.split_at(len);
        if run.len() <= 4 {
            out.extend_from_slice(run);
        } else {
            let (mut lo, mut hi) = (0usize, 0usize);
            for (i, p) in run.iter().enumerate() {
                if run.get(lo).is_some_and(|l| p.1 < l.1) {
                    lo = i;
                }
                if run.get(hi).is_some_and(|h| p.1 > h.1) {
                    hi = i;
                }
            }
            let mut keep = [0, lo.min(hi), lo.max(hi), run.len() - 1];
            keep.sort_unstable();
            let mut last = None;
            for k in keep {
                if last != Some(k) {
                    if let Some(p) = run.get(k) {
                        out.push(*p);
                    }
                    last = Some(k);
                }
            }
        }
        rest = tail;
    }
    if out.len() > MAX_POINTS {
        let stride = out.len().div_ceil(MAX_POINTS - 1);
        let last = out.last().copied();
        out = out.into_iter().step_by(stride).collect();
        if let Some(l) = last {
            if out.last() != Some(&l) {
                out.push(l);
            }
        }
    }
    out
}

impl LineChart {
    /// An empty chart with linear axes, no series and no markers.
    pub fn new(
        title: impl Into<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        LineChart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            log_x: false,
            log_y: false,
            step: false,
            vertical_markers: Vec::new(),
            y_range: None,
        }
    }

    /// The usable points of each series, clamped into the axis range.
    fn usable_points(&self) -> Vec<Vec<(f64, f64)>> {
        self.series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .filter(|(x, y)| usable(*x, self.log_x) && usable(*y, self.log_y))
                    .map(|&(x, y)| (clamp_value(x, self.log_x), clamp_value(y, self.log_y)))
                    .collect()
            })
            .collect()
    }

    /// The markers to draw: (x, label).
    fn usable_markers(&self) -> Vec<(f64, &str)> {
        self.vertical_markers
            .iter()
            .filter(|(x, _)| usable(*x, self.log_x))
            .map(|(x, l)| (clamp_value(*x, self.log_x), l.as_str()))
            .collect()
    }

    /// The x and y axes covering the points and markers (and the fixed y
    /// range).
    fn axes(&self, points: &[Vec<(f64, f64)>], markers: &[(f64, &str)]) -> (Axis, Axis) {
        fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
            values.fold(None, |acc, v| match acc {
                None => Some((v, v)),
                Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
            })
        }
        let xs = points
            .iter()
            .flatten()
            .map(|p| p.0)
            .chain(markers.iter().map(|m| m.0));
        let x = Axis::fitted(self.log_x, extent(xs));
        let y = self
            .y_range
            .and_then(|r| Axis::fixed(self.log_y, r))
            .unwrap_or_else(|| {
                Axis::fitted(self.log_y, extent(points.iter().flatten().map(|p| p.1)))
            });
        (x, y)
    }

    /// Renders a standalone SVG document.
    ///
    /// A legend under the title (a coloured line swatch per series, dashed
    /// where the series is, wrapping onto several rows), the plot with a
    /// light grid, "nice" linear ticks or one tick per decade on log axes,
    /// one path per series (clipped to the plot; a step function when
    /// [`LineChart::step`] is set) and the dashed vertical markers with
    /// their labels. Series longer than about 2000 points are decimated per
    /// plot column, keeping each column's extremes. Hovering a line shows
    /// its name, hovering a marker its label and position. A chart without
    /// any drawable point says "(no data)".
    pub fn to_svg(&self) -> String {
        let points = self.usable_points();
        let markers = self.usable_markers();
        let (x_axis, y_axis) = self.axes(&points, &markers);
        let x_ticks = x_axis.ticks();
        let y_ticks = y_axis.ticks();

        // ---- layout ----
        let (max_tick_chars, margin_left) =
            frame::tick_margin(y_ticks.iter().map(|(_, l)| l.as_str()));
        let plot_w = PLOT_W.max(frame::title_width(&self.title));
        let x0 = margin_left;

        // Legend entries flow left to right, wrapping at the plot width.
        let (legend, margin_top) = frame::legend_layout(
            self.series.iter().map(|s| s.name.as_str()),
            SWATCH_W + 6.0,
            x0,
            plot_w,
        );

        let width = x0 + plot_w + frame::MARGIN_RIGHT;
        let height = margin_top + PLOT_H + MARGIN_BOTTOM;
        let y0 = margin_top;
        let x_of = |v: f64| x0 + plot_w * x_axis.frac(v);
        let y_of = |v: f64| y0 + PLOT_H * (1.0 - y_axis.frac(v));
        let yb = y0 + PLOT_H;

        let mut svg = String::new();
        // `write!` into a String cannot fail; results are ignored below.
        frame::open(&mut svg, &self.title, width, height);
        let _ = writeln!(
            svg,
            r##"<defs><clipPath id="plot-area"><rect x="{}" y="{}" width="{}" height="{}"/></clipPath></defs>"##,
            n(x0),
            n(y0),
            n(plot_w),
            n(PLOT_H),
        );
        frame::background_and_heading(&mut svg, &self.title, width, height, x0 + plot_w / 2.0);

        // Legend.
        if !legend.is_empty() {
            let _ = writeln!(svg, r##"<g class="legend" font-size="11" fill="#333333">"##);
            for (i, ((x, top, label), s)) in legend.iter().zip(&self.series).enumerate() {
                let colour = PALETTE[i % PALETTE.len()];
                let dash = if s.dashed {
                    r#" stroke-dasharray="5 3""#
                } else {
                    ""
                };
                let _ = writeln!(
                    svg,
                    r##"<line class="swatch" x1="{}" y1="{ym}" x2="{}" y2="{ym}" stroke="{colour}" stroke-width="2.5"{dash}/><text x="{}" y="{}">{}</text>"##,
                    n(*x),
                    n(x + SWATCH_W),
                    n(x + SWATCH_W + 6.0),
                    n(top + 10.0),
                    escape(label),
                    ym = n(top + 6.0),
                );
            }
            let _ = writeln!(svg, "</g>");
        }

        // Grid with tick labels: horizontal lines for y, vertical for x.
        let _ = writeln!(svg, r#"<g class="grid">"#);
        for (frac, label) in &y_ticks {
            frame::y_grid_line(&mut svg, x0, plot_w, y0 + PLOT_H * (1.0 - frac), label);
        }
        for (frac, label) in &x_ticks {
            let x = x0 + plot_w * frac;
            let _ = writeln!(
                svg,
                r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#e6e6e6" stroke-width="1"/><text x="{x}" y="{}" text-anchor="middle" fill="#333333">{}</text>"##,
                n(y0),
                n(yb),
                n(yb + 18.0),
                escape(label),
                x = n(x),
            );
        }
        let mut minor = String::new();
        for frac in y_axis.minor_ticks() {
            let _ = write!(minor, "M{} {}h4", n(x0), n(y0 + PLOT_H * (1.0 - frac)));
        }
        for frac in x_axis.minor_ticks() {
            let _ = write!(minor, "M{} {}v-4", n(x0 + plot_w * frac), n(yb));
        }
        if !minor.is_empty() {
            let _ = writeln!(
                svg,
                r##"<path d="{minor}" fill="none" stroke="#888888" stroke-width="1"/>"##
            );
        }
        let _ = writeln!(svg, "</g>");

        // Axis labels.
        if !self.y_label.trim().is_empty() {
            frame::y_axis_label(&mut svg, self.y_label.trim(), x0, y0, max_tick_chars);
        }
        if !self.x_label.trim().is_empty() {
            let _ = writeln!(
                svg,
                r##"<text x="{}" y="{}" text-anchor="middle" font-size="13" fill="#222222">{}</text>"##,
                n(x0 + plot_w / 2.0),
                n(yb + 42.0),
                escape(self.x_label.trim()),
            );
        }

        // The lines, clipped to the plot.
        let column = |x: f64| (x_axis.frac(x) * DECIMATE_COLUMNS as f64).floor() as i64;
        let mut drawn_any = false;
        let _ = writeln!(svg, r#"<g class="lines" clip-path="url(#plot-area)">"#);
        for (i, (s, pts)) in self.series.iter().zip(&points).enumerate() {
            let pts = decimate(pts, column);
            let mut d = String::with_capacity(pts.len() * 16);
            for (k, &(x, y)) in pts.iter().enumerate() {
                let (px, py) = (n(x_of(x)), n(y_of(y)));
                if k == 0 {
                    let _ = write!(d, "M{px} {py}");
                } else if self.step {
                    let _ = write!(d, "H{px}V{py}");
                } else {
                    let _ = write!(d, "L{px} {py}");
                }
            }
            if pts.len() == 1 {
                // A lone point: a dot, so that it shows.
                if let Some(&(x, y)) = pts.first() {
                    let _ = write!(d, "M{} {}h0.01", n(x_of(x)), n(y_of(y)));
                }
            }
            if d.is_empty() {
                continue;
            }
            drawn_any = true;
            let colour = PALETTE[i % PALETTE.len()];
            let dash = if s.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = writeln!(
                svg,
                r##"<path class="series" d="{d}" fill="none" stroke="{colour}" stroke-width="2" stroke-linejoin="round" stroke-linecap="round"{dash}><title>{}</title></path>"##,
                escape(&s.name),
            );
        }
        let _ = writeln!(svg, "</g>");
        if !drawn_any {
            frame::no_data(&mut svg, x0, y0, plot_w);
        }

        // Vertical markers, their labels reading upwards from the top left
        // of the line.
        for (x, label) in &markers {
            let px = x_of(*x);
            let label = truncate_label(label, MAX_MARKER_CHARS);
            let (tx, ty) = (px - 4.0, y0 + 6.0);
            let _ = writeln!(
                svg,
                r##"<g class="marker"><line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#555555" stroke-width="1.2" stroke-dasharray="4 3"><title>{}</title></line><text x="{tx}" y="{ty}" text-anchor="end" font-size="10" fill="#333333" transform="rotate(-90 {tx} {ty})">{}</text></g>"##,
                n(y0),
                n(yb),
                escape(&format!("{label}: {}", fmt_value(*x))),
                escape(&label),
                x = n(px),
                tx = n(tx),
                ty = n(ty),
            );
        }

        // Axes on top of everything.
        frame::axes(&mut svg, x0, y0, plot_w);
        svg.push_str("</svg>\n");
        svg
    }

    /// Writes [`LineChart::to_svg`] to `path`.
    pub fn write_svg(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::testing::assert_well_formed;

    /// The `d` attribute of every series path.
    fn paths(svg: &str) -> Vec<&str> {
        svg.lines()
            .filter(|l| l.starts_with(r#"<path class="series""#))
            .filter_map(|l| l.split(" d=\"").nth(1)?.split('"').next())
            .collect()
    }

    /// Points in a path: one per command letter.
    fn vertices(d: &str) -> usize {
        d.matches(['M', 'L', 'H']).count()
    }

    fn chart() -> LineChart {
        LineChart::new("Stack distance", "bytes", "fraction")
    }

    #[test]
    fn simple_chart_is_well_formed() {
        let mut c = chart();
        c.series = vec![
            LineSeries::new("64 B", vec![(1.0, 0.1), (2.0, 0.5), (3.0, 0.9)]),
            LineSeries {
                name: "4 KiB".into(),
                points: vec![(1.0, 0.0), (3.0, 1.0)],
                dashed: true,
            },
        ];
        let svg = c.to_svg();
        assert_well_formed(&svg);
        let p = paths(&svg);
        assert_eq!(p.len(), 2);
        assert_eq!(vertices(p[0]), 3);
        assert!(p[0].contains('L'));
        assert!(!svg.contains("(no data)"));
        // Legend: a swatch per series, the dashed one dashed; distinct colours.
        assert_eq!(svg.matches(r#"class="swatch""#).count(), 2);
        assert_eq!(svg.matches(r#"stroke-dasharray="5 3""#).count(), 1);
        assert_eq!(svg.matches(r#"stroke-dasharray="6 4""#).count(), 1);
        assert!(svg.contains(PALETTE[0]) && svg.contains(PALETTE[1]));
        assert!(svg.contains("<title>64 B</title>"));
        for label in ["Stack distance", ">bytes<", ">fraction<"] {
            assert!(svg.contains(label), "{label}");
        }
        // Step function: horizontal then vertical moves.
        c.step = true;
        let svg = c.to_svg();
        assert_well_formed(&svg);
        let p = paths(&svg);
        assert!(p[0].contains('H') && p[0].contains('V') && !p[0].contains('L'));
    }

    #[test]
    fn empty_chart_is_valid() {
        let svg = LineChart::new("", "", "").to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains("(no data)"));
        assert!(paths(&svg).is_empty());
        // Series without usable points, on log axes, with a bad range.
        let mut c = chart();
        c.log_x = true;
        c.log_y = true;
        c.y_range = Some((1.0, 0.0));
        c.series = vec![
            LineSeries::new("empty", vec![]),
            LineSeries::new("bad", vec![(f64::NAN, 1.0), (0.0, 1.0), (1.0, -1.0)]),
        ];
        c.vertical_markers = vec![(f64::INFINITY, "inf".into())];
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains("(no data)"));
        assert_eq!(svg.matches(r#"class="swatch""#).count(), 2);
    }

    #[test]
    fn log_axes_skip_non_positive() {
        let mut c = chart();
        c.log_x = true;
        c.log_y = true;
        c.series = vec![LineSeries::new(
            "s",
            vec![
                (0.0, 1.0),
                (-5.0, 1.0),
                (10.0, 0.0),
                (100.0, 0.5),
                (1000.0, 0.9),
                (f64::NAN, 1.0),
                (1e4, f64::INFINITY),
                (1e5, 1.0),
            ],
        )];
        let svg = c.to_svg();
        assert_well_formed(&svg);
        let p = paths(&svg);
        assert_eq!(p.len(), 1);
        assert_eq!(vertices(p[0]), 3, "{}", p[0]);
        // Decades 100 to 1e5 on x, 0.1 to 1 on y.
        for label in [">100<", ">1000<", ">10000<", ">100000<", ">0.1<", ">1<"] {
            assert!(svg.contains(label), "{label}: {svg}");
        }
        assert!(!svg.contains(">10<"));
        // The same data on linear axes keeps all the finite points.
        c.log_x = false;
        c.log_y = false;
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(vertices(paths(&svg)[0]), 6);
    }

    #[test]
    fn markers_appear_and_widen_the_axis() {
        let mut c = chart();
        c.log_x = true;
        c.series = vec![LineSeries::new("s", vec![(64.0, 0.2), (4096.0, 1.0)])];
        c.vertical_markers = vec![
            (128.0 * 1024.0, "L1".into()),
            (40.0 * 1024.0 * 1024.0, "L2 <&>".into()),
            (-1.0, "dropped".into()),
        ];
        c.y_range = Some((0.0, 1.0));
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"class="marker""#).count(), 2);
        assert!(svg.contains(">L1</text>"));
        assert!(svg.contains(">L2 &lt;&amp;&gt;</text>"));
        assert!(svg.contains("<title>L1: 131072</title>"), "{svg}");
        assert!(!svg.contains("dropped"));
        // The x axis reaches the 40 MiB marker: up to 1e8.
        assert!(
            svg.contains(">1e8<") || svg.contains(">100000000<"),
            "{svg}"
        );
        let (x, y) = c.axes(&c.usable_points(), &c.usable_markers());
        assert_eq!(
            x,
            Axis::Log {
                lo: 1,
                hi: 8,
                every: 1
            }
        );
        assert_eq!(
            y,
            Axis::Linear {
                lo: 0.0,
                hi: 1.0,
                step: 0.2
            }
        );
    }

    #[test]
    fn decimation_bounds_the_point_count() {
        let noisy: Vec<(f64, f64)> = (0..100_000)
            .map(|i| (i as f64, ((i * 7919) % 1000) as f64))
            .collect();
        let mut c = chart();
        c.series = vec![
            LineSeries::new("noisy", noisy.clone()),
            // Not ascending in x: falls back to even sampling.
            LineSeries::new(
                "zigzag",
                (0..50_000)
                    .map(|i| (((i * 31) % 100_000) as f64, (i % 3) as f64))
                    .collect(),
            ),
            LineSeries::new("log", (1..100_000).map(|i| (i as f64, 1.0)).collect()),
        ];
        c.step = true;
        let svg = c.to_svg();
        assert_well_formed(&svg);
        let p = paths(&svg);
        assert_eq!(p.len(), 3);
        for d in &p {
            let v = vertices(d);
            assert!((100..=MAX_POINTS).contains(&v), "{v}");
        }
        assert!(svg.len() < 300_000, "{}", svg.len());
        // Extremes survive: the highest and lowest value are still drawn.
        let kept = decimate(&noisy, |x| (x / 200.0) as i64);
        assert!(kept.len() <= MAX_POINTS);
        assert!(kept.iter().any(|p| p.1 == 999.0) && kept.iter().any(|p| p.1 == 0.0));
        assert_eq!(kept.first(), noisy.first());
        assert_eq!(kept.last(), noisy.last());
        // Short series are left alone.
        assert_eq!(decimate(&noisy[..10], |x| x as i64), noisy[..10].to_vec());
        c.log_x = true;
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert!(paths(&svg).iter().all(|d| vertices(d) <= MAX_POINTS));
    }

    #[test]
    fn y_range_clips_and_absurd_values_stay_finite() {
        let mut c = chart();
        c.series = vec![LineSeries::new(
            "s",
            vec![
                (0.0, -f64::MAX),
                (1.0, 5.0),
                (2.0, f64::MAX),
                (f64::MAX, 0.5),
            ],
        )];
        c.y_range = Some((0.0, 1.0));
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains(r#"clip-path="url(#plot-area)""#));
        c.y_range = None;
        for (lx, ly) in [(false, false), (true, true)] {
            c.log_x = lx;
            c.log_y = ly;
            assert_well_formed(&c.to_svg());
        }
        // A single point and constant data.
        let mut c = chart();
        c.series = vec![LineSeries::new("one", vec![(3.0, 3.0)])];
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(paths(&svg).len(), 1);
        c.log_x = true;
        c.log_y = true;
        assert_well_formed(&c.to_svg());
    }

    #[test]
    fn names_are_escaped() {
        let mut c = LineChart::new("a<b>&c", "<x&>", "\"y\"");
        c.series = vec![LineSeries::new(
            r#"<Lazy&"Grp">"#,
            vec![(1.0, 1.0), (2.0, 2.0)],
        )];
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains("&lt;Lazy&amp;&quot;Grp&quot;&gt;"));
        assert!(svg.contains("a&lt;b&gt;&amp;c") && svg.contains("&lt;x&amp;&gt;"));
        assert!(!svg.contains("<Lazy"));
    }
}

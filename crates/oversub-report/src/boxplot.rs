//! Box plots rendered as standalone SVG, written by hand (no dependencies).

use crate::frame::{self, linear_tick_label, CHAR_W_12, PLOT_H};
use crate::html::escape;
use crate::svg::{decimals_for, n, nice_ticks, truncate_label};
use std::fmt::Write as _;
use std::path::Path;

use crate::stats::{percentile, sorted_finite, Summary};
use oversub_base::format::format_seconds;

/// One box of a box plot.
#[derive(Debug, Clone)]
pub struct BoxSeries {
    /// Label shown under the box.
    pub name: String,
    /// Samples in seconds; NaN and infinite values are ignored.
    pub samples_s: Vec<f64>,
}

impl BoxSeries {
    /// Convenience constructor.
    pub fn new(name: impl Into<String>, samples_s: Vec<f64>) -> Self {
        BoxSeries {
            name: name.into(),
            samples_s,
        }
    }
}

/// A box plot of several sample sets sharing one time axis.
#[derive(Debug, Clone)]
pub struct BoxPlot {
    /// Title above the plot.
    pub title: String,
    /// Y axis label; the chosen time unit is appended, e.g. `"latency (ms)"`.
    pub y_label: String,
    /// The boxes, left to right.
    pub series: Vec<BoxSeries>,
}

// ---- layout constants (pixels) ----
// The frame's own (font, plot height, glyph widths) are in `frame`.
const MARGIN_TOP: f64 = 56.0;
const MIN_PLOT_W: f64 = 360.0;
const MAX_LABEL_CHARS: usize = 40;

/// Fill colours (light) and matching outline/marker colours (dark).
const PALETTE: [(&str, &str); 10] = [
    ("#8db8e0", "#1f4e79"),
    ("#f6b878", "#9c4a00"),
    ("#94d49a", "#1e6b2a"),
    ("#ef9a9a", "#8e1b1b"),
    ("#c5b0e0", "#4b2c7a"),
    ("#d4b59e", "#5d3a22"),
    ("#f2b6dc", "#85245f"),
    ("#c8c8c8", "#3d3d3d"),
    ("#dede8a", "#666610"),
    ("#8fd9e3", "#0f5f6b"),
];

/// Tukey box statistics of one series.
#[derive(Debug, Clone)]
struct BoxStats {
    q1: f64,
    median: f64,
    q3: f64,
    whisker_lo: f64,
    whisker_hi: f64,
    mean: f64,
    outliers: Vec<f64>,
    summary: Summary,
}

impl BoxStats {
    fn compute(samples: &[f64]) -> Option<BoxStats> {
        let sorted = sorted_finite(samples);
        let summary = Summary::from_samples(&sorted)?;
        let q1 = percentile(&sorted, 25.0)?;
        let median = percentile(&sorted, 50.0)?;
        let q3 = percentile(&sorted, 75.0)?;
        let iqr = q3 - q1;
        let fence_lo = q1 - 1.5 * iqr;
        let fence_hi = q3 + 1.5 * iqr;
        let whisker_lo = sorted
            .iter()
            .copied()
            .find(|&x| x >= fence_lo)
            .unwrap_or(q1)
            .min(q1);
        let whisker_hi = sorted
            .iter()
            .rev()
            .copied()
            .find(|&x| x <= fence_hi)
            .unwrap_or(q3)
            .max(q3);
        let outliers = sorted
            .iter()
            .copied()
            .filter(|&x| x < fence_lo || x > fence_hi)
            .collect();
        Some(BoxStats {
            q1,
            median,
            q3,
            whisker_lo,
            whisker_hi,
            mean: summary.mean_s,
            outliers,
            summary,
        })
    }
}

/// Display unit for an axis whose largest absolute value is `max_abs`.
fn time_unit(max_abs: f64) -> (f64, &'static str) {
    if max_abs >= 1.0 {
        (1.0, "s")
    } else if max_abs >= 1e-3 {
        (1e-3, "ms")
    } else if max_abs >= 1e-6 {
        (1e-6, "µs")
    } else {
        (1e-9, "ns")
    }
}

impl BoxPlot {
    /// Renders a standalone SVG document.
    ///
    /// One vertical box per series (Tukey style: box from q1 to q3, median
    /// line, whiskers to the most extreme samples within 1.5 IQR of the box,
    /// outliers as small circles), a diamond marking the mean, a y axis with
    /// about 5-8 "nice" ticks in a unit chosen from the data (s, ms, µs or ns),
    /// series names under the boxes (rotated when there are many or they are
    /// long), the title and a light grid. Series without finite samples are
    /// drawn as an empty slot labelled "(no data)". Hovering a box shows its
    /// summary statistics as a tooltip.
    pub fn to_svg(&self) -> String {
        let stats: Vec<Option<BoxStats>> = self
            .series
            .iter()
            .map(|s| BoxStats::compute(&s.samples_s))
            .collect();

        // ---- y scale ----
        let mut data_lo = f64::INFINITY;
        let mut data_hi = f64::NEG_INFINITY;
        for st in stats.iter().flatten() {
            data_lo = data_lo.min(st.summary.min_s);
            data_hi = data_hi.max(st.summary.max_s);
        }
        if !data_lo.is_finite() || !data_hi.is_finite() {
            data_lo = 0.0;
            data_hi = 1.0;
        }
        // Keep the axis arithmetic finite for absurd magnitudes; anything
        // beyond is pinned to the plot edge.
        const LIMIT: f64 = 1e300;
        data_lo = data_lo.clamp(-LIMIT, LIMIT);
        data_hi = data_hi.clamp(-LIMIT, LIMIT);
        // Anchor at zero when the data is non-negative and not far from it.
        // Otherwise leave a little headroom so extreme samples do not sit
        // on the axis line.
        let pad = (data_hi - data_lo) * 0.03;
        if data_lo >= 0.0 && data_lo < 0.35 * data_hi {
            data_lo = 0.0;
        } else {
            data_lo -= pad;
        }
        data_hi += pad;
        let (tick_lo, tick_hi, step) = nice_ticks(data_lo, data_hi);
        let (unit_factor, unit_name) = time_unit(tick_lo.abs().max(tick_hi.abs()));
        let step_u = step / unit_factor;
        let decimals = decimals_for(step_u);
        let scientific = frame::scientific(tick_lo / unit_factor, tick_hi / unit_factor, decimals);
        let tick_count = ((tick_hi - tick_lo) / step).round().clamp(1.0, 50.0) as usize;
        let tick_labels: Vec<(f64, String)> = (0..=tick_count)
            .map(|i| {
                let v = tick_lo + i as f64 * step;
                (v, linear_tick_label(v / unit_factor, decimals, scientific))
            })
            .collect();

        // ---- horizontal layout ----
        let labels: Vec<String> = self
            .series
            .iter()
            .map(|s| truncate_label(&s.name, MAX_LABEL_CHARS))
            .collect();
        let max_label_chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
        let nseries = self.series.len().max(1);
        let slot_w = if nseries <= 4 {
            110.0
        } else if nseries <= 10 {
            85.0
        } else {
            60.0
        };
        let rotate = max_label_chars as f64 * CHAR_W_12 > slot_w - 8.0;
        let (max_tick_chars, margin_left) =
            frame::tick_margin(tick_labels.iter().map(|(_, l)| l.as_str()));
        // Wide enough for the title and the legend.
        let plot_w = (nseries as f64 * slot_w)
            .max(MIN_PLOT_W)
            .max(frame::title_width(&self.title));
        let slot_w = plot_w / nseries as f64;
        let label_extent = max_label_chars as f64 * CHAR_W_12;
        let (margin_bottom, margin_left) =
            frame::x_label_margins(label_extent, slot_w, rotate, margin_left, 48.0);
        let width = margin_left + plot_w + frame::MARGIN_RIGHT;
        let height = MARGIN_TOP + PLOT_H + margin_bottom;
        let x0 = margin_left;
        let y0 = MARGIN_TOP;
        // Divide first: the products could overflow for absurd magnitudes.
        let y_of =
            |v: f64| y0 + PLOT_H * ((tick_hi - v.max(tick_lo).min(tick_hi)) / (tick_hi - tick_lo));

        let mut svg = String::new();
        // `write!` into a String cannot fail; results are ignored below.
        frame::open(&mut svg, &self.title, width, height);
        frame::background_and_heading(&mut svg, &self.title, width, height, x0 + plot_w / 2.0);
        // Legend (top right).
        let ly = 46.0;
        let lx = x0 + plot_w;
        let _ = writeln!(
            svg,
            r##"<g font-size="11" fill="#555555"><text x="{tx}" y="{ty}" text-anchor="end">outlier</text><circle cx="{cx1}" cy="{cy}" r="3" fill="none" stroke="#555555" stroke-width="1.2"/><text x="{tx2}" y="{ty}" text-anchor="end">mean</text><path d="{diamond}" fill="#ffffff" stroke="#333333" stroke-width="1.2"/></g>"##,
            tx = n(lx),
            ty = n(ly),
            cx1 = n(lx - 50.0),
            cy = n(ly - 4.0),
            tx2 = n(lx - 64.0),
            diamond = diamond_path(lx - 108.0, ly - 4.0, 4.5),
        );

        // Grid and y tick labels.
        let _ = writeln!(svg, r#"<g class="grid">"#);
        for (v, label) in &tick_labels {
            frame::y_grid_line(&mut svg, x0, plot_w, y_of(*v), label);
        }
        let _ = writeln!(svg, "</g>");

        // Y axis label.
        let y_label = match (self.y_label.trim().is_empty(), unit_name) {
            (true, u) => u.to_string(),
            (false, u) => format!("{} ({u})", self.y_label.trim()),
        };
        frame::y_axis_label(&mut svg, &y_label, x0, y0, max_tick_chars);

        // Boxes.
        for (i, (series, st)) in self.series.iter().zip(&stats).enumerate() {
            let cx = x0 + slot_w * (i as f64 + 0.5);
            let (fill, dark) = PALETTE[i % PALETTE.len()];
            let bw = (slot_w * 0.55).min(64.0);
            let _ = writeln!(svg, r#"<g class="series">"#);
            match st {
                Some(st) => {
                    let s = &st.summary;
                    let _ = writeln!(
                        svg,
                        "<title>{}\nn = {}\nmin = {}\nq1 = {}\nmedian = {}\nmean = {}\nq3 = {}\np99 = {}\nmax = {}\nstd = {}</title>",
                        escape(&series.name),
                        s.count,
                        format_seconds(s.min_s),
                        format_seconds(st.q1),
                        format_seconds(st.median),
                        format_seconds(st.mean),
                        format_seconds(st.q3),
                        format_seconds(s.p99_s),
                        format_seconds(s.max_s),
                        format_seconds(s.std_s),
                    );
                    let (yq1, yq3) = (y_of(st.q1), y_of(st.q3));
                    let (ywl, ywh) = (y_of(st.whisker_lo), y_of(st.whisker_hi));
                    let cap = bw * 0.25;
                    // Whiskers and caps.
                    let _ = writeln!(
                        svg,
                        r#"<path d="M{cx} {yq3}V{ywh}M{cl} {ywh}H{cr}M{cx} {yq1}V{ywl}M{cl} {ywl}H{cr}" fill="none" stroke="{dark}" stroke-width="1.5"/>"#,
                        cx = n(cx),
                        yq3 = n(yq3),
                        ywh = n(ywh),
                        yq1 = n(yq1),
                        ywl = n(ywl),
                        cl = n(cx - cap),
                        cr = n(cx + cap),
                    );
                    // Box.
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="{dark}" stroke-width="1.5"/>"#,
                        n(cx - bw / 2.0),
                        n(yq3),
                        n(bw),
                        n((yq1 - yq3).max(0.0)),
                    );
                    // Median.
                    let ym = y_of(st.median);
                    let _ = writeln!(
                        svg,
                        r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{dark}" stroke-width="2.5"/>"#,
                        n(cx - bw / 2.0),
                        n(cx + bw / 2.0),
                        y = n(ym),
                    );
                    // Outliers, de-duplicated by rendered position.
                    let mut last_y = f64::NAN;
                    for &o in &st.outliers {
                        let y = (y_of(o) * 2.0).round() / 2.0;
                        if y == last_y {
                            continue;
                        }
                        last_y = y;
                        let _ = writeln!(
                            svg,
                            r#"<circle cx="{}" cy="{}" r="3" fill="none" stroke="{dark}" stroke-width="1.2"/>"#,
                            n(cx),
                            n(y),
                        );
                    }
                    // Mean marker.
                    let _ = writeln!(
                        svg,
                        r##"<path d="{}" fill="#ffffff" stroke="{dark}" stroke-width="1.2"/>"##,
                        diamond_path(cx, y_of(st.mean), 4.5),
                    );
                }
                None => {
                    let empty_w = (slot_w * 0.7).min(100.0);
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#bbbbbb" stroke-dasharray="4 3"/><text x="{}" y="{}" text-anchor="middle" font-size="11" font-style="italic" fill="#888888">(no data)</text>"##,
                        n(cx - empty_w / 2.0),
                        n(y0 + PLOT_H * 0.3),
                        n(empty_w),
                        n(PLOT_H * 0.4),
                        n(cx),
                        n(y0 + PLOT_H * 0.5 + 4.0),
                    );
                }
            }
            frame::x_label(&mut svg, &labels[i], cx, y0, rotate);
            let _ = writeln!(svg, "</g>");
        }

        // Axes on top of everything.
        frame::axes(&mut svg, x0, y0, plot_w);
        svg.push_str("</svg>\n");
        svg
    }

    /// Writes [`BoxPlot::to_svg`] to `path`.
    pub fn write_svg(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

/// SVG path of a diamond centred at (`cx`, `cy`) with half-diagonal `r`.
fn diamond_path(cx: f64, cy: f64, r: f64) -> String {
    format!(
        "M{} {}L{} {}L{} {}L{} {}Z",
        n(cx),
        n(cy - r),
        n(cx + r),
        n(cy),
        n(cx),
        n(cy + r),
        n(cx - r),
        n(cy)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&#39;");
    }

    #[test]
    fn ticks_are_nice() {
        for (lo, hi) in [
            (0.0, 1.0),
            (0.0, 0.0123),
            (3.2e-6, 9.7e-6),
            (10.0, 10.5),
            (5.0, 5.0),
            (0.0, 0.0),
            (-3.0, 17.0),
            (0.0, 1234.0),
        ] {
            let (a, b, step) = nice_ticks(lo, hi);
            let count = ((b - a) / step).round() as usize + 1;
            assert!(a <= lo && b >= hi, "{lo}..{hi} -> {a}..{b}");
            assert!((5..=8).contains(&count), "{lo}..{hi} -> {count} ticks");
        }
    }

    #[test]
    fn tukey_whiskers() {
        let mut v: Vec<f64> = (1..=9).map(f64::from).collect();
        v.push(100.0);
        let st = BoxStats::compute(&v).unwrap();
        assert_eq!(st.outliers, vec![100.0]);
        assert_eq!(st.whisker_hi, 9.0);
        assert_eq!(st.whisker_lo, 1.0);
    }
}

//! Grouped bar charts rendered as standalone SVG, written by hand (no
//! dependencies): one group of bars per category, one bar per series, e.g.
//! the normalized speed-up of every page-migration policy per application.

use crate::frame::{
    self, fmt_value, linear_tick_label, log_minor_ticks, log_ticks, snapped_log10, CHAR_W_12,
    PALETTE, PLOT_H,
};
use crate::html::escape;
use crate::svg::{decimals_for, n, nice_ticks, truncate_label};
use std::fmt::Write as _;
use std::path::Path;

/// One series of a bar chart: one bar in every category group.
#[derive(Debug, Clone)]
pub struct BarSeries {
    /// Name shown in the legend and in the bar tooltips.
    pub name: String,
    /// One value per category (in the order of [`BarChart::categories`]);
    /// `None` draws no bar. Missing trailing values count as `None`, extra
    /// values are ignored.
    pub values: Vec<Option<f64>>,
}

impl BarSeries {
    /// Convenience constructor.
    pub fn new(name: impl Into<String>, values: Vec<Option<f64>>) -> Self {
        BarSeries {
            name: name.into(),
            values,
        }
    }
}

/// A grouped bar chart: categories along the x axis, one coloured bar per
/// series inside each category group, with a legend.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Title above the chart.
    pub title: String,
    /// Y axis label, used as is.
    pub y_label: String,
    /// The x axis groups, left to right (e.g. applications, then "mean").
    pub categories: Vec<String>,
    /// The bars inside each group, left to right (e.g. policies); each gets
    /// a distinct colour and a legend entry.
    pub series: Vec<BarSeries>,
    /// Logarithmic (base 10) y axis with a tick per decade. Values that are
    /// not strictly positive are then treated as missing.
    pub log_y: bool,
    /// A dashed horizontal reference line at this value (e.g. `1.0` for the
    /// baseline a speed-up is normalized to).
    pub reference: Option<f64>,
    /// Values below this are drawn at the floor and labelled `"<floor"`
    /// (e.g. `"<0.01"`), as papers mark runs that did not finish. Ignored
    /// when not finite, or not positive on a log axis.
    pub floor: Option<f64>,
}

// ---- layout constants (pixels) ----
// The frame's own (font, plot height, legend, palette) are in `frame`.
const MIN_PLOT_W: f64 = 360.0;
const MAX_CATEGORY_CHARS: usize = 30;
/// Space between two category groups.
const GROUP_GAP: f64 = 18.0;
/// Keeps the axis arithmetic finite for absurd magnitudes.
const LIMIT: f64 = 1e300;

/// One bar as drawn.
#[derive(Debug, Clone, Copy)]
struct Bar {
    /// The value as given (finite; positive on a log axis).
    value: f64,
    /// The height it is drawn at: the value, raised to the floor and
    /// clamped to the representable range.
    drawn: f64,
    /// Whether the value is below the floor.
    floored: bool,
}

/// The y axis.
#[derive(Debug, Clone, Copy)]
enum Scale {
    /// Linear from `lo` to `hi` with a tick every `step`.
    Linear { lo: f64, hi: f64, step: f64 },
    /// Logarithmic from `10^lo` to `10^hi`, a labelled tick every `every`
    /// decades.
    Log { lo: i32, hi: i32, every: i32 },
}

impl Scale {
    /// Position of `v` on the axis: 0 at the bottom, 1 at the top, clamped.
    fn frac(&self, v: f64) -> f64 {
        match *self {
            Scale::Linear { lo, hi, .. } => {
                if !v.is_finite() {
                    return 0.0;
                }
                // Divide first: the products could overflow.
                ((v.clamp(lo, hi) - lo) / (hi - lo)).clamp(0.0, 1.0)
            }
            Scale::Log { lo, hi, .. } => {
                if v.is_nan() || v <= 0.0 || v.is_infinite() {
                    return 0.0;
                }
                let (lo, hi) = (f64::from(lo), f64::from(hi));
                ((v.log10().clamp(lo, hi) - lo) / (hi - lo)).clamp(0.0, 1.0)
            }
        }
    }

    /// Where bars start: zero on a linear axis, the bottom on a log axis.
    fn base(&self) -> f64 {
        match self {
            Scale::Linear { .. } => self.frac(0.0),
            Scale::Log { .. } => 0.0,
        }
    }

    /// Labelled ticks as (axis position, label).
    fn ticks(&self) -> Vec<(f64, String)> {
        match *self {
            Scale::Linear { lo, hi, step } => {
                let decimals = decimals_for(step);
                let scientific = frame::scientific(lo, hi, decimals);
                let count = ((hi - lo) / step).round().clamp(1.0, 50.0) as usize;
                (0..=count)
                    .map(|i| {
                        let v = lo + i as f64 * step;
                        (self.frac(v), linear_tick_label(v, decimals, scientific))
                    })
                    .collect()
            }
            Scale::Log { lo, hi, every } => log_ticks(lo, hi, every),
        }
    }

    /// Unlabelled minor tick positions (2..9 times each decade on a log axis
    /// showing few decades).
    fn minor_ticks(&self) -> Vec<f64> {
        match *self {
            Scale::Log { lo, hi, every } => log_minor_ticks(lo, hi, every, 10),
            Scale::Linear { .. } => Vec::new(),
        }
    }
}

impl BarChart {
    /// An empty linear chart with no categories, series, reference or floor.
    pub fn new(title: impl Into<String>, y_label: impl Into<String>) -> Self {
        BarChart {
            title: title.into(),
            y_label: y_label.into(),
            categories: Vec::new(),
            series: Vec::new(),
            log_y: false,
            reference: None,
            floor: None,
        }
    }

    /// The floor in effect, if any.
    fn effective_floor(&self) -> Option<f64> {
        self.floor
            .filter(|f| f.is_finite() && (!self.log_y || *f > 0.0))
    }

    /// The reference line in effect, if any.
    fn effective_reference(&self) -> Option<f64> {
        self.reference
            .filter(|r| r.is_finite() && (!self.log_y || *r > 0.0))
            .map(|r| r.clamp(-LIMIT, LIMIT))
    }

    /// The bars to draw, indexed `[series][category]`; `None` where the
    /// value is missing or unusable (NaN, infinite, not positive on a log
    /// axis).
    fn bars(&self) -> Vec<Vec<Option<Bar>>> {
        let floor = self.effective_floor();
        self.series
            .iter()
            .map(|s| {
                (0..self.categories.len())
                    .map(|c| {
                        let value = s.values.get(c).copied().flatten()?;
                        if !value.is_finite() || (self.log_y && value <= 0.0) {
                            return None;
                        }
                        let floored = floor.is_some_and(|f| value < f);
                        let drawn = match floor {
                            Some(f) if floored => f,
                            _ => value,
                        };
                        let drawn = if self.log_y {
                            drawn.clamp(1.0 / LIMIT, LIMIT)
                        } else {
                            drawn.clamp(-LIMIT, LIMIT)
                        };
                        Some(Bar {
                            value,
                            drawn,
                            floored,
                        })
                    })
                    .collect()
            })
            .collect()
    }

    /// The y axis covering every drawn bar and the reference line.
    fn scale(&self, bars: &[Vec<Option<Bar>>]) -> Scale {
        let drawn = bars
            .iter()
            .flatten()
            .flatten()
            .map(|b| b.drawn)
            .chain(self.effective_reference());
        if self.log_y {
            let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
            for l in drawn.map(snapped_log10) {
                lo = lo.min(l);
                hi = hi.max(l);
            }
            if !lo.is_finite() || !hi.is_finite() {
                return Scale::Log {
                    lo: -1,
                    hi: 1,
                    every: 1,
                };
            }
            // Bars grow from the bottom: keep at least a decade below the
            // smallest so that it stays visible.
            let lo_dec = lo.floor().clamp(-400.0, 400.0) as i32;
            let lo_dec = if f64::from(lo_dec) == lo {
                lo_dec - 1
            } else {
                lo_dec
            };
            let hi_dec = (hi.ceil().clamp(-400.0, 400.0) as i32).max(lo_dec + 1);
            // At most about 10 labelled decades.
            let every = (hi_dec - lo_dec + 9) / 10;
            let every = every.max(1);
            let span = hi_dec - lo_dec;
            let hi_dec = lo_dec + (span + every - 1) / every * every;
            Scale::Log {
                lo: lo_dec,
                hi: hi_dec,
                every,
            }
        } else {
            let (mut lo, mut hi) = (0.0f64, 0.0f64);
            for v in drawn {
                lo = lo.min(v);
                hi = hi.max(v);
            }
            if lo == 0.0 && hi == 0.0 {
                hi = 1.0;
            }
            // Headroom so that the tallest bars do not touch the frame.
            let pad = (hi - lo) * 0.05;
            if hi > 0.0 {
                hi += pad;
            }
            if lo < 0.0 {
                lo -= pad;
            }
            let (lo, hi, step) = nice_ticks(lo, hi);
            Scale::Linear { lo, hi, step }
        }
    }

    /// Renders a standalone SVG document.
    ///
    /// One group of bars per category (labelled under the axis, rotated
    /// when long), one coloured bar per series inside each group, a legend
    /// under the title that wraps onto several rows, a y axis with "nice"
    /// linear ticks or one tick per decade on a log axis, a light grid, the
    /// optional dashed reference line, and `"<floor"` labels above bars
    /// raised to the floor. Linear bars grow from zero, log bars from the
    /// bottom of the axis. The width grows with categories × series.
    /// Hovering a bar shows `"series / category: value"`.
    pub fn to_svg(&self) -> String {
        let bars = self.bars();
        let scale = self.scale(&bars);
        let ticks = scale.ticks();
        let floor = self.effective_floor();

        // ---- horizontal layout ----
        let ns = self.series.len();
        let nc = self.categories.len();
        let slots = nc.max(1) as f64;
        let bar_w0 = match ns {
            0..=3 => 26.0,
            4..=6 => 18.0,
            7..=10 => 13.0,
            _ => 10.0,
        };
        let group_w0 = ns.max(1) as f64 * bar_w0 + GROUP_GAP;
        let (max_tick_chars, margin_left) =
            frame::tick_margin(ticks.iter().map(|(_, l)| l.as_str()));
        let plot_w = (slots * group_w0)
            .max(MIN_PLOT_W)
            .max(frame::title_width(&self.title));
        let group_w = plot_w / slots;
        // Stretch bars a little when the plot is wider than needed.
        let bar_w = ((group_w - GROUP_GAP) / ns.max(1) as f64)
            .min(bar_w0 * 2.5)
            .min(48.0);

        let cat_labels: Vec<String> = self
            .categories
            .iter()
            .map(|c| truncate_label(c, MAX_CATEGORY_CHARS))
            .collect();
        let max_cat_chars = cat_labels
            .iter()
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        let label_extent = max_cat_chars as f64 * CHAR_W_12;
        let rotate = label_extent > group_w - 8.0;
        let (margin_bottom, margin_left) =
            frame::x_label_margins(label_extent, group_w, rotate, margin_left, 40.0);
        let x0 = margin_left;

        // ---- legend: entries flow left to right, wrapping at the plot width ----
        let (legend, margin_top) = frame::legend_layout(
            self.series.iter().map(|s| s.name.as_str()),
            16.0,
            x0,
            plot_w,
        );

        let width = x0 + plot_w + frame::MARGIN_RIGHT;
        let height = margin_top + PLOT_H + margin_bottom;
        let y0 = margin_top;
        let y_of = |frac: f64| y0 + PLOT_H * (1.0 - frac);
        let y_base = y_of(scale.base());

        let mut svg = String::new();
        // `write!` into a String cannot fail; results are ignored below.
        frame::open(&mut svg, &self.title, width, height);
        frame::background_and_heading(&mut svg, &self.title, width, height, x0 + plot_w / 2.0);

        // Legend.
        if !legend.is_empty() {
            let _ = writeln!(svg, r##"<g class="legend" font-size="11" fill="#333333">"##);
            for (i, (x, top, label)) in legend.iter().enumerate() {
                let colour = PALETTE[i % PALETTE.len()];
                let _ = writeln!(
                    svg,
                    r##"<rect x="{}" y="{}" width="12" height="12" fill="{colour}" stroke="#333333" stroke-width="0.5"/><text x="{}" y="{}">{}</text>"##,
                    n(*x),
                    n(*top),
                    n(x + 16.0),
                    n(top + 10.0),
                    escape(label),
                );
            }
            let _ = writeln!(svg, "</g>");
        }

        // Grid and y tick labels.
        let _ = writeln!(svg, r#"<g class="grid">"#);
        for (frac, label) in &ticks {
            frame::y_grid_line(&mut svg, x0, plot_w, y_of(*frac), label);
        }
        let minor = scale.minor_ticks();
        if !minor.is_empty() {
            let mut d = String::new();
            for frac in minor {
                let _ = write!(d, "M{} {}h4", n(x0), n(y_of(frac)));
            }
            let _ = writeln!(
                svg,
                r##"<path d="{d}" fill="none" stroke="#888888" stroke-width="1"/>"##
            );
        }
        let _ = writeln!(svg, "</g>");

        // Y axis label.
        if !self.y_label.trim().is_empty() {
            frame::y_axis_label(&mut svg, self.y_label.trim(), x0, y0, max_tick_chars);
        }

        // Bars, one group per category.
        let floor_label = floor.map(|f| escape(&format!("<{}", fmt_value(f))));
        let mut drawn_any = false;
        for (c, category) in self.categories.iter().enumerate() {
            let gx = x0 + group_w * c as f64;
            let start = gx + (group_w - bar_w * ns as f64) / 2.0;
            let _ = writeln!(svg, r#"<g class="category">"#);
            for (s, series) in self.series.iter().enumerate() {
                let Some(bar) = bars.get(s).and_then(|row| row.get(c)).copied().flatten() else {
                    continue;
                };
                drawn_any = true;
                let colour = PALETTE[s % PALETTE.len()];
                let bx = start + bar_w * s as f64;
                let yv = y_of(scale.frac(bar.drawn));
                let (top, bottom) = (yv.min(y_base), yv.max(y_base));
                let mut tip = format!("{} / {}: {}", series.name, category, fmt_value(bar.value));
                if bar.floored {
                    if let Some(f) = floor {
                        let _ = write!(tip, " (drawn at the floor {})", fmt_value(f));
                    }
                }
                let _ = writeln!(
                    svg,
                    r##"<rect class="bar" x="{}" y="{}" width="{}" height="{}" fill="{colour}" stroke="#333333" stroke-width="0.5"><title>{}</title></rect>"##,
                    n(bx),
                    n(top),
                    n(bar_w),
                    n(bottom - top),
                    escape(&tip),
                );
                if let (true, Some(label)) = (bar.floored, &floor_label) {
                    // Reads upwards from just above the bar.
                    let x = bx + bar_w / 2.0 + 3.0;
                    let y = top - 3.0;
                    let _ = writeln!(
                        svg,
                        r##"<text class="floor-label" x="{x}" y="{y}" font-size="9" fill="#222222" transform="rotate(-90 {x} {y})">{label}</text>"##,
                        x = n(x),
                        y = n(y),
                    );
                }
            }
            // Category label.
            let label = cat_labels.get(c).map_or("", String::as_str);
            frame::x_label(&mut svg, label, gx + group_w / 2.0, y0, rotate);
            let _ = writeln!(svg, "</g>");
        }
        if !drawn_any {
            frame::no_data(&mut svg, x0, y0, plot_w);
        }

        // Reference line over the bars.
        if let Some(r) = self.effective_reference() {
            let y = y_of(scale.frac(r));
            let _ = writeln!(
                svg,
                r##"<line class="reference" x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#222222" stroke-width="1.2" stroke-dasharray="6 4"><title>reference: {}</title></line>"##,
                n(x0),
                n(x0 + plot_w),
                fmt_value(r),
                y = n(y),
            );
        }

        // Axes on top of everything.
        frame::axes(&mut svg, x0, y0, plot_w);
        if let Scale::Linear { lo, .. } = scale {
            // A zero line when the axis goes below zero.
            if lo < 0.0 {
                let _ = writeln!(
                    svg,
                    r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#444444" stroke-width="1"/>"##,
                    n(x0),
                    n(x0 + plot_w),
                    y = n(y_base),
                );
            }
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// Writes [`BarChart::to_svg`] to `path`.
    pub fn write_svg(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::testing::assert_well_formed;

    fn bar_count(svg: &str) -> usize {
        svg.matches(r#"<rect class="bar""#).count()
    }

    fn chart(categories: &[&str], series: Vec<BarSeries>) -> BarChart {
        let mut c = BarChart::new("Speed-up", "normalized speed-up");
        c.categories = categories.iter().map(|s| s.to_string()).collect();
        c.series = series;
        c
    }

    #[test]
    fn empty_chart_is_valid() {
        let svg = BarChart::new("", "").to_svg();
        assert_well_formed(&svg);
        assert_eq!(bar_count(&svg), 0);
        assert!(svg.contains("(no data)"));

        // Categories without series, series without categories.
        let svg = chart(&["a", "b"], vec![]).to_svg();
        assert_well_formed(&svg);
        let svg = chart(&[], vec![BarSeries::new("p", vec![Some(1.0)])]).to_svg();
        assert_well_formed(&svg);
        assert_eq!(bar_count(&svg), 0);
        let mut log = BarChart::new("t", "y");
        log.log_y = true;
        log.floor = Some(0.01);
        log.reference = Some(1.0);
        assert_well_formed(&log.to_svg());
    }

    #[test]
    fn one_bar_per_present_value() {
        let c = chart(
            &["bfs", "sssp", "mean"],
            vec![
                BarSeries::new("LazyGrpHW", vec![Some(1.0), Some(1.0), Some(1.0)]),
                BarSeries::new("Eager", vec![Some(0.5), None, Some(2.0)]),
                // Short: the missing last value counts as None; extra ignored.
                BarSeries::new("Oracle", vec![Some(3.0)]),
                BarSeries::new("Extra", vec![None, None, Some(1.5), Some(9.0)]),
            ],
        );
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(bar_count(&svg), 7);
        assert!(svg.contains("<title>Eager / mean: 2</title>"), "{svg}");
        assert!(svg.contains("<title>Oracle / bfs: 3</title>"));
        // Legend: one swatch per series.
        assert_eq!(svg.matches(r#"width="12" height="12""#).count(), 4);
    }

    #[test]
    fn names_are_escaped() {
        let c = chart(
            &["x&y<z>"],
            vec![BarSeries::new(r#"<Lazy&"Grp">"#, vec![Some(1.5)])],
        );
        let mut c = c;
        c.title = "a<b>&c".into();
        c.y_label = "<speed&up>".into();
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert!(svg.contains("x&amp;y&lt;z&gt;"));
        assert!(svg.contains("&lt;Lazy&amp;&quot;Grp&quot;&gt;"));
        assert!(svg.contains("&lt;Lazy&amp;&quot;Grp&quot;&gt; / x&amp;y&lt;z&gt;: 1.5"));
        assert!(svg.contains("a&lt;b&gt;&amp;c"));
        assert!(svg.contains("&lt;speed&amp;up&gt;"));
        assert!(!svg.contains("<Lazy") && !svg.contains("a<b>"));
    }

    #[test]
    fn log_axis_with_floor() {
        let mut c = chart(
            &["bfs", "kmeans", "mean"],
            vec![
                BarSeries::new("LazyGrpHW", vec![Some(1.0), Some(1.0), Some(1.0)]),
                BarSeries::new("Eager", vec![Some(0.001), Some(0.5), Some(0.005)]),
                BarSeries::new("Oracle", vec![Some(2.0), Some(0.0), Some(-3.0)]),
            ],
        );
        c.log_y = true;
        c.floor = Some(0.01);
        c.reference = Some(1.0);
        let svg = c.to_svg();
        assert_well_formed(&svg);
        // 0 and -3 are missing on a log axis.
        assert_eq!(bar_count(&svg), 7);
        assert_eq!(svg.matches(r#"class="floor-label""#).count(), 2);
        assert!(svg.contains(">&lt;0.01</text>"), "{svg}");
        assert!(svg.contains("Eager / bfs: 0.001 (drawn at the floor 0.01)"));
        // Decades from one below the floor up to 10.
        for label in ["0.001", "0.01", "0.1", "1", "10"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}: {svg}");
        }
        assert!(!svg.contains(">100</text>"));
        assert_eq!(svg.matches(r#"class="reference""#).count(), 1);

        // Floored bars are drawn at the floor: all the same height.
        let scale = c.scale(&c.bars());
        assert!(matches!(
            scale,
            Scale::Log {
                lo: -3,
                hi: 1,
                every: 1
            }
        ));
        assert!((scale.frac(0.01) - 0.25).abs() < 1e-12);
        assert!((scale.frac(1.0) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn non_finite_values_are_ignored() {
        let values = vec![
            Some(f64::NAN),
            Some(1.0),
            Some(f64::INFINITY),
            None,
            Some(-1.0),
            Some(f64::NEG_INFINITY),
        ];
        let cats = ["a", "b", "c", "d", "e", "f"];
        let mut c = chart(&cats, vec![BarSeries::new("p", values)]);
        c.reference = Some(f64::NAN);
        c.floor = Some(f64::INFINITY);
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(bar_count(&svg), 2);
        assert!(!svg.contains("class=\"reference\""));
        assert!(!svg.contains("floor-label"));
        c.log_y = true;
        c.reference = Some(-1.0);
        c.floor = Some(0.0);
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(bar_count(&svg), 1);
        assert!(!svg.contains("class=\"reference\""));
    }

    #[test]
    fn absurd_magnitudes_stay_finite() {
        let values = vec![
            Some(f64::MAX),
            Some(-f64::MAX),
            Some(f64::MIN_POSITIVE),
            Some(5e-324),
            Some(1e-300),
            Some(0.0),
        ];
        let cats = ["a", "b", "c", "d", "e", "f"];
        for log_y in [false, true] {
            let mut c = chart(&cats, vec![BarSeries::new("p", values.clone())]);
            c.log_y = log_y;
            c.reference = Some(f64::MAX);
            let svg = c.to_svg();
            assert_well_formed(&svg);
            assert_eq!(bar_count(&svg), if log_y { 4 } else { 6 });
            // Few labelled decades even over 600 of them.
            if log_y {
                assert!(svg.matches(r##"stroke="#e6e6e6""##).count() <= 12);
            }
        }
        // Tiny and constant data.
        let c = chart(&["a"], vec![BarSeries::new("p", vec![Some(1e-12)])]);
        assert_well_formed(&c.to_svg());
    }

    #[test]
    fn paper_sized_chart_is_readable() {
        let cats = [
            "backprop",
            "bfs",
            "hotspot",
            "kmeans",
            "nw",
            "pathfinder",
            "srad",
            "mean",
        ];
        let series: Vec<BarSeries> = (0..14)
            .map(|s| {
                BarSeries::new(
                    format!("Policy-{s}-with-a-longish-name"),
                    (0..cats.len())
                        .map(|c| Some(0.001 * 10f64.powf((s * c) as f64 % 4.0) + 0.0005))
                        .collect(),
                )
            })
            .collect();
        let mut c = chart(&cats, series);
        c.log_y = true;
        c.floor = Some(0.01);
        c.reference = Some(1.0);
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(bar_count(&svg), 8 * 14);
        // Bars at least 8px wide; legend wraps onto several rows.
        assert!(svg.contains(r#"width="10" height"#));
        let legend_rows: std::collections::BTreeSet<&str> = svg
            .lines()
            .filter(|l| l.contains(r#"width="12" height="12""#))
            .filter_map(|l| l.split(" y=\"").nth(1)?.split('"').next())
            .collect();
        assert!(legend_rows.len() >= 2, "{legend_rows:?}");
        // All 14 colours distinct.
        let colours: std::collections::BTreeSet<&str> = PALETTE[..14].iter().copied().collect();
        assert_eq!(colours.len(), 14);
    }

    #[test]
    fn linear_ticks_and_negative_values() {
        let mut c = chart(
            &["a", "b"],
            vec![BarSeries::new("p", vec![Some(2.5), Some(-0.5)])],
        );
        c.reference = Some(1.0);
        c.floor = Some(-0.25);
        let svg = c.to_svg();
        assert_well_formed(&svg);
        assert_eq!(svg.matches(r#"class="floor-label""#).count(), 1);
        assert!(svg.contains(">&lt;-0.25</text>"));
        let scale = c.scale(&c.bars());
        let ticks = scale.ticks();
        assert!((5..=8).contains(&ticks.len()), "{ticks:?}");
        assert!(
            ticks.iter().any(|(_, l)| l == "0.0" || l == "0"),
            "{ticks:?}"
        );
        assert!(scale.base() > 0.0 && scale.base() < 1.0);
    }
}

//! The chart frame the bar charts, line charts and box plots draw alike: the `<svg>` element with its title,
//! background and heading, the legend's flowing layout, the y grid and axis label, the axes, "(no data)", and the
//! tick labels and value formats of linear and log axes. Each chart keeps only what is its own (bars, lines,
//! boxes, its x axis).

use std::fmt::Write as _;

use crate::html::escape;
use crate::svg::n;

pub(crate) const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
pub(crate) const PLOT_H: f64 = 360.0;
pub(crate) const MARGIN_RIGHT: f64 = 24.0;
/// Rough average glyph width of a 12px sans-serif font.
pub(crate) const CHAR_W_12: f64 = 7.0;
/// Rough average glyph width of an 11px sans-serif font.
pub(crate) const CHAR_W_11: f64 = 6.4;
pub(crate) const MAX_LEGEND_CHARS: usize = 40;
/// Top of the first legend row.
pub(crate) const LEGEND_TOP: f64 = 44.0;
pub(crate) const LEGEND_ROW_H: f64 = 18.0;

/// Series colours (Tableau 20, the ten strong hues first), distinct enough for 14 policies side by side; cycled
/// beyond 20 series.
pub(crate) const PALETTE: [&str; 20] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#a0cbe8", "#ffbe7d", "#8cd17d", "#b6992d", "#499894", "#d37295",
    "#fabfd2", "#79706e", "#d4a6c8", "#d7b5a6",
];

/// The widest tick label in characters, and the left margin that leaves room for it and the y axis label.
pub(crate) fn tick_margin<'a>(labels: impl Iterator<Item = &'a str>) -> (usize, f64) {
    let max_chars = labels.map(|l| l.chars().count()).max().unwrap_or(1);
    (max_chars, 52.0 + max_chars as f64 * CHAR_W_12)
}

/// A plot width wide enough for the title (bold 16px).
pub(crate) fn title_width(title: &str) -> f64 {
    title.chars().count() as f64 * 9.5 + 24.0
}

/// Legend entries flowing left to right from `x0`, wrapping at `plot_w`: each `(x, row top, label)`, and the top
/// margin the rows need. `swatch_w` is the room before the text.
pub(crate) fn legend_layout<'a>(
    names: impl Iterator<Item = &'a str>,
    swatch_w: f64,
    x0: f64,
    plot_w: f64,
) -> (Vec<(f64, f64, String)>, f64) {
    let mut legend = Vec::new();
    let (mut lx, mut row) = (0.0f64, 0usize);
    for name in names {
        let label = crate::svg::truncate_label(name, MAX_LEGEND_CHARS);
        let entry_w = swatch_w + label.chars().count() as f64 * CHAR_W_11 + 16.0;
        if lx > 0.0 && lx + entry_w > plot_w {
            lx = 0.0;
            row += 1;
        }
        legend.push((x0 + lx, LEGEND_TOP + row as f64 * LEGEND_ROW_H, label));
        lx += entry_w;
    }
    let rows = if legend.is_empty() { 0 } else { row + 1 };
    let margin_top = LEGEND_TOP + rows as f64 * LEGEND_ROW_H + 12.0;
    (legend, margin_top)
}

// `write!` into a String cannot fail; the results are ignored below.

/// The `<svg>` element and its `<title>`.
pub(crate) fn open(svg: &mut String, title: &str, width: f64, height: f64) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="12">"#,
        w = n(width),
        h = n(height),
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(title));
}

/// The white background and the heading centred at `centre_x`.
pub(crate) fn background_and_heading(
    svg: &mut String,
    title: &str,
    width: f64,
    height: f64,
    centre_x: f64,
) {
    let _ = writeln!(
        svg,
        r##"<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>"##,
        n(width),
        n(height)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="28" text-anchor="middle" font-size="16" font-weight="bold" fill="#222222">{}</text>"##,
        n(centre_x),
        escape(title)
    );
}

/// One horizontal grid line across the plot at `y`, its tick label left of the axis.
pub(crate) fn y_grid_line(svg: &mut String, x0: f64, plot_w: f64, y: f64, label: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#e6e6e6" stroke-width="1"/><text x="{}" y="{}" text-anchor="end" fill="#333333">{}</text>"##,
        n(x0),
        n(x0 + plot_w),
        n(x0 - 8.0),
        n(y + 4.0),
        escape(label),
        y = n(y),
    );
}

/// The y axis label, rotated, left of tick labels `max_tick_chars` wide.
pub(crate) fn y_axis_label(svg: &mut String, label: &str, x0: f64, y0: f64, max_tick_chars: usize) {
    let ylx = x0 - 18.0 - max_tick_chars as f64 * CHAR_W_12;
    let yly = y0 + PLOT_H / 2.0;
    let _ = writeln!(
        svg,
        r##"<text x="{x}" y="{y}" text-anchor="middle" font-size="13" fill="#222222" transform="rotate(-90 {x} {y})">{}</text>"##,
        escape(label),
        x = n(ylx),
        y = n(yly),
    );
}

/// How far x labels that do not fit their slot are turned.
pub(crate) const LABEL_ROTATION_DEG: f64 = 35.0;

/// The bottom margin for x labels `label_extent` wide (turned when `rotate`, else `flat_bottom`), and the left margin
/// widened so that the first turned label, hanging left of its slot `slot_w` wide, fits.
pub(crate) fn x_label_margins(
    label_extent: f64,
    slot_w: f64,
    rotate: bool,
    margin_left: f64,
    flat_bottom: f64,
) -> (f64, f64) {
    if !rotate {
        return (flat_bottom, margin_left);
    }
    let (sin, cos) = LABEL_ROTATION_DEG.to_radians().sin_cos();
    (
        30.0 + label_extent * sin + 10.0,
        margin_left.max(label_extent * cos - slot_w / 2.0 + 16.0),
    )
}

/// An x label centred under `cx` (below a plot whose top is `y0`), turned by [`LABEL_ROTATION_DEG`] when `rotate`.
pub(crate) fn x_label(svg: &mut String, label: &str, cx: f64, y0: f64, rotate: bool) {
    let label = escape(label);
    let ly = y0 + PLOT_H + 18.0;
    if rotate {
        let _ = writeln!(
            svg,
            r##"<text x="{x}" y="{y}" text-anchor="end" fill="#222222" transform="rotate(-{LABEL_ROTATION_DEG} {x} {y})">{label}</text>"##,
            x = n(cx + 4.0),
            y = n(ly),
        );
    } else {
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#222222">{label}</text>"##,
            n(cx),
            n(ly),
        );
    }
}

/// "(no data)" in the middle of an empty plot.
pub(crate) fn no_data(svg: &mut String, x0: f64, y0: f64, plot_w: f64) {
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{}" text-anchor="middle" font-size="11" font-style="italic" fill="#888888">(no data)</text>"##,
        n(x0 + plot_w / 2.0),
        n(y0 + PLOT_H / 2.0),
    );
}

/// The left and bottom axes, drawn over everything else.
pub(crate) fn axes(svg: &mut String, x0: f64, y0: f64, plot_w: f64) {
    let _ = writeln!(
        svg,
        r##"<path d="M{x0} {y0}V{yb}H{xr}" fill="none" stroke="#444444" stroke-width="1"/>"##,
        x0 = n(x0),
        y0 = n(y0),
        yb = n(y0 + PLOT_H),
        xr = n(x0 + plot_w),
    );
}

/// Whether a linear axis over `[lo, hi]` labels its ticks in scientific notation: only for absurd ranges, so
/// that labels stay short.
pub(crate) fn scientific(lo: f64, hi: f64, decimals: usize) -> bool {
    lo.abs().max(hi.abs()) >= 1e7 || decimals > 6
}

/// The label of a linear axis's tick at `v` (no "-0.0").
pub(crate) fn linear_tick_label(v: f64, decimals: usize, scientific: bool) -> String {
    if scientific {
        return format!("{v:.3e}");
    }
    let label = format!("{v:.decimals$}");
    if label
        .trim_start_matches('-')
        .trim_matches(['0', '.'])
        .is_empty()
    {
        format!("{:.decimals$}", 0.0)
    } else {
        label
    }
}

/// A log axis's labelled ticks from `10^lo` to `10^hi`, one every `every` decades, as (axis position, label).
pub(crate) fn log_ticks(lo: i32, hi: i32, every: i32) -> Vec<(f64, String)> {
    let span = f64::from(hi - lo);
    (lo..=hi)
        .step_by(every.max(1) as usize)
        .map(|e| (f64::from(e - lo) / span, decade_label(e)))
        .collect()
}

/// A log axis's unlabelled minor ticks (2..9 times each decade) when it labels every decade and shows at most
/// `max_decades`; none otherwise.
pub(crate) fn log_minor_ticks(lo: i32, hi: i32, every: i32, max_decades: i32) -> Vec<f64> {
    if every != 1 || hi - lo > max_decades {
        return Vec::new();
    }
    let span = f64::from(hi - lo);
    (lo..hi)
        .flat_map(|e| (2..10).map(move |m| (f64::from(e - lo) + f64::from(m).log10()) / span))
        .collect()
}

/// Label of the decade tick `10^e`: plain for 0.0001..1000000, else `1e{e}`.
pub(crate) fn decade_label(e: i32) -> String {
    if (-4..=6).contains(&e) {
        fmt_value(10f64.powi(e))
    } else {
        format!("1e{e}")
    }
}

/// A value for labels and tooltips: 4 significant digits, plain for magnitudes in 0.0001..10^7, scientific
/// otherwise.
pub(crate) fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return "n/a".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if (1e-4..1e7).contains(&a) {
        let mag = a.log10().floor() as i32;
        let decimals = (3 - mag).clamp(0, 8) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    } else {
        format!("{v:.3e}")
    }
}

/// `log10(v)` snapped to an integer when within rounding error of one, so that exact decades (0.01) land on
/// their tick.
pub(crate) fn snapped_log10(v: f64) -> f64 {
    let l = v.log10();
    if (l - l.round()).abs() < 1e-9 {
        l.round()
    } else {
        l
    }
}

/// What the charts' tests check of every document they draw.
#[cfg(test)]
pub(crate) mod testing {
    /// Checks that every tag is closed in order and that no text or
    /// attribute holds a raw `<`, `>` or a bare `&`.
    pub(crate) fn assert_well_formed(svg: &str) {
        assert!(svg.starts_with("<svg "), "{svg}");
        assert!(svg.ends_with("</svg>\n"), "{svg}");
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            assert!(!text.contains('>'), "stray '>' in {text:?}");
            check_entities(text);
            let close = rest[open..].find('>').expect("unclosed tag") + open;
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "raw '<' in tag {tag:?}");
            check_entities(tag);
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "in {svg}");
            } else if !tag.ends_with('/') {
                let name = tag.split_whitespace().next().expect("tag name");
                stack.push(name.to_string());
            }
            rest = &rest[close + 1..];
        }
        assert!(rest.trim().is_empty());
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }

    fn check_entities(s: &str) {
        for (i, _) in s.match_indices('&') {
            let after = &s[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                    .iter()
                    .any(|e| after.starts_with(e)),
                "bare '&' in {s:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_formatting() {
        assert_eq!(fmt_value(1.0), "1");
        assert_eq!(fmt_value(0.01), "0.01");
        assert_eq!(fmt_value(1.23456), "1.235");
        assert_eq!(fmt_value(1234.6), "1235");
        assert_eq!(fmt_value(-0.5), "-0.5");
        assert_eq!(fmt_value(1e-7), "1.000e-7");
        assert_eq!(fmt_value(f64::NAN), "n/a");
        assert_eq!(decade_label(-3), "0.001");
        assert_eq!(decade_label(3), "1000");
        assert_eq!(decade_label(-12), "1e-12");
        assert_eq!(linear_tick_label(-0.0001, 2, false), "0.00");
        assert_eq!(linear_tick_label(2.5, 1, false), "2.5");
    }

    #[test]
    fn minor_ticks_only_for_few_labelled_decades() {
        assert_eq!(log_minor_ticks(0, 2, 1, 10).len(), 16);
        assert!(log_minor_ticks(0, 2, 2, 10).is_empty());
        assert!(log_minor_ticks(0, 11, 1, 10).is_empty());
    }
}

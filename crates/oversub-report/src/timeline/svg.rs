//! The SVG rendering of a [`Timeline`]: lanes, axis, legend and tooltips, drawn like the paper's schedule figures.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use super::{assign_lanes, span_times, MarkerKind, Span, SpanKind, Timeline, LIMIT};
use crate::html::escape;
use crate::svg::{decimals_for, n, truncate_label};
use oversub_base::format::format_seconds;

// ---- layout constants (pixels) ----
const FONT: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";
const WIDTH: f64 = 1100.0;
const MARGIN_RIGHT: f64 = 28.0;
const ROWS_TOP: f64 = 46.0;
const LANE_H: f64 = 24.0;
const HOLDS_LANE_H: f64 = 15.0;
const LANE_GAP: f64 = 3.0;
const ROW_PAD: f64 = 8.0;
/// Extra space above lanes in rows with labelled Miss markers.
const MISS_PAD: f64 = 15.0;
const MIN_ROW_H: f64 = 36.0;
/// Sub-lanes per row in the SVG; further overlapping spans share a lane.
const MAX_LANES: usize = 12;
/// Rows the SVG adds for spans whose row index has no name.
const MAX_IMPLICIT_ROWS: usize = 1024;
const MAX_NAME_CHARS: usize = 28;
/// Rough average glyph widths of sans-serif fonts at 12, 11 and 10 px.
const CHAR_W_12: f64 = 7.0;
const CHAR_W_11: f64 = 6.4;
const CHAR_W_10: f64 = 5.8;
const MISS_RED: &str = "#d32f2f";

/// Fill colours (light) and matching outline colours (dark) for labels.
/// Grey and red are left out: they mean paging slots and faults.
const PALETTE: [(&str, &str); 9] = [
    ("#8db8e0", "#1f4e79"),
    ("#f6b878", "#9c4a00"),
    ("#94d49a", "#1e6b2a"),
    ("#c5b0e0", "#4b2c7a"),
    ("#d4b59e", "#5d3a22"),
    ("#f2b6dc", "#85245f"),
    ("#dede8a", "#666610"),
    ("#8fd9e3", "#0f5f6b"),
    ("#ffd54f", "#7a5b00"),
];

/// Palette index of a label: a fixed function of the text, so the same
/// label gets the same colour in every figure. Labels that differ only in
/// their last character ("A", "B", "C" or "comp1", "comp2") get successive
/// colours; "A" gets the first.
fn palette_index(label: &str) -> usize {
    let h = label.chars().fold(0u64, |h, c| {
        h.wrapping_mul(31).wrapping_add(u64::from(u32::from(c)))
    });
    // 65 ('A') + 7 is a multiple of the palette length.
    (h.wrapping_add(7) % PALETTE.len() as u64) as usize
}

/// Smallest "nice" step (1, 2, 2.5 or 5 times a power of ten) that cuts
/// `span` (> 0) into at most `max_intervals` pieces.
fn nice_step(span: f64, max_intervals: f64) -> f64 {
    let exp0 = (span / max_intervals).log10().floor() as i32;
    for exp in exp0..exp0.saturating_add(3) {
        let base = 10f64.powi(exp);
        for m in [1.0, 2.0, 2.5, 5.0] {
            let step = m * base;
            if step.is_normal() && span / step <= max_intervals + 1e-9 {
                return step;
            }
        }
    }
    span
}

/// A drawable span: finite, ordered, clamped times.
#[derive(Debug, Clone, Copy)]
struct Prepared {
    idx: usize,
    row: usize,
    start: f64,
    end: f64,
}

/// The time axis: range, tick step and display unit.
#[derive(Debug, Clone)]
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
    unit: &'static str,
}

impl Axis {
    fn new(data_lo: f64, data_hi: f64, explicit_end: Option<f64>) -> Axis {
        let (mut lo, mut hi) = if data_lo.is_finite() && data_hi.is_finite() {
            (data_lo, data_hi)
        } else {
            (0.0, 0.0)
        };
        let mut fit_end = true;
        if let Some(end) = explicit_end {
            if end > lo {
                hi = end;
                fit_end = false;
            }
        }
        // Anchor at zero when the data starts at or near it.
        if lo >= 0.0 && lo <= 0.25 * hi {
            lo = 0.0;
        }
        if hi <= lo {
            if lo > 0.0 {
                hi = lo * 1.25;
                lo = 0.0;
            } else if lo == 0.0 {
                hi = 1.0;
            } else {
                let pad = lo.abs() * 0.1;
                lo -= pad;
                hi += pad;
            }
        }
        let min_span = (lo.abs().max(hi.abs()) * 1e-9).max(1e-9);
        if hi - lo < min_span {
            hi = lo + min_span;
        }
        let step = nice_step(hi - lo, 10.0);
        let aligned_lo = (lo / step).floor() * step;
        if aligned_lo.is_finite() && lo - aligned_lo < step * 0.999 {
            lo = aligned_lo;
        }
        if fit_end {
            let aligned_hi = (hi / step).ceil() * step;
            if aligned_hi.is_finite() && aligned_hi >= hi {
                hi = aligned_hi;
            }
        }

        let max_abs = lo.abs().max(hi.abs());
        let (factor, unit) = if max_abs >= 10.0 {
            (1.0, "s")
        } else if max_abs >= 10e-3 {
            (1e-3, "ms")
        } else if max_abs >= 10e-6 {
            (1e-6, "µs")
        } else {
            (1e-9, "ns")
        };
        let decimals = decimals_for(step / factor);
        let scientific = max_abs / factor >= 1e7 || decimals > 6;
        let first = (lo / step - 1e-9).ceil();
        let last = (hi / step + 1e-9).floor();
        let count = (last - first).clamp(0.0, 40.0) as usize;
        let ticks = (0..=count)
            .map(|i| {
                let v = (first + i as f64) * step;
                let label = if scientific {
                    format!("{:.3e}", v / factor)
                } else {
                    let l = format!("{:.*}", decimals, v / factor);
                    if l.trim_start_matches('-')
                        .trim_matches(['0', '.'])
                        .is_empty()
                    {
                        format!("{:.*}", decimals, 0.0)
                    } else {
                        l
                    }
                };
                (v, label)
            })
            .filter(|(v, _)| *v >= lo - step * 1e-6 && *v <= hi + step * 1e-6)
            .collect();
        Axis {
            lo,
            hi,
            ticks,
            unit,
        }
    }

    /// Fraction of the axis at time `t` (clamped to 0..=1).
    fn frac(&self, t: f64) -> f64 {
        let f = (t.clamp(self.lo, self.hi) - self.lo) / (self.hi - self.lo);
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }
}

/// Vertical layout of one row.
#[derive(Debug, Clone, Copy)]
struct RowLayout {
    top: f64,
    height: f64,
    /// Top of the first sub-lane.
    lanes_top: f64,
    lane_h: f64,
    lanes: usize,
}

impl RowLayout {
    fn lane_y(&self, lane: usize) -> f64 {
        self.lanes_top + lane as f64 * (self.lane_h + LANE_GAP)
    }
    fn lanes_bottom(&self) -> f64 {
        self.lane_y(self.lanes.max(1)) - LANE_GAP
    }
}

/// Fill and outline of a span.
fn span_paint(kind: SpanKind, label: &str) -> (String, &'static str, &'static str) {
    let idx = palette_index(label);
    let (light, dark) = PALETTE[idx];
    match kind {
        SpanKind::Work | SpanKind::Holds => (light.to_string(), dark, ""),
        SpanKind::PageIn => (format!("url(#pin{idx})"), dark, ""),
        SpanKind::PageOut => (format!("url(#pout{idx})"), dark, ""),
        SpanKind::Paging => ("#c4c4c4".to_string(), "#5a5a5a", ""),
        SpanKind::Fault => ("url(#fault)".to_string(), "#b71c1c", ""),
        SpanKind::Idle => ("#ffffff".to_string(), "#9e9e9e", "4 3"),
    }
}

/// Text drawn inside a span box, or `None` when even two characters do not
/// fit in `width` pixels.
fn fit_text(kind: SpanKind, label: &str, width: f64, char_w: f64) -> Option<String> {
    let label = label.trim();
    let arrow = match kind {
        SpanKind::PageIn => Some('\u{2191}'),
        SpanKind::PageOut => Some('\u{2193}'),
        _ => None,
    };
    let full = match (arrow, label.is_empty()) {
        (Some(a), false) => format!("{a} {label}"),
        (Some(a), true) => a.to_string(),
        (None, _) => label.to_string(),
    };
    let room = ((width - 6.0) / char_w).floor();
    if room < 1.0 {
        return None;
    }
    let room = room.min(1e6) as usize;
    if full.chars().count() <= room {
        return Some(full);
    }
    if room >= 3 {
        return Some(truncate_label(&full, room));
    }
    arrow.map(|a| a.to_string())
}

impl Timeline {
    /// Renders a standalone SVG document, drawn like the paper's schedule
    /// figures.
    ///
    /// Rows run top to bottom with their names on the left, over a time
    /// axis at the bottom (unit s, ms, µs or ns; nice ticks with a light
    /// vertical grid). Work spans are filled boxes coloured by label (the
    /// same label always gets the same colour), PageIn / PageOut hatched
    /// boxes in the label's colour with an ↑ / ↓ before the label, Paging
    /// grey boxes, Fault red cross-hatched boxes, Holds thin bars and Idle
    /// dashed outlines. Labels are written inside boxes when they fit
    /// (shortened with "…" when they partly fit). Spans that overlap within
    /// a row are stacked in sub-lanes. Miss markers are red ✕ with a red
    /// line and their label, Deadline and Release markers small down / up
    /// triangles. Hovering a span or marker shows its label, times and
    /// detail. A legend for the labels and kinds present sits at the
    /// bottom.
    pub fn to_svg(&self) -> String {
        // ---- drawable data ----
        // Display slots: the named rows, then (as "row N") the unnamed rows
        // that drawable spans or markers use.
        let extra: BTreeSet<usize> = self
            .spans
            .iter()
            .filter(|s| span_times(s).is_some())
            .map(|s| s.row)
            .chain(
                self.markers
                    .iter()
                    .filter(|m| m.at_s.is_finite())
                    .map(|m| m.row),
            )
            .filter(|&r| r >= self.rows.len())
            .collect();
        let extra: BTreeMap<usize, usize> = extra
            .into_iter()
            .take(MAX_IMPLICIT_ROWS)
            .enumerate()
            .map(|(i, r)| (r, self.rows.len() + i))
            .collect();
        let slot_of = |row: usize| -> Option<usize> {
            if row < self.rows.len() {
                Some(row)
            } else {
                extra.get(&row).copied()
            }
        };
        let nrows = self.rows.len() + extra.len();
        let mut spans: Vec<Prepared> = self
            .spans
            .iter()
            .enumerate()
            .filter_map(|(idx, s)| {
                let slot = slot_of(s.row)?;
                span_times(s).map(|(start, end)| Prepared {
                    idx,
                    row: slot,
                    start,
                    end,
                })
            })
            .collect();
        spans.sort_by(|a, b| {
            a.row
                .cmp(&b.row)
                .then(a.start.total_cmp(&b.start))
                .then(a.end.total_cmp(&b.end))
        });
        // (marker index, slot, time)
        let markers: Vec<(usize, usize, f64)> = self
            .markers
            .iter()
            .enumerate()
            .filter(|(_, m)| m.at_s.is_finite())
            .filter_map(|(i, m)| Some((i, slot_of(m.row)?, m.at_s.clamp(-LIMIT, LIMIT))))
            .collect();

        // ---- time axis ----
        let mut data_lo = f64::INFINITY;
        let mut data_hi = f64::NEG_INFINITY;
        for s in &spans {
            data_lo = data_lo.min(s.start);
            data_hi = data_hi.max(s.end);
        }
        for &(_, _, at) in &markers {
            data_lo = data_lo.min(at);
            data_hi = data_hi.max(at);
        }
        let explicit_end =
            (self.end_s.is_finite() && self.end_s > 0.0).then(|| self.end_s.min(LIMIT));
        let axis = Axis::new(data_lo, data_hi, explicit_end);

        // ---- horizontal layout ----
        let mut names: Vec<String> = self
            .rows
            .iter()
            .map(|r| truncate_label(r, MAX_NAME_CHARS))
            .collect();
        names.extend(extra.keys().map(|r| format!("row {r}")));
        let max_name_chars = names.iter().map(|s| s.chars().count()).max().unwrap_or(0);
        let margin_left = (max_name_chars as f64 * CHAR_W_12 + 24.0).clamp(64.0, 230.0);
        let x0 = margin_left;
        let plot_w = WIDTH - margin_left - MARGIN_RIGHT;
        let x_of = |t: f64| x0 + plot_w * axis.frac(t);

        // ---- sub-lanes and vertical layout ----
        let mut lane_of = vec![0usize; spans.len()];
        let mut layouts: Vec<RowLayout> = Vec::with_capacity(nrows);
        let mut y = ROWS_TOP;
        let mut cursor = 0usize;
        for row in 0..nrows {
            let begin = cursor;
            while cursor < spans.len() && spans[cursor].row == row {
                cursor += 1;
            }
            let row_spans = &spans[begin..cursor];
            let intervals: Vec<(f64, f64)> = row_spans.iter().map(|s| (s.start, s.end)).collect();
            let (lanes, nlanes) = assign_lanes(&intervals, MAX_LANES);
            lane_of[begin..cursor].copy_from_slice(&lanes);
            let holds_only = !row_spans.is_empty()
                && row_spans
                    .iter()
                    .all(|s| self.spans[s.idx].kind == SpanKind::Holds);
            let lane_h = if holds_only { HOLDS_LANE_H } else { LANE_H };
            let has_miss = markers
                .iter()
                .any(|&(i, slot, _)| slot == row && self.markers[i].kind == MarkerKind::Miss);
            let top_pad = ROW_PAD + if has_miss { MISS_PAD } else { 0.0 };
            let nl = nlanes.max(1);
            let lanes_h = nl as f64 * lane_h + (nl - 1) as f64 * LANE_GAP;
            let height = (top_pad + lanes_h + ROW_PAD).max(MIN_ROW_H);
            // Centre the lanes in the space below the pad.
            let lanes_top = y + top_pad + ((height - top_pad - ROW_PAD - lanes_h) / 2.0).max(0.0);
            layouts.push(RowLayout {
                top: y,
                height,
                lanes_top,
                lane_h,
                lanes: nlanes,
            });
            y += height;
        }
        let empty = nrows == 0;
        let rows_bottom = if empty { ROWS_TOP + 44.0 } else { y };
        let axis_y = rows_bottom;

        // ---- legend items ----
        let mut work_labels: Vec<&str> = Vec::new();
        let mut kinds_present = [false; SpanKind::ALL.len()];
        for s in &spans {
            let span = &self.spans[s.idx];
            if let Some(k) = SpanKind::ALL.iter().position(|&k| k == span.kind) {
                kinds_present[k] = true;
            }
            if span.kind == SpanKind::Work
                && work_labels.len() <= 24
                && !work_labels.contains(&span.label.as_str())
            {
                work_labels.push(span.label.as_str());
            }
        }
        let marker_present = |kind: MarkerKind| {
            markers
                .iter()
                .any(|&(i, _, _)| self.markers[i].kind == kind)
        };
        // (swatch markup at origin, text).
        let mut legend: Vec<(String, String)> = Vec::new();
        for (i, label) in work_labels.iter().enumerate() {
            if i == 24 {
                legend.push((String::new(), "\u{2026}".to_string()));
                break;
            }
            let (fill, stroke, _) = span_paint(SpanKind::Work, label);
            legend.push((
                format!(
                    r#"<rect x="0" y="-10" width="18" height="12" rx="2" fill="{fill}" stroke="{stroke}"/>"#
                ),
                truncate_label(label, 24),
            ));
        }
        for (k, kind) in SpanKind::ALL.iter().enumerate() {
            if !kinds_present[k] || *kind == SpanKind::Work {
                continue;
            }
            let swatch = match kind {
                SpanKind::PageIn => {
                    r##"<rect x="0" y="-10" width="18" height="12" rx="2" fill="url(#pinN)" stroke="#555555"/>"##.to_string()
                }
                SpanKind::PageOut => {
                    r##"<rect x="0" y="-10" width="18" height="12" rx="2" fill="url(#poutN)" stroke="#555555"/>"##.to_string()
                }
                SpanKind::Holds => {
                    r##"<rect x="0" y="-7" width="18" height="7" rx="1.5" fill="#d0d0d0" stroke="#666666"/>"##.to_string()
                }
                _ => {
                    let (fill, stroke, dash) = span_paint(*kind, "");
                    let dash = if dash.is_empty() {
                        String::new()
                    } else {
                        format!(r#" stroke-dasharray="{dash}""#)
                    };
                    format!(
                        r#"<rect x="0" y="-10" width="18" height="12" rx="2" fill="{fill}" stroke="{stroke}"{dash}/>"#
                    )
                }
            };
            legend.push((swatch, kind.legend_name().to_string()));
        }
        if marker_present(MarkerKind::Release) {
            legend.push((
                r##"<path d="M9 -11L13.5 -4H4.5Z" fill="#333333"/><path d="M9 -4V2" stroke="#333333"/>"##.to_string(),
                "release".to_string(),
            ));
        }
        if marker_present(MarkerKind::Deadline) {
            legend.push((
                r##"<path d="M9 1L13.5 -6H4.5Z" fill="#333333"/><path d="M9 -6V-11" stroke="#333333"/>"##.to_string(),
                "deadline".to_string(),
            ));
        }
        if marker_present(MarkerKind::Miss) {
            legend.push((
                format!(
                    r#"<path d="{}" stroke="{MISS_RED}" stroke-width="2.2" fill="none"/>"#,
                    cross_path(9.0, -4.0, 4.5)
                ),
                "deadline miss".to_string(),
            ));
        }
        // Flow the legend into lines.
        let legend_top = axis_y + 58.0;
        let legend_line_h = 20.0;
        let mut placed: Vec<(f64, f64, usize)> = Vec::new(); // (x, y, item)
        let (mut lx, mut ly) = (x0, legend_top);
        for (i, (swatch, text)) in legend.iter().enumerate() {
            let swatch_w = if swatch.is_empty() { 0.0 } else { 24.0 };
            let w = swatch_w + text.chars().count() as f64 * CHAR_W_11 + 18.0;
            if lx > x0 && lx + w > x0 + plot_w {
                lx = x0;
                ly += legend_line_h;
            }
            placed.push((lx, ly, i));
            lx += w;
        }
        let height = if legend.is_empty() {
            axis_y + 52.0
        } else {
            ly + 14.0
        };

        // ---- output ----
        let mut svg = String::new();
        // `write!` into a String cannot fail; results are ignored below.
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="12">"#,
            w = n(WIDTH),
            h = n(height),
        );
        let _ = writeln!(svg, "<title>{}</title>", escape(&self.title));
        svg.push_str(&self.pattern_defs(&spans));
        let _ = writeln!(
            svg,
            r##"<rect x="0" y="0" width="{}" height="{}" fill="#ffffff"/>"##,
            n(WIDTH),
            n(height)
        );
        let title_chars = ((WIDTH - 40.0) / 9.5) as usize;
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="28" text-anchor="middle" font-size="16" font-weight="bold" fill="#222222">{}</text>"##,
            n(x0 + plot_w / 2.0),
            escape(&truncate_label(&self.title, title_chars))
        );

        // Row bands and names.
        let _ = writeln!(svg, r#"<g class="rows">"#);
        for (row, lay) in layouts.iter().enumerate() {
            let band = if row % 2 == 0 { "#f6f7f9" } else { "#ffffff" };
            let _ = writeln!(
                svg,
                r##"<rect x="{}" y="{}" width="{}" height="{}" fill="{band}"/><line x1="{}" y1="{yb}" x2="{}" y2="{yb}" stroke="#dedede"/><text x="{}" y="{}" text-anchor="end" fill="#222222">{}</text>"##,
                n(x0),
                n(lay.top),
                n(plot_w),
                n(lay.height),
                n(x0),
                n(x0 + plot_w),
                n(x0 - 10.0),
                n((lay.lanes_top + lay.lanes_bottom()) / 2.0 + 4.0),
                escape(&names[row]),
                yb = n(lay.top + lay.height),
            );
        }
        if empty {
            let _ = writeln!(
                svg,
                r##"<rect x="{}" y="{}" width="{}" height="44" fill="none" stroke="#bbbbbb" stroke-dasharray="4 3"/><text x="{}" y="{}" text-anchor="middle" font-style="italic" fill="#888888">(empty timeline)</text>"##,
                n(x0),
                n(ROWS_TOP),
                n(plot_w),
                n(x0 + plot_w / 2.0),
                n(ROWS_TOP + 26.0),
            );
        }
        let _ = writeln!(svg, "</g>");

        // Vertical grid and tick labels.
        let _ = writeln!(svg, r#"<g class="grid">"#);
        for (v, label) in &axis.ticks {
            let x = n(x_of(*v));
            let _ = writeln!(
                svg,
                r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#e0e0e0"/><line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#444444"/><text x="{x}" y="{}" text-anchor="middle" fill="#333333">{}</text>"##,
                n(ROWS_TOP),
                n(axis_y),
                n(axis_y),
                n(axis_y + 5.0),
                n(axis_y + 19.0),
                escape(label),
            );
        }
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="middle" font-size="13" fill="#222222">time ({})</text>"##,
            n(x0 + plot_w / 2.0),
            n(axis_y + 40.0),
            axis.unit,
        );
        let _ = writeln!(svg, "</g>");

        // Spans.
        let _ = writeln!(svg, r#"<g class="spans">"#);
        for (p, &lane) in spans.iter().zip(&lane_of) {
            let Some(lay) = layouts.get(p.row) else {
                continue;
            };
            let span = &self.spans[p.idx];
            let xa = x_of(p.start);
            let xb = x_of(p.end);
            let w = (xb - xa).max(1.0);
            let y = lay.lane_y(lane);
            let h = lay.lane_h;
            let (fill, stroke, dash) = span_paint(span.kind, &span.label);
            let dash = if dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{dash}""#)
            };
            let _ = writeln!(
                svg,
                r#"<g class="{}"><title>{}</title><rect x="{}" y="{}" width="{}" height="{}" rx="{}" fill="{fill}" stroke="{stroke}" stroke-width="1"{dash}/>"#,
                span.kind.as_str(),
                escape(&span_tooltip(span, p.start, p.end)),
                n(xa),
                n(y),
                n(w),
                n(h),
                if w > 6.0 { "2" } else { "0" },
            );
            let (font, char_w): (f64, f64) = if h < LANE_H {
                (10.0, CHAR_W_10)
            } else {
                (11.0, CHAR_W_11)
            };
            if let Some(text) = fit_text(span.kind, &span.label, w, char_w) {
                let text_fill = match span.kind {
                    SpanKind::Idle => "#777777",
                    _ => "#1a1a1a",
                };
                let halo = "";
                if matches!(
                    span.kind,
                    SpanKind::PageIn | SpanKind::PageOut | SpanKind::Fault
                ) {
                    // A white chip keeps the text readable on the hatching.
                    let chip_w = (text.chars().count() as f64 * char_w + 8.0).min(w - 2.0);
                    let chip_h = (font + 4.0).min(h - 2.0);
                    let _ = write!(
                        svg,
                        r##"<rect x="{}" y="{}" width="{}" height="{}" rx="3" fill="#ffffff" fill-opacity="0.9"/>"##,
                        n(xa + (w - chip_w) / 2.0),
                        n(y + (h - chip_h) / 2.0),
                        n(chip_w.max(0.0)),
                        n(chip_h.max(0.0)),
                    );
                }
                let _ = write!(
                    svg,
                    r#"<text x="{}" y="{}" text-anchor="middle" font-size="{font}" fill="{text_fill}"{halo}>{}</text>"#,
                    n(xa + w / 2.0),
                    n(y + h / 2.0 + font * 0.36),
                    escape(&text),
                );
            }
            svg.push_str("</g>\n");
        }
        let _ = writeln!(svg, "</g>");

        // Markers.
        let _ = writeln!(svg, r#"<g class="markers">"#);
        for &(i, slot, at) in &markers {
            let m = &self.markers[i];
            let Some(lay) = layouts.get(slot) else {
                continue;
            };
            let x = x_of(at);
            let tooltip = format!(
                "{} ({}) at {}",
                m.label,
                m.kind.as_str(),
                format_seconds(at)
            );
            let _ = write!(
                svg,
                r#"<g class="{}"><title>{}</title>"#,
                m.kind.as_str(),
                escape(tooltip.trim_start())
            );
            let top = lay.lanes_top;
            let bottom = lay.lanes_bottom();
            match m.kind {
                MarkerKind::Release => {
                    let _ = write!(
                        svg,
                        r##"<path d="M{x} {b}V{t}" stroke="#333333" stroke-opacity="0.6"/><path d="M{x} {tip}L{r} {base}H{l}Z" fill="#333333"/>"##,
                        x = n(x),
                        b = n(bottom + 2.0),
                        t = n(top),
                        tip = n(bottom - 4.0),
                        base = n(bottom + 4.0),
                        r = n(x + 4.0),
                        l = n(x - 4.0),
                    );
                }
                MarkerKind::Deadline => {
                    let _ = write!(
                        svg,
                        r##"<path d="M{x} {t}V{b}" stroke="#333333" stroke-opacity="0.6"/><path d="M{x} {tip}L{r} {base}H{l}Z" fill="#333333"/>"##,
                        x = n(x),
                        t = n(top - 2.0),
                        b = n(bottom),
                        tip = n(top + 4.0),
                        base = n(top - 4.0),
                        r = n(x + 4.0),
                        l = n(x - 4.0),
                    );
                }
                MarkerKind::Miss => {
                    let cy = top - MISS_PAD / 2.0 - 1.0;
                    let _ = write!(
                        svg,
                        r#"<path d="M{x} {t}V{b}" stroke="{MISS_RED}" stroke-width="2"/><path d="{cross}" stroke="{MISS_RED}" stroke-width="2.2" fill="none"/>"#,
                        x = n(x),
                        t = n(cy + 4.0),
                        b = n(bottom + 2.0),
                        cross = cross_path(x, cy, 4.5),
                    );
                    let label = truncate_label(m.label.trim(), 40);
                    if !label.is_empty() {
                        let tw = label.chars().count() as f64 * CHAR_W_10;
                        let (tx, anchor) = if x + 9.0 + tw <= x0 + plot_w + MARGIN_RIGHT - 4.0 {
                            (x + 9.0, "start")
                        } else {
                            (x - 9.0, "end")
                        };
                        let _ = write!(
                            svg,
                            r##"<text x="{}" y="{}" text-anchor="{anchor}" font-size="10" font-weight="bold" fill="{MISS_RED}" stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">{}</text>"##,
                            n(tx),
                            n(cy + 3.5),
                            escape(&label),
                        );
                    }
                }
            }
            svg.push_str("</g>\n");
        }
        let _ = writeln!(svg, "</g>");

        // Axis line and left edge.
        let _ = writeln!(
            svg,
            r##"<path d="M{x0} {top}V{yb}H{xr}" fill="none" stroke="#444444"/>"##,
            x0 = n(x0),
            top = n(ROWS_TOP),
            yb = n(axis_y),
            xr = n(x0 + plot_w),
        );

        // Legend.
        if !legend.is_empty() {
            let _ = writeln!(svg, r##"<g class="legend" font-size="11" fill="#333333">"##);
            for &(lx, ly, i) in &placed {
                let (swatch, text) = &legend[i];
                let tx = if swatch.is_empty() { 0.0 } else { 24.0 };
                let _ = writeln!(
                    svg,
                    r#"<g transform="translate({} {})">{swatch}<text x="{tx}" y="0">{}</text></g>"#,
                    n(lx),
                    n(ly),
                    escape(text),
                );
            }
            let _ = writeln!(svg, "</g>");
        }
        svg.push_str("</svg>\n");
        svg
    }

    /// `<defs>` with the hatch patterns the drawn spans and legend use.
    fn pattern_defs(&self, spans: &[Prepared]) -> String {
        let mut pin = [false; PALETTE.len()];
        let mut pout = [false; PALETTE.len()];
        let mut fault = false;
        for p in spans {
            let s = &self.spans[p.idx];
            let idx = palette_index(&s.label);
            match s.kind {
                SpanKind::PageIn => pin[idx] = true,
                SpanKind::PageOut => pout[idx] = true,
                SpanKind::Fault => fault = true,
                _ => {}
            }
        }
        let any_in = pin.iter().any(|&b| b);
        let any_out = pout.iter().any(|&b| b);
        if !any_in && !any_out && !fault {
            return String::new();
        }
        let mut defs = String::from("<defs>\n");
        // Page-in: dark stripes "/" on the light colour; page-out: stripes
        // "\" in the dark colour on white, so the two read differently.
        let mut hatch = |id: &str, bg: &str, fg: &str, angle: i32, cross: bool| {
            let _ = write!(
                defs,
                r#"<pattern id="{id}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate({angle})"><rect width="6" height="6" fill="{bg}"/><rect width="2" height="6" fill="{fg}"/>"#
            );
            if cross {
                let _ = write!(defs, r#"<rect width="6" height="1.5" fill="{fg}"/>"#);
            }
            defs.push_str("</pattern>\n");
        };
        for (i, (light, dark)) in PALETTE.iter().enumerate() {
            if pin[i] {
                hatch(&format!("pin{i}"), light, dark, 45, false);
            }
            if pout[i] {
                hatch(&format!("pout{i}"), "#ffffff", dark, -45, false);
            }
        }
        // Neutral versions for the legend.
        if any_in {
            hatch("pinN", "#d6d6d6", "#555555", 45, false);
        }
        if any_out {
            hatch("poutN", "#ffffff", "#555555", -45, false);
        }
        if fault {
            hatch("fault", "#fde0e0", "#c62828", 45, true);
        }
        defs.push_str("</defs>\n");
        defs
    }

    /// Writes [`Timeline::to_svg`] to `path`.
    pub fn write_svg(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }
}

/// Tooltip text of a span: label, kind, times, duration and detail.
fn span_tooltip(span: &Span, start: f64, end: f64) -> String {
    let mut t = format!(
        "{} [{}]\n{} \u{2013} {} ({})",
        span.label,
        span.kind.as_str(),
        format_seconds(start),
        format_seconds(end),
        format_seconds(end - start)
    );
    if !span.detail.trim().is_empty() {
        t.push('\n');
        t.push_str(span.detail.trim());
    }
    t
}

/// SVG path of an ✕ centred at (`cx`, `cy`) with half-size `r`.
fn cross_path(cx: f64, cy: f64, r: f64) -> String {
    format!(
        "M{} {}L{} {}M{} {}L{} {}",
        n(cx - r),
        n(cy - r),
        n(cx + r),
        n(cy + r),
        n(cx - r),
        n(cy + r),
        n(cx + r),
        n(cy - r)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn palette_is_stable_and_spread() {
        assert_eq!(palette_index("A"), 0);
        let idx: Vec<usize> = ["A", "B", "C", "D", "E"]
            .iter()
            .map(|l| palette_index(l))
            .collect();
        assert_eq!(idx, vec![0, 1, 2, 3, 4]);
        assert_eq!(palette_index("comp7"), palette_index("comp7"));
        assert_ne!(palette_index("comp1"), palette_index("comp2"));
    }

    #[test]
    fn axis_ticks() {
        let a = Axis::new(0.0, 3.0, None);
        assert_eq!((a.lo, a.hi, a.unit), (0.0, 3.0, "ms"));
        let labels: Vec<&str> = a.ticks.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0", "500", "1000", "1500", "2000", "2500", "3000"]);
        let a = Axis::new(0.0, 2.93, None);
        assert_eq!(a.hi, 3.0);
        let a = Axis::new(0.0, 2.93, Some(2.95));
        assert_eq!(a.hi, 2.95);
        let a = Axis::new(100.0, 130.0, None);
        assert!(a.lo > 90.0 && a.unit == "s");
        for (lo, hi) in [
            (f64::INFINITY, f64::NEG_INFINITY),
            (0.0, 0.0),
            (5.0, 5.0),
            (-3.0, -3.0),
            (-LIMIT, LIMIT),
            (LIMIT, LIMIT),
            (0.0, 5e-324),
            (1e10, 1e10 + 1e-9),
        ] {
            let a = Axis::new(lo, hi, None);
            assert!(a.hi > a.lo, "{lo} {hi}: {a:?}");
            assert!(
                !a.ticks.is_empty() && a.ticks.len() <= 41,
                "{lo} {hi}: {a:?}"
            );
            assert!(a.frac(lo).is_finite());
        }
    }

    #[test]
    fn text_fitting() {
        assert_eq!(
            fit_text(SpanKind::Work, "A", 100.0, 6.4).as_deref(),
            Some("A")
        );
        assert_eq!(
            fit_text(SpanKind::PageIn, "A", 100.0, 6.4).as_deref(),
            Some("\u{2191} A")
        );
        assert_eq!(fit_text(SpanKind::Work, "A", 3.0, 6.4), None);
        let t = fit_text(SpanKind::Work, "a-long-component-name", 60.0, 6.4).unwrap();
        assert!(t.ends_with('\u{2026}') && t.chars().count() <= 8);
        assert_eq!(
            fit_text(SpanKind::PageOut, "long name", 16.0, 6.4).as_deref(),
            Some("\u{2193}")
        );
    }
}

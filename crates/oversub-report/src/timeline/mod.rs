//! Timelines of scheduled work and paging, drawn as horizontal lanes (one
//! row per CPU, GPU, storage controller, ...) like the schedule figures of
//! the paper, rendered as standalone SVG ([`Timeline::to_svg`]) or as Chrome
//! trace-event JSON for Perfetto / `chrome://tracing`
//! ([`Timeline::to_chrome_trace`]).
//!
//! This module holds the data model and the lane assignment both outputs share; `svg.rs` draws, `chrome.rs`
//! exports.

mod chrome;
mod svg;

use serde::{Deserialize, Serialize};

/// What a [`Span`] shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// A component running (filled box, coloured by label).
    Work,
    /// Buffers moving from the store into memory (hatched, "↑").
    PageIn,
    /// Buffers moving from memory to the store (hatched, "↓").
    PageOut,
    /// A synchronous paging slot (grey box).
    Paging,
    /// A demand-paging stall (red cross-hatch).
    Fault,
    /// What the store holds (thin bar, coloured by label).
    Holds,
    /// Nothing running (dashed outline).
    Idle,
}

impl SpanKind {
    /// Every kind, in legend order.
    pub const ALL: [SpanKind; 7] = [
        SpanKind::Work,
        SpanKind::PageIn,
        SpanKind::PageOut,
        SpanKind::Paging,
        SpanKind::Fault,
        SpanKind::Holds,
        SpanKind::Idle,
    ];

    /// Snake-case name, as serialized and used as the trace category:
    /// `"work"`, `"page_in"`, `"page_out"`, `"paging"`, `"fault"`,
    /// `"holds"`, `"idle"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Work => "work",
            SpanKind::PageIn => "page_in",
            SpanKind::PageOut => "page_out",
            SpanKind::Paging => "paging",
            SpanKind::Fault => "fault",
            SpanKind::Holds => "holds",
            SpanKind::Idle => "idle",
        }
    }

    fn legend_name(self) -> &'static str {
        match self {
            SpanKind::Work => "work",
            SpanKind::PageIn => "page-in \u{2191}",
            SpanKind::PageOut => "page-out \u{2193}",
            SpanKind::Paging => "paging slot",
            SpanKind::Fault => "fault stall",
            SpanKind::Holds => "store holds",
            SpanKind::Idle => "idle",
        }
    }
}

/// A time interval on one row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Span {
    /// Index into [`Timeline::rows`].
    pub row: usize,
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Short name written inside the box (e.g. the component); also picks
    /// the colour of Work, PageIn, PageOut and Holds spans.
    pub label: String,
    /// What the span shows.
    pub kind: SpanKind,
    /// Longer description: SVG tooltip and trace event argument.
    pub detail: String,
}

/// What a [`Marker`] shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkerKind {
    /// A job release (small upward tick).
    Release,
    /// A deadline (small downward tick).
    Deadline,
    /// A missed deadline / late start (red ✕ with its label).
    Miss,
}

impl MarkerKind {
    /// Snake-case name, as serialized and used as the trace category.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Release => "release",
            MarkerKind::Deadline => "deadline",
            MarkerKind::Miss => "miss",
        }
    }
}

/// An instant on one row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Marker {
    /// Index into [`Timeline::rows`].
    pub row: usize,
    /// When, seconds.
    pub at_s: f64,
    /// What the marker shows.
    pub kind: MarkerKind,
    /// Text (written next to Miss markers, tooltip for all).
    pub label: String,
}

/// Lanes of spans and markers over a shared time axis.
///
/// Spans and markers whose times are not finite are ignored by both
/// renderers; a span whose end precedes its start is drawn as if the two
/// were swapped. Rows referenced by spans or markers but missing from
/// [`Timeline::rows`] are named `"row N"`; the SVG shows them after the
/// named rows (only those used, at most 1024 of them).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timeline {
    /// Title above the lanes.
    pub title: String,
    /// Row names, top to bottom.
    pub rows: Vec<String>,
    /// Intervals.
    pub spans: Vec<Span>,
    /// Instants.
    pub markers: Vec<Marker>,
    /// End of the time axis in seconds; 0 (or anything not positive and
    /// finite) fits the axis to the data.
    pub end_s: f64,
}

/// Times are clamped to this magnitude so axis arithmetic stays finite.
const LIMIT: f64 = 1e300;

/// Greedy interval partitioning of intervals sorted by start: the lane of
/// each interval and the number of lanes. An interval goes into the first
/// lane that is free at its start; when `max_lanes` lanes are all busy it
/// shares the one that frees up first.
fn assign_lanes(intervals: &[(f64, f64)], max_lanes: usize) -> (Vec<usize>, usize) {
    let mut ends: Vec<f64> = Vec::new();
    let mut lanes = Vec::with_capacity(intervals.len());
    for &(start, end) in intervals {
        let lane = match ends.iter().position(|&e| e <= start) {
            Some(l) => l,
            None if ends.len() < max_lanes.max(1) => {
                ends.push(f64::NEG_INFINITY);
                ends.len() - 1
            }
            None => ends
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| i),
        };
        if let Some(e) = ends.get_mut(lane) {
            *e = e.max(end);
        }
        lanes.push(lane);
    }
    (lanes, ends.len())
}

/// Like [`assign_lanes`], for trace threads, where a span may also share a
/// lane with a span that encloses it (viewers draw it nested below). The
/// intervals must be sorted by start, longer first among equal starts.
fn assign_nested_lanes(intervals: &[(f64, f64)], max_lanes: usize) -> (Vec<usize>, usize) {
    // Per lane: ends of the spans open at the current start, innermost last.
    let mut stacks: Vec<Vec<f64>> = Vec::new();
    let mut lanes = Vec::with_capacity(intervals.len());
    for &(start, end) in intervals {
        for stack in &mut stacks {
            while stack.last().is_some_and(|&e| e <= start) {
                stack.pop();
            }
        }
        let fits = |stack: &Vec<f64>| stack.last().is_none_or(|&e| end <= e);
        let lane = match stacks.iter().position(fits) {
            Some(l) => l,
            None if stacks.len() < max_lanes.max(1) => {
                stacks.push(Vec::new());
                stacks.len() - 1
            }
            None => stacks
                .iter()
                .enumerate()
                .min_by(|a, b| {
                    let ea = a.1.first().copied().unwrap_or(f64::NEG_INFINITY);
                    let eb = b.1.first().copied().unwrap_or(f64::NEG_INFINITY);
                    ea.total_cmp(&eb)
                })
                .map_or(0, |(i, _)| i),
        };
        if let Some(stack) = stacks.get_mut(lane) {
            // Keep the stack bounded when spans are forced to share.
            if stack.len() < 4096 {
                stack.push(end);
            }
        }
        lanes.push(lane);
    }
    (lanes, stacks.len())
}

/// Finite, ordered, clamped times of a span, or `None` when not drawable.
fn span_times(s: &Span) -> Option<(f64, f64)> {
    if !s.start_s.is_finite() || !s.end_s.is_finite() {
        return None;
    }
    let a = s.start_s.clamp(-LIMIT, LIMIT);
    let b = s.end_s.clamp(-LIMIT, LIMIT);
    Some((a.min(b), a.max(b)))
}

impl Timeline {
    /// An empty timeline with the given rows (top to bottom).
    pub fn new(title: impl Into<String>, rows: Vec<String>) -> Self {
        Timeline {
            title: title.into(),
            rows,
            spans: Vec::new(),
            markers: Vec::new(),
            end_s: 0.0,
        }
    }

    /// Index of the row named `name`, appending it when missing.
    pub fn row_index(&mut self, name: &str) -> usize {
        if let Some(i) = self.rows.iter().position(|r| r == name) {
            i
        } else {
            self.rows.push(name.to_string());
            self.rows.len() - 1
        }
    }

    /// Appends a span.
    pub fn add_span(
        &mut self,
        row: usize,
        start_s: f64,
        end_s: f64,
        label: impl Into<String>,
        kind: SpanKind,
        detail: impl Into<String>,
    ) {
        self.spans.push(Span {
            row,
            start_s,
            end_s,
            label: label.into(),
            kind,
            detail: detail.into(),
        });
    }

    /// Appends a marker.
    pub fn add_marker(
        &mut self,
        row: usize,
        at_s: f64,
        kind: MarkerKind,
        label: impl Into<String>,
    ) {
        self.markers.push(Marker {
            row,
            at_s,
            kind,
            label: label.into(),
        });
    }

    /// Name of row `i`: its entry in [`Timeline::rows`] or `"row i"`.
    fn row_name(&self, i: usize) -> String {
        self.rows
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("row {i}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes() {
        let (l, n) = assign_lanes(&[(0.0, 2.0), (1.0, 3.0), (2.0, 4.0), (2.5, 3.0)], 8);
        assert_eq!(l, vec![0, 1, 0, 2]);
        assert_eq!(n, 3);
        let (l, n) = assign_lanes(&[(0.0, 5.0), (1.0, 5.0), (2.0, 3.0)], 2);
        assert_eq!(n, 2);
        assert_eq!(l.len(), 3);
        let (l, n) = assign_lanes(&[], 4);
        assert!(l.is_empty() && n == 0);
        // Nesting shares a lane, partial overlap does not.
        let (l, n) = assign_nested_lanes(
            &[(0.0, 4.0), (1.0, 2.0), (1.5, 2.0), (3.0, 5.0), (4.0, 6.0)],
            8,
        );
        assert_eq!(l, vec![0, 0, 0, 1, 0]);
        assert_eq!(n, 2);
    }
}

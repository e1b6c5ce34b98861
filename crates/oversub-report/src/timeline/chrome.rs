//! The Chrome trace-event export of a [`Timeline`], for Perfetto or `chrome://tracing`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{json, Value};

use super::{assign_nested_lanes, span_times, Timeline, LIMIT};

/// Threads per row in traces; further overlapping spans share a thread.
const MAX_TRACE_LANES: usize = 64;

impl Timeline {
    /// Chrome trace-event format, for Perfetto or `chrome://tracing`: an
    /// object with `"traceEvents"`, `"displayTimeUnit": "ms"` and
    /// `"otherData": {"title": ...}`.
    ///
    /// Events: one `"M"` `process_name` event naming pid 1 `"oversub"`;
    /// per row a `thread_name` (the row name) and a `thread_sort_index`
    /// (the row index) event with tid = row index; one `"X"` (complete)
    /// event per span with `ts` / `dur` in microseconds, `name` = label,
    /// `cat` = kind in snake case ([`SpanKind::as_str`]) and
    /// `args: {"detail": ...}` (times rounded to whole nanoseconds); one `"i"` instant event (scope `"t"`) per
    /// marker with `cat` = marker kind.
    ///
    /// Rows named in [`Timeline::rows`] and rows that spans or markers use
    /// get thread metadata. Trace viewers cannot show spans on one thread
    /// that overlap without nesting, so a span that overlaps an earlier one
    /// on its row without lying inside it (a fault inside a work span
    /// nests fine) goes to an extra thread of that row, named `"<row> (2)"`,
    /// `"<row> (3)"`, ... with the same sort index and a tid after all row
    /// indices. Spans and markers with non-finite times are left out.
    pub fn to_chrome_trace(&self) -> Value {
        // Valid spans grouped by row, sorted by start.
        let mut by_row: BTreeMap<usize, Vec<(usize, f64, f64)>> = BTreeMap::new();
        for (i, s) in self.spans.iter().enumerate() {
            if let Some((a, b)) = span_times(s) {
                by_row.entry(s.row).or_default().push((i, a, b));
            }
        }
        let marker_rows = self
            .markers
            .iter()
            .filter(|m| m.at_s.is_finite())
            .map(|m| m.row);
        let max_tid = by_row
            .keys()
            .copied()
            .chain(marker_rows.clone())
            .max()
            .map_or(0, |r| r.saturating_add(1))
            .max(self.rows.len());
        let mut next_extra_tid = max_tid;

        let threads: BTreeSet<usize> = (0..self.rows.len())
            .chain(by_row.keys().copied())
            .chain(marker_rows)
            .collect();

        let mut events: Vec<Value> = Vec::new();
        events.push(json!({
            "name": "process_name", "ph": "M", "pid": 1, "tid": 0,
            "args": {"name": "oversub"}
        }));
        let thread_meta = |events: &mut Vec<Value>, tid: usize, name: String, sort: usize| {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
                "args": {"name": name}
            }));
            events.push(json!({
                "name": "thread_sort_index", "ph": "M", "pid": 1, "tid": tid,
                "args": {"sort_index": sort}
            }));
        };
        for &r in &threads {
            thread_meta(&mut events, r, self.row_name(r), r);
        }

        let mut span_events: Vec<(f64, Value)> = Vec::new();
        for (&row, list) in &mut by_row {
            list.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.2.total_cmp(&a.2)));
            let intervals: Vec<(f64, f64)> = list.iter().map(|&(_, a, b)| (a, b)).collect();
            let (lanes, nlanes) = assign_nested_lanes(&intervals, MAX_TRACE_LANES);
            let mut lane_tids = vec![row];
            for lane in 1..nlanes {
                lane_tids.push(next_extra_tid);
                thread_meta(
                    &mut events,
                    next_extra_tid,
                    format!("{} ({})", self.row_name(row), lane + 1),
                    row,
                );
                next_extra_tid = next_extra_tid.saturating_add(1);
            }
            for (&(i, a, b), lane) in list.iter().zip(lanes) {
                let s = &self.spans[i];
                let tid = lane_tids.get(lane).copied().unwrap_or(row);
                span_events.push((
                    a,
                    json!({
                        "name": s.label, "cat": s.kind.as_str(), "ph": "X",
                        "ts": micros(a), "dur": micros(b - a),
                        "pid": 1, "tid": tid,
                        "args": {"detail": s.detail}
                    }),
                ));
            }
        }
        for m in &self.markers {
            if !m.at_s.is_finite() {
                continue;
            }
            let at = m.at_s.clamp(-LIMIT, LIMIT);
            span_events.push((
                at,
                json!({
                    "name": m.label, "cat": m.kind.as_str(), "ph": "i", "s": "t",
                    "ts": micros(at), "pid": 1, "tid": m.row
                }),
            ));
        }
        // Time order reads better in the raw file; viewers do not care.
        span_events.sort_by(|a, b| a.0.total_cmp(&b.0));
        events.extend(span_events.into_iter().map(|(_, e)| e));

        json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"title": self.title},
        })
    }

    /// Writes [`Timeline::to_chrome_trace`] to `path` as compact JSON.
    pub fn write_chrome_trace(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&self.to_chrome_trace()).map_err(std::io::Error::from)?;
        std::fs::write(path, bytes)
    }
}

/// Seconds to microseconds, rounded to whole nanoseconds where that keeps
/// the value finite (`459999.99999999994` becomes `460000`).
fn micros(s: f64) -> f64 {
    let us = s * 1e6;
    if us.abs() < 1e12 {
        (us * 1e3).round() / 1e3
    } else {
        us
    }
}

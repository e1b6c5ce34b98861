//! Reporting for the oversub runtime: turns raw timing measurements into
//! summary statistics ([`Summary`], [`percentile`], [`quartiles`]), human
//! readable text ([`format_seconds`], [`format_bytes`], [`text_table`]),
//! parses user-typed sizes ([`parse_size`]), renders box plots as
//! standalone, dependency-free SVG ([`BoxPlot`]) and grouped bar charts
//! the same way ([`BarChart`]), line charts with log axes and vertical
//! markers ([`LineChart`]), draws schedule timelines as SVG or Chrome
//! trace-event JSON ([`Timeline`]) and assembles self-contained HTML report
//! pages ([`HtmlReport`]).
//!
//! Nothing in this crate prints; everything returns strings or values.
#![forbid(unsafe_code)]

mod bars;
mod boxplot;
mod frame;
mod html;
mod lines;
mod stats;
mod svg;
mod table;
mod timeline;

pub use bars::{BarChart, BarSeries};
pub use boxplot::{BoxPlot, BoxSeries};
// Sizes and formats live in the leaf crate so that crates needing them do not depend on the SVG code.
pub use html::{HtmlBlock, HtmlReport};
pub use lines::{LineChart, LineSeries};
pub use oversub_base::format::{format_bytes, format_rate_mbs, format_seconds};
pub use oversub_base::size::{parse_size, SizeParseError};
pub use stats::{percentile, quartiles, Summary};
pub use table::{text_table, text_table_left};
pub use timeline::{Marker, MarkerKind, Span, SpanKind, Timeline};

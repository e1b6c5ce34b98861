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
mod format;
mod html;
mod lines;
mod size;
mod stats;
mod svg;
mod table;
mod timeline;

pub use bars::{BarChart, BarSeries};
pub use boxplot::{BoxPlot, BoxSeries};
pub use format::{format_bytes, format_rate_mbs, format_seconds};
pub use html::{HtmlBlock, HtmlReport};
pub use lines::{LineChart, LineSeries};
pub use size::{parse_size, SizeParseError};
pub use stats::{percentile, quartiles, Summary};
pub use table::{text_table, text_table_left};
pub use timeline::{Marker, MarkerKind, Span, SpanKind, Timeline};

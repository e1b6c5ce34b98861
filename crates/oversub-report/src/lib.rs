//! Reporting for the oversub runtime: turns raw timing measurements into
//! summary statistics ([`Summary`], [`percentile`], [`quartiles`]), human
//! readable text ([`format_seconds`], [`format_bytes`], [`text_table`]),
//! parses user-typed sizes ([`parse_size`]) and renders box plots as
//! standalone, dependency-free SVG ([`BoxPlot`]).
//!
//! Nothing in this crate prints; everything returns strings or values.

mod boxplot;
mod format;
mod size;
mod stats;
mod table;

pub use boxplot::{BoxPlot, BoxSeries};
pub use format::{format_bytes, format_rate_mbs, format_seconds};
pub use size::{parse_size, SizeParseError};
pub use stats::{percentile, quartiles, Summary};
pub use table::text_table;

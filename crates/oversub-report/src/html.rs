//! Self-contained HTML report pages: headings, paragraphs, tables, inline
//! SVG figures, preformatted text and links in one file with inline CSS and
//! no scripts or external resources.

use std::fmt::Write as _;
use std::path::Path;

/// One piece of an [`HtmlReport`], rendered in order.
#[derive(Debug, Clone)]
pub enum HtmlBlock {
    /// A section heading (`<h2>`).
    Heading(String),
    /// A paragraph of plain text.
    Paragraph(String),
    /// A table; cells that look numeric (`"12.30 ms"`, `"1.50 GiB"`,
    /// `"42"`, `"n/a"`) are right-aligned. Rows shorter than the widest
    /// row or the header are padded with empty cells.
    Table {
        /// Column headings.
        header: Vec<String>,
        /// Body rows.
        rows: Vec<Vec<String>>,
    },
    /// Raw SVG markup (e.g. from [`crate::BoxPlot::to_svg`] or
    /// [`crate::Timeline::to_svg`]), inserted as is and scaled down to the
    /// page width when wider.
    Svg(String),
    /// Preformatted text (e.g. a [`crate::text_table`]).
    Pre(String),
    /// A link on a line of its own. `javascript:`, `vbscript:` and `data:`
    /// targets are replaced by `#`.
    Link {
        /// Link text.
        text: String,
        /// Target address.
        href: String,
    },
}

/// A report page built from [`HtmlBlock`]s.
#[derive(Debug, Clone, Default)]
pub struct HtmlReport {
    /// Page title, shown in the browser tab and as the top heading.
    pub title: String,
    /// The content, top to bottom.
    pub blocks: Vec<HtmlBlock>,
}

/// Escapes text for HTML / XML character data and attribute values.
/// Control characters other than tab and newline (not allowed in XML) become
/// U+FFFD.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\t' && c != '\n' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Whether a table cell reads as a number, optionally with a sign and a
/// short unit: `"42"`, `"-1.5e3"`, `"12.30 ms"`, `"2048.0 MB/s"`, `"45%"`,
/// `"1,024"`. Placeholders for missing numbers (`"n/a"`, `"-"`, `"NaN"`)
/// count as numeric so that they align with their column.
pub(crate) fn looks_numeric(cell: &str) -> bool {
    let t = cell.trim();
    if matches!(
        t,
        "n/a" | "N/A" | "-" | "\u{2014}" | "\u{2013}" | "NaN" | "nan" | "inf" | "-inf" | "+inf"
    ) {
        return true;
    }
    let t = t.trim_start_matches([
        '+', '-', '\u{2212}', '~', '\u{2248}', '<', '>', '\u{2264}', '\u{2265}',
    ]);
    let chars: Vec<char> = t.chars().collect();
    let mut i = 0;
    let mut digits = 0usize;
    let mut dots = 0usize;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            digits += 1;
        } else if matches!(c, '.' | ',' | '_') {
            // Separators must sit between digits (a trailing '.' is fine).
            if i == 0 && c != '.' {
                return false;
            }
            if c == '.' {
                dots += 1;
                if dots > 1 {
                    return false;
                }
            }
        } else if matches!(c, 'e' | 'E') && digits > 0 {
            // Exponent only when digits follow (else it starts a unit).
            let mut j = i + 1;
            if matches!(chars.get(j), Some('+' | '-')) {
                j += 1;
            }
            if chars.get(j).is_some_and(char::is_ascii_digit) {
                i = j;
                while chars.get(i).is_some_and(char::is_ascii_digit) {
                    i += 1;
                }
            }
            break;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return false;
    }
    let unit: String = chars[i.min(chars.len())..].iter().collect();
    let unit = unit.strip_prefix(' ').unwrap_or(&unit);
    unit.chars().count() <= 8
        && unit
            .chars()
            .all(|c| c.is_alphabetic() || matches!(c, '%' | '/' | '\u{b0}' | '\u{d7}'))
}

/// Drops a leading XML declaration / doctype, which has no place inside HTML.
fn strip_xml_prolog(svg: &str) -> &str {
    let mut s = svg.trim_start();
    for open in ["<?xml", "<!DOCTYPE"] {
        if s.starts_with(open) {
            if let Some(end) = s.find('>') {
                s = s[end + 1..].trim_start();
            }
        }
    }
    s
}

/// Whether a link target would run script or embed content.
fn unsafe_href(href: &str) -> bool {
    let cleaned: String = href
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase();
    ["javascript:", "vbscript:", "data:"]
        .iter()
        .any(|p| cleaned.starts_with(p))
}

const CSS: &str = r#"
:root { color-scheme: light; }
body { margin: 0; background: #eef0f3; color: #1d1d1f;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "DejaVu Sans", sans-serif; }
main { box-sizing: border-box; max-width: 1200px; min-height: 100vh; margin: 0 auto;
  padding: 28px 32px 56px; background: #ffffff; }
h1 { font-size: 1.7em; line-height: 1.25; margin: 0.1em 0 0.8em; }
h2 { font-size: 1.3em; line-height: 1.3; margin: 1.8em 0 0.6em; padding-bottom: 0.25em;
  border-bottom: 1px solid #e2e4e8; }
p { margin: 0.6em 0; max-width: 75ch; }
.table-wrap { overflow-x: auto; margin: 0.9em 0 1.2em; }
table { border-collapse: collapse; font-size: 14px; font-variant-numeric: tabular-nums; }
th, td { padding: 5px 14px; text-align: left; vertical-align: top; border-bottom: 1px solid #e6e8ec; }
th { background: #eef1f5; font-weight: 600; border-bottom: 2px solid #c8cdd5; white-space: nowrap; }
tbody tr:nth-child(even) { background: #f7f8fa; }
tbody tr:hover { background: #eef4ff; }
th.num, td.num { text-align: right; white-space: nowrap; }
figure { margin: 1em 0 1.4em; overflow-x: auto; }
figure svg { display: block; max-width: 100%; height: auto; }
pre { margin: 0.9em 0; padding: 10px 14px; overflow-x: auto; background: #f5f6f8;
  border: 1px solid #e2e4e8; border-radius: 4px;
  font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; }
a { color: #0b57d0; }
"#;

impl HtmlReport {
    /// An empty report.
    pub fn new(title: impl Into<String>) -> Self {
        HtmlReport {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    /// Appends a block; returns `self` for chaining.
    pub fn push(&mut self, block: HtmlBlock) -> &mut Self {
        self.blocks.push(block);
        self
    }

    /// Renders the page as one self-contained HTML5 document.
    ///
    /// All text is escaped; only [`HtmlBlock::Svg`] markup is inserted as
    /// is (minus any XML declaration).
    pub fn to_html(&self) -> String {
        let title = if self.title.trim().is_empty() {
            "oversub report".to_string()
        } else {
            escape(&self.title)
        };
        let mut out = String::new();
        // `write!` into a String cannot fail; results are ignored below.
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        );
        if !self.title.trim().is_empty() {
            let _ = writeln!(out, "<h1>{title}</h1>");
        }
        for block in &self.blocks {
            match block {
                HtmlBlock::Heading(h) => {
                    let _ = writeln!(out, "<h2>{}</h2>", escape(h));
                }
                HtmlBlock::Paragraph(p) => {
                    let _ = writeln!(out, "<p>{}</p>", escape(p));
                }
                HtmlBlock::Table { header, rows } => table_html(&mut out, header, rows),
                HtmlBlock::Svg(svg) => {
                    let _ = writeln!(
                        out,
                        "<figure>\n{}\n</figure>",
                        strip_xml_prolog(svg).trim_end()
                    );
                }
                HtmlBlock::Pre(text) => {
                    let _ = writeln!(out, "<pre>{}</pre>", escape(text.trim_end_matches('\n')));
                }
                HtmlBlock::Link { text, href } => {
                    let href = if unsafe_href(href) {
                        "#"
                    } else {
                        href.as_str()
                    };
                    let text = if text.is_empty() { href } else { text.as_str() };
                    let _ = writeln!(
                        out,
                        "<p><a href=\"{}\">{}</a></p>",
                        escape(href),
                        escape(text)
                    );
                }
            }
        }
        out.push_str("</main>\n</body>\n</html>\n");
        out
    }

    /// Writes [`HtmlReport::to_html`] to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_html())
    }
}

/// Renders one table; columns whose non-empty body cells all look numeric
/// get a right-aligned heading too.
fn table_html(out: &mut String, header: &[String], rows: &[Vec<String>]) {
    let ncols = crate::table::column_count(header.len(), rows);
    if ncols == 0 {
        return;
    }
    let numeric_col: Vec<bool> = (0..ncols)
        .map(|c| {
            let mut any = false;
            for r in rows {
                match r.get(c).map(|s| s.trim()) {
                    None | Some("") => {}
                    Some(cell) if looks_numeric(cell) => any = true,
                    Some(_) => return false,
                }
            }
            any
        })
        .collect();
    out.push_str("<div class=\"table-wrap\"><table>\n");
    if !header.is_empty() {
        out.push_str("<thead><tr>");
        for (c, num) in numeric_col.iter().enumerate() {
            let cell = header.get(c).map(String::as_str).unwrap_or("");
            let class = if *num { " class=\"num\"" } else { "" };
            let _ = write!(out, "<th{class}>{}</th>", escape(cell));
        }
        out.push_str("</tr></thead>\n");
    }
    out.push_str("<tbody>\n");
    for r in rows {
        out.push_str("<tr>");
        for c in 0..ncols {
            let cell = r.get(c).map(String::as_str).unwrap_or("");
            let class = if looks_numeric(cell) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_cells() {
        for yes in [
            "42",
            "-1.5e3",
            "12.30 ms",
            "2048.0 MB/s",
            "45%",
            "1,024",
            "1.00 GiB",
            "n/a",
            "-",
            "0.5",
            ".5",
            "3x",
            "7 µs",
            "+3",
            "~12 ms",
        ] {
            assert!(looks_numeric(yes), "{yes}");
        }
        for no in [
            "",
            "lru",
            "x3",
            "2024-01-01",
            "12 ms ± 3",
            "A",
            "e5",
            "1.2.3.4 host",
            "v1.2",
            ",5",
            "5 seconds or so",
        ] {
            assert!(!looks_numeric(no), "{no}");
        }
    }

    #[test]
    fn hrefs() {
        assert!(unsafe_href("javascript:alert(1)"));
        assert!(unsafe_href(" JavaScript:alert(1)"));
        assert!(unsafe_href("java\tscript:x"));
        assert!(unsafe_href("data:text/html,x"));
        assert!(!unsafe_href("trace.json"));
        assert!(!unsafe_href("https://ui.perfetto.dev"));
    }

    #[test]
    fn prolog() {
        assert_eq!(
            strip_xml_prolog("<?xml version=\"1.0\"?>\n<svg></svg>"),
            "<svg></svg>"
        );
        assert_eq!(strip_xml_prolog("<svg/>"), "<svg/>");
    }
}

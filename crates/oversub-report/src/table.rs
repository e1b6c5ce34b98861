//! Plain-text tables for terminal output.

/// Columns of a table: those of its header or of its widest row, whichever has more.
pub(crate) fn column_count(header_len: usize, rows: &[Vec<String>]) -> usize {
    rows.iter()
        .map(Vec::len)
        .chain(std::iter::once(header_len))
        .max()
        .unwrap_or(0)
}

/// Renders a plain-text table: the header, a dashed rule, then one line per
/// row. The first column is left-aligned, all others right-aligned; column
/// widths fit the widest cell (counted in characters). Columns are separated
/// by two spaces, lines end with `'\n'` and carry no trailing spaces. Rows
/// shorter than the widest row are padded with empty cells.
pub fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    text_table_left(header, rows, 1)
}

/// As [`text_table`], with the first `left_columns` columns left-aligned (text) and the rest right-aligned
/// (numbers).
pub fn text_table_left(header: &[&str], rows: &[Vec<String>], left_columns: usize) -> String {
    let ncols = column_count(header.len(), rows);
    if ncols == 0 {
        return String::new();
    }
    let mut widths = vec![0usize; ncols];
    let all_rows: Vec<Vec<&str>> = std::iter::once(header.to_vec())
        .chain(rows.iter().map(|r| r.iter().map(String::as_str).collect()))
        .collect();
    for row in &all_rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }

    let mut out = String::new();
    let mut push_line = |cells: &[&str]| {
        let mut line = String::new();
        for (i, w) in widths.iter().enumerate() {
            let cell = cells.get(i).copied().unwrap_or("");
            if i > 0 {
                line.push_str("  ");
            }
            let pad = w.saturating_sub(cell.chars().count());
            if i < left_columns {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            } else {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    };

    let mut rows_iter = all_rows.iter();
    if let Some(h) = rows_iter.next() {
        push_line(h);
    }
    let total: usize = widths.iter().sum::<usize>() + 2 * (ncols - 1);
    let rule = "-".repeat(total);
    push_line(&[rule.as_str()]);
    for r in rows_iter {
        push_line(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_columns() {
        let t = text_table_left(
            &["what", "value", "note"],
            &[
                vec!["a".into(), "1".into(), "long note".into()],
                vec!["bb".into(), "22".into(), "x".into()],
            ],
            1,
        );
        assert!(t.contains("a         1  long note\n"), "{t}");
        let t = text_table_left(
            &["what", "value", "note"],
            &[
                vec!["a".into(), "1".into(), "long note".into()],
                vec!["bb".into(), "22".into(), "x".into()],
            ],
            3,
        );
        assert!(t.contains("bb    22     x\n"), "{t}");
    }

    #[test]
    fn aligned() {
        let t = text_table(
            &["name", "median", "n"],
            &[
                vec!["a".into(), "1.00 ms".into(), "10".into()],
                vec!["longer-name".into(), "12.30 µs".into(), "5".into()],
            ],
        );
        let expected = "\
name           median   n
-------------------------
a             1.00 ms  10
longer-name  12.30 µs   5
";
        assert_eq!(t, expected);
    }

    #[test]
    fn ragged_and_empty() {
        assert_eq!(text_table(&[], &[]), "");
        let t = text_table(&["a", "b"], &[vec!["x".into()], vec![]]);
        assert_eq!(t, "a  b\n----\nx\n\n");
    }
}

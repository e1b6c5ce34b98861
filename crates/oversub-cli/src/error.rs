//! The error every command returns: any library error or a message, printed by `main` with its chain of causes.

/// Any error of the libraries below, or a message of the CLI's own (`"...".into()`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The lines `main` prints for `e`: `error: ` and its text, then `  caused by: ` and each source whose text the
/// lines before do not already hold. Most errors write their source into their own text (`#[error(transparent)]`,
/// `"...: {source}"`), and printing it again under them only repeats it.
pub fn report_lines(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let first = format!("{e:#}");
    let mut said = first.clone();
    let mut lines = vec![format!("error: {first}")];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !said.contains(&text) {
            lines.push(format!("  caused by: {text}"));
            said.push('\n');
            said.push_str(&text);
        }
        source = s.source();
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("cannot open {path}: {source}")]
        Says {
            path: String,
            #[source]
            source: std::io::Error,
        },
        #[error("the run failed")]
        Quiet(#[source] std::io::Error),
        #[error(transparent)]
        Transparent(Box<Outer>),
    }

    fn os() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOENT)
    }

    #[test]
    fn a_source_already_said_is_not_repeated() {
        let e = Outer::Says {
            path: "/x".into(),
            source: os(),
        };
        assert_eq!(
            report_lines(&e),
            [format!("error: cannot open /x: {}", os())]
        );
        let wrapped = Outer::Transparent(Box::new(e));
        assert_eq!(report_lines(&wrapped).len(), 1);
    }

    #[test]
    fn a_source_not_said_is_printed_once() {
        let e = Outer::Quiet(os());
        assert_eq!(
            report_lines(&e),
            [
                "error: the run failed".to_string(),
                format!("  caused by: {}", os())
            ]
        );
    }
}

//! Reading and writing profile files: version first, then the schema, then the ranges; writes are atomic.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Profile, ProfileError, VERSION};

/// The first lines of every written profile.
const HEADER: &str = "# oversub platform profile, schema version 1: see docs/profile.md\n\n";

const MISSING_VERSION: &str = "missing the [profile] table with `version = 1`";

/// 1-based line of a byte offset; counting bytes, so an offset inside a character cannot panic.
fn line_of(text: &str, offset: usize) -> usize {
    let before = text.as_bytes().get(..offset).unwrap_or(text.as_bytes());
    before.iter().filter(|&&b| b == b'\n').count() + 1
}

fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ProfileError {
    let line = e.span().map(|s| line_of(text, s.start));
    let mut message = e.message().trim_end().to_string();
    // A missing key is reported at its table's header, and the message names only the key: name the table too.
    if message.starts_with("missing field") {
        let header = line
            .and_then(|l| text.lines().nth(l - 1))
            .map(str::trim)
            .filter(|h| h.starts_with('['));
        if let Some(header) = header {
            message = format!("{message} in {header}");
        }
    }
    ProfileError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    }
}

/// Reads `profile.version` from the bare table, so that a newer file is refused for its version rather than for a
/// key this build does not know.
fn check_version(path: &Path, text: &str) -> Result<(), ProfileError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
    let parse = |message: String| ProfileError::Parse {
        path: path.to_path_buf(),
        line: None,
        message,
    };
    let version = table
        .get("profile")
        .and_then(toml::Value::as_table)
        .and_then(|t| t.get("version"))
        .ok_or_else(|| parse(MISSING_VERSION.to_string()))?;
    let Some(found) = version.as_integer() else {
        return Err(parse(format!(
            "profile.version must be a whole number like `version = 1`, not {version}"
        )));
    };
    let found = u32::try_from(found).map_err(|_| {
        parse(format!(
            "profile.version must be a whole number like `version = 1`, not {found}"
        ))
    })?;
    if found != VERSION {
        return Err(ProfileError::Version {
            path: path.to_path_buf(),
            found,
            supported: VERSION,
        });
    }
    Ok(())
}

/// A sibling of `path` to write first: same directory, so the rename cannot cross file systems.
fn temp_sibling(path: &Path) -> Result<PathBuf, ProfileError> {
    let name = path.file_name().ok_or_else(|| ProfileError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"),
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp-{}", std::process::id()));
    Ok(path.with_file_name(tmp))
}

impl Profile {
    /// Parses and checks a profile's text; `path` only names the file in errors. The version is checked first,
    /// then the keys and types (unknown keys are refused), then the ranges ([`Profile::validate`]).
    pub fn from_toml_str(text: &str, path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let path = path.as_ref();
        check_version(path, text)?;
        let profile: Profile = toml::from_str(text).map_err(|e| parse_error(path, text, &e))?;
        profile.validate(path)?;
        Ok(profile)
    }

    /// Reads and checks a profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ProfileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, path)
    }

    /// The profile as TOML, after a one-line comment naming the schema. Ranges are not checked ([`Profile::save`]
    /// checks them), but a number TOML cannot hold is refused.
    pub fn to_toml_string(&self) -> Result<String, ProfileError> {
        let body = toml::to_string(self).map_err(|e| ProfileError::Serialize {
            message: e.to_string(),
        })?;
        // The writer emits integers above i64::MAX, which TOML does not have and `load` refuses: never hand those
        // out. Reading back as a bare table is the same first step `load` takes.
        if let Err(e) = toml::from_str::<toml::Table>(&body) {
            let line = e.span().map(|s| line_of(&body, s.start)).unwrap_or(0);
            return Err(ProfileError::Serialize {
                message: format!(
                    "the TOML would not read back (line {line}: {})",
                    e.message().trim_end()
                ),
            });
        }
        Ok(format!("{HEADER}{body}"))
    }

    /// Checks the profile and writes it to `path`: first to a temporary file beside it, then renamed over it, so
    /// a failed write leaves the old file (or none), never half a file. A profile this build would refuse to read
    /// is refused here.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), ProfileError> {
        let path = path.as_ref();
        self.validate(path)?;
        let text = self.to_toml_string()?;
        let tmp = temp_sibling(path)?;
        let io = |source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        };
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
            // Best effort: the error to report is the write's, not the clean-up's.
            let _ = std::fs::remove_file(&tmp);
            return Err(io(e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_count_from_one_and_survive_odd_offsets() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 4), 3);
        assert_eq!(line_of("é\n", 1), 1);
        assert_eq!(line_of("a\n", 99), 2);
    }

    #[test]
    fn temp_file_is_a_hidden_sibling() {
        let t = temp_sibling(Path::new("dir/profile.toml")).unwrap();
        assert_eq!(t.parent(), Some(Path::new("dir")));
        assert!(t
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".profile.toml.tmp-"));
        assert!(temp_sibling(Path::new("/")).is_err());
    }
}

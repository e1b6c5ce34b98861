//! Names users give that become part of a file's or a cgroup's name.

/// Whether `name` can stand as one path component anywhere: 1 to `max_len` ASCII letters, digits, `-`, `_` or `.`,
/// and neither `.` nor `..`.
pub fn is_safe_component(name: &str, max_len: usize) -> bool {
    !name.is_empty()
        && name.len() <= max_len
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::is_safe_component;

    #[test]
    fn only_plain_components_within_the_length_pass() {
        for ok in ["a", "task-1", "x_y.z", "..."] {
            assert!(is_safe_component(ok, 64), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", "tab\t"] {
            assert!(!is_safe_component(bad, 64), "{bad:?}");
        }
        assert!(is_safe_component(&"a".repeat(64), 64));
        assert!(!is_safe_component(&"a".repeat(65), 64));
    }
}

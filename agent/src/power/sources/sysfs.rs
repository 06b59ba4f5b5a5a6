//! Reading sysfs the way the sysfs sources (amdgpu hwmon, RAPL powercap) both do: small text
//! files holding one value, and directories of numbered entries (`card0`, `intel-rapl:1`) found
//! under a root path so tests can build fixture trees.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The file's content, trimmed; `None` when it cannot be read or is empty.
pub fn read_trimmed(path: &Path) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The file's trimmed content parsed as a `T`; `None` when it cannot be read or parsed.
pub fn read_parsed<T: FromStr>(path: &Path) -> Option<T> {
    read_trimmed(path)?.parse().ok()
}

/// `N` of a name that is `prefix` followed by decimal digits only: `card0` → 0 for `card`;
/// `card0-DP-1`, `card`, `renderD128` → `None`.
pub fn number_after(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The entries of `dir` named `prefix` and a number ([`number_after`]), with their numbers,
/// sorted by number.
///
/// # Errors
/// Reading `dir` (it is missing, or not a directory).
pub fn numbered_entries(dir: &Path, prefix: &str) -> io::Result<Vec<(u32, PathBuf)>> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            number_after(name.to_str()?, prefix).map(|n| (n, e.path()))
        })
        .collect();
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_entries_are_sorted_by_number_not_name() {
        let root = tempfile::tempdir().unwrap();
        for name in ["card10", "card2", "card2-DP-1", "renderD128", "card"] {
            fs::create_dir(root.path().join(name)).unwrap();
        }
        let got: Vec<u32> = numbered_entries(root.path(), "card")
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(got, [2, 10]);
        assert!(numbered_entries(&root.path().join("missing"), "card").is_err());
    }

    #[test]
    fn values_are_trimmed_and_parsed() {
        let root = tempfile::tempdir().unwrap();
        let f = root.path().join("power1_input");
        fs::write(&f, "8123000\n").unwrap();
        assert_eq!(read_parsed::<u64>(&f), Some(8_123_000));
        fs::write(&f, "  \n").unwrap();
        assert_eq!(read_trimmed(&f), None);
        assert_eq!(read_parsed::<i64>(&root.path().join("missing")), None);
    }
}

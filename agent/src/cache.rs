//! The agent's cache directory (compiled programs, tuned parameters) and a
//! stable hash for cache keys.
//!
//! The directory is `GPUFLEET_CACHE_DIR` when set (the agent sets it for its
//! workers from `--cache-dir`), else `$XDG_CACHE_HOME/gpufleet`, else
//! `~/.cache/gpufleet`. Entries are keyed by device fingerprint, driver,
//! source hash and our version, so a driver update or a kernel change is a
//! miss, never a stale hit.

use std::path::PathBuf;

/// The cache root (not created here).
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("GPUFLEET_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("gpufleet");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("gpufleet"),
        None => std::env::temp_dir().join("gpufleet-cache"),
    }
}

/// FNV-1a, 64 bits: stable across builds and Rust versions, unlike
/// `DefaultHasher`, so cache file names survive an upgrade of the compiler.
pub fn fnv64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(&[0xffu8]) {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_stable_and_separates_parts() {
        assert_eq!(fnv64(&[b"gpufleet"]), fnv64(&[b"gpufleet"]));
        assert_ne!(fnv64(&[b"ab", b"c"]), fnv64(&[b"a", b"bc"]));
        // Known value: pinned so a change of the function is noticed.
        assert_eq!(fnv64(&[b"a"]), 0x89bc907b544c769);
    }
}

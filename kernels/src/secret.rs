//! The one rule for secrets that guard a listener beyond loopback (the agent's `--token`, the
//! serve's read and admin tokens): at least [`MIN_SECRET_CHARS`] printable ASCII characters, no
//! whitespace (they travel in an `authorization` header). Shared by the agent and the coordinator
//! so both refuse the same weak tokens with the same words.

/// Fewest characters of a secret accepted beyond loopback.
pub const MIN_SECRET_CHARS: usize = 16;

/// Why `secret` is too weak to guard a listener beyond loopback, or `None` when it is fine. The
/// reason never quotes the secret.
pub fn weak_secret(secret: &str) -> Option<String> {
    let printable = secret.bytes().all(|b| b.is_ascii_graphic());
    if printable && secret.len() >= MIN_SECRET_CHARS {
        return None;
    }
    Some(format!(
        "must be at least {MIN_SECRET_CHARS} printable ASCII characters without whitespace; got {} characters{}",
        secret.chars().count(),
        if printable {
            ""
        } else {
            ", some of them whitespace or not printable"
        }
    ))
}

/// Whether a presented secret equals the expected one, comparing every byte so the time taken
/// does not say how much of it matched.
pub fn secrets_equal(expected: &str, presented: &str) -> bool {
    expected.len() == presented.len()
        && expected
            .bytes()
            .zip(presented.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_and_strong() {
        for weak in ["", " ", "short", "sixteen chars!! ", "tab\there-0123456789"] {
            let why = weak_secret(weak).unwrap();
            assert!(why.contains("at least 16"), "{weak:?}: {why}");
        }
        assert_eq!(weak_secret("0123456789abcdef"), None);
    }

    #[test]
    fn equality() {
        assert!(secrets_equal("0123456789abcdef", "0123456789abcdef"));
        assert!(!secrets_equal("0123456789abcdef", "0123456789abcdeF"));
        assert!(!secrets_equal("0123456789abcdef", "0123456789abcde"));
        assert!(!secrets_equal("x", ""));
    }
}

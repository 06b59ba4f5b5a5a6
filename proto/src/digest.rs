//! The one hash gpufleet writes as text, shared by the TLS pins and everything that names content
//! by its digest (tokens stored hashed, a schedule's suite text, a page's file name).

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`: of a DER certificate, the fingerprint `--pin-sha256`
/// compares; of a token, what the coordinator stores instead of it; of a text, a stable name for it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

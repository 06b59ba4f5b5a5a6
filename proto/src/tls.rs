//! TLS for a gpufleet client (an agent dialing its coordinator, the coordinator dialing a direct
//! agent): the server is verified by a CA certificate (`--ca-cert`) or by the SHA-256 of its
//! certificate (`--pin-sha256`, for the self-signed certificate `gpufleet serve --tls-self-signed`
//! prints), and a token is never sent in plaintext beyond loopback ([`is_loopback_host`]).
//!
//! The connection is made here (TCP, then rustls with ALPN `h2`) and handed to tonic as a custom
//! connector, so both ways of verifying share one path.

use crate::digest::sha256_hex;
use hyper_util::rt::TokioIo;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use std::sync::Arc;

/// How the coordinator's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Certificates signed by the CA in this PEM file.
    Ca(std::path::PathBuf),
    /// Certificates signed by the CA in this PEM text.
    CaPem(String),
    /// Exactly the certificate with this SHA-256 (64 hex digits, `:` allowed between bytes).
    Pin(String),
}

/// A pin as the user wrote it (`AB:CD:…` or `abcd…`) in the form [`sha256_hex`] gives.
///
/// # Errors
/// When it is not 32 bytes of hex.
pub fn normalize_pin(pin: &str) -> Result<String, String> {
    let hex: String = pin
        .chars()
        .filter(|c| *c != ':')
        .collect::<String>()
        .to_ascii_lowercase();
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(format!(
            "--pin-sha256 must be 64 hex digits (the SHA-256 `gpufleet serve --tls-self-signed` prints); got {} characters",
            pin.chars().count()
        ))
    }
}

/// True when a URL's host is a loopback name or address.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What a [`Checked`] verifier decides about the server's certificate chain: the end entity, the
/// intermediates and the name the client dialed.
pub type CertCheck = dyn Fn(&CertificateDer<'_>, &[CertificateDer<'_>], &ServerName<'_>) -> Result<(), rustls::Error>
    + Send
    + Sync;

/// A verifier that leaves the decision about the certificate to a function and checks the
/// handshake's signatures (that the server holds the certificate's key) with the provider's
/// algorithms. The pin here, and the `sslmode` checks of the coordinator's PostgreSQL client, are
/// each one function.
pub struct Checked {
    check: Box<CertCheck>,
    provider: Arc<CryptoProvider>,
}

impl Checked {
    pub fn new(provider: Arc<CryptoProvider>, check: Box<CertCheck>) -> Arc<Checked> {
        Arc::new(Checked { check, provider })
    }
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checked")
    }
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        (self.check)(end_entity, intermediates, server_name)
            .map(|()| ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Exactly the certificate whose SHA-256 is `pin` (normalised).
fn pinned(pin: String, provider: Arc<CryptoProvider>) -> Arc<Checked> {
    Checked::new(
        provider,
        Box::new(move |end_entity, _, _| {
            let got = sha256_hex(end_entity);
            if got == pin {
                Ok(())
            } else {
                Err(rustls::Error::General(format!(
                    "pin mismatch: the coordinator's certificate has SHA-256 {got}, --pin-sha256 expects {pin}"
                )))
            }
        }),
    )
}

/// The rustls client configuration for `trust`.
///
/// # Errors
/// An unreadable or empty CA file, a malformed pin.
pub fn client_config(trust: &Trust) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match trust {
        Trust::Ca(path) => {
            let pem =
                std::fs::read(path).map_err(|e| format!("--ca-cert {}: {e}", path.display()))?;
            let roots = roots(&pem).map_err(|e| format!("--ca-cert {}: {e}", path.display()))?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::CaPem(pem) => builder
            .with_root_certificates(
                roots(pem.as_bytes()).map_err(|e| format!("CA certificate: {e}"))?,
            )
            .with_no_client_auth(),
        Trust::Pin(pin) => builder
            .dangerous()
            .with_custom_certificate_verifier(pinned(normalize_pin(pin)?, provider))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A root store of the PEM certificates in `pem`.
///
/// # Errors
/// Malformed PEM, no certificate, a certificate rustls refuses.
pub fn roots(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    Ok(roots)
}

/// Where a gpufleet server is: whether it speaks TLS, its host and port (the scheme's default when
/// the URL has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Splits an `http://` or `https://` URL.
    ///
    /// # Errors
    /// A URL that does not parse, has another scheme or no host.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err("must start with https:// or http://".into()),
        };
        let host = uri.host().ok_or("no host")?.to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(Target { tls, host, port })
    }

    /// The tonic endpoint of the target, always with an `http://` URI: over TLS [`connect`]'s own
    /// connector does the handshake (tonic would refuse `https://` without its own TLS config).
    ///
    /// # Errors
    /// A host tonic does not accept.
    pub fn endpoint(&self) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
        tonic::transport::Endpoint::from_shared(format!("http://{}:{}", self.host, self.port))
    }

    /// Whether sending a token here would cross the network in plaintext.
    pub fn plaintext_beyond_loopback(&self) -> bool {
        !self.tls && !is_loopback_host(&self.host)
    }
}

/// A tonic channel to `target` through `endpoint` (made by [`Target::endpoint`], with the
/// caller's timeouts): over TLS with `config` (verifying the name `target.host`; a host that is
/// not a valid server name fails each connection) when it is given, else plain.
///
/// # Errors
/// Connection and handshake errors.
pub async fn connect(
    endpoint: tonic::transport::Endpoint,
    target: &Target,
    config: Option<Arc<rustls::ClientConfig>>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let Some(config) = config else {
        return endpoint.connect().await;
    };
    let host = &target.host;
    let name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|e| format!("host {host}: {e}"));
    let addr = format!("{host}:{}", target.port);
    let connector = tower::service_fn(move |_uri: http::Uri| {
        let (config, name, addr) = (config.clone(), name.clone(), addr.clone());
        async move {
            let name =
                name.map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let tcp = tokio::net::TcpStream::connect(&addr).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    endpoint.connect_with_connector(connector).await
}

/// Whether a connection failed because the server's certificate did not verify (as opposed to
/// the network): found among the error's sources as the rustls error inside an I/O error.
pub fn is_certificate_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = src {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::General(_)
            );
        }
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidCertificate(_) | rustls::Error::General(_)
            );
        }
        src = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_normalized_and_checked() {
        let hex = "AB:".repeat(31) + "AB";
        assert_eq!(normalize_pin(&hex).unwrap(), "ab".repeat(32));
        assert!(normalize_pin("abc").unwrap_err().contains("64 hex digits"));
        assert!(normalize_pin(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn targets_take_the_scheme_default_port() {
        let t = Target::parse("https://fleet.example").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port),
            (true, "fleet.example", 443)
        );
        let t = Target::parse("http://127.0.0.1:7443").unwrap();
        assert_eq!((t.tls, t.port), (false, 7443));
        assert!(!t.plaintext_beyond_loopback());
        assert!(
            Target::parse("http://10.0.0.1:1")
                .unwrap()
                .plaintext_beyond_loopback()
        );
        assert!(Target::parse("ftp://x").unwrap_err().contains("https://"));
        assert_eq!(sha256_hex(b"abc").len(), 64);
    }

    #[test]
    fn loopback_hosts() {
        for h in ["localhost", "127.0.0.1", "[::1]", "127.9.9.9"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.0.1", "example.org", "[2001:db8::1]"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}

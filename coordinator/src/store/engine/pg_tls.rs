//! TLS to PostgreSQL through rustls, with `sslmode` as libpq spells it.
//!
//! | `sslmode` | TLS | the server's certificate |
//! | --- | --- | --- |
//! | `disable`, `allow` | never | — |
//! | `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked, unless a root certificate is given (then as `verify-ca`) |
//! | `verify-ca` | always | chains to `sslrootcert` |
//! | `verify-full` | always | chains to `sslrootcert` and names the host |
//!
//! `sslrootcert` is a PEM file of CA certificates; without it libpq's default,
//! `~/.postgresql/root.crt`, is read when it exists. The channel is not bound to SCRAM (no
//! `SCRAM-SHA-256-PLUS`); client certificates (`sslcert`, `sslkey`) are not offered.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use gpufleet_proto::tls::{Checked, roots};
use postgres::config::SslMode;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{ServerName, UnixTime};
use rustls::{CertificateError, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How the server's certificate is checked once TLS is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Verify {
    /// Not at all (`prefer`, `require` without a root certificate): the link is encrypted, the
    /// server not authenticated.
    Nothing,
    /// It chains to a root certificate (`verify-ca`).
    Chain,
    /// It chains to a root certificate and names the host the URL gives (`verify-full`).
    ChainAndName,
}

/// The `sslmode` of a URL: whether to use TLS, and how to check the server.
///
/// # Errors
/// A mode libpq does not know; `verify-ca`/`verify-full` without a root certificate to verify
/// against; a root certificate file that cannot be read or holds no certificate.
pub(in crate::store) fn tls_for(
    mode: &str,
    root_cert: Option<&str>,
    home: Option<&str>,
) -> Result<(SslMode, MakeTls), String> {
    let default_root = home
        .map(|h| format!("{h}/.postgresql/root.crt"))
        .filter(|p| std::path::Path::new(p).is_file());
    let root = root_cert.map(str::to_owned).or(default_root);
    let (ssl, verify) = match mode {
        "disable" | "allow" => (SslMode::Disable, Verify::Nothing),
        "prefer" => (SslMode::Prefer, Verify::Nothing),
        "require" if root.is_some() => (SslMode::Require, Verify::Chain),
        "require" => (SslMode::Require, Verify::Nothing),
        "verify-ca" => (SslMode::Require, Verify::Chain),
        "verify-full" => (SslMode::Require, Verify::ChainAndName),
        other => {
            return Err(format!(
                "sslmode {:?} is not one of disable, allow, prefer, require, verify-ca, verify-full",
                short(other)
            ));
        }
    };
    let roots = match (verify, root) {
        (Verify::Nothing, _) => None,
        (_, Some(path)) => Some(read_roots(&path)?),
        (_, None) => {
            return Err(format!(
                "sslmode={mode} checks the server's certificate against a CA certificate: give \
                 sslrootcert=PATH in the URL (libpq's default, ~/.postgresql/root.crt, does not exist)"
            ));
        }
    };
    Ok((ssl, MakeTls::new(verify, roots)))
}

/// At most 40 characters of a value, for an error message.
fn short(text: &str) -> String {
    text.chars().take(40).collect()
}

/// The CA certificates in the PEM file `path`.
fn read_roots(path: &str) -> Result<RootCertStore, String> {
    if path == "system" {
        return Err(
            "sslrootcert=system (the operating system's CAs) is not supported: give the CA \
             certificate's file"
                .into(),
        );
    }
    let pem = std::fs::read(path).map_err(|e| format!("sslrootcert {path}: {e}"))?;
    roots(&pem).map_err(|e| format!("sslrootcert {path}: {e}"))
}

/// Makes a rustls client for each connection, checking the server as the `sslmode` says.
#[derive(Clone)]
pub(in crate::store) struct MakeTls {
    config: Arc<rustls::ClientConfig>,
}

impl MakeTls {
    fn new(verify: Verify, roots: Option<RootCertStore>) -> MakeTls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions");
        let checks = match (verify, roots) {
            (Verify::Nothing, _) | (_, None) => Checked::new(provider, Box::new(|_, _, _| Ok(()))),
            (verify, Some(roots)) => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .expect("a root store that is not empty makes a verifier");
                let name = verify == Verify::ChainAndName;
                // The chain always; the name only for verify-full (verify-ca leaves it out, as
                // libpq does).
                Checked::new(
                    provider,
                    Box::new(move |end_entity, intermediates, server_name| {
                        match webpki.verify_server_cert(
                            end_entity,
                            intermediates,
                            server_name,
                            &[],
                            UnixTime::now(),
                        ) {
                            Ok(_) => Ok(()),
                            Err(rustls::Error::InvalidCertificate(
                                CertificateError::NotValidForName
                                | CertificateError::NotValidForNameContext { .. },
                            )) if !name => Ok(()),
                            Err(e) => Err(e),
                        }
                    }),
                )
            }
        };
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(checks)
            .with_no_client_auth();
        MakeTls {
            config: Arc::new(config),
        }
    }
}

impl<S> MakeTlsConnect<S> for MakeTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{domain:?} is not a host name TLS can check: {e}"),
            )
        })?;
        Ok(Connect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One connection's TLS handshake.
pub(in crate::store) struct Connect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let tls = self.connector.connect(self.name, stream).await?;
            Ok(Stream(tls))
        })
    }
}

/// A connection over TLS.
pub(in crate::store) struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

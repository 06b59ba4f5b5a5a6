//! TLS for `gpufleet serve`: the certificate and key its listeners present (the fleet listener
//! through tonic, the HTTP API through rustls), from files (`--tls-cert/--tls-key`) or from a
//! certificate authority and server certificate made once in a directory (`--tls-self-signed`).
//!
//! Agents verify the serve by that CA (`gpufleet-agent --ca-cert DIR/ca.crt`) or by the SHA-256
//! of the server certificate (`--pin-sha256`), which [`ServeTls::fingerprint`] gives and serve
//! prints at start.

use anyhow::{Context, bail};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use std::path::Path;
use std::sync::Arc;

/// The serve's certificate chain and key, PEM.
#[derive(Clone)]
pub struct ServeTls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ServeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeTls")
            .field("fingerprint", &self.fingerprint().ok())
            .finish_non_exhaustive()
    }
}

/// The SHA-256 agents pin (`pin_sha256`) of the first certificate in a PEM file: what serve
/// prints as `tls sha256` when it serves that certificate.
///
/// # Errors
/// An unreadable file, or one without a PEM certificate.
pub fn pin_of_cert_file(path: &Path) -> anyhow::Result<String> {
    let tls = ServeTls {
        cert_pem: std::fs::read(path).with_context(|| path.display().to_string())?,
        key_pem: Vec::new(),
    };
    tls.fingerprint()
}

impl ServeTls {
    /// Reads a certificate chain and key from PEM files.
    ///
    /// # Errors
    /// Unreadable files, no certificate or no key in them.
    pub fn from_files(cert: &Path, key: &Path) -> anyhow::Result<ServeTls> {
        let tls = ServeTls {
            cert_pem: std::fs::read(cert)
                .with_context(|| format!("--tls-cert {}", cert.display()))?,
            key_pem: std::fs::read(key).with_context(|| format!("--tls-key {}", key.display()))?,
        };
        tls.certs()
            .with_context(|| format!("--tls-cert {}", cert.display()))?;
        tls.key()
            .with_context(|| format!("--tls-key {}", key.display()))?;
        Ok(tls)
    }

    /// The CA and server certificate in `dir` (`ca.crt`, `server.crt`, `server.key`), made there
    /// the first time for the names `names` (host names and IP addresses the agents dial) plus
    /// `localhost`, `127.0.0.1` and `::1`. Returns them and whether they were made now.
    ///
    /// # Errors
    /// A directory that cannot be created or written, files that cannot be read.
    pub fn self_signed(dir: &Path, names: &[String]) -> anyhow::Result<(ServeTls, bool)> {
        let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
        if cert.exists() && key.exists() {
            return Ok((ServeTls::from_files(&cert, &key)?, false));
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--tls-self-signed {}", dir.display()))?;
        let mut sans: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
        for n in names {
            if !sans.contains(n) {
                sans.push(n.clone());
            }
        }
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "gpufleet serve CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, &ca_key);
        let server_key = KeyPair::generate()?;
        let mut server = CertificateParams::new(sans)
            .context("--tls-san: a name is neither a DNS name nor an IP address")?;
        server
            .distinguished_name
            .push(DnType::CommonName, "gpufleet serve");
        let server_cert = server.signed_by(&server_key, &issuer)?;
        write_private(&dir.join("ca.key"), ca_key.serialize_pem().as_bytes())?;
        std::fs::write(dir.join("ca.crt"), ca_cert.pem())?;
        write_private(&key, server_key.serialize_pem().as_bytes())?;
        std::fs::write(&cert, server_cert.pem())?;
        Ok((ServeTls::from_files(&cert, &key)?, true))
    }

    fn certs(&self) -> anyhow::Result<Vec<CertificateDer<'static>>> {
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .context("reading PEM certificates")?;
        if certs.is_empty() {
            bail!("no PEM certificate in it");
        }
        Ok(certs)
    }

    fn key(&self) -> anyhow::Result<PrivateKeyDer<'static>> {
        PrivateKeyDer::from_pem_slice(&self.key_pem).context("no PEM private key in it")
    }

    /// SHA-256 of the server (first) certificate.
    ///
    /// # Errors
    /// When the PEM holds no certificate.
    pub fn fingerprint(&self) -> anyhow::Result<String> {
        Ok(gpufleet_proto::digest::sha256_hex(&self.certs()?[0]))
    }

    /// For the fleet listener (tonic).
    pub fn tonic(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            &self.cert_pem,
            &self.key_pem,
        ))
    }

    /// For the HTTP API: a rustls acceptor speaking HTTP/1.1.
    ///
    /// # Errors
    /// A certificate or key rustls does not accept.
    pub fn acceptor(&self) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(self.certs()?, self.key()?)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}

/// A TCP listener whose connections are TLS, for `axum::serve`. Connections are accepted by a
/// task of their own and each handshake runs in its own task with a deadline, so clients that
/// connect and never send a ClientHello hold nobody else up; at most [`MAX_HANDSHAKES`] are in
/// flight (a connection beyond them is closed at once).
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(TlsStream, std::net::SocketAddr)>,
    local: std::net::SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

type TlsStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Handshakes in flight at once.
pub const MAX_HANDSHAKES: usize = 4096;

impl TlsListener {
    /// Starts accepting on `tcp` (inside a Tokio runtime).
    ///
    /// # Errors
    /// The listener's address cannot be read.
    pub fn new(
        tcp: tokio::net::TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, addr) = match tcp.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(%addr, "{MAX_HANDSHAKES} TLS handshakes in flight: connection closed");
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, addr)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%addr, "TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accepting task is gone (only when the listener is dropped): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_is_made_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (a, made) = ServeTls::self_signed(dir.path(), &["10.0.0.1".into()]).unwrap();
        assert!(made);
        let (b, made) = ServeTls::self_signed(dir.path(), &[]).unwrap();
        assert!(!made);
        assert_eq!(a.fingerprint().unwrap(), b.fingerprint().unwrap());
        assert_eq!(a.fingerprint().unwrap().len(), 64);
        assert!(dir.path().join("ca.crt").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("server.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the key is private: {mode:o}");
        a.acceptor().unwrap();
    }

    #[test]
    fn unreadable_files_name_the_option() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, "not pem").unwrap();
        let e = ServeTls::from_files(&cert, &dir.path().join("missing.key")).unwrap_err();
        assert!(format!("{e:#}").contains("--tls-key"), "{e:#}");
        let e = ServeTls::from_files(&cert, &cert).unwrap_err();
        assert!(format!("{e:#}").contains("--tls-cert"), "{e:#}");
    }
}

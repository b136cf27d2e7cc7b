//! TLS for the router's HTTP and gRPC listeners (rustls, ring provider).
//! The certificate chain and key come from PEM files, as Kubernetes mounts
//! a `kubernetes.io/tls` Secret or cert-manager writes one; the files are
//! polled and a changed pair is loaded for new connections (a pair that
//! does not load is logged and the old one kept, so a half-written renewal
//! never takes the router down).
//!
//! Handshakes run in their own tasks so a slow or silent client cannot
//! hold up the accept loop; finished streams are handed to axum (as a
//! [`axum::serve::Listener`]) or to tonic (as an incoming stream).

use crate::error::{Error, Result};
use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How often the certificate files are checked for a change.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);
/// A client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which protocols a listener offers in ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// HTTP/1.1 and h2 (the HTTP listener).
    Http,
    /// h2 only (gRPC).
    Grpc,
}

/// Builds a server config from a PEM chain and key; errors name the file.
pub fn load_config(cert: &Path, key: &Path, alpn: Alpn) -> Result<ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<std::result::Result<_, _>>())
        .map_err(|e| Error::Config(format!("tls_cert_file {}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "tls_cert_file {} holds no PEM certificate",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| Error::Config(format!("tls_key_file {}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS protocol versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| Error::Config(format!("TLS certificate and key do not go together: {e}")))?;
    config.alpn_protocols = match alpn {
        Alpn::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Alpn::Grpc => vec![b"h2".to_vec()],
    };
    Ok(config)
}

/// The current config of one listener, swapped when the files change.
#[derive(Clone)]
pub struct ReloadingConfig {
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl ReloadingConfig {
    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.current.read()))
    }
}

/// What the pollers compare (TLS files here, the tokens file in
/// `crate::auth`): the files' modification times and sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp(Vec<Option<(SystemTime, u64)>>);

pub(crate) fn stamp(files: &[&Path]) -> Stamp {
    Stamp(
        files
            .iter()
            .map(|f| {
                std::fs::metadata(f)
                    .ok()
                    .and_then(|m| Some((m.modified().ok()?, m.len())))
            })
            .collect(),
    )
}

/// The TLS setup of a router: one config per listener, reloaded together.
pub struct RouterTls {
    pub http: ReloadingConfig,
    pub grpc: ReloadingConfig,
}

impl RouterTls {
    /// Loads both configs now (a bad pair fails the start) and polls the
    /// files every `poll` from then on.
    pub fn start(cert: PathBuf, key: PathBuf, poll: Duration) -> Result<RouterTls> {
        let http = ReloadingConfig {
            current: Arc::new(RwLock::new(Arc::new(load_config(&cert, &key, Alpn::Http)?))),
        };
        let grpc = ReloadingConfig {
            current: Arc::new(RwLock::new(Arc::new(load_config(&cert, &key, Alpn::Grpc)?))),
        };
        let targets = [(http.clone(), Alpn::Http), (grpc.clone(), Alpn::Grpc)];
        tokio::spawn(async move {
            let mut seen = stamp(&[&cert, &key]);
            loop {
                tokio::time::sleep(poll).await;
                let now = stamp(&[&cert, &key]);
                if now == seen {
                    continue;
                }
                seen = now;
                let mut loaded = Vec::new();
                for (_, alpn) in &targets {
                    match load_config(&cert, &key, *alpn) {
                        Ok(c) => loaded.push(Arc::new(c)),
                        Err(e) => {
                            crate::metrics::TLS_EVENTS
                                .with_label_values(&["reload_failed"])
                                .inc();
                            tracing::error!(error = %e, "TLS files changed but do not load; still serving the previous certificate");
                            break;
                        }
                    }
                }
                if loaded.len() == targets.len() {
                    for ((target, _), config) in targets.iter().zip(loaded) {
                        *target.current.write() = config;
                    }
                    crate::metrics::TLS_EVENTS
                        .with_label_values(&["reload"])
                        .inc();
                    tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                }
            }
        });
        Ok(RouterTls { http, grpc })
    }
}

/// Accepts TCP connections on `listener` and hands out finished TLS
/// streams; handshakes run concurrently.
pub fn accept_tls(
    listener: TcpListener,
    config: ReloadingConfig,
) -> mpsc::Receiver<(TlsConn, SocketAddr)> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off briefly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = config.acceptor();
            let handed = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = handed.send((TlsConn(tls), peer)).await;
                    }
                    Ok(Err(e)) => {
                        crate::metrics::TLS_EVENTS
                            .with_label_values(&["handshake_failed"])
                            .inc();
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    }
                    Err(_) => {
                        crate::metrics::TLS_EVENTS
                            .with_label_values(&["handshake_failed"])
                            .inc();
                        tracing::debug!(%peer, "TLS handshake timed out");
                    }
                }
            });
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// A server-side TLS connection, usable by axum and tonic.
pub struct TlsConn(TlsStream<TcpStream>);

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
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

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

/// The HTTP listener's side: axum takes finished TLS streams.
pub struct TlsListener {
    streams: mpsc::Receiver<(TlsConn, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: ReloadingConfig) -> io::Result<TlsListener> {
        let local = listener.local_addr()?;
        Ok(TlsListener {
            streams: accept_tls(listener, config),
            local,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TlsConn, SocketAddr) {
        match self.streams.recv().await {
            Some(s) => s,
            // The accept task only ends with the listener; never resolve.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        let e = load_config(&cert, &key, Alpn::Http)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.crt"), "{e}");
        std::fs::write(&cert, "not pem").unwrap();
        let e = load_config(&cert, &key, Alpn::Http)
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls.crt") && e.contains("no PEM"), "{e}");
    }

    #[test]
    fn stamps_change_with_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        let missing = stamp(&[&f]);
        std::fs::write(&f, "1").unwrap();
        let one = stamp(&[&f]);
        assert_ne!(missing, one);
        std::fs::write(&f, "22").unwrap();
        assert_ne!(one, stamp(&[&f]));
    }
}

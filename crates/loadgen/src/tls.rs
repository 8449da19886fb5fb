//! TLS for https:// targets, with rustls: the client configuration built once per run (trusted
//! roots, client certificate, ALPN, session resumption), the handshake on each new connection,
//! and the one sentence a failed handshake becomes before the run starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, HandshakeKind, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::LoadError;

/// What the user asked of TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Accept any certificate (`--insecure`).
    pub insecure: bool,
    /// Trust the CAs in this PEM file, besides the system's (`--cacert`).
    pub cacert: Option<PathBuf>,
    /// A client certificate chain and its key, PEM (`--cert`, `--key`).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Resume sessions (tickets, session ids) on new connections (`--tls-resumption on|off`).
    pub resumption: bool,
    /// The name sent as SNI and checked against the certificate, when not the URL's host.
    pub sni: Option<String>,
}

/// One run's TLS client: its configuration and the server name every connection sends.
pub(crate) struct Tls {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    /// Without --cert: notes whether a server asked for a client certificate.
    no_cert: Option<Arc<NoClientCert>>,
}

/// No client certificate to give (no --cert), noting whether a server asked for one.
#[derive(Debug, Default)]
struct NoClientCert {
    asked: std::sync::atomic::AtomicBool,
}

impl rustls::client::ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked
            .store(true, std::sync::atomic::Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

/// A completed handshake: how long it took, and whether it resumed an earlier session.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handshake {
    pub took: Duration,
    pub resumed: bool,
}

impl Tls {
    /// The client for `host` (the URL's, or `--sni`), offering `alpn` (e.g. http/1.1).
    pub(crate) fn new(opts: &TlsOptions, host: &str, alpn: &[&[u8]]) -> Result<Tls, LoadError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| LoadError::Tls(format!("cannot set up TLS: {e}")))?;
        let builder = if opts.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        } else {
            builder.with_root_certificates(roots(opts.cacert.as_deref())?)
        };
        let no_cert = opts.cert.is_none().then(|| Arc::new(NoClientCert::default()));
        let mut config = match (&opts.cert, &opts.key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "--cert")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    LoadError::Tls(format!(
                        "cannot read a private key from {} ({e}); give --key a PEM file with the key of --cert",
                        key.display()
                    ))
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    LoadError::Tls(format!(
                        "the --cert and --key files do not go together ({e}); give the key of that certificate"
                    ))
                })?
            }
            (None, None) => builder.with_client_cert_resolver(
                no_cert.clone().expect("made without --cert"),
            ),
            _ => {
                return Err(LoadError::Tls(
                    "--cert and --key go together: give both, or neither".into(),
                ));
            }
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        if !opts.resumption {
            config.resumption = rustls::client::Resumption::disabled();
        }
        let name = opts.sni.as_deref().unwrap_or(host);
        let server_name = ServerName::try_from(name.to_string()).map_err(|_| {
            LoadError::Tls(format!(
                "`{name}` is not a name TLS can send (SNI); give --sni a host name"
            ))
        })?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            server_name,
            no_cert,
        })
    }

    /// A server asked this client for a certificate it did not have (no --cert).
    pub(crate) fn certificate_asked_for(&self) -> bool {
        (self.no_cert.as_ref())
            .is_some_and(|n| n.asked.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The handshake over `tcp`.
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
    ) -> std::io::Result<(TlsStream<TcpStream>, Handshake)> {
        let start = Instant::now();
        let stream = self.connector.connect(self.server_name.clone(), tcp).await?;
        let resumed = stream.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed);
        Ok((
            stream,
            Handshake {
                took: start.elapsed(),
                resumed,
            },
        ))
    }
}

/// The system's trusted roots (/etc/ssl/certs), and the CAs of `--cacert`.
fn roots(cacert: Option<&Path>) -> Result<RootCertStore, LoadError> {
    let mut store = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    store.add_parsable_certificates(native.certs);
    if let Some(path) = cacert {
        for cert in read_certs(path, "--cacert")? {
            store.add(cert).map_err(|e| {
                LoadError::Tls(format!(
                    "{} holds a certificate that cannot be a trusted CA ({e}); give --cacert the CA's certificate, PEM",
                    path.display()
                ))
            })?;
        }
    }
    Ok(store)
}

fn read_certs(path: &Path, option: &str) -> Result<Vec<CertificateDer<'static>>, LoadError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            LoadError::Tls(format!(
                "cannot read certificates from {} ({e}); give {option} a PEM file",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(LoadError::Tls(format!(
            "{} holds no certificate; give {option} a PEM file with one",
            path.display()
        )));
    }
    Ok(certs)
}

/// What a failed handshake means, and what to do: one sentence (the check before the run).
pub(crate) fn explain(err: &std::io::Error, name: &str) -> String {
    let tls = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    use rustls::{CertificateError, Error};
    match tls {
        Some(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            "the server's certificate is not signed by a CA this client trusts: pass --cacert FILE with the CA that signed it, or --insecure to accept any certificate".to_string()
        }
        Some(Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the server's certificate is not valid for `{name}` (the name sent as SNI): use a host name it was issued for in the URL or --sni, or --insecure"
        ),
        Some(Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => "the server's certificate has expired: renew it, or pass --insecure".to_string(),
        Some(Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)) => {
            "the server agreed on no protocol the client offered in the TLS handshake (ALPN; --http2 offers h2 and http/1.1): check that it serves HTTP on this port".to_string()
        }
        Some(Error::AlertReceived(alert)) => format!(
            "the server ended the handshake with the TLS alert {alert:?}: check that it serves TLS on this port and accepts this client (a client certificate with --cert/--key if it asks for one)"
        ),
        Some(Error::NoApplicationProtocol) => {
            "the server agreed on no protocol the client offered (ALPN): drop --http2, or enable HTTP/2 on the server".to_string()
        }
        Some(other) => format!("the TLS handshake failed: {other}"),
        None => format!(
            "the TLS handshake failed ({err}): check that the server speaks TLS on this port (http:// if it does not)"
        ),
    }
}

/// `--insecure`: every certificate is accepted; signatures are still checked, so the handshake
/// is the real one (its cost is what it would be).
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

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
            let verifier = TrustGiven::new(opts.cacert.as_deref(), provider)?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
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

/// The CAs' checks, and a certificate of `--cacert` trusted as given when the server presents that
/// very certificate (a self-signed one, as openssl's `req -x509` makes: CA:TRUE, which the CA
/// checks refuse as a server's), as curl trusts it: its name and validity period still checked.
#[derive(Debug)]
struct TrustGiven {
    cas: Arc<rustls::client::WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl TrustGiven {
    fn new(
        cacert: Option<&Path>,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<TrustGiven, LoadError> {
        let cas = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots(cacert)?),
            provider,
        )
        .build()
        .map_err(|e| LoadError::Tls(format!("cannot set up TLS: {e}")))?;
        let given = match cacert {
            Some(path) => read_certs(path, "--cacert")?,
            None => Vec::new(),
        };
        Ok(TrustGiven { cas, given })
    }

    /// The certificate given with --cacert, presented by the server itself: valid for the name
    /// and for now.
    fn given_and_valid(
        &self,
        end_entity: &CertificateDer<'_>,
        server_name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError;
        use x509_cert::der::Decode;
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        let cert = x509_cert::Certificate::from_der(end_entity.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        let validity = &cert.tbs_certificate.validity;
        let now = std::time::Duration::from_secs(now.as_secs());
        if now < validity.not_before.to_unix_duration() {
            return Err(rustls::Error::InvalidCertificate(CertificateError::NotValidYet));
        }
        if now > validity.not_after.to_unix_duration() {
            return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
        }
        Ok(ServerCertVerified::assertion())
    }
}

impl ServerCertVerifier for TrustGiven {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .cas
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(_) if self.given.iter().any(|c| c.as_ref() == end_entity.as_ref()) => {
                self.given_and_valid(end_entity, server_name, now)
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.cas.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.cas.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.cas.supported_verify_schemes()
    }
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
        Some(Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        )) => "the server's certificate is not valid yet (its start date is ahead of this host's clock): check both clocks, or pass --insecure".to_string(),
        Some(Error::InvalidCertificate(CertificateError::Other(other)))
            if format!("{other:?}").contains("CaUsedAsEndEntity") =>
        {
            "the server presents a CA certificate (CA:TRUE, as `openssl req -x509` makes) as its own, which is trusted only when given: pass that very certificate with --cacert, or give the server one its CA signed".to_string()
        }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A self-signed certificate for 127.0.0.1 as a user makes one: `openssl req -x509 -newkey
    /// rsa:2048 -nodes ... -addext subjectAltName=IP:127.0.0.1` (CA:TRUE, as openssl makes it);
    /// its key is key.pem beside it.
    pub(crate) fn self_signed(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("srvprof-tls-unit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout"])
            .arg(dir.join("key.pem"))
            .arg("-out")
            .arg(dir.join("cert.pem"))
            .args(["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"])
            .output()
            .expect("openssl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        dir.join("cert.pem")
    }

    fn verify(given: Option<&Path>, presented: &Path, name: &str, now: UnixTime) -> Result<(), rustls::Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = TrustGiven::new(given, provider).map_err(|e| rustls::Error::General(e.to_string()))?;
        let cert = read_certs(presented, "test").unwrap().remove(0);
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(&cert, &[], &name, &[], now)
            .map(|_| ())
    }

    fn said(e: rustls::Error) -> String {
        explain(&std::io::Error::other(e), "127.0.0.1")
    }

    #[test]
    fn a_self_signed_certificate_given_with_cacert_is_trusted_as_curl_trusts_it() {
        let cert = self_signed("given");
        let now = UnixTime::now();
        verify(Some(&cert), &cert, "127.0.0.1", now).expect("trusted as given");
        // Its name and dates are still checked.
        let wrong = verify(Some(&cert), &cert, "10.9.9.9", now).unwrap_err();
        assert!(said(wrong).contains("not valid for"));
        let in_2200 = UnixTime::since_unix_epoch(std::time::Duration::from_secs(7_258_118_400));
        let late = verify(Some(&cert), &cert, "127.0.0.1", in_2200).unwrap_err();
        assert!(said(late.clone()).contains("has expired"), "{late:?}");
        let in_1990 = UnixTime::since_unix_epoch(std::time::Duration::from_secs(631_152_000));
        let early = verify(Some(&cert), &cert, "127.0.0.1", in_1990).unwrap_err();
        assert!(said(early.clone()).contains("not valid yet"), "{early:?}");
    }

    #[test]
    fn each_certificate_failure_is_one_sentence_with_what_to_pass() {
        let cert = self_signed("presented");
        let other = self_signed("other");
        let now = UnixTime::now();
        // A CA certificate presented as the server's, not the one given.
        let ca = said(verify(Some(&other), &cert, "127.0.0.1", now).unwrap_err());
        assert!(ca.contains("CA certificate") && ca.contains("--cacert"), "{ca}");
        let ca_alone = said(verify(None, &cert, "127.0.0.1", now).unwrap_err());
        assert!(ca_alone.contains("--cacert"), "{ca_alone}");
        use rustls::CertificateError::*;
        for (error, words) in [
            (UnknownIssuer, "not signed by a CA this client trusts"),
            (Expired, "has expired"),
            (NotValidYet, "not valid yet"),
            (NotValidForName, "not valid for `127.0.0.1`"),
        ] {
            let sentence = said(rustls::Error::InvalidCertificate(error));
            assert!(sentence.contains(words) && !sentence.contains('\n'), "{sentence}");
        }
    }
}

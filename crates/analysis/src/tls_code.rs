//! Which on-CPU samples ran TLS code: samples whose leaf (the running function, as perf's `dso`
//! and `sym` columns name it) is in a TLS library (OpenSSL's libssl and libcrypto, GnuTLS, NSS,
//! BoringSSL, AWS-LC, wolfSSL) or is a function of a TLS stack linked into the program (Go's
//! crypto packages, Rust's rustls, ring and aws-lc, Java's JSSE and JCE, Erlang's ssl and crypto).
//! A sample in the kernel is the kernel's, even when TLS code made the system call.

use serde::{Deserialize, Serialize};

/// File names of shared TLS and crypto libraries.
const LIBRARIES: &[&str] = &[
    "libssl.so",
    "libcrypto.so",
    "libgnutls.so",
    "libnettle.so",
    "libhogweed.so",
    "libnss3.so",
    "libsoftokn3.so",
    "libfreebl",
    "libboringssl",
    "libaws_lc",
    "libwolfssl.so",
];

/// Function-name prefixes of TLS stacks linked into the program.
const FUNCTIONS: &[&str] = &[
    // Go
    "crypto/",
    "vendor/golang.org/x/crypto/",
    "golang.org/x/crypto/",
    // Rust
    "ring::",
    "ring_core_",
    "rustls::",
    "aws_lc_",
    "<ring::",
    "<rustls::",
    // Java (JSSE, JCE, the JIT's crypto intrinsics)
    "sun.security.",
    "com.sun.crypto.",
    "javax.crypto.",
    "StubRoutines::aescrypt",
    "StubRoutines::ghash",
    // Erlang
    "ssl:",
    "tls_",
    "crypto:",
];

/// Whether a frame is TLS code: by the file it was found in (`module`, a path), by a name that
/// carries its file (`libcrypto.so.3+0x1f2e0`), or by its function's name.
pub fn is_tls_code(frame: &str, module: Option<&str>) -> bool {
    let file = module.map(|m| m.rsplit('/').next().unwrap_or(m));
    let in_library = |name: &str| LIBRARIES.iter().any(|lib| name.contains(lib));
    file.is_some_and(in_library)
        || in_library(frame.split('+').next().unwrap_or(frame))
        || FUNCTIONS.iter().any(|p| frame.starts_with(p))
}

/// A kernel frame of a folded stack (`tcp_sendmsg_[k]`).
fn is_kernel(frame: &str) -> bool {
    frame.ends_with("_[k]")
}

/// One group's (server, client) on-CPU samples in TLS code.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsCpu {
    pub group: String,
    pub samples: u64,
    pub tls_samples: u64,
    /// tls_samples / samples.
    pub share: f64,
    /// Where those samples ran, most first (at most 3): a TLS library's file name (a stripped
    /// library's function names are often its nearest exported symbol, not the function that
    /// ran), or a function of a TLS stack linked into the program.
    pub top: Vec<String>,
}

/// Adds up one group's on-CPU stacks.
#[derive(Debug, Default)]
pub struct TlsTally {
    samples: u64,
    tls: u64,
    by_function: std::collections::BTreeMap<String, u64>,
}

impl TlsTally {
    /// One stack, outermost frame first, its leaf last; `leaf_module`, the file its leaf was
    /// found in, when known.
    pub fn add(&mut self, frames: &[String], leaf_module: Option<&str>, weight: u64) {
        self.samples += weight;
        let Some(leaf) = frames.last() else {
            return;
        };
        if !is_kernel(leaf) && is_tls_code(leaf, leaf_module) {
            self.tls += weight;
            let file = leaf_module
                .map(|m| m.rsplit('/').next().unwrap_or(m))
                .or_else(|| leaf.split_once('+').map(|(file, _)| file));
            // A library by its file; code linked into the program by its function.
            let place = file
                .filter(|f| LIBRARIES.iter().any(|lib| f.contains(lib)))
                .unwrap_or(leaf);
            *self.by_function.entry(place.to_string()).or_default() += weight;
        }
    }

    pub fn finish(self, group: &str) -> TlsCpu {
        let mut top: Vec<(String, u64)> = self.by_function.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        TlsCpu {
            group: group.to_string(),
            samples: self.samples,
            tls_samples: self.tls,
            share: self.tls as f64 / self.samples.max(1) as f64,
            top: top.into_iter().take(3).map(|(f, _)| f).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_code_is_known_by_its_library_or_its_name() {
        let libcrypto = Some("/usr/lib/x86_64-linux-gnu/libcrypto.so.3");
        assert!(is_tls_code("ecp_nistz256_point_double", libcrypto));
        assert!(is_tls_code("libssl.so.3+0x3c1f0", None));
        assert!(is_tls_code(
            "crypto/internal/fips140/aes/gcm.gcmAesEnc",
            None
        ));
        assert!(is_tls_code(
            "ring_core_0_17_14__aes_hw_ctr32_encrypt_blocks",
            None
        ));
        assert!(is_tls_code("sun.security.ssl.SSLEngineImpl.wrap", None));
        assert!(!is_tls_code(
            "ngx_http_process_request_line",
            Some("/usr/sbin/nginx")
        ));
        assert!(!is_tls_code(
            "memcpy",
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        ));
        // Go's crypto/tls calling into the runtime is the runtime's.
        assert!(!is_tls_code("runtime.memmove", None));
    }

    #[test]
    fn only_the_running_function_counts_and_the_kernel_is_the_kernels() {
        let s = |frames: &[&str]| frames.iter().map(|f| f.to_string()).collect::<Vec<_>>();
        let crypto = Some("/lib/libcrypto.so.3");
        let mut t = TlsTally::default();
        t.add(
            &s(&["nginx", "main", "SSL_write", "EVP_EncryptUpdate"]),
            crypto,
            30,
        );
        t.add(&s(&["nginx", "main", "EVP_DigestUpdate"]), crypto, 10);
        // SSL_write's system call: the kernel's time, as perf's dso column says.
        t.add(
            &s(&["nginx", "main", "EVP_EncryptUpdate", "tcp_sendmsg_[k]"]),
            None,
            40,
        );
        t.add(
            &s(&["nginx", "main", "ngx_http_handler"]),
            Some("/usr/sbin/nginx"),
            20,
        );
        let q = t.finish("server");
        assert_eq!((q.samples, q.tls_samples), (100, 40));
        assert!((q.share - 0.4).abs() < 1e-12);
        assert_eq!(q.top, ["libcrypto.so.3"]);
        let mut go = TlsTally::default();
        go.add(
            &s(&["main", "crypto/aes.encryptBlock"]),
            Some("/srv/app"),
            3,
        );
        go.add(&s(&["main", "crypto/sha256.block"]), Some("/srv/app"), 5);
        assert_eq!(
            go.finish("server").top,
            ["crypto/sha256.block", "crypto/aes.encryptBlock"]
        );
    }
}

//! The controller runtime: names-only work queues, expectations, informers, the Lease and HTTP
//! endpoints. Nothing here knows about VMs; the controllers in `crate::controller` plug into it.

pub(crate) mod apicall;
pub mod expectations;
pub(crate) mod gate;
pub(crate) mod gojson;
pub(crate) mod http;
pub(crate) mod index;
pub mod informer;
pub mod lease;
#[cfg(test)]
pub(crate) mod log_capture;
pub(crate) mod log_limit;
pub(crate) mod metrics;
pub(crate) mod mutation_cache;
pub mod queue;
pub mod recorder;
pub(crate) mod rest_limiter;
pub mod store;
pub mod wire;

/// An error and its sources, joined by `: ` (kube's `Display` stops at "client error
/// (Connect)"; the cause, e.g. "Connection refused (os error 111)", is in the source chain).
/// Repeated texts (a source that repeats its cause) are shown once.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_chain_shows_the_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let outer = std::io::Error::other(io);
        // `other(io)` displays as its source: shown once.
        assert_eq!(super::error_chain(&outer), "Connection refused");
        #[derive(Debug)]
        struct Wrap(std::io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Wrap {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let w = Wrap(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ));
        assert_eq!(
            super::error_chain(&w),
            "client error (Connect): Connection refused"
        );
    }
}

//! Addressing: path style (`http://127.0.0.1:9100/bucket/key`) and
//! virtual-hosted style for `*.localhost` names
//! (`http://bucket.localhost:9100/key`), which is what the SDKs use for
//! S3 Express directory buckets (`name--zone-id--x-s3`) and what
//! `addressing_style = virtual` asks for. RFC 6761 reserves `.localhost`
//! for loopback; resolvers such as systemd-resolved answer it, others need
//! an `/etc/hosts` line.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

use crate::buckets::valid_bucket_name;

/// The base domain whose subdomains name buckets.
pub const BASE_DOMAIN: &str = "localhost";

/// See the module docs.
#[derive(Debug, Default)]
pub struct LocalhostBuckets;

/// The bucket a `Host` header names, if it is `BUCKET.localhost[:port]`.
pub fn bucket_of_host(host: &str) -> Option<&str> {
    // Strip a port (but not from a bracketed IPv6 literal).
    let name = match host.rsplit_once(':') {
        Some((h, port)) if !h.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ if host.starts_with('[') => return None,
        _ => host,
    };
    let bucket = name.strip_suffix(BASE_DOMAIN)?.strip_suffix('.')?;
    valid_bucket_name(bucket).then_some(bucket)
}

impl S3Host for LocalhostBuckets {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match bucket_of_host(host) {
            Some(bucket) => VirtualHost::new(BASE_DOMAIN).with_bucket(bucket),
            // Anything else (an IP, `localhost`, a name) is path style.
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_subdomains_name_buckets() {
        assert_eq!(bucket_of_host("logs.localhost:9100"), Some("logs"));
        assert_eq!(bucket_of_host("logs--use1-az4--x-s3.localhost"), Some("logs--use1-az4--x-s3"));
        assert_eq!(bucket_of_host("my.bucket.localhost:1"), Some("my.bucket"));
        for path_style in
            ["localhost:9100", "127.0.0.1:9100", "[::1]:9100", "example.com", "x.localhost"]
        {
            assert_eq!(bucket_of_host(path_style), None, "{path_style}");
        }
    }
}

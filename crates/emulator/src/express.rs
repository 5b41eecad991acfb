//! Requests signed for S3 Express (`s3express`).
//!
//! The SDKs sign every request to a directory bucket (`name--zone-id--x-s3`)
//! with SigV4 for the service `s3express`: first `CreateSession`, then each
//! operation with the session's credentials and an `x-amz-s3session-token`
//! header. s3s 0.14.1 (pinned: newer versions need a newer rustc) accepts
//! only the services `s3` and `sts`, so such a request would be refused
//! before it reached the emulator.
//!
//! So `server.rs` checks these signatures here, before s3s sees the
//! request: the canonical request is rebuilt from the request as it arrived
//! (SigV4's rules, with S3's single encoding of the path), signed with the
//! user's secret for the request's scope, and compared in constant time. A
//! valid request loses its `Authorization` and session token headers and
//! gains an [`ExpressSession`] extension, which [`Access`] accepts in place
//! of s3s's own credentials; an invalid one is answered 403 here. The
//! session credentials `CreateSession` hands out are the user's own (a real
//! session's are temporary), so one secret checks both.
//!
//! Only header-signed requests with a declared payload hash
//! (`x-amz-content-sha256`: a hash, `UNSIGNED-PAYLOAD` or
//! `STREAMING-UNSIGNED-PAYLOAD-TRAILER`) are taken; chunk-signed bodies
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`) would need the chunk signatures
//! checked too, and are refused with 501.

use std::collections::HashMap;

use hmac::{Hmac, KeyInit, Mac};
use s3s::access::{S3Access, S3AccessContext};
use s3s::{S3Result, s3_error};
use sha2::{Digest, Sha256};

/// The service name S3 Express requests are signed for.
pub const SERVICE: &str = "s3express";

/// Marks a request whose `s3express` signature was checked, by this user.
#[derive(Debug, Clone)]
pub struct ExpressSession {
    /// The access key that signed it.
    pub access_key: String,
}

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not signed for `s3express`: s3s checks it as usual.
    NotExpress,
    /// A valid `s3express` signature by this access key.
    Valid(String),
    /// Signed for `s3express`, but not validly: (S3 error code, message).
    Invalid(&'static str, String),
}

/// The parts of an `Authorization: AWS4-HMAC-SHA256 ...` header.
struct Auth<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_auth(h: &str) -> Option<Auth<'_>> {
    let rest = h.strip_prefix("AWS4-HMAC-SHA256")?.trim_start();
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=')?;
        match k {
            "Credential" => cred = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => sig = Some(v),
            _ => {}
        }
    }
    let mut c = cred?.split('/');
    let a = Auth {
        access_key: c.next()?,
        date: c.next()?,
        region: c.next()?,
        service: c.next()?,
        signed_headers: signed?.split(';').collect(),
        signature: sig?,
    };
    (c.next()? == "aws4_request" && c.next().is_none()).then_some(a)
}

/// SigV4's URI encoding: everything but unreserved characters.
fn uri_encode(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The canonical query string: pairs decoded, re-encoded, sorted.
fn canonical_query(q: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> = q
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (uri_encode(&percent_decode(k)), uri_encode(&percent_decode(v)))
        })
        .collect();
    pairs.sort();
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// Check a request's `s3express` signature against `users` (access key →
/// secret key).
pub fn verify(
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    users: &HashMap<String, String>,
) -> Verdict {
    let Some(auth) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return Verdict::NotExpress;
    };
    let Some(a) = parse_auth(auth) else { return Verdict::NotExpress };
    if a.service != SERVICE {
        return Verdict::NotExpress;
    }
    let Some(secret) = users.get(a.access_key) else {
        return Verdict::Invalid(
            "InvalidAccessKeyId",
            format!("unknown access key {}", a.access_key),
        );
    };
    let want = match expected_signature(method, uri, headers, &a, secret) {
        Ok(w) => w,
        Err((code, msg)) => return Verdict::Invalid(code, msg),
    };
    // Constant time: every byte is compared.
    let same = want.len() == a.signature.len()
        && want.bytes().zip(a.signature.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0;
    if same {
        Verdict::Valid(a.access_key.to_owned())
    } else {
        Verdict::Invalid(
            "SignatureDoesNotMatch",
            "the s3express signature does not match the request".into(),
        )
    }
}

/// The SigV4 signature the request should carry, for `a`'s scope.
fn expected_signature(
    method: &http::Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    a: &Auth<'_>,
    secret: &str,
) -> Result<String, (&'static str, String)> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let amz_date = header("x-amz-date")
        .ok_or(("AccessDenied", "a SigV4 request needs x-amz-date".to_owned()))?;
    if !amz_date.starts_with(a.date) {
        return Err((
            "SignatureDoesNotMatch",
            "the credential scope's date is not x-amz-date's".into(),
        ));
    }
    let payload = header("x-amz-content-sha256").unwrap_or("UNSIGNED-PAYLOAD");
    if payload.starts_with("STREAMING-AWS4-HMAC-SHA256") {
        return Err((
            "NotImplemented",
            "chunk-signed bodies are not taken with s3express signatures".into(),
        ));
    }
    let mut canonical_headers = String::new();
    for name in &a.signed_headers {
        let values: Vec<String> = headers
            .get_all(*name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        if values.is_empty() {
            return Err(("SignatureDoesNotMatch", format!("signed header {name} is missing")));
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let path = if uri.path().is_empty() { "/" } else { uri.path() };
    let canonical = format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{}\n{payload}",
        canonical_query(uri.query()),
        a.signed_headers.join(";")
    );
    let scope = format!("{}/{}/{}/aws4_request", a.date, a.region, a.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), a.date.as_bytes());
    for part in [a.region, a.service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    Ok(hex::encode(hmac(&key, to_sign.as_bytes())))
}

/// Access control: a request needs s3s's checked credentials, or a checked
/// `s3express` signature.
#[derive(Debug, Default)]
pub struct Access;

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() || cx.extensions_mut().get::<ExpressSession>().is_some() {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied, "Signature is required"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published SigV4 example: GET /test.txt with a Range header
    /// ("Signature Calculations for the Authorization Header", S3 API
    /// reference).
    fn example(service: &str, sig: &str) -> (http::Method, http::Uri, http::HeaderMap) {
        let mut h = http::HeaderMap::new();
        h.insert("host", "examplebucket.s3.amazonaws.com".parse().expect("header"));
        h.insert("range", "bytes=0-9".parse().expect("header"));
        h.insert(
            "x-amz-content-sha256",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".parse().expect("h"),
        );
        h.insert("x-amz-date", "20130524T000000Z".parse().expect("header"));
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/{service}/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature={sig}"
        );
        h.insert(http::header::AUTHORIZATION, auth.parse().expect("header"));
        (http::Method::GET, "/test.txt".parse().expect("uri"), h)
    }

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const EXAMPLE_SIG: &str = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";

    fn users() -> HashMap<String, String> {
        [("AKIAIOSFODNN7EXAMPLE".to_owned(), SECRET.to_owned())].into()
    }

    #[test]
    fn the_published_aws_example_computes_its_signature() {
        let (m, u, h) = example("s3", EXAMPLE_SIG);
        let auth = h[http::header::AUTHORIZATION].to_str().expect("ascii").to_owned();
        let a = parse_auth(&auth).expect("parses");
        assert_eq!(expected_signature(&m, &u, &h, &a, SECRET).expect("computes"), EXAMPLE_SIG);
        // Signed for s3, it is left to s3s.
        assert_eq!(verify(&m, &u, &h, &users()), Verdict::NotExpress);
    }

    #[test]
    fn s3express_signatures_are_checked() {
        let (m, u, h) = example(SERVICE, "0");
        let auth = h[http::header::AUTHORIZATION].to_str().expect("ascii").to_owned();
        let a = parse_auth(&auth).expect("parses");
        let right = expected_signature(&m, &u, &h, &a, SECRET).expect("computes");
        assert_ne!(right, EXAMPLE_SIG, "the service is part of the signature");
        let (m, u, mut h) = example(SERVICE, &right);
        assert_eq!(verify(&m, &u, &h, &users()), Verdict::Valid("AKIAIOSFODNN7EXAMPLE".into()));
        // A changed signed header, path, or key fails.
        h.insert("range", "bytes=0-10".parse().expect("header"));
        assert!(matches!(
            verify(&m, &u, &h, &users()),
            Verdict::Invalid("SignatureDoesNotMatch", _)
        ));
        let (m, _, h) = example(SERVICE, &right);
        let other: http::Uri = "/test2.txt".parse().expect("uri");
        assert!(matches!(verify(&m, &other, &h, &users()), Verdict::Invalid(..)));
        let stranger: HashMap<String, String> = [("X".to_owned(), "y".to_owned())].into();
        assert!(matches!(verify(&m, &u, &h, &stranger), Verdict::Invalid("InvalidAccessKeyId", _)));
    }

    #[test]
    fn query_strings_are_canonical() {
        assert_eq!(canonical_query(Some("uploads")), "uploads=");
        assert_eq!(canonical_query(Some("b=2&a=1&a=0")), "a=0&a=1&b=2");
        assert_eq!(canonical_query(Some("prefix=a%2Fb&x=a b")), "prefix=a%2Fb&x=a%20b");
        assert_eq!(canonical_query(None), "");
    }
}

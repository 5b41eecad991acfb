"""Fuzz the emulator's request parsing: seeded random requests, most of them
validly signed (so that they get past authentication to the parsers of
query strings, headers and XML bodies), some with broken signatures or none.

Every request must get an HTTP answer that is not a server error (5xx means
the server failed on input it should have refused with a 4xx), the server
must keep serving, and the objects written by well-formed requests must read
back intact at the end.

Run: python3 emulator_fuzz.py ENDPOINT SEED COUNT
"""

import http.client
import random
import sys
import urllib.parse

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

ENDPOINT, SEED, COUNT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
HOST = urllib.parse.urlparse(ENDPOINT).netloc
CREDS = boto3.session.Session(aws_access_key_id="milliscale",
                              aws_secret_access_key="milliscale-secret").get_credentials()
rng = random.Random(SEED)
B = f"fuzz-{SEED}"

METHODS = ["GET", "PUT", "POST", "DELETE", "HEAD"]
SUBRESOURCES = ["", "uploads", "uploadId=x", "partNumber=1&uploadId=x", "delete", "versions",
                "list-type=2", "location", "acl", "versioning", "session", "tagging", "policy",
                "max-keys=-1", "max-keys=abc", "marker=%FF", "prefix=%00", "delimiter=",
                "encoding-type=bogus", "continuation-token=zz", "list-type=2&start-after=a",
                "partNumber=0", "partNumber=99999", "uploadId=", "versionId=abc", "x-id=GetObject"]
HEADERS = [
    ("Range", ["bytes=0-0", "bytes=5-1", "bytes=-0", "bytes=abc", "bytes=0-18446744073709551615",
               "bytes=9223372036854775808-", "items=0-1", "bytes=0-1,4-5"]),
    ("If-Match", ["*", '"x"', "", "W/\"x\"", "\"unterminated"]),
    ("If-None-Match", ["*", '"x"', ""]),
    ("If-Modified-Since", ["yesterday", "Wed, 21 Oct 2015 07:28:00 GMT", ""]),
    ("If-Unmodified-Since", ["Thu, 01 Jan 1970 00:00:00 GMT", "not a date"]),
    ("x-amz-write-offset-bytes", ["0", "-1", "abc", "99999999999999999999", "1"]),
    ("Content-MD5", ["", "abc", "AAAAAAAAAAAAAAAAAAAAAA=="]),
    ("x-amz-copy-source", [f"{B}/k", "/", "nobucket", f"{B}/%ZZ", ""]),
    ("x-amz-copy-source-range", ["bytes=0-0", "bytes=x"]),
    ("x-amz-metadata-directive", ["COPY", "REPLACE", "BOGUS"]),
    ("x-amz-meta-x", ["v", "\u00e9", ""]),
    ("Content-Type", ["text/plain", "", "a/b; c=d"]),
    ("x-amz-checksum-crc32c", ["AAAAAA==", "bad"]),
    ("Expect", ["100-continue"]),
]
XML = [b"", b"<", b"<Delete>", b"<Delete><Object><Key>k</Key></Object></Delete>",
       b"<Delete><Quiet>maybe</Quiet></Delete>",
       b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part>"
       b"</CompleteMultipartUpload>",
       b"<CompleteMultipartUpload><Part><PartNumber>x</PartNumber><ETag>e</ETag></Part>"
       b"</CompleteMultipartUpload>",
       b"<?xml version='1.0'?><!DOCTYPE a [<!ENTITY b 'c'>]><a>&b;</a>",
       b"\x00\xff\xfe", b"x" * 5000]
KEYS = ["k", "a/b", "%2F", "..", "a%00b", "\u00fcml", "k" * 1100, "sp ace", "q?x=1"]


def send(method, path, query, headers, body, sign=True):
    url = f"{ENDPOINT}{path}" + (f"?{query}" if query else "")
    req = AWSRequest(method=method, url=url, data=body, headers=headers)
    if sign:
        req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        # Some signed for S3 Express, checked by the emulator itself.
        SigV4Auth(CREDS, rng.choice(["s3", "s3", "s3express"]), "us-east-1").add_auth(req)
    conn = http.client.HTTPConnection(HOST, timeout=10)
    try:
        conn.request(method, req.url[len(ENDPOINT):], body=body, headers=dict(req.headers))
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def one():
    method = rng.choice(METHODS)
    bucket = rng.choice([B, B, "nosuch-bucket", "UPPER", ""])
    key = rng.choice(KEYS + [""])
    path = "/" + urllib.parse.quote(bucket) + ("/" + urllib.parse.quote(key) if key else "")
    query = "&".join(rng.sample(SUBRESOURCES, rng.randint(0, 2))).strip("&")
    headers = {}
    for name, values in rng.sample(HEADERS, rng.randint(0, 4)):
        headers[name] = rng.choice(values)
    body = rng.choice(XML) if method in ("PUT", "POST") else b""
    mode = rng.random()
    if mode < 0.8:
        return send(method, path, query, headers, body)
    if mode < 0.9:
        headers["Authorization"] = rng.choice([
            "AWS4-HMAC-SHA256 Credential=milliscale/20260101/us-east-1/s3/aws4_request, "
            "SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 garbage", "Bearer x", "AWS milliscale:abc"])
    return send(method, path, query, headers, body, sign=False)


def main():
    assert send("PUT", f"/{B}", "", {}, b"") == 200
    kept = {f"keep-{i}": bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
            for i in range(5)}
    for k, v in kept.items():
        assert send("PUT", f"/{B}/{k}", "", {}, v) == 200
    statuses = {}
    for i in range(COUNT):
        try:
            s = one()
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            raise AssertionError(f"request {i} (seed {SEED}) got no answer: {e!r}")
        assert s < 500 or s == 501, f"request {i} (seed {SEED}) answered {s}"
        statuses[s] = statuses.get(s, 0) + 1
    # Still serving, and what was written is intact (the fuzz wrote only
    # keys it picked from KEYS, never keep-*).
    for k, v in kept.items():
        url = f"{ENDPOINT}/{B}/{k}"
        req = AWSRequest(method="GET", url=url)
        req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        SigV4Auth(CREDS, "s3", "us-east-1").add_auth(req)
        conn = http.client.HTTPConnection(HOST, timeout=10)
        conn.request("GET", f"/{B}/{k}", headers=dict(req.headers))
        r = conn.getresponse()
        assert r.status == 200 and r.read() == v, f"{k} did not read back"
    print(f"fuzz ok: seed {SEED}, {COUNT} requests, statuses {dict(sorted(statuses.items()))}")


if __name__ == "__main__":
    main()

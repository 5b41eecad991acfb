"""A third-party client against `milliscale emulator`: Python boto3.

Every result is checked against the AWS behaviour written down in
docs/latency-model.md ("Errors a faithful store produces") and the
S3 API reference. Run: python3 emulator_boto3.py http://127.0.0.1:PORT
(the Rust test crates/cli/tests/emulator_clients.rs starts the emulator and
runs this). Exits non-zero on the first mismatch.
"""

import hashlib
import json
import socket
import sys
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = sys.argv[1]
s3 = boto3.client(
    "s3",
    endpoint_url=ENDPOINT,
    aws_access_key_id="milliscale",
    aws_secret_access_key="milliscale-secret",
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
B = "boto3-bucket"


def fails(status, code, fn, **kw):
    """Call fn(**kw); it must fail with this HTTP status and error code."""
    try:
        fn(**kw)
    except ClientError as e:
        got = (e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"])
        assert got == (status, code), f"{fn.__name__}: wanted {(status, code)}, got {got}"
        return
    raise AssertionError(f"{fn.__name__}({kw}) succeeded; wanted {status} {code}")


def body(key, **kw):
    return s3.get_object(Bucket=B, Key=key, **kw)["Body"].read()


def check(name):
    print(f"ok: {name}", flush=True)


# Buckets.
s3.create_bucket(Bucket=B)
fails(409, "BucketAlreadyOwnedByYou", s3.create_bucket, Bucket=B)
assert B in [b["Name"] for b in s3.list_buckets()["Buckets"]]
s3.head_bucket(Bucket=B)
fails(404, "NoSuchKey", s3.get_object, Bucket=B, Key="missing")
check("buckets; a missing key is 404 NoSuchKey")

# Put, then appends at the right and the wrong offset.
r = s3.put_object(Bucket=B, Key="log/seg", Body=b"hello")
assert r["ETag"].startswith('"'), r["ETag"]
r = s3.put_object(Bucket=B, Key="log/seg", Body=b" world", WriteOffsetBytes=5)
assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
assert body("log/seg") == b"hello world"
assert s3.head_object(Bucket=B, Key="log/seg")["ContentLength"] == 11
check("append at the right offset")

fails(400, "InvalidWriteOffset", s3.put_object, Bucket=B, Key="log/seg", Body=b"!", WriteOffsetBytes=5)
fails(400, "InvalidWriteOffset", s3.put_object, Bucket=B, Key="log/seg", Body=b"!", WriteOffsetBytes=12)
assert body("log/seg") == b"hello world", "a refused append changes nothing"
check("append at a wrong offset: 400 InvalidWriteOffset, nothing written")

fails(404, "NoSuchKey", s3.put_object, Bucket=B, Key="log/none", Body=b"x", WriteOffsetBytes=3)
fails(400, "InvalidRequest", s3.put_object, Bucket=B, Key="log/seg", Body=b"", WriteOffsetBytes=11)
s3.put_object(Bucket=B, Key="log/new", Body=b"first", WriteOffsetBytes=0)
assert body("log/new") == b"first", "offset 0 creates a missing object"
check("append to a missing object: 404 at offset > 0, creates at 0; empty append: 400")

# Ranges.
r = s3.get_object(Bucket=B, Key="log/seg", Range="bytes=2-4")
assert r["Body"].read() == b"llo"
assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
assert r["ContentRange"] == "bytes 2-4/11", r["ContentRange"]
assert body("log/seg", Range="bytes=-3") == b"rld"
assert body("log/seg", Range="bytes=6-") == b"world"
assert body("log/seg", Range="bytes=8-100") == b"rld", "a range past the end is clipped"
fails(416, "InvalidRange", s3.get_object, Bucket=B, Key="log/seg", Range="bytes=11-20")
check("range gets: 206 with Content-Range, suffix, open, clipped; past the end 416")

# Listing, with pages and a delimiter.
for k in ["list/a", "list/b", "list/c/1", "list/c/2", "list/d", "other"]:
    s3.put_object(Bucket=B, Key=k, Body=b"12")
keys, token = [], None
while True:
    kw = {"ContinuationToken": token} if token else {}
    page = s3.list_objects_v2(Bucket=B, Prefix="list/", MaxKeys=2, **kw)
    keys += [o["Key"] for o in page.get("Contents", [])]
    assert page["KeyCount"] <= 2
    if not page["IsTruncated"]:
        break
    token = page["NextContinuationToken"]
assert keys == ["list/a", "list/b", "list/c/1", "list/c/2", "list/d"], keys
page = s3.list_objects_v2(Bucket=B, Prefix="list/", Delimiter="/")
assert [o["Key"] for o in page["Contents"]] == ["list/a", "list/b", "list/d"], page
assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["list/c/"], page
assert all(o["Size"] == 2 for o in page["Contents"])
page = s3.list_objects_v2(Bucket=B, Prefix="list/", StartAfter="list/b")
assert [o["Key"] for o in page["Contents"]] == ["list/c/1", "list/c/2", "list/d"]
check("ListObjectsV2: prefix, continuation, delimiter, start-after")

# Conditional puts.
s3.put_object(Bucket=B, Key="cond", Body=b"v1", IfNoneMatch="*")
fails(412, "PreconditionFailed", s3.put_object, Bucket=B, Key="cond", Body=b"v2", IfNoneMatch="*")
assert body("cond") == b"v1"
etag = s3.head_object(Bucket=B, Key="cond")["ETag"]
r = s3.put_object(Bucket=B, Key="cond", Body=b"v2", IfMatch=etag)
assert r["ETag"] != etag, "a write changes the ETag"
fails(412, "PreconditionFailed", s3.put_object, Bucket=B, Key="cond", Body=b"v3", IfMatch=etag)
assert body("cond") == b"v2"
fails(404, "NoSuchKey", s3.put_object, Bucket=B, Key="cond-missing", Body=b"v", IfMatch=etag)
check("If-None-Match: * and If-Match: 412 PreconditionFailed; If-Match on a missing key: 404")

# Integrity: a body that does not match its checksum is refused, not stored.
fails(400, "BadDigest", s3.put_object, Bucket=B, Key="bad", Body=b"data", ChecksumCRC32="AAAAAA==")
try:
    s3.head_object(Bucket=B, Key="bad")
    raise AssertionError("a body with a bad checksum was stored")
except ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 404
check("a bad CRC32: 400 BadDigest, nothing stored")

# Deletes.
s3.delete_object(Bucket=B, Key="cond")
s3.delete_object(Bucket=B, Key="cond")  # deleting a missing key succeeds, as in S3
r = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "list/a"}, {"Key": "list/b"}]})
assert sorted(d["Key"] for d in r["Deleted"]) == ["list/a", "list/b"], r
fails(409, "BucketNotEmpty", s3.delete_bucket, Bucket=B)
left = [o["Key"] for o in s3.list_objects_v2(Bucket=B).get("Contents", [])]
assert "cond" not in left and "list/a" not in left and "other" in left, left
check("DeleteObject, DeleteObjects; a bucket with objects is 409 BucketNotEmpty")

# The accounting endpoint counts what the client did.
acct = json.load(urllib.request.urlopen(ENDPOINT + "/_milliscale/accounting"))
req = acct["accounting"]["requests"]
assert req["append"] >= 5 and req["put_if_absent"] >= 2 and req["list"] >= 4, req
assert acct["accounting"]["cost_usd"] > 0
check("accounting JSON at /_milliscale/accounting")

# A directory bucket through the SDK's S3 Express path: virtual-hosted
# addressing (BUCKET.localhost), CreateSession, requests signed for the
# service s3express with the session's token. RFC 6761 reserves .localhost
# for loopback; this resolver does not answer it, so the test does.
_getaddrinfo = socket.getaddrinfo


def _loopback_localhost(host, *a, **kw):
    if isinstance(host, str) and host.endswith(".localhost"):
        host = "127.0.0.1"
    return _getaddrinfo(host, *a, **kw)


socket.getaddrinfo = _loopback_localhost
port = ENDPOINT.rsplit(":", 1)[1]
xs3 = boto3.client(
    "s3",
    endpoint_url=f"http://localhost:{port}",
    aws_access_key_id="milliscale",
    aws_secret_access_key="milliscale-secret",
    region_name="us-east-1",
    config=Config(retries={"max_attempts": 1}),
)
D = "logs--use1-az4--x-s3"
xs3.create_bucket(Bucket=D, CreateBucketConfiguration={
    "Location": {"Type": "AvailabilityZone", "Name": "use1-az4"},
    "Bucket": {"Type": "Directory", "DataRedundancy": "SingleAvailabilityZone"}})
xs3.put_object(Bucket=D, Key="seg", Body=b"ab", WriteOffsetBytes=0)
xs3.put_object(Bucket=D, Key="seg", Body=b"cd", WriteOffsetBytes=2)
assert xs3.get_object(Bucket=D, Key="seg")["Body"].read() == b"abcd"
etag = xs3.head_object(Bucket=D, Key="seg")["ETag"]
assert etag != '"' + hashlib.md5(b"abcd").hexdigest() + '"', "directory bucket ETags are not MD5s"
assert [o["Key"] for o in xs3.list_objects_v2(Bucket=D)["Contents"]] == ["seg"]
wrong = boto3.client("s3", endpoint_url=f"http://localhost:{port}", region_name="us-east-1",
                     aws_access_key_id="milliscale", aws_secret_access_key="wrong",
                     config=Config(retries={"max_attempts": 1}))
fails(403, "SignatureDoesNotMatch", wrong.get_object, Bucket=D, Key="seg")
check("a directory bucket through the SDK: *.localhost, CreateSession, s3express signatures")
print("all boto3 checks passed")

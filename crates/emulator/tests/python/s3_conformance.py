"""S3 conformance cases, run with boto3 against any S3 endpoint.

scripts/test.sh runs the same cases against MinIO and against
`milliscale emulator` (crates/cli/tests/s3_conformance.rs): the emulator
must pass every case MinIO passes. Each case is a function; it passes if
it returns, and fails with the assertion or the error it raised. The
expected answers are AWS's (the S3 API reference).

Run: python3 s3_conformance.py ENDPOINT [ACCESS_KEY SECRET_KEY]
Prints one JSON object: {"case name": "pass" | "fail: why", ...}.
"""

import base64
import datetime
import hashlib
import json
import sys
import time
import traceback
import urllib.parse
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = sys.argv[1]
KEY = sys.argv[2] if len(sys.argv) > 2 else "milliscale"
SECRET = sys.argv[3] if len(sys.argv) > 3 else "milliscale-secret"
s3 = boto3.client(
    "s3",
    endpoint_url=ENDPOINT,
    aws_access_key_id=KEY,
    aws_secret_access_key=SECRET,
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
MIB = 1 << 20
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def bucket():
    name = "conf-" + uuid.uuid4().hex[:20]
    s3.create_bucket(Bucket=name)
    return name


def fails(status, code, fn, **kw):
    """fn(**kw) must fail with this HTTP status and (if given) error code."""
    try:
        fn(**kw)
    except ClientError as e:
        got = e.response["ResponseMetadata"]["HTTPStatusCode"]
        got_code = e.response["Error"]["Code"]
        assert got == status, f"wanted HTTP {status}, got {got} ({got_code})"
        assert code is None or got_code == code, f"wanted {code}, got {got_code}"
        return e
    raise AssertionError(f"succeeded; wanted {status} {code}")


def md5_etag(b):
    return '"' + hashlib.md5(b).hexdigest() + '"'


def keys(listing, field="Contents"):
    return [o["Key"] for o in listing.get(field, [])]


def prefixes(listing):
    return [p["Prefix"] for p in listing.get("CommonPrefixes", [])]


def filled(names):
    b = bucket()
    for n in names:
        s3.put_object(Bucket=b, Key=n, Body=n.encode())
    return b


# ---- listing -------------------------------------------------------------

TREE = ["a", "b/1", "b/2", "c/x/1", "c/y", "d"]


@case
def list_v1_plain():
    b = filled(TREE)
    r = s3.list_objects(Bucket=b)
    assert keys(r) == TREE, keys(r)
    assert r["IsTruncated"] is False
    o = r["Contents"][0]
    assert o["Size"] == 1 and o["ETag"] == md5_etag(b"a"), o
    assert "LastModified" in o and "Owner" in o, o


@case
def list_v1_delimiter_and_markers():
    b = filled(TREE)
    r = s3.list_objects(Bucket=b, Delimiter="/", MaxKeys=2)
    assert keys(r) == ["a"] and prefixes(r) == ["b/"], r
    assert r["IsTruncated"] is True and r["NextMarker"] == "b/", r
    r = s3.list_objects(Bucket=b, Delimiter="/", Marker=r["NextMarker"])
    assert keys(r) == ["d"] and prefixes(r) == ["c/"], r
    assert r["IsTruncated"] is False


@case
def list_v1_prefix_and_marker_without_delimiter():
    b = filled(TREE)
    r = s3.list_objects(Bucket=b, Prefix="c/")
    assert keys(r) == ["c/x/1", "c/y"], keys(r)
    r = s3.list_objects(Bucket=b, Marker="b/1", MaxKeys=2)
    assert keys(r) == ["b/2", "c/x/1"] and r["IsTruncated"] is True, r
    r = s3.list_objects(Bucket=b, MaxKeys=0)
    assert keys(r) == [] and r["IsTruncated"] is False, r


@case
def list_v1_url_encoding():
    b = filled(["a b", "c+d"])
    r = s3.list_objects(Bucket=b, EncodingType="url")
    # Asked for explicitly, the encoded keys reach the caller.
    got = keys(r)
    assert [urllib.parse.unquote_plus(k) for k in got] == ["a b", "c+d"], got
    assert " " not in got[0] and r["EncodingType"] == "url", r
    # Unasked, botocore asks for it and decodes.
    assert keys(s3.list_objects(Bucket=b)) == ["a b", "c+d"]


@case
def list_v2_pages_and_delimiter():
    b = filled(TREE)
    r = s3.list_objects_v2(Bucket=b, MaxKeys=4)
    assert keys(r) == TREE[:4] and r["KeyCount"] == 4 and r["IsTruncated"], r
    r = s3.list_objects_v2(Bucket=b, ContinuationToken=r["NextContinuationToken"])
    assert keys(r) == TREE[4:] and not r["IsTruncated"], r
    r = s3.list_objects_v2(Bucket=b, Delimiter="/", Prefix="c/")
    assert keys(r) == ["c/y"] and prefixes(r) == ["c/x/"] and r["KeyCount"] == 2, r
    r = s3.list_objects_v2(Bucket=b, StartAfter="c/x/1")
    assert keys(r) == ["c/y", "d"], r


@case
def list_v2_fetch_owner():
    b = filled(["k"])
    assert "Owner" not in s3.list_objects_v2(Bucket=b)["Contents"][0]
    assert "Owner" in s3.list_objects_v2(Bucket=b, FetchOwner=True)["Contents"][0]


@case
def list_object_versions_unversioned():
    b = filled(TREE)
    r = s3.list_object_versions(Bucket=b, MaxKeys=3)
    vs = r["Versions"]
    assert [v["Key"] for v in vs] == TREE[:3], vs
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in vs), vs
    assert r["IsTruncated"] and r["NextKeyMarker"] == TREE[2], r
    r = s3.list_object_versions(Bucket=b, KeyMarker=r["NextKeyMarker"],
                                VersionIdMarker=r.get("NextVersionIdMarker", "null"))
    assert [v["Key"] for v in r["Versions"]] == TREE[3:], r
    r = s3.list_object_versions(Bucket=b, Delimiter="/")
    assert [v["Key"] for v in r["Versions"]] == ["a", "d"] and prefixes(r) == ["b/", "c/"], r


@case
def list_buckets_and_location():
    b = bucket()
    assert b in [x["Name"] for x in s3.list_buckets()["Buckets"]]
    loc = s3.get_bucket_location(Bucket=b)
    assert loc.get("LocationConstraint") in (None, "", "us-east-1"), loc
    fails(404, "NoSuchBucket", s3.list_objects, Bucket="conf-missing-" + uuid.uuid4().hex[:8])


# ---- objects and metadata ------------------------------------------------


@case
def put_get_head_delete():
    b = bucket()
    r = s3.put_object(Bucket=b, Key="k", Body=b"hello")
    assert r["ETag"] == md5_etag(b"hello"), r["ETag"]
    g = s3.get_object(Bucket=b, Key="k")
    assert g["Body"].read() == b"hello" and g["ContentLength"] == 5
    assert g["ETag"] == md5_etag(b"hello") and "LastModified" in g
    h = s3.head_object(Bucket=b, Key="k")
    assert h["ContentLength"] == 5 and h["ETag"] == r["ETag"]
    s3.delete_object(Bucket=b, Key="k")
    fails(404, "NoSuchKey", s3.get_object, Bucket=b, Key="k")
    fails(404, None, s3.head_object, Bucket=b, Key="k")
    s3.delete_object(Bucket=b, Key="never-was")


@case
def metadata_and_headers_round_trip():
    b = bucket()
    exp = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    s3.put_object(Bucket=b, Key="m", Body=b"x", ContentType="text/plain",
                  ContentEncoding="identity", ContentDisposition="attachment",
                  ContentLanguage="en", CacheControl="no-cache", Expires=exp,
                  Metadata={"color": "blue", "Size": "XL"})
    for r in (s3.head_object(Bucket=b, Key="m"), s3.get_object(Bucket=b, Key="m")):
        assert r["ContentType"] == "text/plain", r["ContentType"]
        assert r["Metadata"] == {"color": "blue", "size": "XL"}, r["Metadata"]
        assert r["ContentDisposition"] == "attachment" and r["CacheControl"] == "no-cache"
        assert r["ContentLanguage"] == "en" and r["ContentEncoding"] == "identity"
        assert r["Expires"] == exp, r.get("Expires")


@case
def default_content_type_and_overrides():
    b = bucket()
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    assert s3.head_object(Bucket=b, Key="k")["ContentType"] == "binary/octet-stream"
    g = s3.get_object(Bucket=b, Key="k", ResponseContentType="image/png",
                      ResponseContentDisposition="inline")
    assert g["ContentType"] == "image/png" and g["ContentDisposition"] == "inline", g


@case
def last_modified_is_recent():
    b = bucket()
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    lm = s3.head_object(Bucket=b, Key="k")["LastModified"]
    now = datetime.datetime.now(datetime.timezone.utc)
    assert abs((now - lm).total_seconds()) < 60, lm


@case
def content_md5_is_checked():
    b = bucket()
    good = base64.b64encode(hashlib.md5(b"body").digest()).decode()
    s3.put_object(Bucket=b, Key="k", Body=b"body", ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    fails(400, "BadDigest", s3.put_object, Bucket=b, Key="k", Body=b"body", ContentMD5=bad)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"body"


@case
def empty_object():
    b = bucket()
    s3.put_object(Bucket=b, Key="e", Body=b"")
    g = s3.get_object(Bucket=b, Key="e")
    assert g["Body"].read() == b"" and g["ETag"] == md5_etag(b"")


# ---- ranges --------------------------------------------------------------


@case
def ranges():
    b = bucket()
    s3.put_object(Bucket=b, Key="r", Body=b"0123456789")
    g = s3.get_object(Bucket=b, Key="r", Range="bytes=2-4")
    assert g["Body"].read() == b"234" and g["ContentRange"] == "bytes 2-4/10", g
    assert g["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert s3.get_object(Bucket=b, Key="r", Range="bytes=7-")["Body"].read() == b"789"
    assert s3.get_object(Bucket=b, Key="r", Range="bytes=-3")["Body"].read() == b"789"
    assert s3.get_object(Bucket=b, Key="r", Range="bytes=8-100")["Body"].read() == b"89"
    fails(416, "InvalidRange", s3.get_object, Bucket=b, Key="r", Range="bytes=10-20")


# ---- conditional reads ---------------------------------------------------


def cond_object():
    b = bucket()
    etag = s3.put_object(Bucket=b, Key="c", Body=b"data")["ETag"]
    return b, etag


@case
def get_if_match():
    b, etag = cond_object()
    assert s3.get_object(Bucket=b, Key="c", IfMatch=etag)["Body"].read() == b"data"
    fails(412, "PreconditionFailed", s3.get_object, Bucket=b, Key="c", IfMatch='"nope"')


@case
def get_if_none_match():
    b, etag = cond_object()
    e = fails(304, None, s3.get_object, Bucket=b, Key="c", IfNoneMatch=etag)
    assert e.response["ResponseMetadata"]["HTTPHeaders"].get("etag") == etag
    assert s3.get_object(Bucket=b, Key="c", IfNoneMatch='"other"')["Body"].read() == b"data"


@case
def get_if_modified_since():
    b, _ = cond_object()
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    fails(304, None, s3.get_object, Bucket=b, Key="c", IfModifiedSince=future)
    assert s3.get_object(Bucket=b, Key="c", IfModifiedSince=past)["Body"].read() == b"data"


@case
def get_if_unmodified_since():
    b, _ = cond_object()
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    fails(412, "PreconditionFailed", s3.get_object, Bucket=b, Key="c", IfUnmodifiedSince=past)
    assert s3.get_object(Bucket=b, Key="c", IfUnmodifiedSince=future)["Body"].read() == b"data"


@case
def conditional_precedence():
    b, etag = cond_object()
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    # If-Match true wins over a failing If-Unmodified-Since.
    s3.get_object(Bucket=b, Key="c", IfMatch=etag, IfUnmodifiedSince=past)
    # If-None-Match false (tag differs) wins over a failing If-Modified-Since.
    s3.get_object(Bucket=b, Key="c", IfNoneMatch='"other"', IfModifiedSince=future)


@case
def head_conditions():
    b, etag = cond_object()
    fails(412, None, s3.head_object, Bucket=b, Key="c", IfMatch='"nope"')
    fails(304, None, s3.head_object, Bucket=b, Key="c", IfNoneMatch=etag)
    s3.head_object(Bucket=b, Key="c", IfMatch=etag)


# ---- conditional writes --------------------------------------------------


@case
def put_if_none_match_star():
    b = bucket()
    s3.put_object(Bucket=b, Key="k", Body=b"1", IfNoneMatch="*")
    fails(412, "PreconditionFailed", s3.put_object, Bucket=b, Key="k", Body=b"2", IfNoneMatch="*")
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"1"


@case
def put_if_match():
    b = bucket()
    etag = s3.put_object(Bucket=b, Key="k", Body=b"1")["ETag"]
    fails(412, "PreconditionFailed", s3.put_object, Bucket=b, Key="k", Body=b"2", IfMatch='"x"')
    s3.put_object(Bucket=b, Key="k", Body=b"2", IfMatch=etag)
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"2"
    fails(404, "NoSuchKey", s3.put_object, Bucket=b, Key="missing", Body=b"", IfMatch=etag)


# ---- multi-delete --------------------------------------------------------


@case
def delete_objects():
    b = filled(["x", "y", "z"])
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "x"}, {"Key": "y"},
                                                        {"Key": "absent"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["absent", "x", "y"], r
    assert not r.get("Errors"), r
    assert keys(s3.list_objects_v2(Bucket=b)) == ["z"]
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "z"}], "Quiet": True})
    assert not r.get("Deleted") and not r.get("Errors"), r
    assert keys(s3.list_objects_v2(Bucket=b)) == []


@case
def delete_objects_with_null_versions():
    b = filled(["x"])
    s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "x", "VersionId": "null"}]})
    assert keys(s3.list_objects_v2(Bucket=b)) == []
    s3.delete_bucket(Bucket=b)


# ---- multipart -----------------------------------------------------------


@case
def multipart_upload():
    b = bucket()
    up = s3.create_multipart_upload(Bucket=b, Key="mp", ContentType="video/mp4",
                                    Metadata={"kind": "big"})["UploadId"]
    p1, p2 = b"a" * (5 * MIB), b"tail"
    e1 = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=2, Body=p2)["ETag"]
    assert e1 == md5_etag(p1), e1
    parts = s3.list_parts(Bucket=b, Key="mp", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == [
        (1, e1, len(p1)), (2, e2, len(p2))], parts
    ups = s3.list_multipart_uploads(Bucket=b)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in ups] == [("mp", up)], ups
    r = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    want = hashlib.md5(hashlib.md5(p1).digest() + hashlib.md5(p2).digest()).hexdigest()
    assert r["ETag"] == f'"{want}-2"', r["ETag"]
    h = s3.head_object(Bucket=b, Key="mp")
    assert h["ContentLength"] == len(p1) + len(p2) and h["ETag"] == r["ETag"]
    assert h["ContentType"] == "video/mp4" and h["Metadata"] == {"kind": "big"}, h
    g = s3.get_object(Bucket=b, Key="mp", PartNumber=2)
    assert g["Body"].read() == p2 and g["PartsCount"] == 2, g
    assert not s3.list_multipart_uploads(Bucket=b).get("Uploads")


@case
def multipart_errors():
    b = bucket()
    up = s3.create_multipart_upload(Bucket=b, Key="mp")["UploadId"]
    e1 = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"small")["ETag"]
    e2 = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=2, Body=b"last")["ETag"]
    both = [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]
    fails(400, "EntityTooSmall", s3.complete_multipart_upload, Bucket=b, Key="mp",
          UploadId=up, MultipartUpload={"Parts": both})
    fails(400, "InvalidPart", s3.complete_multipart_upload, Bucket=b, Key="mp", UploadId=up,
          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e2}]})
    fails(400, "InvalidPartOrder", s3.complete_multipart_upload, Bucket=b, Key="mp",
          UploadId=up, MultipartUpload={"Parts": both[::-1]})
    fails(404, "NoSuchUpload", s3.upload_part, Bucket=b, Key="mp", UploadId="nope",
          PartNumber=1, Body=b"x")
    s3.abort_multipart_upload(Bucket=b, Key="mp", UploadId=up)
    fails(404, "NoSuchUpload", s3.list_parts, Bucket=b, Key="mp", UploadId=up)


# ---- copy ----------------------------------------------------------------


@case
def copy_object_keeps_or_replaces_metadata():
    b = bucket()
    s3.put_object(Bucket=b, Key="src", Body=b"payload", ContentType="text/csv",
                  Metadata={"a": "1"})
    r = s3.copy_object(Bucket=b, Key="dst", CopySource={"Bucket": b, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == md5_etag(b"payload"), r
    h = s3.head_object(Bucket=b, Key="dst")
    assert h["Metadata"] == {"a": "1"} and h["ContentType"] == "text/csv", h
    s3.copy_object(Bucket=b, Key="dst2", CopySource={"Bucket": b, "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/plain")
    h = s3.head_object(Bucket=b, Key="dst2")
    assert h["Metadata"] == {"b": "2"} and h["ContentType"] == "text/plain", h
    assert s3.get_object(Bucket=b, Key="dst2")["Body"].read() == b"payload"


@case
def copy_object_errors_and_conditions():
    b = bucket()
    etag = s3.put_object(Bucket=b, Key="src", Body=b"payload")["ETag"]
    fails(400, "InvalidRequest", s3.copy_object, Bucket=b, Key="src",
          CopySource={"Bucket": b, "Key": "src"})
    fails(404, "NoSuchKey", s3.copy_object, Bucket=b, Key="d",
          CopySource={"Bucket": b, "Key": "absent"})
    fails(412, "PreconditionFailed", s3.copy_object, Bucket=b, Key="d",
          CopySource={"Bucket": b, "Key": "src"}, CopySourceIfMatch='"nope"')
    s3.copy_object(Bucket=b, Key="d", CopySource={"Bucket": b, "Key": "src"},
                   CopySourceIfMatch=etag)
    # Copying onto itself with new metadata is allowed.
    s3.copy_object(Bucket=b, Key="src", CopySource={"Bucket": b, "Key": "src"},
                   MetadataDirective="REPLACE", Metadata={"new": "yes"})
    assert s3.head_object(Bucket=b, Key="src")["Metadata"] == {"new": "yes"}


# ---- buckets -------------------------------------------------------------


@case
def bucket_errors():
    b = filled(["k"])
    fails(409, "BucketNotEmpty", s3.delete_bucket, Bucket=b)
    fails(409, None, s3.create_bucket, Bucket=b)
    s3.delete_object(Bucket=b, Key="k")
    s3.delete_bucket(Bucket=b)
    fails(404, None, s3.head_bucket, Bucket=b)
    fails(404, "NoSuchBucket", s3.list_objects_v2, Bucket=b)


# ---- appends (S3 Express) ------------------------------------------------


@case
def appends_with_write_offset():
    b = bucket()
    s3.put_object(Bucket=b, Key="log", Body=b"ab", WriteOffsetBytes=0)
    s3.put_object(Bucket=b, Key="log", Body=b"cd", WriteOffsetBytes=2)
    fails(400, "InvalidWriteOffset", s3.put_object, Bucket=b, Key="log", Body=b"x",
          WriteOffsetBytes=1)
    assert s3.get_object(Bucket=b, Key="log")["Body"].read() == b"abcd"


def main():
    results = {}
    for fn in CASES:
        try:
            fn()
            results[fn.__name__] = "pass"
        except Exception as e:  # noqa: BLE001 - every failure is a result
            where = traceback.extract_tb(e.__traceback__)[-1]
            results[fn.__name__] = f"fail: {type(e).__name__}: {e} (line {where.lineno})"
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

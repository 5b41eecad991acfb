"""Everyday S3 tools against `milliscale emulator`: the AWS CLI and s3cmd.

Each tool does what its users do: copy files up and down, list with and
without delimiters, sync a directory tree, upload a file large enough to go
multipart, copy on the server, round-trip metadata, make conditional
requests, and (AWS CLI) append with --write-offset-bytes. Results are
checked against the files themselves.

Run: python3 emulator_clients.py ENDPOINT AWS S3CMD
(AWS and S3CMD are the paths of the two executables; the Rust test
crates/cli/tests/emulator_clients.rs starts the emulator and runs this).
Exits non-zero on the first mismatch.
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import uuid

ENDPOINT, AWS, S3CMD = sys.argv[1], sys.argv[2], sys.argv[3]
HOSTPORT = ENDPOINT.split("://", 1)[1]
MIB = 1 << 20
ENV = dict(
    os.environ,
    AWS_ACCESS_KEY_ID="milliscale",
    AWS_SECRET_ACCESS_KEY="milliscale-secret",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_CONFIG_FILE="/dev/null",
    AWS_SHARED_CREDENTIALS_FILE="/dev/null",
)


def run(*args, ok=True):
    p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=300)
    if ok and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def aws(*args, ok=True):
    return run(AWS, "--endpoint-url", ENDPOINT, *args, ok=ok)


def s3api(*args):
    return json.loads(aws("s3api", *args, "--output", "json").stdout or "{}")


def s3cmd(*args, ok=True):
    return run(S3CMD, "--access_key=milliscale", "--secret_key=milliscale-secret",
               f"--host={HOSTPORT}", f"--host-bucket={HOSTPORT}", "--no-ssl",
               "--region=us-east-1", "-c", "/dev/null",
               *args, ok=ok)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tree(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = read(p)
    return out


def aws_cli(tmp):
    b = "cli-" + uuid.uuid4().hex[:12]
    aws("s3", "mb", f"s3://{b}")
    src = os.path.join(tmp, "aws-src")
    files = {"a.txt": b"alpha", "dir/b.bin": os.urandom(1000), "dir/sub/c.txt": b"gamma"}
    for name, data in files.items():
        write(os.path.join(src, name), data)
    # cp up and down.
    aws("s3", "cp", os.path.join(src, "a.txt"), f"s3://{b}/single/a.txt")
    aws("s3", "cp", f"s3://{b}/single/a.txt", os.path.join(tmp, "a.back"))
    assert read(os.path.join(tmp, "a.back")) == b"alpha"
    # sync a tree, list with and without a delimiter, sync back.
    aws("s3", "sync", src, f"s3://{b}/tree/")
    top = aws("s3", "ls", f"s3://{b}/tree/").stdout
    assert "PRE dir/" in top and "a.txt" in top, top
    rec = aws("s3", "ls", "--recursive", f"s3://{b}/tree/").stdout
    assert all(f"tree/{n}" in rec for n in files), rec
    listed = s3api("list-objects", "--bucket", b, "--prefix", "tree/", "--delimiter", "/")
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["tree/dir/"], listed
    back = os.path.join(tmp, "aws-back")
    aws("s3", "sync", f"s3://{b}/tree/", back)
    assert tree(back) == files, sorted(tree(back))
    # A second sync finds nothing to do.
    again = aws("s3", "sync", src, f"s3://{b}/tree/").stdout
    assert again.strip() == "", again
    # Multipart: 20 MiB goes up in parts (the CLI's threshold is 8 MiB).
    big = os.urandom(20 * MIB)
    write(os.path.join(tmp, "big.bin"), big)
    aws("s3", "cp", os.path.join(tmp, "big.bin"), f"s3://{b}/big.bin")
    head = s3api("head-object", "--bucket", b, "--key", "big.bin")
    assert head["ContentLength"] == len(big) and head["ETag"].endswith('-3"'), head
    aws("s3", "cp", f"s3://{b}/big.bin", os.path.join(tmp, "big.back"))
    assert hashlib.sha256(read(os.path.join(tmp, "big.back"))).digest() == \
        hashlib.sha256(big).digest()
    # Server-side copy, and metadata round trips.
    aws("s3", "cp", f"s3://{b}/single/a.txt", f"s3://{b}/copy/a.txt",
        "--metadata", "owner=cli", "--content-type", "text/plain",
        "--metadata-directive", "REPLACE")
    head = s3api("head-object", "--bucket", b, "--key", "copy/a.txt")
    assert head["Metadata"] == {"owner": "cli"} and head["ContentType"] == "text/plain", head
    # Conditional requests.
    etag = head["ETag"]
    s3api("get-object", "--bucket", b, "--key", "copy/a.txt", "--if-match", etag,
          os.path.join(tmp, "cond.out"))
    p = aws("s3api", "get-object", "--bucket", b, "--key", "copy/a.txt",
            "--if-none-match", etag, os.path.join(tmp, "cond2.out"), ok=False)
    assert p.returncode != 0 and "304" in p.stderr, p.stderr
    p = aws("s3api", "put-object", "--bucket", b, "--key", "copy/a.txt", "--if-none-match", "*",
            ok=False)
    assert p.returncode != 0 and "PreconditionFailed" in p.stderr, p.stderr
    # Appends with --write-offset-bytes.
    write(os.path.join(tmp, "p1"), b"log-1;")
    write(os.path.join(tmp, "p2"), b"log-2;")
    s3api("put-object", "--bucket", b, "--key", "log", "--body", os.path.join(tmp, "p1"),
          "--write-offset-bytes", "0")
    s3api("put-object", "--bucket", b, "--key", "log", "--body", os.path.join(tmp, "p2"),
          "--write-offset-bytes", "6")
    p = aws("s3api", "put-object", "--bucket", b, "--key", "log", "--body",
            os.path.join(tmp, "p2"), "--write-offset-bytes", "6", ok=False)
    assert p.returncode != 0 and "InvalidWriteOffset" in p.stderr, p.stderr
    aws("s3", "cp", f"s3://{b}/log", os.path.join(tmp, "log.back"))
    assert read(os.path.join(tmp, "log.back")) == b"log-1;log-2;"
    # rm, recursively, and the bucket goes.
    aws("s3", "rm", "--recursive", f"s3://{b}/")
    assert aws("s3", "ls", "--recursive", f"s3://{b}/").stdout.strip() == ""
    aws("s3", "rb", f"s3://{b}")
    print("aws cli: ok")


def s3cmd_checks(tmp):
    b = "s3cmd-" + uuid.uuid4().hex[:12]
    s3cmd("mb", f"s3://{b}")
    src = os.path.join(tmp, "s3cmd-src")
    files = {"x.txt": b"ex", "d/y.txt": b"why", "d/e/z.bin": os.urandom(3000)}
    for name, data in files.items():
        write(os.path.join(src, name), data)
    s3cmd("sync", src + "/", f"s3://{b}/t/")
    top = s3cmd("ls", f"s3://{b}/t/").stdout
    assert "DIR" in top and f"s3://{b}/t/d/" in top and f"s3://{b}/t/x.txt" in top, top
    rec = s3cmd("ls", "--recursive", f"s3://{b}/t/").stdout
    assert all(f"s3://{b}/t/{n}" in rec for n in files), rec
    back = os.path.join(tmp, "s3cmd-back")
    s3cmd("sync", f"s3://{b}/t/", back + "/")
    assert tree(back) == files, sorted(tree(back))
    # s3cmd has no conditional request of its own: its sync compares sizes
    # and MD5s from the listing, so a second sync must move nothing, and a
    # changed file must move alone.
    again = s3cmd("sync", src + "/", f"s3://{b}/t/")
    assert "upload:" not in again.stdout, again.stdout
    write(os.path.join(src, "x.txt"), b"changed")
    again = s3cmd("sync", src + "/", f"s3://{b}/t/")
    assert again.stdout.count("upload:") == 1 and "x.txt" in again.stdout, again.stdout
    files["x.txt"] = b"changed"
    # Multipart: s3cmd splits at 15 MiB chunks by default; 5 MiB here.
    big = os.urandom(12 * MIB)
    write(os.path.join(tmp, "s3cmd-big"), big)
    put = s3cmd("put", "--progress", "--multipart-chunk-size-mb=5", os.path.join(tmp, "s3cmd-big"),
                f"s3://{b}/big")
    assert "part 3 of 3" in put.stdout + put.stderr, put.stdout + put.stderr
    info = s3cmd("info", f"s3://{b}/big").stdout
    assert f"File size: {len(big)}" in info and hashlib.md5(big).hexdigest() in info, info
    s3cmd("get", f"s3://{b}/big", os.path.join(tmp, "s3cmd-big.back"))
    assert read(os.path.join(tmp, "s3cmd-big.back")) == big
    # Metadata (s3cmd keeps file attributes in x-amz-meta-s3cmd-attrs) and copy.
    s3cmd("put", "--add-header=x-amz-meta-team:storage", "--mime-type=text/markdown",
          os.path.join(src, "x.txt"), f"s3://{b}/meta.md")
    info = s3cmd("info", f"s3://{b}/meta.md").stdout
    assert "text/markdown" in info and "x-amz-meta-team: storage" in info, info
    s3cmd("cp", f"s3://{b}/meta.md", f"s3://{b}/copied.md")
    info = s3cmd("info", f"s3://{b}/copied.md").stdout
    assert "x-amz-meta-team: storage" in info, info
    s3cmd("del", "--recursive", "--force", f"s3://{b}/")
    assert s3cmd("ls", "--recursive", f"s3://{b}/").stdout.strip() == ""
    s3cmd("rb", f"s3://{b}")
    print("s3cmd: ok")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        aws_cli(tmp)
        s3cmd_checks(tmp)
    print("all client checks passed")


if __name__ == "__main__":
    main()

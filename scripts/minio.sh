#!/usr/bin/env bash
# Build (once; cached) and start MinIO on loopback for the tests.
# Prints the endpoint on stdout; the server's pid is in $MINIO_DIR/pid.
# Usage: eval "$(scripts/minio.sh start)"; ...; scripts/minio.sh stop
set -euo pipefail
VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
CACHE=${MILLISCALE_CACHE:-$HOME/.cache/milliscale}
BIN=$CACHE/minio-$VERSION/minio
MINIO_DIR=${MINIO_DIR:-/tmp/milliscale-minio}

build() {
  if [ -x "$BIN" ]; then return; fi
  command -v go >/dev/null || { echo "go is needed to build MinIO" >&2; exit 1; }
  echo "building MinIO $VERSION (about 3 minutes, cached afterwards)..." >&2
  mkdir -p "$(dirname "$BIN")"
  GOBIN="$(dirname "$BIN")" GOFLAGS=-mod=mod go install "github.com/minio/minio@$VERSION" >&2
}

case "${1:-}" in
  start)
    build
    rm -rf "$MINIO_DIR" && mkdir -p "$MINIO_DIR/data"
    { read -r port; read -r cport; } < <(python3 "$(dirname "$0")/free-port.py" 2)
    MINIO_ROOT_USER=milliscale MINIO_ROOT_PASSWORD=milliscale-secret \
      "$BIN" server "$MINIO_DIR/data" --address "127.0.0.1:$port" --console-address "127.0.0.1:$cport" \
      > "$MINIO_DIR/log" 2>&1 &
    echo $! > "$MINIO_DIR/pid"
    for _ in $(seq 1 100); do
      if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/minio/health/live', timeout=1)" 2>/dev/null; then
        echo "export MILLISCALE_TEST_S3_ENDPOINT=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=milliscale AWS_SECRET_ACCESS_KEY=milliscale-secret AWS_REGION=us-east-1"
        exit 0
      fi
      sleep 0.2
    done
    echo "MinIO did not start; log:" >&2; cat "$MINIO_DIR/log" >&2; exit 1 ;;
  stop)
    if [ -f "$MINIO_DIR/pid" ]; then kill "$(cat "$MINIO_DIR/pid")" 2>/dev/null || true; rm -f "$MINIO_DIR/pid"; fi ;;
  build) build ;;
  *) echo "usage: $0 start|stop|build" >&2; exit 2 ;;
esac

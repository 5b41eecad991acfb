#!/usr/bin/env bash
# Install (once; cached) the everyday S3 tools the emulator is tested with,
# the AWS CLI and s3cmd, into their own virtualenv, and print the exports
# the tests read. Usage: eval "$(bash scripts/clients.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=crates/emulator/tests/python/requirements-clients.txt
CACHE=${MILLISCALE_CACHE:-$HOME/.cache/milliscale}
VENV=$CACHE/py-clients-$(sha256sum "$REQ" | cut -c1-12)
if [ ! -x "$VENV/bin/aws" ] || [ ! -x "$VENV/bin/s3cmd" ]; then
  echo "installing the AWS CLI and s3cmd into $VENV..." >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ" >&2
fi
echo "export MILLISCALE_AWS_CLI=$VENV/bin/aws MILLISCALE_S3CMD=$VENV/bin/s3cmd"

#!/usr/bin/env bash
# Generate the Python package's gRPC stubs from the one schema file,
# proto/milliscale/v1/milliscale.proto, into python/milliscale/v1/ (or the
# directory given). The stubs are committed; python/tests/test_stubs.py
# checks they match the schema. PYTHON: the interpreter with grpcio-tools
# (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-python}"
mkdir -p "$out/milliscale/v1"
"${PYTHON:-python3}" -m grpc_tools.protoc -I proto --python_out="$out" --pyi_out="$out" \
  --grpc_python_out="$out" proto/milliscale/v1/milliscale.proto
touch "$out/milliscale/v1/__init__.py"

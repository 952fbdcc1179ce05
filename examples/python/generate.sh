#!/usr/bin/env bash
# Generates the Python client of sandbox.v1 from the contract with grpcio-tools into
# examples/python/gen (not committed: run this after every change of the proto).
# PYTHON defaults to the project's venv made by test/setup-tools.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-.venv/bin/python}"
rm -rf examples/python/gen
mkdir -p examples/python/gen
"$python" -m grpc_tools.protoc -I proto \
  --python_out=examples/python/gen --pyi_out=examples/python/gen --grpc_python_out=examples/python/gen \
  proto/sandbox/v1/sandbox.proto

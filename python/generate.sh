#!/usr/bin/env bash
# Generates the protobuf messages of sandbox.v1 (sandbox.proto and files.proto) for the Python SDK from the contract, with grpcio-tools, into
# src/sandboxd/_gen (committed; test/side/python.sh checks they are current). The gRPC methods themselves are
# declared, typed, in src/sandboxd/_transport.py, so grpcio-tools' untyped service stub is not used.
#   OUT      where to write (default: src/sandboxd/_gen), so a check can generate elsewhere and compare
#   PYTHON   an interpreter with grpcio-tools (default: python/.venv made by test/side/python.sh)
set -euo pipefail
cd "$(dirname "$0")"
python="${PYTHON:-.venv/bin/python}"
out="${OUT:-src/sandboxd/_gen}"
mkdir -p "$out"
rm -f "$out/sandbox/v1/sandbox_pb2.py" "$out/sandbox/v1/sandbox_pb2.pyi" "$out/sandbox/v1/files_pb2.py" "$out/sandbox/v1/files_pb2.pyi"
"$python" -m grpc_tools.protoc -I ../proto --python_out="$out" --pyi_out="$out" ../proto/sandbox/v1/sandbox.proto ../proto/sandbox/v1/files.proto

#!/usr/bin/env bash
# Installs the external tools the tests need, each at a pinned version, inside the project (both
# directories are gitignored), and does nothing for what is already in place:
#   .tools/bin  grpcurl, protoc-gen-go, protoc-gen-go-grpc (go install), the Go example's binary
#   .venv       grpcio, grpcio-tools and grpcio-status (pip), for the Python example
# Needs Go and Python 3 with venv; reaches only the Go module proxy and PyPI.
# The tests find the tools here; to use them by hand: export PATH="$PWD/.tools/bin:$PATH".
set -euo pipefail
cd "$(dirname "$0")/.."

grpcurl_version=v1.9.4
protoc_gen_go_version=v1.36.12
protoc_gen_go_grpc_version=v1.6.2
grpcio_version=1.85.1

export GOBIN="$PWD/.tools/bin"
mkdir -p "$GOBIN"

# go_tool NAME PACKAGE VERSION: installs PACKAGE@VERSION as $GOBIN/NAME unless that version is there.
go_tool() {
  if [ -x "$GOBIN/$1" ] && go version -m "$GOBIN/$1" 2>/dev/null | awk '$1 == "mod" { print $3 }' | grep -qx "$3"; then
    return 0
  fi
  echo "installing $1 $3"
  go install "$2@$3"
}

# The three downloads and builds are independent: run them side by side.
pids=()
go_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "$grpcurl_version" & pids+=($!)
go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$protoc_gen_go_version" & pids+=($!)
go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$protoc_gen_go_grpc_version" & pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
for tool in grpcurl protoc-gen-go protoc-gen-go-grpc; do
  echo "$tool $(go version -m "$GOBIN/$tool" | awk '$1 == "mod" { print $3 }')"
done

# The Go example's modules and a first build, so the test that builds it again hits Go's cache.
go -C examples/go build -o "$GOBIN/sandboxd-go-example" .

# grpcio-status reads the google.rpc.ErrorInfo details of errors (it brings googleapis-common-protos).
if ! .venv/bin/python -c "import grpc, grpc_tools, grpc_status, sys; sys.exit(grpc.__version__ != '$grpcio_version')" 2>/dev/null; then
  echo "installing grpcio, grpcio-tools and grpcio-status $grpcio_version into .venv"
  python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --disable-pip-version-check \
    "grpcio==$grpcio_version" "grpcio-tools==$grpcio_version" "grpcio-status==$grpcio_version"
fi
echo "python $(.venv/bin/python -c 'import grpc, platform; print(platform.python_version(), "grpcio", grpc.__version__)')"

#!/usr/bin/env bash
# The Python SDK's suite (python/): a venv with the pinned tools, the stubs checked current, mypy --strict, the
# wheel built and installed, then pytest against a real daemon the tests start from this checkout. Downloads land
# in pip's cache (~/.cache/pip), so a second run installs nothing new.
set -euo pipefail
cd "$(dirname "$0")/../.."
source test/side/lib/steps.sh
report_failed_step

python="${PYTHON:-python3}"
venv=python/.venv
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "the Python SDK needs Python 3.11 or later" >&2; exit 1; }

echo "== python: venv with requirements-dev.txt"
# Reused while the pins are unchanged; a stamp records the pins it was made with.
stamp="$venv/.requirements.sha256"
wanted=$(sha256sum python/requirements-dev.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements-dev.txt
  echo "$wanted" >"$stamp"
fi
"$venv/bin/python" -c 'import grpc, google.protobuf, platform; print("python", platform.python_version(), "grpcio", grpc.__version__, "protobuf", google.protobuf.__version__)'

echo "== python: src/sandboxd/_gen is what generate.sh writes from proto/"
generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT
OUT="$generated" PYTHON="$PWD/$venv/bin/python" bash python/generate.sh
for file in sandbox/v1/sandbox_pb2.py sandbox/v1/sandbox_pb2.pyi sandbox/v1/files_pb2.py sandbox/v1/files_pb2.pyi; do
  if ! cmp -s "$generated/$file" "python/src/sandboxd/_gen/$file"; then
    diff -u "python/src/sandboxd/_gen/$file" "$generated/$file" | head -40 || true
    echo "python/src/sandboxd/_gen/$file is not current: run 'bash python/generate.sh' (after bash test/side/python.sh made the venv) and commit it" >&2
    exit 1
  fi
done

echo "== python: wheel"
rm -rf "$generated/dist"
"$venv/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$generated/dist" ./python
wheel=$(ls "$generated"/dist/sandboxd-*.whl)
"$venv/bin/python" - "$wheel" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
for needed in ("sandboxd/py.typed", "sandboxd/__init__.py", "sandboxd/_gen/sandbox/v1/sandbox_pb2.py", "sandboxd/_gen/sandbox/v1/sandbox_pb2.pyi", "sandboxd/_gen/sandbox/v1/files_pb2.py", "sandboxd/_gen/sandbox/v1/files_pb2.pyi"):
    assert needed in names, f"{needed} missing from the wheel"
print("wheel", sys.argv[1].rsplit("/", 1)[1], len(names), "files")
PY
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"

echo "== python: mypy --strict (the package, the tests, and the README's Python as written, its Files section too)"
(cd python && .venv/bin/mypy)
(cd python && .venv/bin/python -c 'from tests.test_readme import python_blocks; print("\n".join(python_blocks()))') >"$generated/readme_example.py"
(cd python && .venv/bin/mypy --strict --no-incremental "$generated/readme_example.py")
(cd python && .venv/bin/python -c 'from tests.test_readme import python_blocks; print("\n".join(python_blocks("Files")))') >"$generated/readme_files.py"
(cd python && .venv/bin/mypy --strict --no-incremental "$generated/readme_files.py")

echo "== python: pytest"
(cd python && .venv/bin/python -m pytest -q -p no:cacheprovider)

#!/usr/bin/env bash
# `make test`: start what the tests need, run pytest, stop what was started, return pytest's status.
set -u
cd "$(dirname "$0")/.."
. scripts/services.sh
trap services_down EXIT
trap 'exit 130' INT TERM
services_up || { echo "make test: services failed to start" >&2; exit 1; }
.venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Start the services the tests need, if they are not already there, and stop only what
# this script started (by pid). Source it, then call `services_up` and `services_down`.
#   RabbitMQ on 127.0.0.1:5672: installed with apt if missing, started if not listening.
#   SecantusDB (a MongoDB wire-protocol server): always our own, on a free port.
# Exports SWEEPSTACK_TEST_BROKER_URL and SWEEPSTACK_TEST_SECANTUS_URL for pytest.

SERVICES_DIR="${SERVICES_DIR:-$(pwd)/.services}"
PY="${PY:-.venv/bin/python}"
_started_rabbit=""
_secantus_pid=""

_listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

_free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

_apt_updated=""
_apt_install() {
  # _apt_install COMMAND PACKAGE...: install the Debian packages unless COMMAND exists.
  local cmd="$1"; shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  echo "services: installing $* with apt"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$_apt_updated" ]; then apt-get update -qq || return 1; _apt_updated=1; fi
  apt-get install -y -qq "$@" >/dev/null || { echo "services: could not install $*" >&2; return 1; }
}

# Tools the tests drive: headless Chromium for the dashboard, docker-compose to validate
# the compose file (no Docker engine is needed for `docker-compose config`).
ensure_test_tools() {
  _apt_install chromium chromium || return 1
  _apt_install docker-compose --no-install-recommends docker-compose || return 1
}

_ensure_rabbitmq() {
  if _listening 5672; then
    echo "services: RabbitMQ already listening on 127.0.0.1:5672"
    return 0
  fi
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    _apt_install rabbitmq-server rabbitmq-server || return 1
    # Debian's package may start it through its init script; stop that one so ours is known.
    _listening 5672 && { echo "services: RabbitMQ came up with the package"; return 0; }
  fi
  mkdir -p "$SERVICES_DIR"
  echo "services: starting RabbitMQ on 127.0.0.1:5672"
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_PID_FILE="$SERVICES_DIR/rabbitmq.pid"
  rabbitmq-server -detached || return 1
  timeout 90 rabbitmqctl wait "$RABBITMQ_PID_FILE" >/dev/null 2>&1 \
    || timeout 90 rabbitmqctl await_startup >/dev/null 2>&1 \
    || { echo "services: RabbitMQ did not start" >&2; return 1; }
  _started_rabbit="$(cat "$RABBITMQ_PID_FILE" 2>/dev/null)"
}

_start_secantus() {
  mkdir -p "$SERVICES_DIR"
  local port dir
  port="$(_free_port)"
  dir="$(mktemp -d "$SERVICES_DIR/secantus.XXXXXX")"
  .venv/bin/secantusd-py --host 127.0.0.1 --port "$port" --storage-path "$dir" \
    --log-level WARNING --standalone --sync-on-commit >"$dir.log" 2>&1 &
  _secantus_pid=$!
  _secantus_dir="$dir"
  for _ in $(seq 1 100); do
    _listening "$port" && break
    kill -0 "$_secantus_pid" 2>/dev/null || { cat "$dir.log" >&2; return 1; }
    sleep 0.2
  done
  _listening "$port" || { echo "services: SecantusDB did not start" >&2; return 1; }
  export SWEEPSTACK_TEST_SECANTUS_URL="mongodb://127.0.0.1:$port/?retryWrites=false"
  echo "services: SecantusDB on 127.0.0.1:$port (pid $_secantus_pid)"
}

services_up() {
  ensure_test_tools || return 1
  _ensure_rabbitmq || return 1
  export SWEEPSTACK_TEST_BROKER_URL="${SWEEPSTACK_TEST_BROKER_URL:-amqp://guest:guest@127.0.0.1:5672//}"
  _start_secantus || return 1
}

services_down() {
  if [ -n "$_secantus_pid" ]; then
    kill "$_secantus_pid" 2>/dev/null && wait "$_secantus_pid" 2>/dev/null
    rm -rf "$_secantus_dir" "$_secantus_dir.log"
    echo "services: stopped SecantusDB (pid $_secantus_pid)"
  fi
  if [ -n "$_started_rabbit" ]; then
    rabbitmqctl shutdown >/dev/null 2>&1 || kill "$_started_rabbit" 2>/dev/null
    echo "services: stopped RabbitMQ (pid $_started_rabbit)"
  fi
}

#!/usr/bin/env bash
# Clean-venv smoke test: what a new user gets from `pip install celery-fairqueue`.
#
# Builds the sdist and, from it, the wheel, and checks both with `twine check --strict`;
# installs ONLY that wheel (no extras) into a fresh venv; starts a throwaway redis-server on a free loopback port and a real
# `celery -A proj worker --pool=threads` from that venv, in a tiny project outside this
# repository; enqueues one fair job with .delay() and waits until the task has written its key
# into Redis. Prints "PASS: ..." and exits 0, or prints why and exits non-zero.
#
#   tools/smoke-wheel.sh                  # PYTHON=python3.11 by default (as the Makefile)
#   PYTHON=python3.12 tools/smoke-wheel.sh
#
# Everything it starts is stopped and its temp folder removed at exit, failures included.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3.11}
TIMEOUT=${SMOKE_TIMEOUT:-60}   # seconds for each wait (redis up, worker ready, job done)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fairqueue-smoke.XXXXXX")
redis_pid=""
worker_pid=""

cleanup() {
  local status=$?
  if [[ -n $worker_pid ]] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$worker_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  if [[ -n $redis_pid ]]; then
    kill -KILL "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: smoke-wheel: $*" >&2
  if [[ -f $tmp/worker.log ]]; then
    echo "--- worker log (last 40 lines) ---" >&2
    tail -n 40 "$tmp/worker.log" >&2
  fi
  exit 1
}

step() { echo "smoke-wheel: $*"; }

# 1. Build: sdist, then the wheel from that sdist (what an index would serve); then check both
#    as PyPI would take them (twine check: metadata, and the README and CHANGELOG render).
build_py=$root/.venv/bin/python
if ! "$build_py" -m build --version >/dev/null 2>&1 \
    || ! "$build_py" -m twine --version >/dev/null 2>&1; then
  step "no 'build' or 'twine' in .venv: installing them into a throwaway venv"
  "$PYTHON" -m venv "$tmp/buildenv"
  "$tmp/buildenv/bin/pip" install --quiet build twine
  build_py=$tmp/buildenv/bin/python
fi
step "building the sdist and wheel"
"$build_py" -m build --outdir "$tmp/dist" "$root" >"$tmp/build.log" 2>&1 \
  || { tail -n 40 "$tmp/build.log" >&2; fail "python -m build failed"; }
wheels=("$tmp"/dist/*.whl)
[[ ${#wheels[@]} == 1 && -f ${wheels[0]} ]] || fail "expected one wheel in dist/, got: ${wheels[*]}"
wheel=${wheels[0]}
step "twine check --strict of the sdist and wheel"
"$build_py" -m twine check --strict "$tmp"/dist/* >"$tmp/twine.log" 2>&1 \
  || { cat "$tmp/twine.log" >&2; fail "twine check failed"; }

# 2. A fresh venv with the wheel alone: its declared dependencies must be enough.
step "installing $(basename "$wheel") into a fresh venv ($PYTHON)"
"$PYTHON" -m venv "$tmp/venv"
venv=$tmp/venv
"$venv/bin/python" -m pip install --quiet "$wheel" >"$tmp/pip.log" 2>&1 \
  || { tail -n 40 "$tmp/pip.log" >&2; fail "pip install of the wheel failed"; }

# The project and its worker see the venv only: no PYTHONPATH, no settings from this shell.
# `exec` keeps the subshell's pid for the command: `(... run_in_proj ...) &` gives $! = its pid.
run_in_proj() {
  cd "$tmp/proj" && exec env -i HOME="$tmp" PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" \
    LANG=C.UTF-8 PYTHONUNBUFFERED=1 SMOKE_REDIS_URL="$redis_url" "$@"
}
run() { (run_in_proj "$@"); }

# 3. A throwaway redis-server on a free loopback port.
port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis_url=redis://127.0.0.1:$port/0
command -v redis-server >/dev/null || fail "redis-server is not on PATH (run \`make services\`)"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --dir "$tmp" >"$tmp/redis.log" 2>&1 &
redis_pid=$!

# 4. A tiny project: one app module with a FairTask that writes a key into Redis.
mkdir "$tmp/proj"
cat >"$tmp/proj/proj.py" <<'EOF'
import os

import redis
from celery import Celery

import celery_fairqueue
from celery_fairqueue import FairTask

REDIS_URL = os.environ["SMOKE_REDIS_URL"]

app = Celery("proj", broker=REDIS_URL)
celery_fairqueue.install(app)


@app.task(base=FairTask, bind=True, account_arg="account", job_key=("account", "order"))
def ship(self, account, order):
    with redis.Redis.from_url(REDIS_URL) as client:
        client.set(f"smoke:shipped:{account}:{order}", self.request.job_key or "")
EOF

deadline=$((SECONDS + TIMEOUT))
until run python -c 'import os, redis; redis.Redis.from_url(os.environ["SMOKE_REDIS_URL"]).ping()' 2>/dev/null; do
  kill -0 "$redis_pid" 2>/dev/null || { cat "$tmp/redis.log" >&2; fail "redis-server exited"; }
  ((SECONDS < deadline)) || fail "redis-server did not answer PING within ${TIMEOUT}s"
  sleep 0.1
done

# 5. Enqueue one fair job before any worker runs: it must wait in the fair store, not the broker.
step "enqueueing one fair job with .delay()"
run python - "$venv" <<'EOF' || fail "enqueue failed"
import os
import sys

import redis

import celery_fairqueue
from proj import ship

venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(celery_fairqueue.__file__).startswith(venv + os.sep), (
    f"celery_fairqueue imported from {celery_fairqueue.__file__}, not from the venv {venv}")
result = ship.delay("acme", 7)
assert result.id, result
broker = redis.Redis.from_url(os.environ["SMOKE_REDIS_URL"])
assert broker.llen("celery") == 0, "the fair job was published to the broker queue"
print(f"smoke-wheel: enqueued {result.id}")
EOF

# 6. A real worker from the venv.
step "starting celery -A proj worker --pool=threads"
(run_in_proj celery -A proj worker --pool=threads --concurrency=2 -n smoke@localhost -l INFO \
  --without-gossip --without-mingle --without-heartbeat) >"$tmp/worker.log" 2>&1 &
worker_pid=$!

deadline=$((SECONDS + TIMEOUT))
until grep -q "smoke@localhost ready." "$tmp/worker.log"; do
  kill -0 "$worker_pid" 2>/dev/null || fail "the worker exited before it was ready"
  ((SECONDS < deadline)) || fail "the worker was not ready within ${TIMEOUT}s"
  sleep 0.2
done

# 7. The job ran: the task wrote its key, with the business key it was given.
step "waiting for the job to run"
deadline=$((SECONDS + TIMEOUT))
until job_key=$(run python -c '
import os, sys, redis
value = redis.Redis.from_url(os.environ["SMOKE_REDIS_URL"]).get("smoke:shipped:acme:7")
sys.exit(1) if value is None else print(value.decode())'); do
  kill -0 "$worker_pid" 2>/dev/null || fail "the worker exited before the job ran"
  ((SECONDS < deadline)) || fail "the fair job did not run within ${TIMEOUT}s"
  sleep 0.2
done
[[ -n $job_key ]] || fail "the task ran without a business key (self.request.job_key is empty)"

# 8. Stop the worker warmly; it must exit on its own.
kill -TERM "$worker_pid"
for _ in $(seq 1 150); do kill -0 "$worker_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$worker_pid" 2>/dev/null; then
  fail "the worker did not stop within 15s of SIGTERM"
fi
wait "$worker_pid" || fail "the worker exited with status $? after SIGTERM"
worker_pid=""

echo "PASS: smoke-wheel: $(basename "$wheel") installed alone into a fresh venv ran a fair job" \
  "through a real worker (job key $job_key)"

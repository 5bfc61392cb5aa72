#!/usr/bin/env bash
# Make sure the programs that the tests and the demo start themselves are installed:
# redis-server, the PostgreSQL server binaries, Debian's Chromium (for the Playwright test) and
# rabbitmq-server (the RabbitMQ broker test).
# Installs what is missing with apt-get (as root), never starts a system service, and does
# nothing at all when everything is already there.
set -euo pipefail

missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
if ! command -v initdb >/dev/null && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi
command -v chromium >/dev/null || missing+=(chromium fonts-liberation)
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)

if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "missing: ${missing[*]}; install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi

# The packages' maintainer scripts would start system redis and postgres services; the tests
# run their own servers on free ports, so forbid service starts while installing.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  trap 'rm -f "$policy"' EXIT
fi

echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# Belt and braces: a service that started anyway is stopped, and the default port must be free.
for service in redis-server postgresql rabbitmq-server; do
  if [[ -x /etc/init.d/$service ]]; then
    /etc/init.d/$service stop >/dev/null 2>&1 || true
  fi
done
if (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  echo "warning: something still listens on 127.0.0.1:6379 (the tests do not use it)" >&2
fi

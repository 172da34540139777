#!/usr/bin/env bash
# Fetch RabbitMQ's own rabbitmqadmin (a Python script in Debian's rabbitmq-server package, in the
# management plugin under priv/www/cli/) into ~/.cache/ringmq/rabbitmqadmin for
# tests/management/test_rabbitmqadmin.py. Never starts RabbitMQ; downloads the .deb and unpacks
# it in a scratch directory. Best effort: exits 0 when it cannot be had (the test then skips).
set -uo pipefail
dest="${RINGMQ_RABBITMQADMIN:-$HOME/.cache/ringmq/rabbitmqadmin}"
if [ -f "$dest" ]; then exit 0; fi
command -v apt-get >/dev/null 2>&1 || { echo "rabbitmqadmin: no apt-get, skipped"; exit 0; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch" || exit 0
if ! apt-get download rabbitmq-server >/dev/null 2>&1; then
  echo "rabbitmqadmin: apt-get download rabbitmq-server failed (run apt-get update?), skipped"
  exit 0
fi
dpkg-deb -x rabbitmq-server_*.deb x || exit 0
script="$(find x -path '*rabbitmq_management*/priv/www/cli/rabbitmqadmin' -type f | head -n 1)"
if [ -z "$script" ]; then
  # newer packages keep each plugin as a zip archive (.ez)
  ez="$(find x -name 'rabbitmq_management-*.ez' | head -n 1)"
  if [ -n "$ez" ] && command -v unzip >/dev/null 2>&1; then
    unzip -q "$ez" -d ez && script="$(find ez -path '*/priv/www/cli/rabbitmqadmin' | head -n 1)"
  fi
fi
if [ -z "$script" ]; then echo "rabbitmqadmin: not found in the package, skipped"; exit 0; fi
mkdir -p "$(dirname "$dest")" && cp "$script" "$dest" && echo "rabbitmqadmin: $dest"
exit 0

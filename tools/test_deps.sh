#!/usr/bin/env bash
# The Debian packages some tests need beyond PyPI, installed when they are missing and this
# runs as root with apt-get (`make install` and .ci/run call it); best effort: without them the
# tests that need them skip and say why. Never starts a service.
#   chromium, chromium-driver  the web console tests (tests/management/test_console.py)
#   mosquitto-clients          mosquitto_pub / mosquitto_sub (tests/integration/mqtt)
#   rabbitmqadmin              RabbitMQ's script, extracted by tools/fetch_rabbitmqadmin.sh
#   curl                       the README's shell block (tests/docs/test_blocks.py)
#   etcd-server                etcd 3.4, started by the cluster tests (tests/cluster)
#   iproute2                   `ip netns` for the partition tests (tests/cluster/netns.py; as root)
#   slapd, ldap-utils          OpenLDAP for the LDAP login tests (tests/integration/auth/
#                              test_ldap.py start their own slapd on a loopback port)
#   rabbitmq-server            RabbitMQ 3.10.8 for the definitions export test (tests/integration/
#                              test_rabbitmq_export.py starts its own node on loopback ports);
#                              installed with a policy-rc.d that keeps the package's service off
set -uo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
wanted=()
command -v chromium >/dev/null 2>&1 || wanted+=(chromium)
command -v chromedriver >/dev/null 2>&1 || wanted+=(chromium-driver)
command -v mosquitto_pub >/dev/null 2>&1 || wanted+=(mosquitto-clients)
command -v curl >/dev/null 2>&1 || wanted+=(curl)
command -v etcd >/dev/null 2>&1 || wanted+=(etcd-server)
command -v ip >/dev/null 2>&1 || wanted+=(iproute2)
command -v slapd >/dev/null 2>&1 || [ -x /usr/sbin/slapd ] || wanted+=(slapd ldap-utils)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || wanted+=(rabbitmq-server)
admin="${RINGMQ_RABBITMQADMIN:-$HOME/.cache/ringmq/rabbitmqadmin}"
root_apt=0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then root_apt=1; fi
if [ "$root_apt" = 1 ] && { [ "${#wanted[@]}" -gt 0 ] || { [ ! -f "$admin" ] \
    && ! command -v rabbitmqadmin >/dev/null 2>&1; }; }; then
  apt-get update -qq >/dev/null 2>&1 || true  # the package lists fetch_rabbitmqadmin.sh reads too
fi
if [ "${#wanted[@]}" -gt 0 ]; then
  if [ "$root_apt" = 1 ]; then
    # no package's service is started (rabbitmq-server's would take port 5672): a policy-rc.d
    # that refuses every start, only for this install and only if the machine has none
    made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
        && made_policy=1
    fi
    apt-get install -y -qq "${wanted[@]}" >/dev/null \
      || echo "could not install ${wanted[*]}: the tests that need them will be skipped"
    if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  else
    echo "not installed: ${wanted[*]} (apt-get install as root, or run .ci/run):" \
      "the tests that need them will be skipped"
  fi
fi
if ! command -v rabbitmqadmin >/dev/null 2>&1; then tools/fetch_rabbitmqadmin.sh || true; fi
exit 0

#!/bin/bash
# Stops the real-OpenStack test tier started by setup.sh and removes $OS_BASE
# (KEEP=1 keeps it: logs, data). Only what setup.sh started is stopped: every service
# runs in its own process group, recorded by pid, and each group is signalled whole.
# The Debian packages stay installed.
set -uo pipefail
BASE=${OS_BASE:-/tmp/nodewright-os}
if [ ! -f "$BASE/.nodewright-os" ]; then
  echo "teardown: nothing to do ($BASE was not made by setup.sh)"
  exit 0
fi
rm -f "$BASE/state/ready"
alive() { kill -0 -- "-$1" 2>/dev/null; }
# API services first, then the engines, the backing services last.
ORDER="nova-api nova-compute nova-scheduler nova-conductor neutron glance placement keystone mariadb rabbitmq"
groups=()
for name in $ORDER; do
  f=$BASE/pids/$name.pid
  [ -f "$f" ] || continue
  pgid=$(cat "$f")
  alive "$pgid" || continue
  if [ "$name" = rabbitmq ]; then # stop the Erlang node cleanly (it also owns an epmd)
    RABBITMQ_NODENAME=rabbit@localhost timeout 30 rabbitmqctl -n rabbit@localhost stop >/dev/null 2>&1 || true
  fi
  kill -TERM -- "-$pgid" 2>/dev/null && groups+=("$pgid") && echo "teardown: stopping $name (group $pgid)"
done
for _ in $(seq 30); do
  left=0
  for g in "${groups[@]}"; do alive "$g" && left=1; done
  [ $left = 0 ] && break
  sleep 0.5
done
for g in "${groups[@]}"; do
  alive "$g" && { echo "teardown: group $g still up after 15s: SIGKILL"; kill -KILL -- "-$g" 2>/dev/null; }
done
rm -f "$BASE"/pids/*.pid
# RabbitMQ's epmd daemonizes out of the group; stop it if no other Erlang node uses it.
epmd -kill >/dev/null 2>&1 || true
if [ "${KEEP:-}" = 1 ]; then
  echo "teardown: stopped; kept $BASE"
else
  rm -rf "$BASE"
  echo "teardown: stopped; removed $BASE"
fi

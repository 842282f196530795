#!/bin/bash
# Installs the Debian packages of the real-OpenStack test tier if any is missing.
# Idempotent: does nothing (in well under a second) when everything is there.
# Services shipped by the packages are never started by the install: a policy-rc.d
# that denies starts is put in place for the duration (ours is removed afterwards;
# an existing one is left alone). setup.sh starts what it needs itself, on 127.0.0.1.
set -euo pipefail

PACKAGES=(
  # identity, compute (API, conductor, scheduler; nova-compute runs from python3-nova
  # with the fake virt driver), placement, image, network
  keystone nova-api nova-conductor nova-scheduler nova-common python3-nova
  placement-api glance-api neutron-server neutron-common  # (provides neutron-plugin-ml2)
  # backing services and the WSGI server
  mariadb-server rabbitmq-server python3-pymysql uwsgi-core uwsgi-plugin-python3
  # tools used by setup.sh
  curl python3 qemu-utils
)

missing=()
for p in "${PACKAGES[@]}"; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install: all ${#PACKAGES[@]} packages present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install: missing packages (${missing[*]}) and not root: install them as root first" >&2
  exit 1
fi

start=$(date +%s)
ours=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# nodewright real-OpenStack tier: no service starts during install\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  ours=1
fi
trap '[ -n "$ours" ] && rm -f /usr/sbin/policy-rc.d' EXIT

echo "install: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" > "${TMPDIR:-/tmp}/nodewright-os-apt.log" 2>&1 || {
  tail -30 "${TMPDIR:-/tmp}/nodewright-os-apt.log" >&2
  exit 1
}
echo "install: done in $(( $(date +%s) - start ))s (log: ${TMPDIR:-/tmp}/nodewright-os-apt.log)"

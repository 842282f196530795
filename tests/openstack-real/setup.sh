#!/bin/bash
# nodewright real-OpenStack test tier: a real Keystone + Nova (fake virt driver) +
# Placement + Glance + Neutron (server only) on 127.0.0.1, from Debian packages.
#
#   bash tests/openstack-real/setup.sh      # install if needed, start, seed; prints timings
#   bash tests/openstack-real/teardown.sh   # stop what this started, remove $OS_BASE
#
# Everything lives under $OS_BASE (default /tmp/nodewright-os): config, MariaDB and
# RabbitMQ data, logs, pid files. Running it again while the stack is up is detected
# and skipped. Needs root (packages, MariaDB/RabbitMQ run as their own users).
#
# What it leaves for tests/openstack_real.rs (export NODEWRIGHT_REAL_OPENSTACK=$OS_BASE):
#   nodewright-password.yaml  OS_* file: user nodewright, project nodewright (password)
#   nodewright-appcred.yaml   OS_* file: an application credential of that user
#   nodewright-quota.yaml     OS_* file: same user, project nodewright-quota (quota tests)
#   admin.yaml                OS_* file: admin/admin (test-side admin calls)
#   resources.env             ids of the flavors, image, network and projects
#
# Facts this script relies on (found the hard way, see ../../../shared/openstack/):
#  - Keystone on SQLite locks up under its worker threads: a private MariaDB is used.
#  - Nova answers 500 on server GETs without a Neutron, even for "networks": "none".
#  - Neutron (Zed) answers 500 on ports until one GET /v2.0/networks has been served.
#  - uWSGI's --http-socket closes every connection after one response without saying so;
#    keystoneauth (Nova's calls to Keystone/Neutron) reuses the connection and fails with
#    "Remote end closed connection without response": every uWSGI service sends
#    "Connection: close".
#  - Nova refuses a network without a subnet, and fails a server whose port no mechanism
#    driver bound, which without agents none does (see the Neutron section).
#  - The openstack CLI is slow (~1 s a call) and flaky here: plain REST via curl.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${OS_BASE:-/tmp/nodewright-os}
PW=secret                 # admin, service users and the nodewright user
REGION=RegionOne
KS=http://127.0.0.1:5000/v3
NOVA=http://127.0.0.1:8774/v2.1
GLANCE=http://127.0.0.1:9292
NEUTRON=http://127.0.0.1:9696
PLACEMENT=http://127.0.0.1:8778
COMPUTE_HOST=fake-compute-1
PORTS="3306 5000 5672 8774 8778 9292 9696"

T0=$(date +%s%N)
LAST=$T0
TIMINGS=()
elapsed() { local ns=$(( $(date +%s%N) - $1 )); printf '%d.%01d' $((ns / 1000000000)) $(((ns / 100000000) % 10)); }
step() { # step NAME: prints the time since the previous step and since the start
  local now; now=$(date +%s%N)
  TIMINGS+=("$(printf '%-52s %6ss' "$1" "$(elapsed "$LAST")")")
  printf '[setup %6ss] %s (%ss)\n' "$(elapsed "$T0")" "$1" "$(elapsed "$LAST")"
  LAST=$now
}
die() { # prints the reason and the end of every service log (CI shows only this output)
  echo "setup: $*" >&2
  if [ -d "$BASE/log" ]; then
    for f in "$BASE"/log/*.log; do
      [ -s "$f" ] || continue
      echo "----- last lines of $f" >&2
      tail -n 8 "$f" | cut -c1-300 >&2
    done
    echo "setup: logs are in $BASE/log; stop what was started with tests/openstack-real/teardown.sh" >&2
  fi
  exit 1
}
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for() { # wait_for SECONDS WHAT COMMAND...
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.5
  done
}
jget() { # jget EXPR: evaluates a Python expression on the JSON document `d` read from stdin
  /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}

# ---------------------------------------------------------------- already up?
healthy() {
  [ -f "$BASE/state/ready" ] || return 1
  for f in "$BASE"/pids/*.pid; do
    [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null || return 1
  done
  curl -sf "$KS" >/dev/null && curl -sf "$NOVA/" -o /dev/null
}
if healthy; then
  echo "setup: real OpenStack already running under $BASE; skipped"
  echo "setup: export NODEWRIGHT_REAL_OPENSTACK=$BASE"
  exit 0
fi
if [ -f "$BASE/.nodewright-os" ]; then
  # A stack that is half up (an earlier setup failed or was killed) or half down.
  echo "setup: $BASE holds a stack that is not healthy; tearing it down first"
  bash "$HERE/teardown.sh"
fi

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and runs MariaDB/RabbitMQ as their users)"
bash "$HERE/install.sh"
step "packages present"

for p in $PORTS; do
  listening "$p" && die "port 127.0.0.1:$p is already in use (another OpenStack or database running?)"
done
if [ -e "$BASE" ]; then
  [ -f "$BASE/.nodewright-os" ] || die "$BASE exists and was not made by this script; set OS_BASE elsewhere"
  rm -rf "$BASE"
fi
ETC=$BASE/etc DATA=$BASE/data LOG=$BASE/log PIDS=$BASE/pids RUN=$BASE/run
mkdir -p "$ETC"/{keystone,nova,placement,glance,neutron/plugins/ml2} "$DATA"/{images,lock,nova,neutron} \
         "$LOG" "$PIDS" "$RUN" "$BASE/state"
touch "$BASE/.nodewright-os"
bg() { # bg NAME COMMAND...: starts a service in its own process group (teardown stops
  local name=$1; shift   # the whole group), logs and pid under $BASE
  setsid "$@" >"$LOG/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

# ---------------------------------------------------------------- RabbitMQ, MariaDB
mkdir -p "$DATA/rabbitmq"
chown rabbitmq:rabbitmq "$DATA/rabbitmq"
bg rabbitmq env RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
  RABBITMQ_NODE_PORT=5672 RABBITMQ_DIST_PORT=25672 ERL_EPMD_ADDRESS=127.0.0.1 \
  RABBITMQ_MNESIA_BASE="$DATA/rabbitmq/mnesia" RABBITMQ_LOG_BASE="$DATA/rabbitmq" \
  RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
  rabbitmq-server

mkdir -p "$DATA/mysql"
chown mysql:mysql "$DATA/mysql" "$RUN"
mariadb-install-db --user=mysql --datadir="$DATA/mysql" --auth-root-authentication-method=socket \
  >"$LOG/mariadb-install.log" 2>&1 || die "mariadb-install-db failed"
bg mariadb mariadbd --user=mysql --datadir="$DATA/mysql" --bind-address=127.0.0.1 --port=3306 \
  --socket="$RUN/mysqld.sock" --pid-file="$RUN/mysqld.pid" --innodb-buffer-pool-size=64M \
  --skip-log-bin --max-connections=500
SQL() { mariadb --socket="$RUN/mysqld.sock" -e "$1"; }
wait_for 60 "MariaDB" SQL 'select 1'
for db in keystone placement glance neutron nova_api nova nova_cell0; do
  SQL "CREATE DATABASE $db; GRANT ALL ON $db.* TO 'os'@'127.0.0.1' IDENTIFIED BY '$PW';"
done
DB="mysql+pymysql://os:$PW@127.0.0.1:3306"
step "mariadb up, databases created"

keystone_authtoken() { # the [keystone_authtoken] section for service user $1
  cat <<EOF
[keystone_authtoken]
www_authenticate_uri = http://127.0.0.1:5000/
auth_url = http://127.0.0.1:5000/
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $1
password = $PW
EOF
}
service_auth() { # [placement]/[neutron] sections of nova.conf: section name, user
  cat <<EOF
[$1]
region_name = $REGION
auth_type = password
auth_url = $KS
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $2
password = $PW
EOF
}

# ---------------------------------------------------------------- configs
{ cat <<EOF
[placement_database]
connection = $DB/placement
[api]
auth_strategy = keystone
EOF
  keystone_authtoken placement; } >"$ETC/placement/placement.conf"

cp /etc/glance/glance-api-paste.ini "$ETC/glance/"
{ cat <<EOF
[DEFAULT]
bind_host = 127.0.0.1
bind_port = 9292
workers = 1
[database]
connection = $DB/glance
[glance_store]
stores = file
default_store = file
filesystem_store_datadir = $DATA/images/
[paste_deploy]
flavor = keystone
config_file = $ETC/glance/glance-api-paste.ini
EOF
  keystone_authtoken glance; } >"$ETC/glance/glance-api.conf"

# Neutron: the API server only (ML2, no agents). Without an agent no shipped mechanism
# driver binds a port, and Nova fails every server that has one (PortBindingFailed):
# nodewright_bind_all.py, beside this script, binds every port; it is installed as a
# Python distribution of its own under $BASE/pylib (an entry point is how ML2 finds it).
mkdir -p "$BASE/pylib/nodewright_bind_all-1.0.dist-info"
cp "$HERE/nodewright_bind_all.py" "$BASE/pylib/"
printf 'Metadata-Version: 2.1\nName: nodewright-bind-all\nVersion: 1.0\n' \
  >"$BASE/pylib/nodewright_bind_all-1.0.dist-info/METADATA"
printf '[neutron.ml2.mechanism_drivers]\nnodewright_bind_all = nodewright_bind_all:BindAllMechanismDriver\n' \
  >"$BASE/pylib/nodewright_bind_all-1.0.dist-info/entry_points.txt"
cp /etc/neutron/api-paste.ini "$ETC/neutron/"
{ cat <<EOF
[DEFAULT]
bind_host = 127.0.0.1
bind_port = 9696
core_plugin = ml2
service_plugins = router,port_forwarding
auth_strategy = keystone
transport_url = rabbit://guest:guest@127.0.0.1:5672/
api_workers = 1
rpc_workers = 0
rpc_state_report_workers = 0
api_paste_config = $ETC/neutron/api-paste.ini
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false
state_path = $DATA/neutron
[database]
connection = $DB/neutron
[oslo_concurrency]
lock_path = $DATA/lock
[ml2]
type_drivers = flat,local
tenant_network_types = local
mechanism_drivers = nodewright_bind_all
extension_drivers = port_security
EOF
  keystone_authtoken neutron; } >"$ETC/neutron/neutron.conf"

cp /etc/nova/api-paste.ini "$ETC/nova/"
{ cat <<EOF
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/
compute_driver = fake.FakeDriver
host = $COMPUTE_HOST
my_ip = 127.0.0.1
state_path = $DATA/nova
[api]
auth_strategy = keystone
[api_database]
connection = $DB/nova_api
[database]
connection = $DB/nova
[glance]
api_servers = $GLANCE
[oslo_concurrency]
lock_path = $DATA/lock
[wsgi]
api_paste_config = $ETC/nova/api-paste.ini
[vnc]
enabled = false
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 5
EOF
  service_auth placement placement
  service_auth neutron neutron
  keystone_authtoken nova; } >"$ETC/nova/nova.conf"
NOVA_CONF=(--config-file "$ETC/nova/nova.conf")

# ---------------------------------------------------------------- schemas, in parallel
# The migrations are the slow part; they need only MariaDB, so they run side by side
# with each other and with Keystone's setup below.
placement-manage --config-file "$ETC/placement/placement.conf" db sync >"$LOG/placement-db.log" 2>&1 &
p_placement=$!
glance-manage --config-file "$ETC/glance/glance-api.conf" db_sync >"$LOG/glance-db.log" 2>&1 &
p_glance=$!
neutron-db-manage --config-file "$ETC/neutron/neutron.conf" upgrade heads >"$LOG/neutron-db.log" 2>&1 &
p_neutron=$!
{ nova-manage "${NOVA_CONF[@]}" api_db sync &&
  nova-manage "${NOVA_CONF[@]}" cell_v2 map_cell0 --database_connection "$DB/nova_cell0" &&
  nova-manage "${NOVA_CONF[@]}" cell_v2 create_cell --name cell1 &&
  nova-manage "${NOVA_CONF[@]}" db sync; } >"$LOG/nova-db.log" 2>&1 &
p_nova=$!
step "service configs written, schema migrations started"

# ---------------------------------------------------------------- Keystone
cat >"$ETC/keystone/keystone.conf" <<EOF
[database]
connection = $DB/keystone
[token]
provider = fernet
expiration = 7200
[fernet_tokens]
key_repository = $DATA/fernet-keys
[fernet_receipts]
key_repository = $DATA/fernet-keys
[credential]
key_repository = $DATA/credential-keys
EOF
KM=(keystone-manage --config-file "$ETC/keystone/keystone.conf")
"${KM[@]}" db_sync >"$LOG/keystone-manage.log" 2>&1 || die "keystone db_sync failed"
"${KM[@]}" fernet_setup --keystone-user root --keystone-group root >>"$LOG/keystone-manage.log" 2>&1
"${KM[@]}" credential_setup --keystone-user root --keystone-group root >>"$LOG/keystone-manage.log" 2>&1
"${KM[@]}" bootstrap --bootstrap-password "$PW" --bootstrap-region-id "$REGION" \
  --bootstrap-admin-url "$KS/" --bootstrap-internal-url "$KS/" --bootstrap-public-url "$KS/" \
  >>"$LOG/keystone-manage.log" 2>&1 || die "keystone bootstrap failed"
bg keystone uwsgi --plugin python3 --add-header "Connection: close" --http-socket 127.0.0.1:5000 --wsgi-file /usr/bin/keystone-wsgi-public \
  --processes 2 --threads 1 --master --die-on-term --env OS_KEYSTONE_CONFIG_FILES="$ETC/keystone/keystone.conf"
wait_for 60 "Keystone" curl -sf "$KS"
step "keystone up"

# ---------------------------------------------------------------- REST helpers
token() { # token USER PASSWORD PROJECT: a project-scoped token (domain Default)
  curl -sf -D - -o /dev/null -X POST "$KS/auth/tokens" -H 'Content-Type: application/json' -d "{\"auth\":{
    \"identity\":{\"methods\":[\"password\"],\"password\":{\"user\":{\"name\":\"$1\",\"domain\":{\"name\":\"Default\"},\"password\":\"$2\"}}},
    \"scope\":{\"project\":{\"name\":\"$3\",\"domain\":{\"name\":\"Default\"}}}}}" |
    awk 'tolower($1)=="x-subject-token:"{print $2}' | tr -d '\r'
}
TOKEN=$(token admin "$PW" admin)
[ -n "$TOKEN" ] || die "no admin token from Keystone"
api() { # api METHOD URL [JSON]: as admin; fails loudly with the response body
  local out code
  out=$(curl -s -w '\n%{http_code}' -X "$1" "$2" -H "X-Auth-Token: $TOKEN" \
        -H 'Content-Type: application/json' -H 'OpenStack-API-Version: compute 2.79' ${3:+-d "$3"})
  code=${out##*$'\n'}
  [ "${code:0:1}" = 2 ] || die "$1 $2 -> HTTP $code: ${out%$'\n'*}"
  printf '%s' "${out%$'\n'*}"
}
id_of() { jget "d['$1']['id']"; }

SERVICE_PROJECT=$(api POST "$KS/projects" '{"project":{"name":"service","domain_id":"default"}}' | id_of project)
ADMIN_ROLE=$(api GET "$KS/roles?name=admin" | jget "d['roles'][0]['id']")
MEMBER_ROLE=$(api GET "$KS/roles?name=member" | jget "d['roles'][0]['id']")
for svc in nova placement glance neutron; do
  uid=$(api POST "$KS/users" "{\"user\":{\"name\":\"$svc\",\"domain_id\":\"default\",\"password\":\"$PW\"}}" | id_of user)
  api PUT "$KS/projects/$SERVICE_PROJECT/users/$uid/roles/$ADMIN_ROLE" >/dev/null
done
catalog() { # catalog NAME TYPE URL
  local sid; sid=$(api POST "$KS/services" "{\"service\":{\"name\":\"$1\",\"type\":\"$2\"}}" | id_of service)
  for iface in public internal admin; do
    api POST "$KS/endpoints" "{\"endpoint\":{\"service_id\":\"$sid\",\"interface\":\"$iface\",\"url\":\"$3\",\"region_id\":\"$REGION\"}}" >/dev/null
  done
}
catalog nova compute "$NOVA"
catalog placement placement "$PLACEMENT"
catalog glance image "$GLANCE"
catalog neutron network "$NEUTRON"
step "keystone service users and catalog"

wait $p_placement || die "placement db sync failed"
bg placement uwsgi --plugin python3 --add-header "Connection: close" --http-socket 127.0.0.1:8778 --wsgi-file /usr/bin/placement-api \
  --processes 1 --threads 1 --master --die-on-term --env OS_PLACEMENT_CONFIG_DIR="$ETC/placement"
wait $p_glance || die "glance db sync failed"
bg glance glance-api --config-file "$ETC/glance/glance-api.conf"
wait $p_neutron || die "neutron db migration failed"
bg neutron env PYTHONPATH="$BASE/pylib" neutron-server --config-file "$ETC/neutron/neutron.conf"
wait $p_nova || die "nova db sync failed"
step "schemas migrated, placement/glance/neutron started"

# ---------------------------------------------------------------- Nova
wait_for 120 "RabbitMQ" listening 5672
bg nova-conductor nova-conductor "${NOVA_CONF[@]}"
bg nova-scheduler nova-scheduler "${NOVA_CONF[@]}"
# nova-compute's package pulls libvirt; the fake driver needs only python3-nova.
bg nova-compute /usr/bin/python3 -c 'import sys; sys.argv[0] = "nova-compute"; from nova.cmd.compute import main; sys.exit(main())' \
  "${NOVA_CONF[@]}"
bg nova-api uwsgi --plugin python3 --add-header "Connection: close" --http-socket 127.0.0.1:8774 --wsgi-file /usr/bin/nova-api-wsgi \
  --processes 2 --threads 1 --master --die-on-term --env OS_NOVA_CONFIG_DIR="$ETC/nova"
wait_for 120 "Neutron" curl -sf "$NEUTRON/"
# Neutron warm-up (see the header).
curl -sf "$NEUTRON/v2.0/networks" -H "X-Auth-Token: $TOKEN" >/dev/null || die "Neutron warm-up failed"
wait_for 120 "Glance" curl -sf "$GLANCE/"
wait_for 120 "Placement" curl -sf "$PLACEMENT/"
wait_for 120 "Nova API" curl -sf "$NOVA/"
step "APIs answering"

compute_up() { api GET "$NOVA/os-services?binary=nova-compute" | grep -q '"state": "up"'; }
wait_for 180 "nova-compute to report up" compute_up
nova-manage "${NOVA_CONF[@]}" cell_v2 discover_hosts >>"$LOG/nova-db.log" 2>&1
provider_registered() { api GET "$PLACEMENT/resource_providers" | grep -q "$COMPUTE_HOST"; }
wait_for 120 "the compute node in Placement" provider_registered
step "nova-compute up and mapped"

# ---------------------------------------------------------------- what the tests use
project() { api POST "$KS/projects" "{\"project\":{\"name\":\"$1\",\"domain_id\":\"default\"}}" | id_of project; }
NW_PROJECT=$(project nodewright)
QUOTA_PROJECT=$(project nodewright-quota)
NW_USER=$(api POST "$KS/users" "{\"user\":{\"name\":\"nodewright\",\"domain_id\":\"default\",\"password\":\"$PW\"}}" | id_of user)
for p in "$NW_PROJECT" "$QUOTA_PROJECT"; do
  api PUT "$KS/projects/$p/users/$NW_USER/roles/$MEMBER_ROLE" >/dev/null
done
# The application credential is created by its owner, scoped to the owner's token's project.
USER_TOKEN=$(token nodewright "$PW" nodewright)
[ -n "$USER_TOKEN" ] || die "the nodewright user cannot get a token"
APPCRED=$(curl -sf -X POST "$KS/users/$NW_USER/application_credentials" -H "X-Auth-Token: $USER_TOKEN" \
  -H 'Content-Type: application/json' \
  -d '{"application_credential":{"name":"nodewright-tests","description":"nodewright real-OpenStack tier"}}') ||
  die "creating the application credential failed"
APPCRED_ID=$(jget "d['application_credential']['id']" <<<"$APPCRED")
APPCRED_SECRET=$(jget "d['application_credential']['secret']" <<<"$APPCRED")
# Tests run in parallel in the nodewright project: room for all of them.
api PUT "$NOVA/os-quota-sets/$NW_PROJECT" '{"quota_set":{"instances":100,"cores":1000,"ram":2000000}}' >/dev/null

flavor() { # flavor NAME RAM_MIB VCPUS: a public flavor, Nova picks the id (a UUID)
  api POST "$NOVA/flavors" "{\"flavor\":{\"name\":\"$1\",\"ram\":$2,\"vcpus\":$3,\"disk\":1}}" | id_of flavor
}
SMALL=$(flavor m1.small 2048 1)
LARGE=$(flavor m1.large 8192 2)
# More memory than the fake hypervisor has (800000 MiB): Nova accepts, then "No valid host".
flavor m1.toobig 1048576 1 >/dev/null

qemu-img create -q -f qcow2 "$DATA/nodewright-test.qcow2" 64M
IMAGE=$(api POST "$GLANCE/v2/images" '{"name":"nodewright-test-image","disk_format":"qcow2","container_format":"bare","visibility":"public"}' | jget "d['id']")
curl -sf -X PUT "$GLANCE/v2/images/$IMAGE/file" -H "X-Auth-Token: $TOKEN" \
  -H 'Content-Type: application/octet-stream' --data-binary @"$DATA/nodewright-test.qcow2" ||
  die "uploading the image failed"
image_active() { api GET "$GLANCE/v2/images/$IMAGE" | grep -q '"status": "active"'; }
wait_for 60 "the image to become active" image_active

# A network of the nodewright project. Nova refuses a network without a subnet, so it
# gets one: a documentation range (TEST-NET-1), no DHCP, no gateway; nothing ever uses
# the addresses (the fake driver boots nothing). Port security off: no security groups.
NETWORK=$(api POST "$NEUTRON/v2.0/networks" "{\"network\":{\"name\":\"nodewright-net\",\"project_id\":\"$NW_PROJECT\",\"port_security_enabled\":false}}" | id_of network)
api POST "$NEUTRON/v2.0/subnets" "{\"subnet\":{\"name\":\"nodewright-subnet\",\"network_id\":\"$NETWORK\",\"project_id\":\"$NW_PROJECT\",\"ip_version\":4,\"cidr\":\"192.0.2.0/24\",\"gateway_ip\":null,\"enable_dhcp\":false}}" >/dev/null
step "projects, user, app credential, flavors, image, network"

# ---------------------------------------------------------------- credential files
yaml() { # yaml FILE KEY=VALUE...
  local f=$1; shift
  : >"$f"
  for kv in "$@"; do printf '%s: "%s"\n' "${kv%%=*}" "${kv#*=}" >>"$f"; done
  chmod 600 "$f"
}
# The forms users have: password with OS_PROJECT_NAME (project domain = user domain) ...
yaml "$BASE/nodewright-password.yaml" OS_AUTH_URL=$KS OS_USERNAME=nodewright OS_PASSWORD=$PW \
  OS_USER_DOMAIN_NAME=Default OS_PROJECT_NAME=nodewright OS_REGION=$REGION
# ... an application credential (already scoped to its project) ...
yaml "$BASE/nodewright-appcred.yaml" OS_AUTH_TYPE=v3applicationcredential OS_AUTH_URL=$KS \
  OS_IDENTITY_API_VERSION=3 OS_APPLICATION_CREDENTIAL_ID="$APPCRED_ID" \
  OS_APPLICATION_CREDENTIAL_SECRET="$APPCRED_SECRET" OS_REGION_NAME=$REGION OS_INTERFACE=public
# ... and the older OS_TENANT_NAME form with an explicit project domain (quota tests).
yaml "$BASE/nodewright-quota.yaml" OS_AUTH_URL=$KS OS_IDENTITY_API_VERSION=3 OS_USERNAME=nodewright \
  OS_PASSWORD=$PW OS_USER_DOMAIN_NAME=Default OS_TENANT_NAME=nodewright-quota OS_PROJECT_DOMAIN_NAME=Default \
  OS_REGION=$REGION
yaml "$BASE/admin.yaml" OS_AUTH_URL=$KS OS_USERNAME=admin OS_PASSWORD=$PW OS_USER_DOMAIN_NAME=Default \
  OS_PROJECT_NAME=admin OS_PROJECT_DOMAIN_NAME=Default OS_REGION=$REGION
cat >"$BASE/resources.env" <<EOF
FLAVOR_SMALL_ID=$SMALL
FLAVOR_LARGE_ID=$LARGE
IMAGE_NAME=nodewright-test-image
IMAGE_ID=$IMAGE
NETWORK_NAME=nodewright-net
NETWORK_ID=$NETWORK
PROJECT_ID=$NW_PROJECT
QUOTA_PROJECT_ID=$QUOTA_PROJECT
EOF
touch "$BASE/state/ready"
step "credential files written"

echo
echo "setup: timings"
printf '  %s\n' "${TIMINGS[@]}"
printf '  %-52s %6ss\n' total "$(elapsed "$T0")"
echo "setup: real OpenStack ready under $BASE (logs: $BASE/log)"
echo "setup: export NODEWRIGHT_REAL_OPENSTACK=$BASE"

# shellcheck shell=bash
# shellcheck disable=SC2034  # NETNS_* are for the scripts that source this
# Network namespaces as "hosts" for the multi-host tests and benchmark.
# Sourced, not run:
#
#   source tests/multihost/netns.sh
#   netns_require          # exits 77 (CTest "skipped") unless root with ip netns
#   netns_up 3 1gbit       # three hosts; optional tc tbf RATE on every host link
#   trap netns_down EXIT   # netns_up installs this itself; keep it if you trap
#   kolorun -H "$(netns_hosts 2)" --ssh-command "$NETNS_SSH" ...
#
# Layout (names carry this shell's PID, so runs never collide):
#
#   root namespace ("login node")        namespace kn<PID>h<i> ("host" i)
#   bridge kb<PID>  10.X.Y.254/24  --- veth kv<PID>h<i> ... eth0  10.X.Y.<i>/24
#
# Every host has lo up and one link (a veth pair) to the bridge, which the
# root namespace also sits on, so a launcher there reaches every host and the
# hosts reach each other through the bridge. With RATE, a tbf qdisc shapes
# the egress of both ends of every host link, so each link carries at most
# RATE in each direction (the bridge-side end's egress is what the host
# receives). X.Y come from the PID, avoiding subnets already routed here.
#
# After netns_up these are set (and exported where a child needs them):
#   NETNS_COUNT, NETNS_PREFIX, NETNS_SUBNET (10.X.Y), NETNS_BRIDGE,
#   NETNS_NAMES[i], NETNS_IPS[i], NETNS_VETHS[i] (root-side veth), i = 1..COUNT
#   KOLO_NETNS_MAP  file of "IP NAMESPACE" lines read by netns_ssh (exported)
#   NETNS_SSH       path of netns_ssh, the ssh stand-in entering a namespace
#
# Shaping settings (see docs/launching.md): tbf burst NETNS_TBF_BURST
# (default 256kb: at least one 64 KiB GSO segment, so tbf never re-segments)
# and queue limit NETNS_TBF_LIMIT (default 1mb, deep enough that a TCP
# stream fills the shaped link without drops on a zero-delay path).

NETNS_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NETNS_SSH="$NETNS_LIB_DIR/netns_ssh"
NETNS_COUNT=0
NETNS_NAMES=()
NETNS_IPS=()
NETNS_VETHS=()
NETNS_BRIDGE=""
NETNS_WORK=""

# Exits 77 with a message unless this shell can create network namespaces.
netns_require() {
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: multi-host tests need root (ip netns add); running as uid $(id -u)" >&2
    exit 77
  fi
  if ! command -v ip >/dev/null 2>&1; then
    echo "SKIP: multi-host tests need iproute2's 'ip'" >&2
    exit 77
  fi
  local probe="knprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "SKIP: 'ip netns add' does not work here (no network namespace support)" >&2
    exit 77
  fi
  ip netns del "$probe" 2>/dev/null || true
}

# Prints a free 10.X.Y prefix derived from the PID.
netns_pick_subnet_() {
  local n=$(($$ % 25000)) x y
  for _ in 0 1 2 3 4 5 6 7 8 9; do
    x=$((100 + (n / 250) % 100))
    y=$((1 + n % 250))
    if ! ip -4 route show | grep "^10\.$x\.$y\." >/dev/null; then
      echo "10.$x.$y"
      return 0
    fi
    n=$(((n + 7919) % 25000))
  done
  echo "netns.sh: no free 10.X.Y.0/24 subnet found" >&2
  return 1
}

# Deletes what an earlier run killed before its teardown (SIGKILL) left:
# namespaces kn<PID>h<i> and bridges kb<PID> whose PID is gone.
netns_reap_stale_() {
  local ns pid link
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E '^kn[0-9]+h[0-9]+$' || true); do
    pid="${ns#kn}"
    pid="${pid%%h*}"
    [ -d "/proc/$pid" ] && continue
    # shellcheck disable=SC2046
    kill -9 $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{ print $2 }' |
    grep -E '^kb[0-9]+$' || true); do
    [ -d "/proc/${link#kb}" ] || ip link del "$link" 2>/dev/null || true
  done
}

# netns_up COUNT [RATE]: creates COUNT hosts (see the header) and installs
# 'trap netns_down EXIT'. RATE is a tc rate such as 1gbit.
netns_up() {
  local count="$1" rate="${2:-}" i ns veth
  netns_reap_stale_
  NETNS_COUNT=0
  NETNS_PREFIX="kn$$"
  NETNS_BRIDGE="kb$$"
  NETNS_SUBNET="$(netns_pick_subnet_)"
  NETNS_WORK="$(mktemp -d /tmp/kolo-netns.XXXXXX)"
  export KOLO_NETNS_MAP="$NETNS_WORK/hosts"
  : >"$KOLO_NETNS_MAP"
  trap netns_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  ip link add "$NETNS_BRIDGE" type bridge
  # Forward at once: no STP listening delay on the new ports.
  ip link set "$NETNS_BRIDGE" type bridge forward_delay 0 stp_state 0
  ip addr add "$NETNS_SUBNET.254/24" dev "$NETNS_BRIDGE"
  ip link set "$NETNS_BRIDGE" up
  for ((i = 1; i <= count; i++)); do
    ns="${NETNS_PREFIX}h$i"
    veth="kv$$h$i"
    ip netns add "$ns"
    NETNS_NAMES[i]="$ns"
    NETNS_VETHS[i]="$veth"
    NETNS_IPS[i]="$NETNS_SUBNET.$i"
    NETNS_COUNT=$i
    ip link add "$veth" type veth peer name "kp$$h$i"
    ip link set "kp$$h$i" netns "$ns" name eth0
    ip link set "$veth" master "$NETNS_BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "${NETNS_IPS[i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$rate" ]; then
      netns_shape_ "$ns" "$veth" "$rate"
    fi
    echo "${NETNS_IPS[i]} $ns" >>"$KOLO_NETNS_MAP"
  done
  # Every host answers the login node and the next host before anyone uses
  # them (the bridge learns its ports). Hosts that reach the login node but
  # not each other usually mean a firewall on bridged traffic (br_netfilter
  # with an iptables FORWARD policy of DROP, as Docker sets).
  for ((i = 1; i <= count; i++)); do
    netns_wait_reachable_ "${NETNS_IPS[i]}"
  done
  for ((i = 1; i < count; i++)); do
    if ! netns_exec "$i" bash -c "$(declare -f netns_wait_reachable_); netns_wait_reachable_ ${NETNS_IPS[i + 1]}"; then
      echo "netns.sh: host ${NETNS_IPS[i]} cannot reach host ${NETNS_IPS[i + 1]} through" \
        "bridge $NETNS_BRIDGE (a firewall on bridged traffic? net.bridge.bridge-nf-call-iptables)" >&2
      return 1
    fi
  done
}

netns_shape_() {
  local ns="$1" veth="$2" rate="$3"
  local burst="${NETNS_TBF_BURST:-256kb}" limit="${NETNS_TBF_LIMIT:-1mb}"
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" limit "$limit"
  tc qdisc add dev "$veth" root tbf rate "$rate" burst "$burst" limit "$limit"
}

netns_wait_reachable_() {
  # No ping here: a TCP connect to a closed port answers "refused" (a RST)
  # once the host is reachable, and hangs while it is not.
  local ip="$1" k out
  for ((k = 0; k < 50; k++)); do
    out="$(timeout 1 bash -c ": >/dev/tcp/$ip/9" 2>&1)" && return 0
    case "$out" in *refused*) return 0 ;; esac
    sleep 0.1
  done
  echo "netns.sh: host $ip does not answer after setup" >&2
  return 1
}

# netns_hosts SLOTS: "-H" list of every host, e.g. 10.1.2.1:2,10.1.2.2:2,...
netns_hosts() {
  local slots="$1" i out=""
  for ((i = 1; i <= NETNS_COUNT; i++)); do
    out+="${out:+,}${NETNS_IPS[i]}:$slots"
  done
  echo "$out"
}

# netns_exec I CMD...: runs CMD in host I's namespace.
netns_exec() {
  local i="$1"
  shift
  ip netns exec "${NETNS_NAMES[i]}" "$@"
}

# netns_pids: pids of every process in any of the hosts (empty when none).
netns_pids() {
  local i
  for ((i = 1; i <= NETNS_COUNT; i++)); do
    ip netns pids "${NETNS_NAMES[i]}" 2>/dev/null || true
  done
}

# netns_link_bytes: one line per host link, "I VETH TX RX", with TX/RX the
# bytes counted on the root-side veth (TX: towards host I, RX: from host I).
netns_link_bytes() {
  local i d
  for ((i = 1; i <= NETNS_COUNT; i++)); do
    d="/sys/class/net/${NETNS_VETHS[i]}/statistics"
    echo "$i ${NETNS_VETHS[i]} $(cat "$d/tx_bytes") $(cat "$d/rx_bytes")"
  done
}

# netns_link_total: sum over host links of tx + rx bytes.
netns_link_total() {
  netns_link_bytes | awk '{ s += $3 + $4 } END { printf "%d\n", s }'
}

# netns_down: kills what is left in the hosts, deletes them, their links and
# the bridge. Safe to call twice and after a partial netns_up.
netns_down() {
  local i ns pids k
  for ((i = 1; i <= NETNS_COUNT; i++)); do
    ns="${NETNS_NAMES[i]}"
    [ -n "$ns" ] || continue
    for ((k = 0; k < 20; k++)); do
      pids="$(ip netns pids "$ns" 2>/dev/null || true)"
      [ -n "$pids" ] || break
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
      sleep 0.1
    done
    ip link del "${NETNS_VETHS[i]}" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  NETNS_COUNT=0
  if [ -n "$NETNS_BRIDGE" ]; then
    ip link del "$NETNS_BRIDGE" 2>/dev/null || true
    NETNS_BRIDGE=""
  fi
  if [ -n "$NETNS_WORK" ]; then
    rm -rf "$NETNS_WORK"
    NETNS_WORK=""
  fi
}

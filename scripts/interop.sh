#!/usr/bin/env bash
# Interoperability suite: mobicore's NFs against independent 3GPP implementations, on loopback
# (127.0.0.x only), as root on Debian 12. Installs what it needs (idempotent), builds mobicore
# (release) and the peers, runs each row, prints a result table; exit status 1 if a runnable row
# failed. Logs and loopback captures (each checked with tshark) go to target/interop/.
#
#   scripts/interop.sh [--no-build] [--rows 1,2,3]
#
# Peers: go-gtp v0.8.0 (github.com/wmnsk/go-gtp, pinned in scripts/interop/go.mod): the gw-tester
# MME + pseudo eNB, SGW-C and PGW-C, and scripts/interop/s11mme (an MME's S11 side on go-gtp's
# GTPv2-C library) and scripts/interop/gnb (an eNB's S1-U on go-gtp's GTP-U library); pycrate 0.8.1
# (PyPI): scripts/interop/s6a_client.py on pycrate_diameter; pfcpsim v1.4.0 (SD-Core's PFCP
# simulator, an SGW-C/SMF; github.com/omec-project/pfcpsim, pinned in scripts/interop/pfcpsim/go.mod).
# Traffic goes to an echo server in a namespace the suite makes (mcinterop-dn, the data network).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/target/interop
LOGS=$OUT/logs
GOBIN_DIR=$OUT/bin
PYCRATE_VERSION=0.8.1
build=1
rows=1,2,3,5
while (($#)); do
  case "$1" in
    --no-build) build=0 ;;
    --rows) rows=$2; shift ;;
    -h | --help) sed -n 2,14p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "interop: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "interop: run as root (raw IP for user-space SCTP, tshark captures)" >&2; exit 2; }

say() { echo "interop: $*" >&2; }

# ---- what the suite needs -------------------------------------------------------------------
bash scripts/bootstrap.sh
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
apt_need=()
command -v go >/dev/null 2>&1 || apt_need+=(golang-go)
python3 -c 'import ensurepip, venv' 2>/dev/null || apt_need+=(python3-venv)
command -v curl >/dev/null 2>&1 || apt_need+=(curl)
if ((${#apt_need[@]})); then
  say "installing ${apt_need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_need[@]}" >/dev/null
fi
mkdir -p "$OUT" "$LOGS" "$GOBIN_DIR"

if ((build)); then
  say "building mobicore (release)"
  cargo build --release -j"${CARGO_BUILD_JOBS:-2}" -q -p mobicore || { say "mobicore build failed"; exit 2; }
fi
MOBICORE=${MOBICORE_BIN:-$ROOT/target/release/mobicore}
[ -x "$MOBICORE" ] || { say "no $MOBICORE (run without --no-build)"; exit 2; }

say "building go-gtp gw-tester and s11mme (go $(go env GOVERSION))"
(cd scripts/interop && GOFLAGS=-mod=readonly go build -o "$GOBIN_DIR/" \
  github.com/wmnsk/go-gtp/examples/gw-tester/mme github.com/wmnsk/go-gtp/examples/gw-tester/enb \
  github.com/wmnsk/go-gtp/examples/gw-tester/sgw github.com/wmnsk/go-gtp/examples/gw-tester/pgw ./s11mme ./gnb) \
  || { say "go build failed"; exit 2; }
say "building pfcpsim"
(cd scripts/interop/pfcpsim && GOFLAGS=-mod=readonly go build -o "$GOBIN_DIR/" \
  github.com/omec-project/pfcpsim/cmd/pfcpsim github.com/omec-project/pfcpsim/cmd/pfcpctl) \
  || { say "pfcpsim build failed"; exit 2; }

VENV=$OUT/venv
if ! "$VENV/bin/python" -c "import pycrate_diameter" 2>/dev/null; then
  say "installing pycrate $PYCRATE_VERSION in $VENV"
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "pycrate==$PYCRATE_VERSION" || { say "pycrate install failed"; exit 2; }
fi

# ---- processes ------------------------------------------------------------------------------
PIDS=()
start() { # start NAME CMD...: runs CMD in the background, output in $LOGS/NAME.log
  local name=$1
  shift
  "$@" >"$LOGS/$name.log" 2>&1 &
  PIDS+=($!)
}
stop_all() {
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
# The data network: a namespace with an echo server on DN (UDP 7); a UPF's TUN device and its UE
# pool routes go there ([upf] core_netns).
DN_NS=mcinterop-dn
DN=192.0.2.10
dn_down() {
  ip netns pids "$DN_NS" 2>/dev/null | xargs -r kill 2>/dev/null
  ip netns del "$DN_NS" 2>/dev/null
  true
}
dn_up() { # dn_up ROW: a fresh data network with its echo server
  dn_down
  ip netns add "$DN_NS" && ip -n "$DN_NS" link set lo up && ip -n "$DN_NS" addr add "$DN/32" dev lo || return 1
  start "$1-dn-echo" ip netns exec "$DN_NS" python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('$DN', 7))
while True:
    d, a = s.recvfrom(65535)
    s.sendto(d, a)"
  wait_for 10 ip netns exec "$DN_NS" sh -c "ss -Hlun 'src $DN:7' | grep -q ."
}
cleanup() { stop_all; dn_down; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

wait_for() { # wait_for SECONDS CMD...: true once CMD succeeds, polled every 0.2 s
  local until=$((SECONDS + $1))
  shift
  while ((SECONDS < until)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  "$@" >/dev/null 2>&1
}
listening_tcp() { ss -Hltn "src $1" | grep -q .; }
listening_udp() { ss -Hlun "src $1" | grep -q .; }
listening_tcp_port() { ss -Hltn "sport = :$1" | grep -q .; }
metric() { curl -s "http://$1/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
metric_at_least() { local v; v=$(metric "$1" "$2"); [ -n "$v" ] && [ "$v" -ge "$3" ]; }

capture_start() { # capture_start ROW FILTER
  rm -f "$OUT/$1.pcap"
  start "$1-tshark" tshark -i lo -f "$2" -w "$OUT/$1.pcap"
  wait_for 10 grep -q "Capture started" "$LOGS/$1-tshark.log"
}
# Every message on the wire dissects without a malformed packet or an expert error.
capture_check() { # capture_check ROW: stops the row's capture (PIDS[0]); prints a reason and fails on a bad packet
  local bad
  sleep 0.5 # tshark writes what it has seen before it is told to stop
  kill "${PIDS[0]}" 2>/dev/null
  wait "${PIDS[0]}" 2>/dev/null
  bad=$(tshark -r "$OUT/$1.pcap" -Y '_ws.malformed || _ws.expert.severity >= 8388608' 2>/dev/null) ||
    { echo "tshark could not read $OUT/$1.pcap"; return 1; }
  [ -z "$bad" ] || { echo "tshark: malformed/expert error: $(echo "$bad" | head -1 | tr -s ' ')"; return 1; }
  [ "$(tshark -r "$OUT/$1.pcap" 2>/dev/null | wc -l)" -gt 0 ] || { echo "the loopback capture is empty"; return 1; }
}

# GTPv2-C IE types (TS 29.274 8.1) a peer's log may name by number.
ie_names() {
  sed -E 's/IE missing: 75$/IE missing: 75 (MEI)/; s/IE missing: 76$/IE missing: 76 (MSISDN)/;
    s/IE missing: 79$/IE missing: 79 (PAA)/; s/IE missing: 87$/IE missing: 87 (F-TEID)/;
    s/IE missing: 93$/IE missing: 93 (Bearer Context)/' <<<"$1"
}

ROWS=()
row() { ROWS+=("$1|$2|$3|$4|$5"); } # row NUMBER PEERS RESULT DETAIL TRAFFIC
failed=0
# finish_row NUMBER PEERS WHY DETAIL TRAFFIC: checks the row's capture, stops its processes and its
# data network, and records PASS with DETAIL, or FAIL with WHY.
finish_row() {
  local why=$3
  capture_check "row$1" >"$OUT/row$1.tshark" || why="${why:+$why; }$(cat "$OUT/row$1.tshark")"
  stop_all
  dn_down
  if [ -z "$why" ]; then
    row "$1" "$2" PASS "$4" "$5"
  else
    row "$1" "$2" FAIL "$why" "$5"
    failed=1
  fi
}

# ---- row 1: go-gtp MME -> our S/P-GW-C + UPF (S11, PFCP) ---------------------------------------
row1() {
  local cfg=scripts/interop/row1-mobicore.toml why="" detail="" n=5
  capture_start row1 "net 127.0.0.60/30 or net 127.0.0.64/30"
  dn_up row1 || why="could not make the data network namespace"
  start row1-upf "$MOBICORE" upf -c "$cfg" --metrics 127.0.0.62:9102
  start row1-spgwc "$MOBICORE" spgwc -c "$cfg" --metrics 127.0.0.61:9101 --log info
  if ! wait_for 20 metric_at_least 127.0.0.62:9102 mobicore_upf_pfcp_associations_set_up 1; then
    why="no PFCP association between our S/P-GW-C and UPF"
  fi
  sleep 1 # the Association Setup Response is on its way to the S/P-GW-C
  if [ -z "$why" ]; then
    # (a) gw-tester's MME + pseudo eNB: their attach is Create Session + Modify Bearer (no detach:
    # their MME's Detach is a stub).
    start row1-gwt-mme "$GOBIN_DIR/mme" -config scripts/interop/row1-mme.yml
    wait_for 10 listening_tcp 127.0.0.63:36412
    start row1-gwt-enb "$GOBIN_DIR/enb" -config scripts/interop/row1-enb.yml
    count() { grep -c "Bearer modified with S-GW for Subscriber" "$LOGS/row1-gwt-mme.log"; }
    enough() { [ "$(count)" -ge $n ] || grep -q "FATAL\|got unexpected Cause\|Failed to attach" "$LOGS/row1-gwt-enb.log"; }
    wait_for 30 enough
    local ok
    ok=$(count)
    if [ "$ok" -lt $n ]; then
      why="gw-tester MME: $ok/$n attaches; $(grep -h "error\|FATAL\|Cause" "$LOGS/row1-gwt-mme.log" "$LOGS/row1-gwt-enb.log" | tail -1)"
    else
      detail="gw-tester eNB+MME: $ok/$n attached (CSR+MBR)"
    fi
    # (b) go-gtp's GTPv2-C library as an MME: create / modify / delete, answers checked; between
    # modify and delete its GTP-U library, as the eNB, carries each UE's datagrams to the DN and back.
    if "$GOBIN_DIR/s11mme" -sgw 127.0.0.61:2123 -local 127.0.0.65 -pgw 127.0.0.61 -enb 127.0.0.66 -n 3 \
      -dn "$DN:7" >"$LOGS/row1-s11mme.log" 2>&1; then
      detail="$detail; s11mme: echo, unknown TEID -> 64, 3/3 create/modify/delete"
    else
      why="${why:+$why; }s11mme: $(grep -m1 FAIL "$LOGS/row1-s11mme.log" || tail -1 "$LOGS/row1-s11mme.log")"
    fi
    curl -s http://127.0.0.61:9101/metrics >"$LOGS/row1-spgwc.metrics"
  fi
  finish_row 1 "go-gtp gw-tester MME+eNB, go-gtp s11mme -> our S/P-GW-C+UPF" "$why" "$detail" \
    "s11mme's UEs: 3x5 UDP datagrams through our UPF to the DN and back (go-gtp GTP-U as the eNB), none after delete; gw-tester's eNB: none (its U-plane needs kernel GTP)"
}

# ---- row 2: our RAN + MME + HSS -> go-gtp SGW-C + PGW-C (S11, S5/S8-C between theirs) -----------
row2() {
  local cfg=scripts/interop/row2-mobicore.toml store=$OUT/row2-subscribers.json why="" detail="" n=3 i
  rm -f "$store"
  for ((i = 1; i <= n; i++)); do
    "$MOBICORE" subscriber add --store "$store" --imsi "00101000000400$i" --msisdn "81400000400$i" \
      --k 465B5CE8B199B49FAA5F0A2EE238A6BC --opc E8ED289DEBA952E4283B54E88E6183CA >/dev/null
  done
  capture_start row2 "net 127.0.0.64/26"
  start row2-gwt-pgw "$GOBIN_DIR/pgw" -config scripts/interop/row2-pgw.yml
  start row2-gwt-sgw "$GOBIN_DIR/sgw" -config scripts/interop/row2-sgw.yml
  start row2-hss "$MOBICORE" hss -c "$cfg"
  wait_for 10 listening_udp 127.0.0.71:2123
  wait_for 10 listening_udp 127.0.0.73:2123
  if ! wait_for 10 listening_tcp 127.0.0.75:3868; then
    why="our HSS did not listen"
  else
    start row2-mme "$MOBICORE" mme -c "$cfg" --log info
    wait_for 10 grep -q "S1-MME on" "$LOGS/row2-mme.log" || why="our MME did not start: $(tail -1 "$LOGS/row2-mme.log")"
  fi
  if [ -z "$why" ]; then
    rm -f "$OUT/row2-ran.json"
    timeout 120 "$MOBICORE" ran -c "$cfg" --ues $n --json "$OUT/row2-ran.json" >"$LOGS/row2-ran.log" 2>&1
    local att det
    att=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["attached"])' "$OUT/row2-ran.json" 2>/dev/null || echo 0)
    det=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["detached"])' "$OUT/row2-ran.json" 2>/dev/null || echo 0)
    detail="$att/$n attached, $det/$n detached"
    if [ "$att" -ne $n ] || [ "$det" -ne $n ]; then
      local ran_err sgw_err
      ran_err=$(python3 -c 'import json,sys; print("; ".join(f"{k} x{v}" for k,v in json.load(open(sys.argv[1]))["failures"].items()))' \
        "$OUT/row2-ran.json" 2>/dev/null || tail -1 "$LOGS/row2-ran.log")
      sgw_err=$(grep -h "error\|missing\|Cause" "$LOGS/row2-gwt-sgw.log" "$LOGS/row2-gwt-pgw.log" | tail -1 |
        sed -E 's/^[0-9\/]+ [0-9:]+ //')
      sgw_err=$(ie_names "$sgw_err")
      why="$detail; RAN: $ran_err; their SGW-C/PGW-C: ${sgw_err:-no error logged}"
    fi
  fi
  finish_row 2 "our RAN+MME+HSS -> go-gtp gw-tester SGW-C+PGW-C" "$why" "$detail" "N/A: their U-plane needs kernel GTP"
}

# ---- row 3: pycrate_diameter S6a client -> our HSS ------------------------------------------------
row3() {
  local cfg=scripts/interop/row3-mobicore.toml store=$OUT/row3-subscribers.json why=""
  rm -f "$store"
  "$MOBICORE" subscriber add --store "$store" --imsi 001010000003001 --msisdn 814000003001 \
    --k 465B5CE8B199B49FAA5F0A2EE238A6BC --opc E8ED289DEBA952E4283B54E88E6183CA >/dev/null
  capture_start row3 "host 127.0.0.81"
  start row3-hss "$MOBICORE" hss -c "$cfg"
  if ! wait_for 10 listening_tcp 127.0.0.81:3868; then
    why="our HSS did not listen"
  elif ! "$VENV/bin/python" scripts/interop/s6a_client.py 127.0.0.81:3868 001010000003001 >"$LOGS/row3-s6a-client.log" 2>&1; then
    why="$(grep -m1 FAIL "$LOGS/row3-s6a-client.log" || tail -1 "$LOGS/row3-s6a-client.log")"
  fi
  finish_row 3 "pycrate_diameter S6a client -> our HSS" "$why" \
    "CER, AIR (vector checked), ULR with Terminal-Information, unknown IMSI 5001, DPR" "N/A: signalling only"
}

# ---- row 5: pfcpsim (SD-Core's SGW-C/SMF simulator) -> our UPF (PFCP), traffic through it -------
row5() {
  local cfg=scripts/interop/row5-mobicore.toml why="" detail="" n=3 ctl pool=10.48.0.0/24 gnb=127.0.0.93
  ctl=("$GOBIN_DIR/pfcpctl" -s 127.0.0.1:54399)
  rm -f "$LOGS"/row5-*.log
  capture_start row5 "host 127.0.0.92 or host 127.0.0.93"
  dn_up row5 || why="could not make the data network namespace"
  start row5-upf "$MOBICORE" upf -c "$cfg" --metrics 127.0.0.92:9105 --log info
  start row5-pfcpsim "$GOBIN_DIR/pfcpsim" --interface lo --port 54399
  wait_for 10 listening_udp 127.0.0.92:8805 || why="${why:+$why; }our UPF did not start: $(tail -1 "$LOGS/row5-upf.log")"
  wait_for 10 listening_tcp_port 54399 || why="${why:+$why; }pfcpsim did not start: $(tail -1 "$LOGS/row5-pfcpsim.log")"
  pfcpctl() { # pfcpctl ARGS...: one pfcpctl command, its output logged; fails the row on an error
    [ -n "$why" ] && return 1
    echo "+ pfcpctl $*" >>"$LOGS/row5-pfcpctl.log"
    "${ctl[@]}" "$@" >>"$LOGS/row5-pfcpctl.log" 2>&1 ||
      { why="pfcpctl $1 $2: $(tail -1 "$LOGS/row5-pfcpctl.log" | sed -E 's/.*(ERROR|rpc error)/\1/')"; return 1; }
  }
  gnb() { # gnb WHAT ARGS...: the eNB's traffic check; fails the row with its first failure
    [ -n "$why" ] && return 1
    "$GOBIN_DIR/gnb" -local $gnb -upf 127.0.0.92 -dn "$DN:7" -ue-pool $pool "${@:2}" >>"$LOGS/row5-gnb.log" 2>&1 ||
      { why="$1: $(grep -m1 FAIL "$LOGS/row5-gnb.log" || tail -1 "$LOGS/row5-gnb.log")"; return 1; }
  }
  local gated=(-a "udp:$DN/32:40000-40999:allow:100" -a "ip:any:any:deny:200")
  pfcpctl service configure --n3-addr 127.0.0.92 --remote-peer-addr 127.0.0.92:8805
  pfcpctl service associate
  # (a) default sessions: uplink PDR with the SMF's TEID, downlink FAR DROP then FORW to the gNB.
  pfcpctl session create --count $n --baseID 2 --ue-pool $pool --gnb-addr $gnb
  pfcpctl session modify --count $n --baseID 2 --ue-pool $pool --gnb-addr $gnb
  gnb "traffic" -base-id 2 -count $n -n 5
  pfcpctl session delete --count $n --baseID 2
  gnb "after delete" -base-id 2 -count $n -mode silent
  # (b) an allow and a deny filter by precedence, the deny one's QER gate closed.
  pfcpctl session create --count $n --baseID 102 --ue-pool $pool --gnb-addr $gnb "${gated[@]}"
  pfcpctl session modify --count $n --baseID 102 --ue-pool $pool --gnb-addr $gnb "${gated[@]}"
  gnb "filters" -base-id 102 -count $n -n 5 -mode gated
  pfcpctl session delete --count $n --baseID 102
  pfcpctl service disassociate
  curl -s http://127.0.0.92:9105/metrics >"$LOGS/row5-upf.metrics"
  if [ -z "$why" ]; then
    local est del
    est=$(awk '$1 == "mobicore_upf_pfcp_sessions_established" { print $2 }' "$LOGS/row5-upf.metrics")
    del=$(awk '$1 == "mobicore_upf_pfcp_sessions_deleted" { print $2 }' "$LOGS/row5-upf.metrics")
    [ "$est" = $((2 * n)) ] && [ "$del" = $((2 * n)) ] ||
      why="our UPF counted $est sessions established and $del deleted, not $((2 * n)) each"
    detail="association, $n+$n sessions created/modified/deleted (PDRs with SDF filters, FARs, QERs, URRs), release"
  fi
  finish_row 5 "pfcpsim v1.4.0 (SD-Core SGW-C/SMF simulator) -> our UPF" "$why" "$detail" \
    "$n x5 UDP datagrams per UE through our UPF to the DN and back (go-gtp GTP-U as the gNB), none after delete; allow/deny filters: allowed flow echoed, denied flow dropped"
}

for r in ${rows//,/ }; do
  case "$r" in 1 | 2 | 3 | 5) ;; *) say "no runnable row $r (1, 2, 3, 5)"; exit 2 ;; esac
  say "row $r"
  "row$r"
done
row 4 "independent eNB/MME over S1AP (srsRAN, OAI, Open5GS, pycrate_corenet)" "not runnable on this machine" \
  "their SCTP is the kernel's; this kernel has no SCTP module (mobicore's SCTP is user-space)" "-"
row 6 "independent S/P-GW U-plane (go-gtp gw-tester eNB, SGW-U, PGW-U)" "not runnable on this machine" \
  "go-gtp's gw-tester U-plane needs the kernel GTP module, absent here (rows 1 and 5 carry traffic on go-gtp's GTP-U library)" "-"

echo
printf '%-4s %-72s %-29s %s\n' row peers result "detail / reason"
while IFS='|' read -r n peers result detail traffic; do
  printf '%-4s %-72s %-29s %s\n' "$n" "$peers" "$result" "$detail"
  [ "$traffic" = "-" ] || printf '%-4s %-72s %-29s %s\n' "" "" "" "traffic: $traffic"
done < <(printf '%s\n' "${ROWS[@]}" | sort -t'|' -k1,1n)
echo
echo "logs: $LOGS; captures: $OUT/row*.pcap"
exit $failed

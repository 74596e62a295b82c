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
# GTPv2-C library); pycrate 0.8.1 (PyPI): scripts/interop/s6a_client.py on pycrate_diameter.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/target/interop
LOGS=$OUT/logs
GOBIN_DIR=$OUT/bin
PYCRATE_VERSION=0.8.1
build=1
rows=1,2,3
while (($#)); do
  case "$1" in
    --no-build) build=0 ;;
    --rows) rows=$2; shift ;;
    -h | --help) sed -n 2,11p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
  github.com/wmnsk/go-gtp/examples/gw-tester/sgw github.com/wmnsk/go-gtp/examples/gw-tester/pgw ./s11mme) \
  || { say "go build failed"; exit 2; }

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
trap stop_all EXIT
trap 'stop_all; exit 130' INT TERM

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

# ---- row 1: go-gtp MME -> our S/P-GW-C + UPF (S11, PFCP) ---------------------------------------
row1() {
  local cfg=scripts/interop/row1-mobicore.toml why="" detail="" n=5
  capture_start row1 "net 127.0.0.60/30 or net 127.0.0.64/30"
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
    # (b) go-gtp's GTPv2-C library as an MME: create / modify / delete, answers checked.
    if "$GOBIN_DIR/s11mme" -sgw 127.0.0.61:2123 -local 127.0.0.65 -pgw 127.0.0.61 -enb 127.0.0.64 -n 3 \
      >"$LOGS/row1-s11mme.log" 2>&1; then
      detail="$detail; s11mme: echo, unknown TEID -> 64, 3/3 create/modify/delete"
    else
      why="${why:+$why; }s11mme: $(grep -m1 FAIL "$LOGS/row1-s11mme.log" || tail -1 "$LOGS/row1-s11mme.log")"
    fi
    curl -s http://127.0.0.61:9101/metrics >"$LOGS/row1-spgwc.metrics"
  fi
  capture_check row1 >"$OUT/row1.tshark" || why="${why:+$why; }$(cat "$OUT/row1.tshark")"
  stop_all
  if [ -z "$why" ]; then
    row 1 "go-gtp gw-tester MME+eNB, go-gtp s11mme -> our S/P-GW-C+UPF" PASS "$detail" "N/A: their U-plane needs kernel GTP"
  else
    row 1 "go-gtp gw-tester MME+eNB, go-gtp s11mme -> our S/P-GW-C+UPF" FAIL "$why" "N/A: their U-plane needs kernel GTP"
    failed=1
  fi
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
  capture_check row2 >"$OUT/row2.tshark" || why="${why:+$why; }$(cat "$OUT/row2.tshark")"
  stop_all
  if [ -z "$why" ]; then
    row 2 "our RAN+MME+HSS -> go-gtp gw-tester SGW-C+PGW-C" PASS "$detail" "N/A: their U-plane needs kernel GTP"
  else
    row 2 "our RAN+MME+HSS -> go-gtp gw-tester SGW-C+PGW-C" FAIL "$why" "N/A: their U-plane needs kernel GTP"
    failed=1
  fi
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
  capture_check row3 >"$OUT/row3.tshark" || why="${why:+$why; }$(cat "$OUT/row3.tshark")"
  stop_all
  if [ -z "$why" ]; then
    row 3 "pycrate_diameter S6a client -> our HSS" PASS "CER, AIR (vector checked), ULR with Terminal-Information, unknown IMSI 5001, DPR" "N/A: signalling only"
  else
    row 3 "pycrate_diameter S6a client -> our HSS" FAIL "$why" "N/A: signalling only"
    failed=1
  fi
}

for r in ${rows//,/ }; do
  case "$r" in 1 | 2 | 3) ;; *) say "no runnable row $r (1, 2, 3)"; exit 2 ;; esac
  say "row $r"
  "row$r"
done
row 4 "independent eNB/MME over S1AP (srsRAN, OAI, Open5GS, pycrate_corenet)" "not runnable on this machine" \
  "their SCTP is the kernel's; this kernel has no SCTP module (mobicore's SCTP is user-space)" "-"
row 5 "independent SGW-C/SMF over PFCP against our UPF" "not runnable on this machine" \
  "none obtainable here (Open5GS, OAI, free5GC not installable; no PFCP CP in a registry)" "-"
row 6 "independent S/P-GW U-plane (GTP-U traffic in any row)" "not runnable on this machine" \
  "go-gtp's U-plane needs the kernel GTP module, absent here" "-"

echo
printf '%-4s %-72s %-29s %s\n' row peers result "detail / reason"
for line in "${ROWS[@]}"; do
  IFS='|' read -r n peers result detail traffic <<<"$line"
  printf '%-4s %-72s %-29s %s\n' "$n" "$peers" "$result" "$detail"
  [ "$traffic" = "-" ] || printf '%-4s %-72s %-29s %s\n' "" "" "" "traffic: $traffic"
done
echo
echo "logs: $LOGS; captures: $OUT/row*.pcap"
exit $failed

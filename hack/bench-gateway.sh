#!/usr/bin/env bash
# Measures Switchyard's proxy overhead against HAProxy in one run: both sit
# in front of the same fast mock shim (hack/benchshim) on loopback, and wrk
# drives each, plus the shim directly as the floor. Switchyard runs the
# demo fleet (embedded etcd, 2 prefill + 2 decode workers), so every request
# goes through discovery, the picker and the pinned dispatch path. Two
# routers run: "switchyard" with the demo's KV-aware routing (each prompt
# rendered with the fleet's chat template and tokenized) and
# "switchyard (load)" with --kv=false (the load-based picker alone). A
# third proxy, "go relay (floor)" (hack/benchrelay), copies bytes between
# each client connection and its own shim connection without reading HTTP:
# what Go's runtime and the sockets alone cost a goroutine-per-connection
# proxy here, so the routers' distance from it is their own work.
#
#   hack/bench-gateway.sh [DURATION] [CONNECTIONS...]
#
# Prints a Markdown table. "CPU/request" is the serving process's user and
# system time over its wrk run divided by the requests it answered (the
# shim's for the direct row): it moves far less with the machine's other
# load than requests/s does. Installs haproxy and wrk from Debian when
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
shift || true
if [ $# -gt 0 ]; then CONNS=("$@"); else CONNS=(8 64); fi

need() { command -v "$1" >/dev/null 2>&1; }
if ! need haproxy || ! need wrk; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy wrk >/dev/null
fi

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

go build -o "$work/switchyard" ./cmd/switchyard
go build -o "$work/benchshim" ./hack/benchshim
go build -o "$work/benchrelay" ./hack/benchrelay

SHIM=127.0.0.1:19100 HAPROXY=127.0.0.1:19200 ROUTER=127.0.0.1:19300 ROUTER_LOAD=127.0.0.1:19400 RELAY=127.0.0.1:19500
"$work/benchshim" -addr "$SHIM" & pids+=($!)
SHIM_PID=$!

cat >"$work/haproxy.cfg" <<CFG
global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
frontend fe
  bind $HAPROXY
  default_backend shim
backend shim
  server s1 $SHIM
CFG
haproxy -f "$work/haproxy.cfg" -q & pids+=($!)
HAPROXY_PID=$!
"$work/benchrelay" -addr "$RELAY" -backend "$SHIM" & pids+=($!)
RELAY_PID=$!

start_router() { # addr name flags...
	local addr=$1 name=$2
	shift 2
	"$work/switchyard" demo --addr "$addr" --shim-url "http://$SHIM" "$@" >"$work/$name.out" 2>"$work/$name.err" & pids+=($!)
	router_pid=$!
	for _ in $(seq 1 100); do
		grep -q "admin token" "$work/$name.out" 2>/dev/null && break
		sleep 0.1
	done
}
start_router "$ROUTER" kv
ROUTER_PID=$router_pid
start_router "$ROUTER_LOAD" load --kv=false
ROUTER_LOAD_PID=$router_pid

cat >"$work/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Say ok in one word, please."}],"max_tokens":1}'
LUA

# Warm up, then check that each router's path really answers 200s.
for r in "kv:$ROUTER" "load:$ROUTER_LOAD"; do
	curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' \
		-d '{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"hi"}]}' "http://${r#*:}/v1/chat/completions" ||
		{ echo "router ${r%%:*} did not answer; logs:" >&2; tail -20 "$work/${r%%:*}.err" >&2; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

run() { # target conns pid -> "rps p50 p99 non2xx cpu_us_per_request"
	local before after
	before=$(cpu_ticks "$3")
	wrk -t2 -c"$2" -d"$DURATION" --latency -s "$work/post.lua" "http://$1/v1/chat/completions" >"$work/wrk.out" 2>&1
	after=$(cpu_ticks "$3")
	awk -v ticks=$((after - before)) -v hz="$TICK" '
		/requests in/ {n=$1}
		/Requests\/sec/ {rps=$2}
		/^ +50%/ {p50=$2} /^ +99%/ {p99=$2}
		/Non-2xx/ {bad=$NF}
		END {printf "%s %s %s %s %.0f µs\n", rps, p50, p99, (bad==""?0:bad), (n>0 ? ticks/hz*1e6/n : 0)}' "$work/wrk.out"
}

echo "| connections | target | requests/s | p50 | p99 | non-2xx | CPU/request |"
echo "|---|---|---|---|---|---|---|"
for c in "${CONNS[@]}"; do
	for t in "shim (direct)|$SHIM|$SHIM_PID" "haproxy|$HAPROXY|$HAPROXY_PID" "go relay (floor)|$RELAY|$RELAY_PID" "switchyard|$ROUTER|$ROUTER_PID" "switchyard (load)|$ROUTER_LOAD|$ROUTER_LOAD_PID"; do
		IFS='|' read -r name addr pid <<<"$t"
		read -r rps p50 p99 bad cpu unit < <(run "$addr" "$c" "$pid")
		echo "| $c | $name | $rps | $p50 | $p99 | $bad | $cpu $unit |"
	done
done

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
#   [ROUNDS=3] [RATE=5000] hack/bench-gateway.sh [DURATION] [CONNECTIONS...]
#
# Then, unless RATE=0, every target again at a fixed offered load
# (hack/benchload, RATE requests/s, 5000 by default, on 64 connections): an
# open loop, whose latencies are what a target adds at that load, where
# wrk's closed loop at saturation mostly restates requests/s.
#
# Prints Markdown tables. "CPU/request" is the serving process's user and
# system time over its wrk run divided by the requests it answered (the
# shim's for the direct row): it moves far less with the machine's other
# load than requests/s does. Installs haproxy and wrk from Debian when
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-10s}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-5000}
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
go build -o "$work/benchload" ./hack/benchload

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

TARGETS=("shim (direct)|$SHIM|$SHIM_PID" "haproxy|$HAPROXY|$HAPROXY_PID" "go relay (floor)|$RELAY|$RELAY_PID"
	"switchyard|$ROUTER|$ROUTER_PID" "switchyard (load)|$ROUTER_LOAD|$ROUTER_LOAD_PID")

# ms converts a wrk latency (us, ms or s suffix) to milliseconds.
ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0
		if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000
		printf "%.3f", n
	}'
}

# median CONNS TARGET FIELD: the median of one column over the rounds.
median() {
	awk -F'|' -v c="$1" -v n="$2" -v f="$3" '$1 == c && $2 == n {v[++k] = $f + 0}
		END {
			for (i = 2; i <= k; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
			print (k % 2) ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
		}' "$runs"
}

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

# Each round runs every target once, so the machine's slower and faster
# stretches fall on all of them alike; a row is the median of its rounds.
# Latencies are in ms. "/ HAProxy" is the row's requests/s over HAProxy's,
# "added p99" its p99 less the direct path's, both from medians.
runs="$work/runs"
for c in "${CONNS[@]}"; do
	for r in $(seq 1 "$ROUNDS"); do
		for t in "${TARGETS[@]}"; do
			IFS='|' read -r name addr pid <<<"$t"
			read -r rps p50 p99 bad cpu _ < <(run "$addr" "$c" "$pid")
			printf '%s|%s|%s|%s|%s|%s|%s\n' "$c" "$name" "$rps" "$(ms "$p50")" "$(ms "$p99")" "$bad" "$cpu" >>"$runs"
		done
	done
done

echo "| connections | target | requests/s | p50 (ms) | p99 (ms) | non-2xx | CPU/request | / HAProxy | added p99 (ms) |"
echo "|---|---|---|---|---|---|---|---|---|"
for c in "${CONNS[@]}"; do
	base_rps=$(median "$c" haproxy 3)
	base_p99=$(median "$c" "shim (direct)" 5)
	for t in "${TARGETS[@]}"; do
		name=${t%%|*}
		rps=$(median "$c" "$name" 3)
		p99=$(median "$c" "$name" 5)
		bad=$(awk -F'|' -v c="$c" -v n="$name" '$1 == c && $2 == n {s += $6} END {print s + 0}' "$runs")
		awk -v c="$c" -v n="$name" -v rps="$rps" -v p50="$(median "$c" "$name" 4)" -v p99="$p99" -v bad="$bad" \
			-v cpu="$(median "$c" "$name" 7)" -v base="$base_rps" -v direct="$base_p99" 'BEGIN {
			ratio = (n == "shim (direct)" || n == "haproxy") ? "" : sprintf("%.2f×", rps / base)
			added = (n == "shim (direct)") ? "" : sprintf("%+.2f", p99 - direct)
			printf "| %s | %s | %.0f | %.2f | %.2f | %s | %.0f µs | %s | %s |\n", c, n, rps, p50, p99, bad, cpu, ratio, added
		}'
	done
done

[ "$RATE" = 0 ] && exit 0

# The same targets at a fixed offered load, in rounds; a row is the median
# of its rounds and "added p99" its p99 less the direct path's.
fixed="$work/fixed"
for r in $(seq 1 "$ROUNDS"); do
	for t in "${TARGETS[@]}"; do
		IFS='|' read -r name addr _ <<<"$t"
		line=$("$work/benchload" -url "http://$addr/v1/chat/completions" -rate "$RATE" -conns 64 -duration "$DURATION" 2>>"$work/benchload.err")
		# "offered=N answered=N failed=N non2xx=N rps=N p50_ms=X ..." -> fields
		printf '%s|%s|%s\n' "$RATE" "$name" "$(tr ' ' '\n' <<<"$line" | cut -d= -f2 | paste -sd'|')" >>"$fixed"
	done
done
# fields: 1 rate, 2 target, 3 offered, 4 answered, 5 failed, 6 non2xx, 7 rps,
# 8 p50, 9 p90, 10 p99, 11 p99.9, 12 max
echo
echo "| offered requests/s | target | answered requests/s | p50 (ms) | p90 (ms) | p99 (ms) | p99.9 (ms) | failed + non-2xx | added p99 (ms) |"
echo "|---|---|---|---|---|---|---|---|---|"
runs=$fixed
direct=$(median "$RATE" "shim (direct)" 10)
for t in "${TARGETS[@]}"; do
	name=${t%%|*}
	bad=$(awk -F'|' -v n="$name" '$2 == n {s += $5 + $6} END {print s + 0}' "$fixed")
	awk -v rate="$RATE" -v n="$name" -v rps="$(median "$RATE" "$name" 7)" -v p50="$(median "$RATE" "$name" 8)" \
		-v p90="$(median "$RATE" "$name" 9)" -v p99="$(median "$RATE" "$name" 10)" -v p999="$(median "$RATE" "$name" 11)" \
		-v bad="$bad" -v direct="$direct" 'BEGIN {
		added = (n == "shim (direct)") ? "" : sprintf("%+.2f", p99 - direct)
		printf "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", rate, n, rps, p50, p90, p99, p999, bad, added
	}'
done
# benchload prints the first few failures of each run; show them, so a
# count in the last column comes with its reasons.
if [ -s "$work/benchload.err" ]; then
	echo
	echo "benchload reported:"
	sort "$work/benchload.err" | uniq -c | sort -rn | head -20
fi

#!/usr/bin/env bash
# Measures gap recovery by replay in the simulator: the Mooncake
# conversation trace on scenarios/mooncake-16.yaml's fleet under the
# KV-aware picker, with messages lost at each rate in LOSSES, the workers'
# publishers offering replay or not, same seed. Each rate runs twice:
# lost from both streams (network.load_loss: kv-events and load samples),
# and from kv-events alone (network.kv_loss). Baselines: no loss, and
# round robin at each loss.
#
#   SWITCHYARD_TRACE_DIR=DIR hack/bench-kv-replay.sh [LOSSES...]
#
# Prints a Markdown table (hit ratio, TTFT p50/p90, the tracker's gaps,
# replays requested, messages recovered and lost).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 0 ]; then LOSSES=("$@"); else LOSSES=(0.001 0.01); fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/switchyard" ./cmd/switchyard

# scenario PICKER LOSS REPLAY STREAMS writes a variant of mooncake-16.yaml.
scenario() {
	local f="$work/$1-$2-$3-$4.yaml"
	local knob=load_loss
	[ "$4" = kv-events ] && knob=kv_loss
	{
		echo "name: mooncake-16-$1-$knob-$2-replay-$3"
		echo "seed: 1"
		echo "picker: $1"
		echo "fleet:"
		echo "  - role: aggregated"
		echo "    count: 16"
		[ "$3" = on ] && echo "    kv_replay: {enabled: true}"
		echo "network: {$knob: $2}"
		echo "workload: {trace: {path: mooncake_conversation_trace.jsonl}}"
		echo "slo: {ttft: 2s, itl: 100ms}"
	} >"$f"
	echo "$f"
}

run() {
	local f
	f=$(scenario "$@")
	"$work/switchyard" sim --scenario "$f" --json --log-level error >"$f.json"
	python3 - "$f.json" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s, c = d["stats"], d["core"]
kv, rp = c.get("kv_messages") or {}, c.get("kv_replay") or {}
print(f"| {sys.argv[2]} | {float(sys.argv[3])*100:g} % | {sys.argv[5]} | {sys.argv[4]} | {s['hit_ratio']:.3f} | "
      f"{s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p90']:.0f} | {kv.get('gap', 0):,} | "
      f"{rp.get('requested', 0):,} | {rp.get('recovered', 0):,} | {rp.get('lost', 0):,} |")
PY
}

echo "| picker | loss | lost from | replay | hit ratio | TTFT p50 / p90 (ms) | gaps (tracker) | replays | recovered | lost |"
echo "|---|---|---|---|---|---|---|---|---|---|"
run kv 0 off both
for loss in "${LOSSES[@]}"; do
	for streams in both kv-events; do
		run kv "$loss" off "$streams"
		run kv "$loss" on "$streams"
	done
	run round_robin "$loss" off both
done

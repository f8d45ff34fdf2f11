package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"switchyard/router/picker"
)

// validateFault checks the fields of the faults added for scenario suites
// (etcd, lease, network degradation, shim and reload faults): each takes
// only the fields it reads, and a fleet-wide one names no worker.
func (sc *Scenario) validateFault(i int, f Fault) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("faults[%d]%s", i, fmt.Sprintf(format, a...)))
	}
	if f.Kind.FleetWide() && (f.workerSet || f.Worker != 0) {
		what := map[FaultKind]string{FaultEtcdRestart: "etcd faults", FaultEtcdCompaction: "etcd faults",
			FaultShimSlow: "shim faults", FaultShimFail: "shim faults", FaultShimRecover: "shim faults", FaultReload: "reload"}[f.Kind]
		verb := "name"
		if f.Kind == FaultReload {
			verb = "names"
		}
		bad(".worker: %s %s no worker", what, verb)
	}
	if f.Kind.FleetWide() && f.Factor != 0 {
		bad(".factor: only for slow")
	}
	if f.Kind.ofEtcd() && sc.Discovery.Kubernetes() {
		bad(".kind: %s needs etcd discovery, and discovery.source is %s", f.Kind, sc.Discovery.Source)
	}
	switch f.Kind {
	case FaultEtcdRestart:
		if f.Duration <= 0 {
			bad(".duration: must be > 0")
		}
	case FaultLeaseExpiry:
		if f.Duration < 0 {
			bad(".duration: must be >= 0 (0: the worker never registers again)")
		}
	default:
		if f.Duration != 0 {
			bad(".duration: only for etcd_restart and lease_expiry")
		}
	}
	switch f.Kind {
	case FaultDegrade:
		if f.Delay < 0 {
			bad(".delay: must be >= 0")
		}
		if !(f.Loss >= 0 && f.Loss < 1) {
			bad(".loss: must be in [0, 1)")
		}
		if f.Delay == 0 && f.Loss == 0 {
			bad(".delay: degrade needs delay > 0 or loss > 0")
		}
	case FaultShimSlow:
		if f.Delay <= 0 {
			bad(".delay: must be > 0")
		}
	default:
		if f.Delay != 0 {
			bad(".delay: only for degrade and shim_slow")
		}
	}
	if f.Kind != FaultDegrade && f.Loss != 0 {
		bad(".loss: only for degrade")
	}
	if f.Kind == FaultDrop && (f.Count < 0 || f.Count > MaxDropCount) {
		bad(".count: must be in [1, %d] (0: 1)", MaxDropCount)
	}
	if f.Kind != FaultDrop && f.Count != 0 {
		bad(".count: only for drop")
	}
	if f.Kind != FaultReload {
		if f.Router != nil {
			bad(".router: only for reload")
		}
		return errs
	}
	rl := f.Router
	if rl == nil {
		bad(".router: required for reload (picker, max_staleness or kv)")
		return errs
	}
	if rl.Picker != "" && !slices.Contains(picker.Names(), rl.Picker) {
		bad(".router.picker: unknown picker %q (known: %s)", rl.Picker, strings.Join(picker.Names(), ", "))
	}
	if rl.MaxStaleness != nil && *rl.MaxStaleness < 0 {
		bad(".router.max_staleness: must be >= 0")
	}
	if rl.Picker == "" && rl.MaxStaleness == nil && rl.KV == nil {
		bad(".router: changes nothing: set picker, max_staleness or kv")
	}
	if rl.KV != nil {
		errs = append(errs, validateKV(fmt.Sprintf("faults[%d].router.kv", i), rl.KV.Over(sc.Router.KV))...)
	}
	return errs
}

// validateKV checks a router.kv block (or one a reload makes) at path.
func validateKV(path string, k KVParams) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(path+format, a...)) }
	if ko := k.Options(); ko.OverlapScoreCredit < 0 || ko.OverlapScoreCredit > 1 || ko.PrefillLoadScale < 0 ||
		ko.Temperature < 0 || ko.DecodeBusyThreshold != nil && (*ko.DecodeBusyThreshold < 0 || *ko.DecodeBusyThreshold > 1) {
		bad(": overlap_score_credit and decode_busy_threshold must be in [0, 1], prefill_load_scale and router_temperature >= 0")
	}
	if ttl := k.PredictedBlockTTL; ttl < 0 || ttl > Duration(24*time.Hour) {
		bad(".predicted_block_ttl: must be between 0 (120s) and 24h")
	}
	if k.ExpectedOutputTokens < 0 || k.DecodeActiveRequestWeight < 0 || math.IsNaN(k.DecodeActiveRequestWeight) ||
		k.OverlapScoreCreditDecay < 0 || math.IsNaN(k.OverlapScoreCreditDecay) {
		bad(": expected_output_tokens, decode_active_request_weight and overlap_score_credit_decay must be >= 0")
	}
	return errs
}

package live

import (
	"fmt"
	"time"

	"switchyard/router/config"
	"switchyard/router/coreconfig"
	"switchyard/router/kv"
	"switchyard/router/picker"
	"switchyard/sim"
)

// backendName is the one shim backend: the frontend emulation.
const backendName = "dynamo-frontend"

// routerConfig is the router's configuration for sc, rendered as a file
// would say it so every default is filled as for `serve`: discovery from
// the run's etcd in the scenario's namespace, the frontend emulation as
// the one shim backend, the scenario's picker (kv turns dynamo.kv on),
// max_staleness, and router.kv mapped onto dynamo.kv. The mapping is
// checked: the core must get exactly the picker options the simulator
// would.
func routerConfig(sc *sim.Scenario, token, etcd, frontendURL string) (*config.Config, error) {
	staleness := ""
	if sc.Router.MaxStaleness > 0 {
		staleness = fmt.Sprintf("    max_staleness: %q\n", sc.Router.MaxStaleness.Std().String())
	}
	y := fmt.Sprintf(`server: {bind_address: "127.0.0.1:0"}
admin: {token: %q}
gateway: {shutdown_grace: "5s"}
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: [%q]
      namespace: %q
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
%s  shim:
    backends: [%s]
  kv: {enabled: %t}
disaggregated_serving: {enabled: true}
backends:
  - {name: %s, type: openai, url: %q, role: unified, models: [%q]}
`, token, etcd, sc.Namespace, staleness, backendName, sc.Picker == picker.NameKV, backendName, frontendURL, sc.Model)
	cfg, err := config.Parse([]byte(y), nil)
	if err != nil {
		return nil, err
	}
	want := sc.Router.KV.Options()
	setKV(&cfg.Dynamo.KV, want)
	if got := coreconfig.KVOptions(cfg.Dynamo.KV); !sameKV(got, want) {
		return nil, fmt.Errorf("router.kv: the live router would select with %+v, not the scenario's %+v", got, want)
	}
	return cfg, nil
}

// setKV writes the picker options o onto dynamo.kv.
func setKV(k *config.KV, o picker.KVOptions) {
	k.OverlapScoreCredit, k.PrefillLoadScale, k.RouterTemperature = o.OverlapScoreCredit, o.PrefillLoadScale, o.Temperature
	k.ConditionalDisaggregation.Enabled = o.ConditionalDisagg
	k.ConditionalDisaggregation.DecodeBusyThreshold = o.DecodeBusyThreshold
	k.UseKVEvents = !o.PredictCache
	if o.PredictCache {
		k.PredictedBlockTTL = config.Duration(predictedTTL(o.PredictedTTL))
	}
	k.TrackActiveBlocks, k.TrackPrefillTokens, k.TrackOutputBlocks = o.Track.ActiveBlocks, o.Track.PrefillTokens, o.Track.OutputBlocks
	k.ExpectedOutputTokens = o.Track.ExpectedOutputTokens
	k.DecodeActiveRequestWeight, k.OverlapScoreCreditDecay = o.DecodeActiveRequestWeight, o.OverlapScoreCreditDecay
}

// predictedTTL is the TTL the tracker uses for d (0 is its default).
func predictedTTL(d time.Duration) time.Duration {
	if d == 0 {
		return kv.DefaultPredictedTTL
	}
	return d
}

// sameKV compares picker options as the picker reads them: the busy
// threshold by value, a predicted TTL of 0 as the default.
func sameKV(a, b picker.KVOptions) bool {
	ta, tb := a.DecodeBusyThreshold, b.DecodeBusyThreshold
	a.DecodeBusyThreshold, b.DecodeBusyThreshold = nil, nil
	a.PredictedTTL, b.PredictedTTL = predictedTTL(a.PredictedTTL), predictedTTL(b.PredictedTTL)
	if !a.PredictCache {
		a.PredictedTTL = 0
	}
	if !b.PredictCache {
		b.PredictedTTL = 0
	}
	return a == b && (ta == nil) == (tb == nil) && (ta == nil || *ta == *tb)
}

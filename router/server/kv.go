package server

import (
	"switchyard/router/config"
	"switchyard/router/picker"
)

// kvActive reports whether cfg asks for KV-aware selection.
func kvActive(cfg *config.Config) bool { return cfg.Dynamo.Enabled && cfg.Dynamo.KV.Enabled }

// PickerName is the picker a router running cfg selects with: "kv" when
// dynamo.kv.enabled (and dynamo.enabled), else "load". A recording of the
// process names it.
func PickerName(cfg *config.Config) string {
	if kvActive(cfg) {
		return picker.NameKV
	}
	return picker.NameLoad
}

// kvOptionsEqual compares two KV settings, the busy threshold by value.
func kvOptionsEqual(a, b picker.KVOptions) bool {
	ta, tb := a.DecodeBusyThreshold, b.DecodeBusyThreshold
	a.DecodeBusyThreshold, b.DecodeBusyThreshold = nil, nil
	return a == b && (ta == nil) == (tb == nil) && (ta == nil || *ta == *tb)
}

package discovery

import (
	"log/slog"
	"sort"
)

// maxMixedNamed bounds the (namespace, model) pairs one publish names in
// warnings: model names come from etcd, so a hostile fleet must not be able
// to flood the log.
const maxMixedNamed = 8

type nsModel struct{ namespace, model string }

type roleCounts struct{ prefill, decode, aggregated int }

// mixedWatch warns when a published view first makes a namespace serve one
// model from aggregated workers beside prefill or decode workers: Dynamo's
// direct-mode frontend then picks a worker set at random per request and
// refuses instance ids from the other. A pair is warned about once while
// it stays mixed.
type mixedWatch struct {
	warned map[nsModel]bool
	// seen is the worker list last observed: a publish that changed only
	// publishers shares it, and walking 16,384 workers again would find
	// nothing new.
	seen []*Worker
}

func (m *mixedWatch) observe(log *slog.Logger, v *View) {
	if sameSlice(m.seen, v.Workers) {
		return
	}
	m.seen = v.Workers
	counts := map[nsModel]*roleCounts{}
	for _, w := range v.Workers {
		if w.Model == "" {
			continue
		}
		k := nsModel{w.Namespace, w.Model}
		c := counts[k]
		if c == nil {
			c = &roleCounts{}
			counts[k] = c
		}
		switch w.Role {
		case RolePrefill:
			c.prefill++
		case RoleDecode:
			c.decode++
		case RoleAggregated:
			c.aggregated++
		}
	}
	now := map[nsModel]bool{}
	var fresh []nsModel
	for k, c := range counts {
		if c.aggregated > 0 && c.prefill+c.decode > 0 {
			now[k] = true
			if !m.warned[k] {
				fresh = append(fresh, k)
			}
		}
	}
	m.warned = now
	sort.Slice(fresh, func(i, j int) bool {
		if fresh[i].namespace != fresh[j].namespace {
			return fresh[i].namespace < fresh[j].namespace
		}
		return fresh[i].model < fresh[j].model
	})
	for i, k := range fresh {
		if i == maxMixedNamed {
			log.Warn("more namespaces started serving a model from mixed roles",
				"shown", maxMixedNamed, "suppressed", len(fresh)-maxMixedNamed)
			break
		}
		c := counts[k]
		log.Warn("namespace serves one model from aggregated workers beside prefill/decode workers; "+
			"a direct-mode frontend cannot serve such a fleet reliably",
			"namespace", k.namespace, "model", k.model,
			"prefill", c.prefill, "decode", c.decode, "aggregated", c.aggregated)
	}
}

// sameSlice reports whether a and b are the same slice of the same array:
// the reducer reuses its worker list when no worker changed.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"switchyard/router/discovery"
)

// modelList is OpenAI's GET /v1/models answer.
type modelList struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// models lists what the caller can ask for: the models of every enabled,
// non-internal unified backend the key may use (exactly what unified
// routing can reach), plus the models Dynamo workers serve behind a shim
// pool the key may use, under their client ids when dynamo.shim.model_map
// maps some to them.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	st := g.st.Load()
	key, ok := st.authenticate(r)
	if !ok {
		writeUnauthorized(w)
		return
	}
	ids := map[string]bool{}
	for model, rot := range st.unified {
		if rot.allowsAny(key) {
			ids[model] = true
		}
	}
	if st.pinning {
		for _, wk := range g.snapshot().Workers {
			pl := st.poolByNS[wk.Namespace]
			if pl == nil || wk.Model == "" || !routable(wk) || !pl.allowsAny(key) {
				continue
			}
			if clients := st.reverse[wk.Model]; len(clients) > 0 {
				for _, c := range clients {
					ids[c] = true
				}
			} else {
				ids[wk.Model] = true
			}
		}
	}
	list := modelList{Object: "list", Data: make([]modelEntry, 0, len(ids))}
	for id := range ids {
		list.Data = append(list.Data, modelEntry{ID: id, Object: "model", OwnedBy: "switchyard"})
	}
	slices.SortFunc(list.Data, func(a, b modelEntry) int { return strings.Compare(a.ID, b.ID) })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// routable reports whether a worker can serve requests on its own: a
// decode or aggregated worker (prefill workers only serve through one).
func routable(w *discovery.Worker) bool {
	return w.Role == discovery.RoleDecode || w.Role == discovery.RoleAggregated
}

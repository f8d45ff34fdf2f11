package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"switchyard/fakefleet/frontend"
)

// AdminHandler serves fault injection for a running fleet (loopback only;
// it is test tooling):
//
//	GET  /fleet/workers                        the workers, their roles and loads
//	POST /fleet/workers/{id}/kill              crash: stop at once, lease lapses
//	POST /fleet/workers/{id}/stall?on=false    stop (resume) progress and publishing
//	POST /fleet/workers/{id}/restart-publisher new publisher id, re-advertised
//	POST /fleet/workers/{id}/gap               skip one load sequence
//	POST /fleet/workers/{id}/drop?n=1          lose kv-events messages, kept for replay
//	POST /fleet/workers/{id}/malformed         publish a malformed message
//	POST /fleet/workers/{id}/malformed-record  a non-JSON discovery record under its lease
//	POST /fleet/workers/{id}/reset             empty the KV cache (engine workers): Cleared
//	POST /fleet/workers/{id}/slow?ms=200       add delay per token (0 clears)
//	POST /fleet/workers/{id}/fail?on=false     answer generations with 5xx
//
// {id} is the decimal worker id (the admin API's worker_id).
func (f *Fleet) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fleet/workers", func(w http.ResponseWriter, r *http.Request) {
		type rank struct {
			Rank                                                  uint32
			KVUsedBlocks, ActiveDecodeBlocks, ActivePrefillTokens uint64
		}
		type row struct {
			WorkerID    string `json:"worker_id"`
			InstanceID  string `json:"instance_id"`
			Role        string `json:"role"`
			PublisherID string `json:"publisher_id"`
			Ranks       []rank `json:"ranks"`
		}
		out := []row{}
		for _, m := range f.Members() {
			rw := row{WorkerID: strconv.FormatUint(m.ID(), 10), InstanceID: strconv.FormatUint(m.ID(), 16),
				Role: m.Role, PublisherID: strconv.FormatUint(m.pub.ID(), 10)}
			for i := 0; i < f.spec.DPSize; i++ {
				l := m.Worker.Load(uint32(i))
				rw.Ranks = append(rw.Ranks, rank{uint32(i), l.KVUsedBlocks, l.ActiveDecodeBlocks, l.ActivePrefillTokens})
			}
			out = append(out, rw)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /fleet/workers/{id}/{fault}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			http.Error(w, "worker id must be decimal", http.StatusBadRequest)
			return
		}
		on := r.URL.Query().Get("on") != "false"
		switch r.PathValue("fault") {
		case "kill":
			err = f.Kill(id)
		case "stall":
			err = f.Stall(id, on)
		case "restart-publisher":
			err = f.RestartPublisher(r.Context(), id)
		case "gap":
			err = f.Gap(id)
		case "drop":
			n := 1
			if q := r.URL.Query().Get("n"); q != "" {
				if n, err = strconv.Atoi(q); err != nil || n < 1 || n > maxDrop {
					http.Error(w, fmt.Sprintf("n must be 1-%d", maxDrop), http.StatusBadRequest)
					return
				}
			}
			err = f.Drop(id, n)
		case "malformed":
			err = f.Malformed(id)
		case "malformed-record":
			err = f.MalformedRecord(r.Context(), id)
		case "reset":
			err = f.Reset(id)
		case "slow", "fail":
			var m *Member
			if m, err = f.member(id); err == nil {
				if r.PathValue("fault") == "fail" {
					m.Worker.SetFailing(on)
				} else {
					ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
					m.Worker.SetSlow(time.Duration(ms) * time.Millisecond)
				}
			}
		default:
			http.Error(w, "unknown fault", http.StatusNotFound)
			return
		}
		switch {
		case errors.Is(err, ErrNoWorker):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, ErrNoEngine):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	return mux
}

// Handler is the fleet's whole HTTP surface on one listener: the
// direct-mode frontend emulation, with the fault API under /fleet/.
func (f *Fleet) Handler(log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/fleet/", f.AdminHandler())
	fe := frontend.New(f.Directory(), log.With("component", "frontend"))
	if f.prompts != nil {
		fe.UsePrompts(f.prompts)
	}
	mux.Handle("/", fe)
	return mux
}

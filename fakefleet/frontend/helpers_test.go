package frontend

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"switchyard/fakefleet/worker"
	"switchyard/router/clock"
)

const (
	disaggModel = "Qwen/Qwen3-0.6B"
	aggModel    = "llama-agg"

	prefillID  = 966999679619852
	decodeID   = 2173882273627495
	aggID      = 5
	otherModel = 99 // a decode worker of aggModel, pinned for disaggModel
)

// directory is a fixed Directory.
type directory struct {
	workers map[uint64]*entry
}

type entry struct {
	w     *worker.Worker
	model string
	rec   *recorder
}

func (d *directory) Worker(id uint64) (Generator, string, bool) {
	e, ok := d.workers[id]
	if !ok {
		return nil, "", false
	}
	return e.w, e.model, true
}

func (d *directory) HasPrefill(model string) bool {
	for _, e := range d.workers {
		if e.model == model && e.w.Config().Role == worker.RolePrefill {
			return true
		}
	}
	return false
}

func (d *directory) Models() []string {
	var ms []string
	for _, e := range d.workers {
		if !slices.Contains(ms, e.model) {
			ms = append(ms, e.model)
		}
	}
	slices.Sort(ms)
	return ms
}

// recorder keeps a worker's load changes by rank: what it served, where.
type recorder struct {
	mu    sync.Mutex
	loads map[uint32][]worker.Load
}

func (r *recorder) ranks() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint32
	for k := range r.loads {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (r *recorder) first(rank uint32) worker.Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loads[rank][0]
}

// fleet is a frontend over a prefill worker (2 ranks) and a decode worker
// (4 ranks) of disaggModel, and an aggregated worker of aggModel.
type fleet struct {
	dir *directory
	srv *httptest.Server
}

func newFleet(t *testing.T) *fleet {
	d := &directory{workers: map[uint64]*entry{}}
	add := func(id uint64, model, role string, dp int) {
		w := worker.New(worker.Config{
			Model: model, Role: role, BlockSize: 16, TotalKVBlocks: 1024, DPSize: dp, SpeedupRatio: 1000,
		}, clock.Real{})
		rec := &recorder{loads: map[uint32][]worker.Load{}}
		w.OnChange(func(rank uint32) {
			l := w.Load(rank)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			rec.loads[rank] = append(rec.loads[rank], l)
		})
		d.workers[id] = &entry{w: w, model: model, rec: rec}
	}
	add(prefillID, disaggModel, worker.RolePrefill, 2)
	add(decodeID, disaggModel, worker.RoleDecode, 4)
	add(aggID, aggModel, worker.RoleAggregated, 1)
	add(otherModel, aggModel, worker.RoleDecode, 1)
	srv := httptest.NewServer(New(d, nil))
	t.Cleanup(srv.Close)
	return &fleet{dir: d, srv: srv}
}

func (f *fleet) worker(id uint64) *entry { return f.dir.workers[id] }

// client is an OpenAI client for the fleet with the given headers (name,
// value pairs) and no retries, so error answers are seen as they are.
func (f *fleet) client(headers ...string) openai.Client {
	opts := []option.RequestOption{
		option.WithBaseURL(f.srv.URL + "/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHTTPClient(f.srv.Client()),
	}
	for i := 0; i+1 < len(headers); i += 2 {
		opts = append(opts, option.WithHeader(headers[i], headers[i+1]))
	}
	return openai.NewClient(opts...)
}

func chatParams(model string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Say hello to the fleet")},
		MaxTokens: openai.Int(maxTokens),
	}
}

// responseInto captures the HTTP response for header checks.
func responseInto(dst **http.Response) option.RequestOption { return option.WithResponseInto(dst) }

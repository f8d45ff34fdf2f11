// Package registrar registers a fake Dynamo worker in etcd the way a real
// one does: every record is put under the worker's own lease, the lease is
// kept alive, and the worker's instance id is the lease id. Killing the
// worker stops the keep-alive, so its keys vanish when the lease lapses,
// exactly what the router must notice.
//
// This is fleet-side code: it writes to etcd. The router's discovery
// packages never import it.
package registrar

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultTTL is Dynamo's lease TTL in seconds.
const DefaultTTL = 10

// Worker describes one fake worker's discovery records.
type Worker struct {
	Namespace string
	// Component is prefill, decode or backend (aggregated).
	Component string
	// WorkerType is the card's worker_type: prefill, decode or aggregated.
	WorkerType string
	Model      string
	BlockSize  int
	// Card runtime capacity.
	TotalKVBlocks, MaxNumBatchedTokens, MaxNumSeqs, ContextLength int
	DPSize                                                        int
	// Transport is the request-plane address advertised in the Endpoint record.
	Transport string
}

// Registration is a live worker registration.
type Registration struct {
	client *clientv3.Client
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	keys   []string
}

// Register grants a lease with ttl seconds, keeps it alive, and puts the
// worker's Endpoint and Model records under it.
func Register(ctx context.Context, cli *clientv3.Client, w Worker, ttl int64) (*Registration, error) {
	grant, err := cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	kaCtx, cancel := context.WithCancel(context.Background())
	ka, err := cli.KeepAlive(kaCtx, grant.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	go func() {
		for range ka { // drain acknowledgements until cancelled
		}
	}()
	r := &Registration{client: cli, lease: grant.ID, cancel: cancel}
	for key, value := range Records(w, uint64(grant.ID)) {
		if _, err := cli.Put(ctx, key, string(value), clientv3.WithLease(grant.ID)); err != nil {
			r.Kill()
			return nil, fmt.Errorf("put %s: %w", key, err)
		}
		r.keys = append(r.keys, key)
	}
	return r, nil
}

// InstanceID is the worker's id: its lease id.
func (r *Registration) InstanceID() uint64 { return uint64(r.lease) }

// Kill stops the keep-alive without revoking: the keys disappear when the
// lease's TTL lapses, as when a worker process dies.
func (r *Registration) Kill() { r.cancel() }

// Deregister revokes the lease, removing the keys at once (a clean shutdown).
func (r *Registration) Deregister(ctx context.Context) error {
	r.cancel()
	_, err := r.client.Revoke(ctx, r.lease)
	return err
}

// Records renders a worker's Endpoint and Model records, keyed as Dynamo
// keys them (instance id in lower-case hex).
func Records(w Worker, instanceID uint64) map[string][]byte {
	hex := strconv.FormatUint(instanceID, 16)
	ep := map[string]any{
		"type": "Endpoint", "namespace": w.Namespace, "component": w.Component, "endpoint": "generate",
		"instance_id": instanceID, "transport": map[string]any{"tcp": w.Transport},
	}
	runtime := map[string]any{
		"total_kv_blocks": w.TotalKVBlocks, "max_num_batched_tokens": w.MaxNumBatchedTokens,
		"max_num_seqs": w.MaxNumSeqs, "context_length": w.ContextLength,
		"data_parallel_start_rank": 0, "data_parallel_size": max(w.DPSize, 1),
	}
	card := map[string]any{
		"display_name": w.Model, "worker_type": w.WorkerType, "kv_cache_block_size": w.BlockSize,
		"model_input": "Tokens", "model_type": "Chat | Completions", "runtime_config": runtime,
	}
	model := map[string]any{
		"type": "Model", "namespace": w.Namespace, "component": w.Component, "endpoint": "generate",
		"instance_id": instanceID, "card_json": card,
	}
	path := fmt.Sprintf("%s/%s/generate/%s", w.Namespace, w.Component, hex)
	return map[string][]byte{
		"v1/instances/" + path: mustJSON(ep),
		"v1/mdc/" + path:       mustJSON(model),
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of plain values above
	}
	return b
}

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
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/router/discovery"
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
	// Channels are the event-plane publishers the worker advertises.
	Channels []Channel
}

// Channel is one advertised event-plane publisher (kv_metrics, kv-events).
type Channel struct {
	Topic       string
	PublisherID uint64
	// Endpoint is tcp://host:port of the publisher's ZMQ PUB socket.
	Endpoint string
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

// Readvertise rewrites the worker's records under the same lease (for
// example after a publisher restart changed a channel's id and endpoint)
// and removes keys the new records no longer use.
func (r *Registration) Readvertise(ctx context.Context, w Worker) error {
	recs := Records(w, r.InstanceID())
	for key, value := range recs {
		if _, err := r.client.Put(ctx, key, string(value), clientv3.WithLease(r.lease)); err != nil {
			return err
		}
	}
	kept := r.keys[:0]
	for _, key := range r.keys {
		if _, ok := recs[key]; ok {
			kept = append(kept, key)
			continue
		}
		if _, err := r.client.Delete(ctx, key); err != nil {
			return err
		}
	}
	r.keys = kept
	for key := range recs {
		if !slices.Contains(r.keys, key) {
			r.keys = append(r.keys, key)
		}
	}
	return nil
}

// PutRaw writes an arbitrary value under the worker's lease (fault
// injection: a malformed discovery record that dies with the worker).
func (r *Registration) PutRaw(ctx context.Context, key string, value []byte) error {
	if _, err := r.client.Put(ctx, key, string(value), clientv3.WithLease(r.lease)); err != nil {
		return err
	}
	r.keys = append(r.keys, key)
	return nil
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
	out := map[string][]byte{
		"v1/instances/" + path: mustJSON(ep),
		"v1/mdc/" + path:       mustJSON(model),
	}
	for _, c := range w.Channels {
		// The scope-based layout of newer releases: endpoint-scoped, with
		// the publisher's own id (not the worker's) as instance_id.
		key := fmt.Sprintf("v1/event_channels/namespace/%s/component/%s/endpoint/generate/topic/%s/%x",
			discovery.EncodeSegment(w.Namespace), discovery.EncodeSegment(w.Component), discovery.EncodeSegment(c.Topic), c.PublisherID)
		out[key] = mustJSON(map[string]any{
			"type":  "EventChannel",
			"scope": map[string]any{"kind": "endpoint", "endpoint": map[string]any{"namespace": w.Namespace, "component": w.Component, "name": "generate"}},
			"topic": c.Topic, "instance_id": c.PublisherID,
			"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": c.Endpoint}},
		})
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of plain values above
	}
	return b
}

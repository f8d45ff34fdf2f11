package fleet

import (
	"context"
	"log/slog"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/kuberegistrar"
	"switchyard/fakefleet/registrar"
)

// Registry is where the fleet publishes its workers for discovery: etcd
// (leases and records, as Dynamo's etcd discovery) or a Kubernetes API
// server (Pods, DynamoWorkerMetadata, EndpointSlices).
type Registry interface {
	Register(ctx context.Context, w registrar.Worker, log *slog.Logger) (Registration, error)
}

// Registration is one published worker.
type Registration interface {
	// InstanceID is the id discovery gives the worker.
	InstanceID() uint64
	// Readvertise publishes the worker's changed records.
	Readvertise(ctx context.Context, w registrar.Worker) error
	// PutMalformed publishes an unreadable record beside the worker's own.
	PutMalformed(ctx context.Context) error
	// Kill ends the worker as a crash would, for discovery to notice.
	Kill()
	// Deregister removes the worker at once (a clean shutdown).
	Deregister(ctx context.Context) error
}

// EtcdRegistry registers workers in etcd under their own leases of TTL
// seconds (registrar.DefaultTTL when 0).
func EtcdRegistry(cli *clientv3.Client, ttl int64) Registry { return etcdRegistry{cli, ttl} }

type etcdRegistry struct {
	cli *clientv3.Client
	ttl int64
}

func (e etcdRegistry) Register(ctx context.Context, w registrar.Worker, log *slog.Logger) (Registration, error) {
	ttl := e.ttl
	if ttl <= 0 {
		ttl = registrar.DefaultTTL
	}
	reg, err := registrar.Register(ctx, e.cli, w, ttl, log)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

// KubernetesRegistry publishes workers as the objects of r's shape.
func KubernetesRegistry(r *kuberegistrar.Registrar) Registry { return kubeRegistry{r} }

type kubeRegistry struct{ r *kuberegistrar.Registrar }

func (k kubeRegistry) Register(ctx context.Context, w registrar.Worker, log *slog.Logger) (Registration, error) {
	reg, err := k.r.Register(ctx, w, log)
	if err != nil {
		return nil, err
	}
	return reg, nil
}

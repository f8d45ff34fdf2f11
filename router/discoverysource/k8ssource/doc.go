// Package k8ssource holds the read-only Kubernetes discovery sources.
//
// The metadata source (dynamo.discovery.source: kubernetes, MetaWatcher)
// reads the DynamoWorkerMetadata resources Dynamo workers publish, joined
// with EndpointSlice readiness, and feeds the records they carry to the
// etcd reducer unchanged: see metawatcher.go and metafleet.go.
//
// The Pod source (dynamo.discovery.source: kubernetes_pods, Watcher) lists
// and watches the Pods the Dynamo operator labels for Kubernetes discovery
// and turns the ready worker Pods into discovery events for the core.
//
// Pods carry no model cards or event channels, so each ready worker Pod is
// described to the core as the two records a worker would register in etcd:
// an Endpoint and a minimal model card naming the configured model and the
// role read from the Pod's labels. The discovery reducer then builds the
// workers exactly as it does for etcd, and refuses two Pods whose names hash
// to one instance id as a duplicate identity. Those workers have no capacity
// and no load publisher, so the picker rotates round-robin across them.
//
// Each pass builds a client (in-cluster credentials first, then KUBECONFIG
// or ~/.kube/config), lists matching Pods in pages, hands the host one
// DiscoveryResync per Dynamo namespace, then watches from the list's
// resourceVersion. Any end of the watch (the routine server-side close,
// 410 Gone, a transport error, or the idle deadline) starts a fresh pass
// after a backoff: a relist, never a resume. The source only gets, lists
// and watches; it never writes to the API server.
package k8ssource

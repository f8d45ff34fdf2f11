// Package kuberegistrar publishes fake Dynamo workers to a Kubernetes API
// server the way Dynamo's operator and workers do: a labelled worker Pod
// with a kubelet-like status, the worker's DynamoWorkerMetadata carrying
// the records an etcd-registered worker would put, and an EndpointSlice
// saying whether the Pod is ready. The router's Kubernetes sources
// (router/discoverysource/k8ssource) then discover the fleet exactly as
// they discover a real one.
//
// This is fleet-side code: it writes to the API server. The router's
// discovery packages never import it.
package kuberegistrar

package k8ssource

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
)

// The seed's list, watch and backoff figures.
const (
	// DefaultBackoffInitial and DefaultBackoffMax apply to a zero Config.
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	// pageSize is the list page (limit) size.
	pageSize = 500
	// MaxPods is the most Pods held; more are refused and counted.
	MaxPods = 16384
	// watchTimeout is the server-side close requested of every watch
	// (timeoutSeconds); a routine close starts a relist.
	watchTimeout = 290 * time.Second
	// idleTimeout ends a watch that delivered nothing (not even a
	// bookmark) for this long, so a half-open connection cannot leave
	// discovery frozen while it looks connected.
	idleTimeout = 320 * time.Second
	// requestTimeout bounds a pass's client build, list and watch opening
	// together.
	requestTimeout = 30 * time.Second
)

// ComponentModel maps one nvidia.com/dynamo-component value in one Dynamo
// namespace to the model its Pods serve.
type ComponentModel struct {
	DynamoNamespace, Component, Model string
}

// Config is what one Pod watcher needs. router/config validates the user's
// configuration with field paths; Run only refuses a Config no pass could
// use.
type Config struct {
	// Namespace is the Kubernetes namespace of the fleet's Pods.
	Namespace string
	// DynamoNamespaces are the nvidia.com/dynamo-namespace label values
	// selected, >= 1.
	DynamoNamespaces []string
	// Model is served by every worker Pod; when empty, Models maps
	// components to models and Pods of unlisted components are held
	// without being published.
	Model  string
	Models []ComponentModel
	// BackoffInitial and BackoffMax bound the wait between passes
	// (0 = the defaults).
	BackoffInitial, BackoffMax time.Duration
	// REST, when set, is used instead of in-cluster credentials or a
	// kubeconfig (tests point it at their API server).
	REST *rest.Config
}

// limits are the compiled-in figures; tests shrink them.
type limits struct {
	pageSize       int64
	maxPods        int
	watchTimeout   time.Duration
	idleTimeout    time.Duration
	requestTimeout time.Duration
}

func defaultLimits() limits {
	return limits{
		pageSize: pageSize, maxPods: MaxPods,
		watchTimeout: watchTimeout, idleTimeout: idleTimeout, requestTimeout: requestTimeout,
	}
}

func (c Config) check() error {
	if err := c.checkNamespaces(); err != nil {
		return err
	}
	if c.Model == "" && len(c.Models) == 0 {
		return errors.New("kubernetes pod discovery: neither model nor models is set")
	}
	return nil
}

// checkNamespaces is the part of check both Kubernetes sources need.
func (c Config) checkNamespaces() error {
	if c.Namespace == "" {
		return errors.New("kubernetes discovery: no namespace")
	}
	if len(c.DynamoNamespaces) == 0 {
		return errors.New("kubernetes discovery: no dynamo namespaces")
	}
	seen := map[string]bool{}
	for _, ns := range c.DynamoNamespaces {
		if ns == "" || seen[ns] {
			return fmt.Errorf("kubernetes discovery: bad or repeated dynamo namespace %q", ns)
		}
		seen[ns] = true
	}
	return nil
}

package peerservice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"switchyard/internal/kubetest"
)

type ep struct {
	addr              string
	ready, terminated *bool
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

func slice(name, service string, family discoveryv1.AddressType, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: family,
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Terminating: e.terminated}})
	}
	return s
}

// waitPeers waits for the watcher to hand over want, failing with the
// last list it handed over otherwise.
func waitPeers(t *testing.T, got <-chan []string, want ...string) {
	t.Helper()
	var last []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case last = <-got:
			if fmt.Sprint(last) == fmt.Sprint(want) {
				return
			}
		case <-deadline:
			t.Fatalf("peers %v, want %v", last, want)
		}
	}
}

// A real API server: the peers are the ready, not terminating endpoints
// of the Service's slices (not another Service's), this Pod's address
// left out, on the sync port; they follow slices created, updated and
// deleted.
func TestPeersFollowTheServicesEndpointSlices(t *testing.T) {
	ns := kubetest.Namespace(t)
	cs := kubetest.Client(t)
	ctx := context.Background()
	slices := cs.DiscoveryV1().EndpointSlices(ns)
	_, err := slices.Create(ctx, slice("epp-peers-a", "epp-peers", discoveryv1.AddressTypeIPv4,
		ep{"10.0.0.1", yes(), nil}, ep{"10.0.0.2", yes(), nil}, ep{"10.0.0.3", no(), nil},
		ep{"10.0.0.4", nil, nil}, ep{"10.0.0.5", yes(), yes()}), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = slices.Create(ctx, slice("other-a", "other", discoveryv1.AddressTypeIPv4, ep{"10.0.0.9", yes(), nil}), metav1.CreateOptions{})
	require.NoError(t, err)

	got := make(chan []string, 16)
	w, err := Start(Options{Namespace: ns, Service: "epp-peers", Port: 9010, Self: []string{"10.0.0.2"},
		Set: func(p []string) { got <- p }, REST: kubetest.Config(t)})
	require.NoError(t, err)
	t.Cleanup(w.Close)
	waitPeers(t, got, "10.0.0.1:9010")

	// A replica becomes ready; another appears in a second (IPv6) slice.
	a, err := slices.Get(ctx, "epp-peers-a", metav1.GetOptions{})
	require.NoError(t, err)
	a.Endpoints[2].Conditions.Ready = yes()
	_, err = slices.Update(ctx, a, metav1.UpdateOptions{})
	require.NoError(t, err)
	waitPeers(t, got, "10.0.0.1:9010", "10.0.0.3:9010")
	_, err = slices.Create(ctx, slice("epp-peers-b", "epp-peers", discoveryv1.AddressTypeIPv6, ep{"fd00::5", yes(), nil}), metav1.CreateOptions{})
	require.NoError(t, err)
	waitPeers(t, got, "10.0.0.1:9010", "10.0.0.3:9010", "[fd00::5]:9010")

	// The first slice goes: its replicas are no longer peers.
	require.NoError(t, slices.Delete(ctx, "epp-peers-a", metav1.DeleteOptions{}))
	waitPeers(t, got, "[fd00::5]:9010")
}

func TestSelfAndNamespaceFromEnvironment(t *testing.T) {
	env := map[string]string{"POD_IP": "10.0.0.2", "POD_IPS": "10.0.0.2, fd00::2", "POD_NAMESPACE": " team "}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	require.Equal(t, []string{"10.0.0.2", "fd00::2"}, SelfFromEnvironment(lookup))
	require.Equal(t, "team", NamespaceFromEnvironment(lookup))
	require.Empty(t, SelfFromEnvironment(func(string) (string, bool) { return "", false }))
}

func TestStartRefusesMissingOptions(t *testing.T) {
	_, err := Start(Options{Namespace: "ns", Service: "s", Port: 0, Set: func([]string) {}})
	require.ErrorContains(t, err, "required")
}

// The watcher works with exactly the rule docs/epp.md prescribes: get,
// list and watch on EndpointSlices in its namespace, nothing else.
func TestPeersNeedOnlyEndpointSliceReadAccess(t *testing.T) {
	ns := kubetest.Namespace(t)
	cs := kubetest.Client(t)
	ctx := context.Background()
	name := "peer-reader-" + ns
	user := kubetest.User(t, name)
	_, err := kubernetes.NewForConfigOrDie(user).DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "without the Role the user may not list EndpointSlices: %v", err)

	_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "peer-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"},
			Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "peer-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "peer-reader"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice("epp-peers-a", "epp-peers", discoveryv1.AddressTypeIPv4,
		ep{"10.0.0.1", yes(), nil}), metav1.CreateOptions{})
	require.NoError(t, err)

	got := make(chan []string, 16)
	w, err := Start(Options{Namespace: ns, Service: "epp-peers", Port: 9010, Set: func(p []string) { got <- p }, REST: user})
	require.NoError(t, err)
	t.Cleanup(w.Close)
	waitPeers(t, got, "10.0.0.1:9010")
}

package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

// TestUsableNamespaces checks the pick's namespaces in configuration order
// whichever pools are down, and that the usual answer, every pool, is the
// state's shared slice capped so that an append never writes into it.
func TestUsableNamespaces(t *testing.T) {
	names := []string{"a", "b", "c"}
	st := &state{}
	pools := map[string]*pool{}
	for _, ns := range names {
		rt := &runtime{breaker: newBreaker(1, time.Minute, nil)}
		rt.healthy.Store(true)
		pl := &pool{namespace: ns}
		pl.members = []*backend{{name: ns, cfg: config.Backend{Name: ns}, rt: rt}}
		st.pools, st.namespaces = append(st.pools, pl), append(st.namespaces, ns)
		pools[ns] = pl
	}
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		down []string
		want []string
	}{
		{nil, []string{"a", "b", "c"}},
		{[]string{"a"}, []string{"b", "c"}},
		{[]string{"b"}, []string{"a", "c"}},
		{[]string{"c"}, []string{"a", "b"}},
		{[]string{"a", "c"}, []string{"b"}},
		{[]string{"a", "b", "c"}, nil},
	} {
		for _, ns := range names {
			pools[ns].members[0].rt.healthy.Store(true)
		}
		for _, ns := range tc.down {
			pools[ns].members[0].rt.healthy.Store(false)
		}
		got := st.usableNamespaces(nil, now)
		if len(tc.want) == 0 {
			require.Empty(t, got, "down %v", tc.down)
			continue
		}
		require.Equal(t, tc.want, got, "down %v", tc.down)
	}
	for _, ns := range names {
		pools[ns].members[0].rt.healthy.Store(true)
	}
	all := st.usableNamespaces(nil, now)
	require.Same(t, &st.namespaces[0], &all[0], "every pool usable: the shared slice")
	require.Equal(t, len(all), cap(all), "an append to the answer must copy, not write into the state's array")
}

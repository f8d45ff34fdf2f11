package workload

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSharedPrefixGroups(t *testing.T) {
	const groups, users, s, q = 4, 5, 64, 16
	src, err := NewSharedPrefix(SharedPrefixConfig{Groups: groups, UsersPerGroup: users, SystemTokens: s,
		QuestionTokens: q, Output: Range{2, 9}, Rate: 10, Count: 2000}, 11)
	require.NoError(t, err)
	reqs := collect(t, src, 2000)
	requireOrdered(t, reqs)

	// Every request's first S tokens must be one of exactly G prefixes: shared within a group, and
	// no two groups collapsing into one.
	perPrefix := map[string]int{}
	questions := map[string]bool{}
	for _, r := range reqs {
		require.Len(t, r.Tokens, s+q)
		perPrefix[tokenKey(r.Tokens[:s])]++
		questions[tokenKey(r.Tokens[s:])] = true
	}
	require.Len(t, perPrefix, groups)
	for _, n := range perPrefix {
		require.InDelta(t, 2000/groups, n, 100, "users are picked uniformly, so groups get equal shares")
	}
	require.Len(t, questions, len(reqs), "questions are per request")

	// Different groups' prefixes must differ well before their end, not just in the last token.
	var prefixes [][]uint32
	for _, r := range reqs {
		if len(prefixes) == groups {
			break
		}
		if !containsPrefix(prefixes, r.Tokens[:s]) {
			prefixes = append(prefixes, r.Tokens[:s])
		}
	}
	for i := range prefixes {
		for j := i + 1; j < len(prefixes); j++ {
			require.Less(t, commonPrefix(prefixes[i], prefixes[j]), 4)
		}
	}
}

func tokenKey(ts []uint32) string {
	b := make([]byte, 0, 4*len(ts))
	for _, t := range ts {
		b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	return string(b)
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func containsPrefix(set [][]uint32, p []uint32) bool {
	for _, s := range set {
		if commonPrefix(s, p) == len(p) {
			return true
		}
	}
	return false
}

package picker

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
)

// tagged decorates a picker and notes which decorator saw each call.
type tagged struct {
	Picker
	tag string
	log *[]string
	mu  *sync.Mutex
}

func (d tagged) Pick(req Request, snap *discovery.Snapshot) (Selection, bool) {
	d.mu.Lock()
	*d.log = append(*d.log, d.tag+" pick")
	d.mu.Unlock()
	return d.Picker.Pick(req, snap)
}

func (d tagged) Ended(req Request, sel Selection) {
	d.mu.Lock()
	*d.log = append(*d.log, d.tag+" ended")
	d.mu.Unlock()
	d.Picker.Ended(req, sel)
}

// A wrap stays on top of every picker installed later, each picker with
// its own decorator, so a request pinned before a replacement ends on the
// picker (and decorator) that pinned it.
func TestHolderWrapStaysOnTop(t *testing.T) {
	f := newFixture(t, worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode))
	first, second := NewLoad(f.store, nil), NewRoundRobin(f.store, nil)
	h := NewHolder(first)
	require.Same(t, first, h.Get())

	var mu sync.Mutex
	var log []string
	n := 0
	h.Wrap(func(p Picker) Picker {
		n++
		return tagged{Picker: p, tag: map[Picker]string{first: "first", second: "second"}[p], log: &log, mu: &mu}
	})
	require.Equal(t, 1, n, "the active picker is wrapped at once")

	req := Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 64, Now: t0}
	p := h.Get()
	sel, ok := p.Pick(req, f.snap)
	require.True(t, ok)

	h.Set(second)
	require.Equal(t, 2, n)
	p.Ended(req, sel) // the request pinned before the replacement
	_, ok = h.Get().Pick(Request{ID: 2, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 64, Now: t0}, f.snap)
	require.True(t, ok)
	require.Equal(t, []string{"first pick", "first ended", "second pick"}, log, "the request ended on the picker that pinned it")
}

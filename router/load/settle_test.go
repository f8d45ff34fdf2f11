package load

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// settleEveryRecord is settle as a scan of every live record: the
// reference the counted, newest-first settle must match.
func settleEveryRecord(s *Store, requestID uint64, drop bool, keys []Key) {
	for _, k := range keys {
		r := s.ranks.lookup(k)
		if r == nil {
			continue
		}
		l := r.live()
		for i := range l {
			dp := &l[i]
			if dp.RequestID != requestID {
				continue
			}
			if canStall(dp) {
				r.stallable--
			}
			dp.ended = true
			if drop && !dp.finished {
				dp.finished = true
				r.finished++
				r.tokens -= dp.PromptTokens
				r.blocks -= dp.Blocks
				dp.PromptTokens, dp.Blocks = 0, 0
			}
		}
	}
}

// Ending and finishing requests agree with a scan of every record, under
// random dispatches (request ids out of order and repeated on a rank),
// expiries and samples that clear a rank; and each rank's count of
// records per request matches its live unfinished records.
func TestSettleMatchesAScanOfEveryRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []Key{{"dynamo", 7, 0}, {"dynamo", 7, 1}}
	got, want := NewStore(nil), NewStore(nil)
	for _, s := range []*Store{got, want} {
		s.SetLive(liveSnapshot(decodeWorker(7, 0, 2)))
	}
	now := t0
	for step := range 6000 {
		now = now.Add(time.Duration(rng.IntN(20)) * time.Millisecond)
		id := uint64(rng.IntN(400))
		ks := keys[:1+rng.IntN(2)]
		switch op := rng.IntN(10); {
		case op < 5:
			dp := Dispatch{RequestID: id, Key: ks[rng.IntN(len(ks))], Phase: Phase(rng.IntN(2)), PromptTokens: uint64(rng.IntN(900)),
				Blocks: uint64(rng.IntN(5)), PairedDecode: rng.IntN(3) == 0, At: now}
			require.Equal(t, want.RecordDispatch(dp), got.RecordDispatch(dp))
		case op < 7:
			got.EndDispatch(id, ks...)
			settleEveryRecord(want, id, false, ks)
		case op < 9:
			got.FinishDispatch(id, ks...)
			settleEveryRecord(want, id, true, ks)
		default:
			k := ks[0]
			if r := got.ranks.lookup(k); r != nil {
				got.ranks.answered(r)
			}
			if r := want.ranks.lookup(k); r != nil {
				want.ranks.answered(r)
			}
		}
		for _, k := range keys {
			g, w := got.ranks.lookup(k), want.ranks.lookup(k)
			if w == nil {
				require.Nil(t, g)
				continue
			}
			require.Equal(t, w.live(), g.live(), "step %d", step)
			require.Equal(t, [3]uint64{w.tokens, w.blocks, uint64(w.stallable)}, [3]uint64{g.tokens, g.blocks, uint64(g.stallable)}, "step %d", step)
			recount := map[uint64]int{}
			for _, dp := range g.live() {
				if !dp.finished {
					recount[dp.RequestID]++
				}
			}
			require.Equal(t, recount, map[uint64]int(maps(g.records)), "step %d", step)
		}
	}
}

// maps is a nil map as an empty one, for comparison.
func maps(m map[uint64]int) map[uint64]int {
	if m == nil {
		return map[uint64]int{}
	}
	return m
}

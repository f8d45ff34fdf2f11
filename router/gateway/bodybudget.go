package gateway

import (
	"errors"
	"io"
	"sync/atomic"

	"switchyard/router/config"
)

// bodyBudget counts the request-body bytes every inference request holds
// together, against gateway.max_buffered_body_bytes. gateway.max_in_flight
// alone would let 4,096 clients park a 10 MiB body each (40 GiB); with the
// budget, memory held by bodies has one ceiling whatever their number.
type bodyBudget struct {
	held atomic.Int64
}

// errBodyBudget ends a body read that would go past the budget.
var errBodyBudget = errors.New("gateway: buffered request bodies at gateway.max_buffered_body_bytes")

// take reserves n bytes under limit; false leaves the budget untouched.
func (b *bodyBudget) take(n, limit int64) bool {
	for {
		held := b.held.Load()
		if held+n > limit {
			return false
		}
		if b.held.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

func (b *bodyBudget) give(n int64) { b.held.Add(-n) }

// budgetLimit is the budget in effect: never below one body of the
// largest size, so a lone request of that size is always read.
func budgetLimit(g config.Gateway) int64 {
	limit := orDefaultInt(g.MaxBufferedBodyBytes, config.DefaultMaxBufferedBodyBytes)
	return max(limit, orDefaultInt(g.MaxBodyBytes, config.DefaultMaxBodyBytes))
}

// budgetReader reserves each chunk it reads before handing it on, so a
// body that does not fit is refused as it arrives, not once it is whole.
type budgetReader struct {
	r            io.Reader
	budget       *bodyBudget
	limit, taken int64
}

func (br *budgetReader) Read(p []byte) (int, error) {
	n, err := br.r.Read(p)
	if n > 0 {
		if !br.budget.take(int64(n), br.limit) {
			return 0, errBodyBudget
		}
		br.taken += int64(n)
	}
	return n, err
}

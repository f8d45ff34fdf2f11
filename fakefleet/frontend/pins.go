package frontend

import (
	"math"
	"net/http"
	"strconv"
	"strings"
)

// Pin headers, each with the older aliases the frontend still honours
// (dynamo-wire §8.1). The first spelling that parses wins.
var (
	workerIDHeaders      = []string{"X-Dynamo-Worker-Instance-Id", "X-Worker-Instance-Id"}
	prefillIDHeaders     = []string{"X-Dynamo-Prefill-Instance-Id", "X-Prefill-Instance-Id"}
	dpRankHeaders        = []string{"X-Dynamo-Dp-Rank", "X-Dp-Rank", "X-Data-Parallel-Rank"}
	prefillDPRankHeaders = []string{"X-Dynamo-Prefill-Dp-Rank", "X-Prefill-Dp-Rank"}
)

// pins are a request's routing headers. Ranks are 0 when absent.
type pins struct {
	worker, prefill       uint64
	hasWorker, hasPrefill bool
	dpRank, prefillDPRank uint32
}

// readPins parses the pins the way the frontend does: ids are decimal u64
// and ranks u32; anything unparseable (a hex id included) counts as absent,
// and a rank of u32::MAX is the "unset" sentinel.
func readPins(h http.Header) pins {
	var p pins
	p.worker, p.hasWorker = firstUint(h, workerIDHeaders, 64)
	p.prefill, p.hasPrefill = firstUint(h, prefillIDHeaders, 64)
	p.dpRank = rank(h, dpRankHeaders)
	p.prefillDPRank = rank(h, prefillDPRankHeaders)
	return p
}

func rank(h http.Header, names []string) uint32 {
	v, ok := firstUint(h, names, 32)
	if !ok || v == math.MaxUint32 {
		return 0
	}
	return uint32(v)
}

func firstUint(h http.Header, names []string, bits int) (uint64, bool) {
	for _, name := range names {
		for _, s := range h.Values(name) {
			if v, err := strconv.ParseUint(strings.TrimSpace(s), 10, bits); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

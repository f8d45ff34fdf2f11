package tokenizer

import "slices"

// A word of one byte repeated (64 KiB of "a" or of spaces is one word) is
// merged on its runs: the word is held as runs of equal tokens, [t × k, ...],
// and the merge order of mergeByHeap — lowest rank first, then leftmost — is
// followed exactly on that form:
//
//   - The lowest-ranked pair is found among the pairs inside runs (t, t) and
//     the pairs across two neighbouring runs, leftmost first. Neighbouring
//     runs never hold the same token, so a pair (t, t) of rank r lies only
//     inside runs of t.
//   - A pair across runs is merged once: each run gives up one token to a
//     new run of one merged token between them.
//   - A pair (t, t) of rank r inside a run of k is merged into T at the
//     run's leftmost position. The next merges are this run's next pairs
//     (t, t), left to right, as long as no pair the merges create ranks
//     below r: (T, T), (T, t), and T with the neighbouring runs' tokens. When
//     none does, the whole run becomes [T × k/2] (and one t if k is odd) at
//     once, a pass; when one does, only the first merge is made and the
//     search starts again.
//
// A pass is what makes this fast: each pass halves a run, so 65,536 bytes
// take about sixteen steps. Every step is one exact step (or an exact
// sequence of steps) of the heap's order, so the ids are the heap's; a word
// whose runs grow past maxRuns, or whose steps pass maxRunSteps (only a
// vocabulary built to defeat passes does that), goes to the rank queues.
const (
	maxRuns     = 32
	maxRunSteps = 512
)

// tokenRun is count copies of one token.
type tokenRun struct {
	id    uint32
	count int
}

// isOneByteRepeated reports whether every byte of word is its first.
func isOneByteRepeated(word string) bool {
	for i := 1; i < len(word); i++ {
		if word[i] != word[0] {
			return false
		}
	}
	return true
}

// mergeRepeatedByte appends the ids of n copies of byte b, or returns dst
// unchanged and false when the word is past the bounds on runs and steps.
func (m *bpeModel) mergeRepeatedByte(dst []uint32, b byte, n int, sc *bpeScratch) ([]uint32, bool) {
	runs := append(sc.runs[:0], tokenRun{id: m.byteIDs[b], count: n})
	defer func() { sc.runs = runs[:0] }()
	for step := 0; ; step++ {
		if step > maxRunSteps || len(runs) > maxRuns {
			return dst, false
		}
		at, inside, rank, merged, ok := m.lowestRunPair(runs)
		if !ok {
			break
		}
		if inside {
			runs = m.mergeInsideRun(runs, at, rank, merged)
		} else {
			runs = mergeAcrossRuns(runs, at, merged)
		}
	}
	for _, r := range runs {
		for i := 0; i < r.count; i++ {
			dst = append(dst, r.id)
		}
	}
	return dst, true
}

// lowestRunPair finds the pair with the lowest rank, leftmost first: the
// pairs inside run at (at its left end) come before the pair across runs at
// and at+1.
func (m *bpeModel) lowestRunPair(runs []tokenRun) (at int, inside bool, rank, merged uint32, ok bool) {
	rank = noPair
	consider := func(i int, in bool, left, right uint32) {
		if r, mg, found := m.merges.get(left, right); found && r < rank {
			at, inside, rank, merged, ok = i, in, r, mg, true
		}
	}
	for i, run := range runs {
		if run.count >= 2 {
			consider(i, true, run.id, run.id)
		}
		if i+1 < len(runs) {
			consider(i, false, run.id, runs[i+1].id)
		}
	}
	return at, inside, rank, merged, ok
}

// mergeInsideRun merges the pair (t, t) of rank r at the left end of run i
// into merged: the whole run in one pass when no pair the pass creates ranks
// below r, else that one pair.
func (m *bpeModel) mergeInsideRun(runs []tokenRun, i int, r, merged uint32) []tokenRun {
	t, k := runs[i].id, runs[i].count
	clean := !(k >= 4 && m.ranksBelow(merged, merged, r)) &&
		!(k >= 3 && m.ranksBelow(merged, t, r)) &&
		!(i > 0 && m.ranksBelow(runs[i-1].id, merged, r)) &&
		!(k%2 == 0 && i+1 < len(runs) && m.ranksBelow(merged, runs[i+1].id, r))
	if clean {
		return normalizeRuns(splice(runs, i, tokenRun{merged, k / 2}, tokenRun{t, k % 2}))
	}
	return normalizeRuns(splice(runs, i, tokenRun{merged, 1}, tokenRun{t, k - 2}))
}

// mergeAcrossRuns merges the last token of run i with the first of run i+1.
func mergeAcrossRuns(runs []tokenRun, i int, merged uint32) []tokenRun {
	left, right := runs[i], runs[i+1]
	left.count--
	right.count--
	runs = splice(runs, i+1, right)
	return normalizeRuns(splice(runs, i, left, tokenRun{merged, 1}))
}

// ranksBelow reports whether the pair (left, right) has a merge ranked
// below r.
func (m *bpeModel) ranksBelow(left, right, r uint32) bool {
	rank, _, ok := m.merges.get(left, right)
	return ok && rank < r
}

// splice replaces run i with the given runs.
func splice(runs []tokenRun, i int, with ...tokenRun) []tokenRun {
	return slices.Replace(runs, i, i+1, with...)
}

// normalizeRuns drops empty runs and joins neighbouring runs of one token,
// so that neighbouring runs always hold different tokens.
func normalizeRuns(runs []tokenRun) []tokenRun {
	out := runs[:0]
	for _, r := range runs {
		switch {
		case r.count == 0:
		case len(out) > 0 && out[len(out)-1].id == r.id:
			out[len(out)-1].count += r.count
		default:
			out = append(out, r)
		}
	}
	return out
}

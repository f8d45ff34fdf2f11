package recorder

import (
	"context"
	"fmt"
)

// Integrity is what a run's records and end marker say about whether the
// run is all there. A writer that Close never reached (the process was
// killed, the machine lost power) leaves no end marker, and its last
// batches may be missing; a record dropped while recording, or deleted
// afterwards, leaves a gap in the seq numbers.
type Integrity struct {
	RunID int64 `json:"run_id"`
	// Closed: the run has its end marker, written by the writer's Close.
	Closed bool `json:"closed"`
	// LastSeq is the last seq the writer assigned, from the end marker (0
	// when the run is not closed or TailUnchecked).
	LastSeq uint64 `json:"last_seq"`
	// TailUnchecked: the run was recorded under schema version 1, whose
	// end marker does not count records, so missing records after the
	// last one present cannot be detected.
	TailUnchecked bool `json:"tail_unchecked,omitempty"`
	// Records counts the records present.
	Records uint64 `json:"records"`
	// Gaps counts the stretches of missing seq numbers, Missing the seq
	// numbers missing in all; FirstGap is the first missing seq.
	Gaps     uint64 `json:"gaps"`
	Missing  uint64 `json:"missing"`
	FirstGap uint64 `json:"first_gap,omitempty"`
	// Dropped counts the records the writer could not write, from the
	// end marker.
	Dropped uint64 `json:"dropped"`
}

// Complete reports whether the run is closed and holds every record it
// was given.
func (i Integrity) Complete() bool { return i.Closed && i.Gaps == 0 && i.Dropped == 0 }

// Problems describes, one sentence each, what makes the run incomplete.
func (i Integrity) Problems() []string {
	var out []string
	if !i.Closed {
		out = append(out, "no end marker: the recording was not closed (its process ended first, or it is still being written), so its tail may be missing")
	}
	if i.Gaps > 0 {
		out = append(out, fmt.Sprintf("%d sequence gaps (first at seq %d): %d records missing", i.Gaps, i.FirstGap, i.Missing))
	}
	if i.Dropped > 0 {
		out = append(out, fmt.Sprintf("%d records dropped while recording", i.Dropped))
	}
	return out
}

// Integrity checks run runID: its end marker, and every seq from 1 to the
// end marker's last seq (to the last record present, for a run without
// one) against the records in the file.
func (r *Reader) Integrity(runID int64) (Integrity, error) {
	runs, err := r.Runs()
	if err != nil {
		return Integrity{}, err
	}
	in := Integrity{RunID: runID}
	found := false
	for _, ri := range runs {
		if ri.ID != runID {
			continue
		}
		found = true
		in.Closed = !ri.EndedAt.IsZero()
		in.TailUnchecked = in.Closed && r.version < 2
		in.LastSeq = ri.LastSeq
		for _, n := range ri.Dropped {
			in.Dropped += n
		}
	}
	if !found {
		return Integrity{}, fmt.Errorf("recorder: %s: no run %d", r.path, runID)
	}
	if err := r.countGaps(runID, &in); err != nil {
		return Integrity{}, err
	}
	return in, nil
}

// countGaps walks the run's seq numbers in order and counts the missing
// ones.
func (r *Reader) countGaps(runID int64, in *Integrity) error {
	rows, err := r.db.QueryContext(context.Background(), `SELECT seq FROM timeline WHERE run_id = ? ORDER BY seq`, runID)
	if err != nil {
		return r.errf("integrity", err)
	}
	defer rows.Close()
	next := uint64(1) // the seq expected next
	for rows.Next() {
		var s int64
		if err := rows.Scan(&s); err != nil {
			return r.errf("integrity", err)
		}
		if s <= 0 {
			return fmt.Errorf("recorder: %s: run %d: seq %d is not positive", r.path, runID, s)
		}
		seq := uint64(s)
		switch {
		case seq < next:
			return fmt.Errorf("recorder: %s: run %d: seq %d appears twice", r.path, runID, seq)
		case seq > next:
			in.gap(next, seq-next)
		}
		if in.Closed && !in.TailUnchecked && seq > in.LastSeq {
			return fmt.Errorf("recorder: %s: run %d: seq %d lies beyond the end marker's last seq %d", r.path, runID, seq, in.LastSeq)
		}
		in.Records++
		next = seq + 1
	}
	if err := rows.Err(); err != nil {
		return r.errf("integrity", err)
	}
	if in.LastSeq >= next {
		in.gap(next, in.LastSeq-next+1)
	}
	return nil
}

func (i *Integrity) gap(first, missing uint64) {
	if i.Gaps == 0 {
		i.FirstGap = first
	}
	i.Gaps++
	i.Missing += missing
}

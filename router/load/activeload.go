// Package load keeps the latest ActiveLoad sample of every worker rank and
// answers the questions the pickers ask of it: is this rank's load fresh,
// quiet, or silent under load; what has been dispatched to it since its
// last sample; has it stalled. It is part of the deterministic core: every
// call takes the time it needs as an argument.
package load

import (
	"switchyard/router/envelope/msgpack"
)

// ActiveLoad is a worker rank's load as it publishes it. Absent (nil)
// fields have their Has flag false.
type ActiveLoad struct {
	WorkerID uint64
	DPRank   uint32

	ActiveDecodeBlocks  uint64
	ActivePrefillTokens uint64
	KVUsedBlocks        uint64
	HasDecodeBlocks     bool
	HasPrefillTokens    bool
	HasKVUsedBlocks     bool
}

// Field order of ActiveLoad on the wire; the positional (array) encoding
// uses it, and named maps use these keys.
const (
	fWorkerID = iota
	fDPRank
	fActiveDecodeBlocks
	fActivePrefillTokens
	fSchedulerLoadScope
	fKVUsedBlocks
	fUnknown
)

// DecodeActiveLoad reads an ActiveLoad msgpack payload, as a named map or
// a positional array. Every field but worker_id is optional; unknown keys
// are skipped. It allocates nothing.
func DecodeActiveLoad(b []byte, a *ActiveLoad) bool {
	*a = ActiveLoad{}
	r := msgpack.NewReader(b)
	haveWorker := false
	read := func(f int) bool {
		switch f {
		case fWorkerID:
			v, err := r.Uint()
			a.WorkerID, haveWorker = v, err == nil
			return err == nil
		case fDPRank:
			if r.IsNil() {
				return true
			}
			v, err := r.Uint()
			if err != nil || v > 1<<32-1 {
				return false
			}
			a.DPRank = uint32(v)
			return true
		case fActiveDecodeBlocks:
			return optional(&r, &a.ActiveDecodeBlocks, &a.HasDecodeBlocks)
		case fActivePrefillTokens:
			return optional(&r, &a.ActivePrefillTokens, &a.HasPrefillTokens)
		case fKVUsedBlocks:
			return optional(&r, &a.KVUsedBlocks, &a.HasKVUsedBlocks)
		}
		return r.Skip() == nil
	}
	switch {
	case r.IsMap():
		n, err := r.MapLen()
		if err != nil {
			return false
		}
		for i := 0; i < n; i++ {
			k, err := r.Bytes()
			if err != nil {
				return false
			}
			f := fUnknown
			switch string(k) {
			case "worker_id":
				f = fWorkerID
			case "dp_rank":
				f = fDPRank
			case "active_decode_blocks":
				f = fActiveDecodeBlocks
			case "active_prefill_tokens":
				f = fActivePrefillTokens
			case "scheduler_load_scope":
				f = fSchedulerLoadScope
			case "kv_used_blocks":
				f = fKVUsedBlocks
			}
			if !read(f) {
				return false
			}
		}
	case r.IsArray():
		n, err := r.ArrayLen()
		if err != nil {
			return false
		}
		for i := 0; i < n; i++ {
			if !read(min(i, fUnknown)) {
				return false
			}
		}
	default:
		return false
	}
	return haveWorker
}

func optional(r *msgpack.Reader, v *uint64, has *bool) bool {
	if r.IsNil() {
		*has = false
		return true
	}
	x, err := r.Uint()
	*v, *has = x, err == nil
	return err == nil
}

package kv

// vLLM-native KV events (an engine publishing its own KVEventBatches,
// without Dynamo's RouterEvent wrapper) name no worker and number
// batches, not events. The host says which worker a publisher belongs to;
// the tracker keeps the batch sequence per rank for replays and gaps, as
// event ids do for Dynamo's events.

// ApplyVLLM decodes one vLLM KVEventBatch published by workerID's engine
// in namespace and folds its events into the index. It reports the
// batch's result: the decoder's refusal, replay or gap by batch sequence,
// or the first non-applied result among its events (applied when all
// were).
func (t *Tracker) ApplyVLLM(namespace string, workerID uint64, frames [][]byte) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	res := t.applyVLLM(namespace, workerID, frames)
	t.count(res)
	return res
}

func (t *Tracker) applyVLLM(namespace string, workerID uint64, frames [][]byte) string {
	if t.pred != nil {
		return PredictingResult
	}
	if dr := DecodeVLLMBatch(frames, workerID, &t.vllm); dr != DecodeOK {
		return dr.String()
	}
	b := &t.vllm
	r := Rank{Namespace: namespace, WorkerID: workerID, DPRank: b.DPRank}
	if !t.index.admits(r) {
		return IdentityMismatch.String()
	}
	if t.vllmSeq == nil {
		t.vllmSeq = map[Rank]uint64{}
	}
	res := Applied
	if last, ok := t.vllmSeq[r]; ok {
		switch {
		case b.Seq <= last:
			return Replay.String()
		case b.Seq > last+1:
			t.index.ClearRank(r)
			res = Gap
		}
	}
	t.vllmSeq[r] = b.Seq
	for i := range b.Events {
		if got := t.index.Apply(namespace, &b.Events[i]); got != Applied && res == Applied {
			res = got
		}
	}
	return res.String()
}

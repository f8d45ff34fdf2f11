package picker

import "switchyard/router/load"

// Dispatch charges the ranks a selection pinned with the request, as
// unanswered dispatches in the load store, until the ranks' next samples
// answer for it: a prefill pin with the prompt's tokens and blocks, the
// decode pin with its blocks (and the prompt's tokens when the decode
// worker prefills the request itself).
func Dispatch(store *load.Store, req Request, sel Selection) {
	decode := load.Key{Namespace: sel.Namespace, WorkerID: sel.Decode.WorkerID, DPRank: sel.Decode.DPRank}
	if !sel.HasPrefill {
		store.RecordDispatch(load.Dispatch{RequestID: req.ID, Key: decode, Phase: load.Decode,
			PromptTokens: req.PromptTokens, Blocks: sel.PromptBlocks, At: req.Now})
		return
	}
	prefill := load.Key{Namespace: sel.Namespace, WorkerID: sel.Prefill.WorkerID, DPRank: sel.Prefill.DPRank}
	store.RecordDispatch(load.Dispatch{RequestID: req.ID, Key: prefill, Phase: load.Prefill,
		PromptTokens: req.PromptTokens, Blocks: sel.PromptBlocks, At: req.Now})
	store.RecordDispatch(load.Dispatch{RequestID: req.ID, Key: decode, Phase: load.Decode,
		Blocks: sel.PromptBlocks, PairedDecode: true, At: req.Now})
}

// EndDispatch marks a pinned request ended unserved on the ranks its
// selection pinned, so it no longer counts toward their stall.
func EndDispatch(store *load.Store, req Request, sel Selection) {
	store.EndDispatch(req.ID, pinnedKeys(sel)...)
}

// FinishDispatch drops a request served to its end from the ranks its
// selection pinned: it is in no rank's backlog any more.
func FinishDispatch(store *load.Store, req Request, sel Selection) {
	store.FinishDispatch(req.ID, pinnedKeys(sel)...)
}

// pinnedKeys are the ranks a selection pinned: its decode rank, then its
// prefill rank when it has one.
func pinnedKeys(sel Selection) []load.Key {
	decode := load.Key{Namespace: sel.Namespace, WorkerID: sel.Decode.WorkerID, DPRank: sel.Decode.DPRank}
	if !sel.HasPrefill {
		return []load.Key{decode}
	}
	return []load.Key{decode, {Namespace: sel.Namespace, WorkerID: sel.Prefill.WorkerID, DPRank: sel.Prefill.DPRank}}
}

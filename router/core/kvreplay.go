package core

import (
	"cmp"
	"encoding/binary"
	"slices"
	"time"

	"switchyard/router/events"
)

// Gap recovery by replay. A kv-events publisher that offers replay
// (events.KVSubscribed.Replay) keeps its recent messages; when the core
// sees its transport sequence (the envelope's for Dynamo, the batch's for
// a vLLM engine) skip, it asks for the missed messages instead of letting
// the tracker clear the rank:
//
//   - a message with seq > last+1 starts a recovery: the core emits
//     events.KVReplayWanted{From: last+1, To: seq-1}, holds that message
//     and every later live message of the subscription, and sets a
//     deadline (KVReplaySettings.Timeout);
//   - replayed messages (KVReplayed) whose seq is in the missing range and
//     not yet applied go through the tracker at once, in the live form;
//     earlier ones count as duplicate, later ones or ones nobody asked for
//     as unexpected, and are dropped;
//   - at KVReplayEnd, at a Tick past the deadline, or when the held
//     messages pass their bound, the recovery ends and the held messages
//     go through the normal path in order. What was not recovered then
//     shows as the tracker's event-id or batch gap and clears the rank, as
//     without replay, and counts as lost;
//   - only a replay that ended as asked may lead to another one: a gap
//     among the released messages (one that opened while the first replay
//     was in flight) starts the next recovery. After a timeout, a failure
//     or an overflow every released gap is lost at once, so a publisher
//     that cannot replay is not asked again and again for the same
//     messages.
//
// A subscription that loses its session keeps its recovery (the replay
// has a connection of its own; the deadline bounds it). One that is
// unsubscribed, or whose publisher is lost (the staleness rule, a
// kv_cache_index source's loss), drops its recovery and the messages it
// held unapplied: the publisher's ranks are cleared anyway, so applying
// them would only restore blocks nobody vouches for.
// A restarted subscription (KVSubscribed again) releases what it held,
// since those messages did arrive, and starts over.
//
// Recordings keep what the tracker applied, when it applied it: a held
// message is recorded at its release, a replayed one as it is applied
// (KVApplied.Replayed), so a replay of the recording, which never starts
// a recovery, reproduces the index. The KVReplayWanted and KVReplayFinished
// outputs are recorded beside them for the record.

// Defaults and bounds of gap recovery.
const (
	DefaultKVReplayTimeout = 2 * time.Second
	DefaultKVReplayMaxHeld = 4096
	// KVReplayMaxHeldBytes bounds the frames one recovery holds.
	KVReplayMaxHeldBytes = 8 << 20
	// KVReplayMaxHeldBytesTotal bounds the frames every recovery of a
	// core holds together: a fleet whose publishers all open gaps at once
	// cannot make the router hold 8 MiB per subscription.
	KVReplayMaxHeldBytesTotal = 64 << 20
	// KVReplayMaxGap is the widest gap asked for: far more than any
	// publisher keeps (vLLM keeps 10,000 batches), so a wider jump of the
	// sequence, a restarted numbering or a hostile one, is not asked for;
	// it is counted as an overflow and lost, and counts at most this much
	// toward lost.
	KVReplayMaxGap = 1 << 20
)

// KVReplaySettings configure gap recovery (dynamo.kv.replay). The zero
// value is off, which is what a replay of a recording runs with.
type KVReplaySettings struct {
	Enabled bool
	// Timeout is how long a recovery waits for its replay to end; 0 is
	// DefaultKVReplayTimeout.
	Timeout time.Duration
	// MaxHeldMessages bounds the live messages one recovery holds; 0 is
	// DefaultKVReplayMaxHeld.
	MaxHeldMessages int
}

// EffectiveTimeout is Timeout, or its default when unset.
func (s KVReplaySettings) EffectiveTimeout() time.Duration {
	return cmp.Or(s.Timeout, DefaultKVReplayTimeout)
}

func (s KVReplaySettings) maxHeld() int { return cmp.Or(s.MaxHeldMessages, DefaultKVReplayMaxHeld) }

// Results of gap recovery, the labels of Hooks.KVReplay and of
// switchyard_dynamo_kv_replay_total{result}.
const (
	ReplayRequested  = "requested"  // a replay asked of a publisher
	ReplayRecovered  = "recovered"  // a replayed message applied
	ReplayLost       = "lost"       // a missed message not recovered
	ReplayTimeout    = "timeout"    // a recovery ended by its deadline
	ReplayOverflow   = "overflow"   // a recovery ended by its bound on held messages
	ReplayFailed     = "failed"     // a replay that ended with an error
	ReplayDuplicate  = "duplicate"  // a replayed message already applied
	ReplayUnexpected = "unexpected" // a replayed message beyond the range, or with no recovery to fill
)

// KVReplayResults lists every gap-recovery result, for pre-registered
// metric series.
func KVReplayResults() []string {
	return []string{ReplayRequested, ReplayRecovered, ReplayLost, ReplayTimeout, ReplayOverflow, ReplayFailed,
		ReplayDuplicate, ReplayUnexpected}
}

// maxReplayErr bounds the error text a recovery's end keeps.
const maxReplayErr = 256

// KVHeld is what KVMessage returns for a message held while its
// subscription recovers a gap; the tracker's result comes at its release.
const KVHeld = "held"

// Why a recovery ended (KVReplayFinished.Reason).
const (
	FinishedEnd          = "end"          // the publisher replayed all it held
	FinishedFailed       = "failed"       // the replay failed (Err)
	FinishedTimeout      = "timeout"      // the deadline passed first
	FinishedOverflow     = "overflow"     // too many held messages
	FinishedResubscribed = "resubscribed" // the subscription restarted
	FinishedDisabled     = "disabled"     // recovery was switched off
	FinishedDropped      = "dropped"      // unsubscribed or publisher lost; held messages dropped
)

// KVReplayFinished: a recovery ended. Recovered messages of From..To
// were replayed and applied; Lost were not and the tracker will treat
// them as a gap; Held messages were released (or, for FinishedDropped,
// dropped).
type KVReplayFinished struct {
	At          time.Time
	Namespace   string
	PublisherID uint64
	From, To    uint64
	Reason      string
	Err         string
	Recovered   uint64
	Lost        uint64
	Duplicates  uint64
	Held        int
}

func (o KVReplayFinished) Time() time.Time { return o.At }

// kvStream is the transport sequence state of a subscription whose
// publisher offers replay.
type kvStream struct {
	last    uint64
	started bool // last holds a sequence
	rec     *recovery
}

// recovery is one gap being recovered.
type recovery struct {
	from, to uint64
	deadline time.Time
	held     []heldMessage
	bytes    int
	// recovered and duplicates count replayed messages.
	recovered, duplicates uint64
}

// heldMessage is a live message held during a recovery; its frames are
// the core's own copy.
type heldMessage struct {
	at     time.Time
	seq    uint64
	hasSeq bool
	frames [][]byte
}

// transportSeq reads a kv-events message's transport sequence without
// decoding it: frame 2 of Dynamo's four (whose frame 1 must name the
// subscription's publisher), frame 1 of a vLLM engine's three. Anything
// else has none and never moves the stream's state.
func transportSeq(frames [][]byte, publisherID uint64) (uint64, bool) {
	switch len(frames) {
	case 4:
		if len(frames[1]) != 8 || len(frames[2]) != 8 || binary.BigEndian.Uint64(frames[1]) != publisherID {
			return 0, false
		}
		return binary.BigEndian.Uint64(frames[2]), true
	case 3:
		if len(frames[1]) != 8 {
			return 0, false
		}
		return binary.BigEndian.Uint64(frames[1]), true
	}
	return 0, false
}

// replaySubscribed sets up (or drops) a subscription's stream state.
func (c *Core) replaySubscribed(ev events.KVSubscribed) {
	k := publisherKey{ev.Namespace, ev.PublisherID}
	if st := c.streams[k]; st != nil && st.rec != nil {
		c.release(ev.At, k, st, c.finish(ev.At, k, st, FinishedResubscribed, ""), false)
	}
	if ev.Replay {
		c.streams[k] = &kvStream{}
		return
	}
	delete(c.streams, k)
}

// receive is KVMessage's path for a subscription with stream state.
func (c *Core) receive(k publisherKey, st *kvStream, ev *events.KVMessage) string {
	seq, ok := transportSeq(ev.Frames, ev.PublisherID)
	if st.rec != nil {
		return c.hold(k, st, heldMessage{at: ev.At, seq: seq, hasSeq: ok, frames: ev.Frames}, true)
	}
	if ok && st.started && seq > st.last && seq-st.last > 1 {
		if seq-st.last-1 <= KVReplayMaxGap {
			c.startRecovery(ev.At, k, st, seq)
			return c.hold(k, st, heldMessage{at: ev.At, seq: seq, hasSeq: true, frames: ev.Frames}, true)
		}
		c.countReplay(ReplayOverflow, 1)
		c.countReplay(ReplayLost, KVReplayMaxGap)
	}
	if ok && (!st.started || seq > st.last) {
		st.last, st.started = seq, true
	}
	return c.applyKV(ev, false)
}

// pass applies a message through the tracker and moves the stream past
// its sequence.
func (c *Core) pass(k publisherKey, st *kvStream, at time.Time, frames [][]byte, seq uint64, ok bool) string {
	if ok && (!st.started || seq > st.last) {
		st.last, st.started = seq, true
	}
	return c.applyKV(&events.KVMessage{At: at, Namespace: k.namespace, PublisherID: k.id, Frames: frames}, false)
}

func (c *Core) startRecovery(at time.Time, k publisherKey, st *kvStream, seq uint64) {
	st.rec = &recovery{from: st.last + 1, to: seq - 1, deadline: at.Add(c.settings.KVReplay.EffectiveTimeout())}
	c.countReplay(ReplayRequested, 1)
	want := events.KVReplayWanted{At: at, Namespace: k.namespace, PublisherID: k.id, From: st.rec.from, To: st.rec.to}
	c.record(want)
	if c.hooks.KVReplayWanted != nil {
		c.hooks.KVReplayWanted(want)
	}
}

// hold keeps a message until the recovery ends and returns KVHeld; past
// the bound the recovery gives up and releases everything, this message
// last, and hold returns its result. copyIt is false for a message
// already the core's own (a released one held again by the next
// recovery).
func (c *Core) hold(k publisherKey, st *kvStream, m heldMessage, copyIt bool) string {
	rec := st.rec
	size := framesSize(m.frames)
	if len(rec.held) >= c.settings.KVReplay.maxHeld() || rec.bytes+size > KVReplayMaxHeldBytes ||
		c.heldBytes+size > c.heldBytesCap {
		c.countReplay(ReplayOverflow, 1)
		held := c.finish(m.at, k, st, FinishedOverflow, "")
		return c.release(m.at, k, st, append(held, m), false)
	}
	if copyIt {
		m.frames = cloneFrames(m.frames, size)
	}
	rec.held = append(rec.held, m)
	rec.bytes += size
	c.heldBytes += size
	return KVHeld
}

// KVReplayed applies one message a publisher replayed, if the core's
// recovery of that subscription is missing it; others are counted and
// dropped. It returns the tracker's result, or the replay result that
// dropped it.
func (c *Core) KVReplayed(ev *events.KVReplayMessage) string {
	k := publisherKey{ev.Namespace, ev.PublisherID}
	st := c.streams[k]
	seq, ok := transportSeq(ev.Frames, ev.PublisherID)
	if st == nil || st.rec == nil || !ok || seq > st.rec.to {
		c.countReplay(ReplayUnexpected, 1)
		return ReplayUnexpected
	}
	rec := st.rec
	if seq <= st.last || seq < rec.from {
		rec.duplicates++
		c.countReplay(ReplayDuplicate, 1)
		return ReplayDuplicate
	}
	st.last = seq
	rec.recovered++
	c.countReplay(ReplayRecovered, 1)
	return c.applyKV(&events.KVMessage{At: ev.At, Namespace: k.namespace, PublisherID: k.id, Frames: ev.Frames}, true)
}

// KVReplayEnd ends the recovery of a subscription whose replay is over.
// An end with no recovery (one that timed out first) changes nothing.
func (c *Core) KVReplayEnd(ev events.KVReplayEnd) {
	k := publisherKey{ev.Namespace, ev.PublisherID}
	st := c.streams[k]
	if st == nil || st.rec == nil {
		return
	}
	reason := FinishedEnd
	errText := ev.Err
	if errText != "" {
		reason = FinishedFailed
		c.countReplay(ReplayFailed, 1)
		if len(errText) > maxReplayErr {
			errText = errText[:maxReplayErr]
		}
	}
	held := c.finish(ev.At, k, st, reason, errText)
	c.release(ev.At, k, st, held, reason == FinishedEnd)
}

// replayDue ends, at a Tick, every recovery past its deadline, in
// publisher order. It reports whether any did.
func (c *Core) replayDue(at time.Time) bool {
	var due []publisherKey
	for k, st := range c.streams {
		if st.rec != nil && !at.Before(st.rec.deadline) {
			due = append(due, k)
		}
	}
	slices.SortFunc(due, comparePublishers)
	for _, k := range due {
		st := c.streams[k]
		c.countReplay(ReplayTimeout, 1)
		held := c.finish(at, k, st, FinishedTimeout, "")
		c.release(at, k, st, held, false)
	}
	return len(due) > 0
}

// replayStopAll ends every recovery (recovery switched off), releasing
// what each held.
func (c *Core) replayStopAll(at time.Time) {
	var keys []publisherKey
	for k, st := range c.streams {
		if st.rec != nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, comparePublishers)
	for _, k := range keys {
		st := c.streams[k]
		c.release(at, k, st, c.finish(at, k, st, FinishedDisabled, ""), false)
	}
}

// replayDrop forgets a subscription's stream state, dropping what a
// recovery held unapplied: its publisher's ranks are being cleared.
func (c *Core) replayDrop(at time.Time, k publisherKey, forget bool) {
	st := c.streams[k]
	if st == nil {
		return
	}
	if st.rec != nil {
		c.finish(at, k, st, FinishedDropped, "")
	}
	if forget {
		delete(c.streams, k)
		return
	}
	// A lost publisher that comes back may number its messages anew.
	*st = kvStream{}
}

// finish ends st's recovery: the missing range is settled (recovered or
// lost), the outcome recorded. It returns the held messages for the
// caller to release or drop.
func (c *Core) finish(at time.Time, k publisherKey, st *kvStream, reason, errText string) []heldMessage {
	rec := st.rec
	st.rec = nil
	c.heldBytes -= rec.bytes
	lost := rec.to - rec.from + 1 - rec.recovered
	if lost > 0 {
		c.countReplay(ReplayLost, lost)
	}
	// The range is settled either way: what was not recovered is not
	// asked for again.
	if rec.to > st.last {
		st.last = rec.to
	}
	c.record(KVReplayFinished{At: at, Namespace: k.namespace, PublisherID: k.id, From: rec.from, To: rec.to,
		Reason: reason, Err: errText, Recovered: rec.recovered, Lost: lost, Duplicates: rec.duplicates, Held: len(rec.held)})
	c.log.Debug("kv-events replay ended", "namespace", k.namespace, "publisher_id", k.id, "from", rec.from, "to", rec.to,
		"reason", reason, "error", errText, "recovered", rec.recovered, "lost", lost, "held", len(rec.held))
	return rec.held
}

// release hands held messages to the normal path in order, at the
// release time at (when the tracker applies them, which is what a
// recording keeps). With next, a gap among them starts the next
// recovery, which holds the rest; without, such a gap is lost at once.
// It returns the last message's result (KVHeld if it is held again).
func (c *Core) release(at time.Time, k publisherKey, st *kvStream, held []heldMessage, next bool) string {
	res := KVHeld
	for _, m := range held {
		if st.rec != nil {
			res = c.hold(k, st, m, false)
			continue
		}
		if m.hasSeq && st.started && m.seq > st.last && m.seq-st.last > 1 {
			width := m.seq - st.last - 1
			if next && c.settings.KVReplay.Enabled && width <= KVReplayMaxGap {
				c.startRecovery(at, k, st, m.seq)
				res = c.hold(k, st, m, false)
				continue
			}
			c.countReplay(ReplayLost, min(width, KVReplayMaxGap))
		}
		res = c.pass(k, st, at, m.frames, m.seq, m.hasSeq)
	}
	return res
}

func comparePublishers(a, b publisherKey) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.id, b.id))
}

func framesSize(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	return n
}

// cloneFrames copies frames into one allocation of size bytes.
func cloneFrames(frames [][]byte, size int) [][]byte {
	buf := make([]byte, 0, size)
	out := make([][]byte, len(frames))
	for i, f := range frames {
		start := len(buf)
		buf = append(buf, f...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

func (c *Core) countReplay(result string, n uint64) {
	c.replayResults[result] += n
	if c.hooks.KVReplay != nil {
		c.hooks.KVReplay(result, n)
	}
}

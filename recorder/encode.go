package recorder

import (
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// SQLite integers are signed 64-bit. Every uint64 (ids, generations,
// sequences, seeds) is stored as the int64 with the same bits, so values
// of 2^63 and above read back exactly (and show as negative in sqlite3).
func u2i(v uint64) int64 { return int64(v) }
func i2u(v int64) uint64 { return uint64(v) }

// atNS is the at_ns column: Unix nanoseconds, NULL for the zero time.
func atNS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// fromNS reads an at_ns column back, in UTC.
func fromNS(ns sql.NullInt64) time.Time {
	if !ns.Valid {
		return time.Time{}
	}
	return time.Unix(0, ns.Int64).UTC()
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// blob keeps nil (NULL) apart from empty (a zero-length BLOB).
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// nullBlob reads a BLOB column scanned with its "IS NULL" beside it.
func nullBlob(b []byte, isNull bool) []byte {
	if isNull {
		return nil
	}
	if b == nil {
		return []byte{}
	}
	return b
}

// tokensBlob encodes token ids as little-endian uint32s; nil stays NULL.
func tokensBlob(tokens []uint32) any {
	if tokens == nil {
		return nil
	}
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return b
}

func decodeTokens(b []byte, isNull bool) ([]uint32, error) {
	if isNull {
		return nil, nil
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("tokens blob of %d bytes is not a whole number of uint32s", len(b))
	}
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out, nil
}

// jsonStrings encodes a string list as a JSON array; nil stays NULL.
func jsonStrings(s []string) (any, error) {
	if s == nil {
		return nil, nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func decodeStrings(s sql.NullString) ([]string, error) {
	if !s.Valid {
		return nil, nil
	}
	out := []string{}
	if err := json.Unmarshal([]byte(s.String), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// candidate is a picker.Candidate in the candidates JSON array. The worker
// id follows the integer-column rule (int64 bits), so it joins with
// selections.decode_worker and load_messages.worker_id.
type candidate struct {
	Phase    string   `json:"phase"`
	WorkerID int64    `json:"worker_id"`
	DPRank   uint32   `json:"dp_rank"`
	Cost     jsonCost `json:"cost"`
	Defined  bool     `json:"defined"`
}

// jsonCost is a float64 that survives JSON: a number when finite, else
// the string "NaN", "+Inf" or "-Inf".
type jsonCost float64

func (c jsonCost) MarshalJSON() ([]byte, error) {
	f := float64(c)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

func (c *jsonCost) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
		if s != "NaN" && s != "+Inf" && s != "-Inf" {
			return fmt.Errorf("cost %q is not a number", s)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("cost %s: %w", b, err)
	}
	*c = jsonCost(f)
	return nil
}

func jsonCandidates(cs []picker.Candidate) (any, error) {
	if cs == nil {
		return nil, nil
	}
	out := make([]candidate, len(cs))
	for i, c := range cs {
		out[i] = candidate{Phase: c.Phase, WorkerID: u2i(c.WorkerID), DPRank: c.DPRank, Cost: jsonCost(c.Cost), Defined: c.Defined}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func decodeCandidates(s sql.NullString) ([]picker.Candidate, error) {
	if !s.Valid {
		return nil, nil
	}
	var in []candidate
	if err := json.Unmarshal([]byte(s.String), &in); err != nil {
		return nil, err
	}
	out := make([]picker.Candidate, len(in))
	for i, c := range in {
		out[i] = picker.Candidate{Phase: c.Phase, WorkerID: i2u(c.WorkerID), DPRank: c.DPRank, Cost: float64(c.Cost), Defined: c.Defined}
	}
	return out, nil
}

var roles = []discovery.Role{discovery.RoleUnknown, discovery.RolePrefill, discovery.RoleDecode, discovery.RoleAggregated}

// parseRole reads back Role.String(); anything else is RoleUnknown.
func parseRole(s string) discovery.Role {
	for _, r := range roles {
		if r.String() == s {
			return r
		}
	}
	return discovery.RoleUnknown
}

var keyspaces = []events.Keyspace{events.Instances, events.Models, events.EventChannels}

// parseKeyspace reads back Keyspace.String(); "unknown" is 0.
func parseKeyspace(s string) events.Keyspace {
	for _, k := range keyspaces {
		if k.String() == s {
			return k
		}
	}
	return 0
}

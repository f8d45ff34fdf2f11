package gateway

import (
	"strconv"
)

// withTokenData returns body with the router's token ids as
// nvext.token_data, so the shim's frontend skips tokenizing again. body is
// a JSON object the inbound parser accepted, client token_data already
// stripped; the ids go first in an existing nvext object, or in a new
// nvext member first in the body. Every other byte stays as it was. An
// nvext that is not an object is left alone (the frontend refuses it).
func withTokenData(body []byte, ids []uint32) []byte {
	member := appendTokenData(make([]byte, 0, 16+len(ids)*7), ids)
	w := &jsonWalker{b: body}
	if w.peek() != '{' {
		return body
	}
	at, found := -1, false
	w.members(func(key []byte, _ int) bool {
		if keyIs(key, "nvext") {
			found = true
			if w.peek() == '{' {
				at = w.i
			}
			return false
		}
		w.value()
		return true
	})
	if found && at < 0 {
		return body // an nvext that is not an object: the upstream refuses it as sent
	}
	if !found {
		// A new nvext member after the body's opening brace.
		open := skipSpace(body, 0)
		nv := append(append([]byte(`"nvext":{`), member...), '}')
		return splice(body, open+1, nv, !emptyObject(body, open))
	}
	return splice(body, at+1, member, !emptyObject(body, at))
}

// appendTokenData appends "token_data":[id,...].
func appendTokenData(dst []byte, ids []uint32) []byte {
	dst = append(dst, `"token_data":[`...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(id), 10)
	}
	return append(dst, ']')
}

// splice inserts ins at i, followed by a comma when the object it opens
// has other members.
func splice(body []byte, i int, ins []byte, comma bool) []byte {
	out := make([]byte, 0, len(body)+len(ins)+1)
	out = append(out, body[:i]...)
	out = append(out, ins...)
	if comma {
		out = append(out, ',')
	}
	return append(out, body[i:]...)
}

// emptyObject reports whether the object opening at i has no members.
func emptyObject(b []byte, i int) bool {
	j := skipSpace(b, i+1)
	return j < len(b) && b[j] == '}'
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

package tokenizer

// addedTrie finds added and special tokens in text, leftmost first and, of
// the tokens starting there, longest first (Hugging Face's library uses an
// Aho-Corasick automaton with that match kind). It is a byte trie: finding
// the tokens at one position reads at most the longest token's length, so a
// scan costs O(text × longest token), and tokens are capped in length.
type addedTrie struct {
	// children maps node<<8 | byte to the child node; node 0 is the root.
	children map[uint32]uint32
	// ids[node] is the token ending at node, or -1.
	ids []int64
	// Most nodes lie on one token's tail and have a single child: for
	// those, soleChild[node] (never 0, the root) and soleByte[node] give
	// it without a map lookup. soleChild is 0 for a node with no child or
	// several, whose children only the map holds.
	soleChild []uint32
	soleByte  []byte
	degree    []uint32
	// first marks the bytes some token starts with, so most positions cost
	// one table read.
	first [256]bool
}

func newAddedTrie() addedTrie {
	return addedTrie{children: map[uint32]uint32{}, ids: []int64{-1}, soleChild: []uint32{0}, soleByte: []byte{0}, degree: []uint32{0}}
}

func (t *addedTrie) insert(content string, id uint32) {
	node := uint32(0)
	for i := 0; i < len(content); i++ {
		key := node<<8 | uint32(content[i])
		child, ok := t.children[key]
		if !ok {
			child = uint32(len(t.ids))
			t.children[key] = child
			t.ids = append(t.ids, -1)
			t.soleChild, t.soleByte, t.degree = append(t.soleChild, 0), append(t.soleByte, 0), append(t.degree, 0)
			t.degree[node]++
			if t.degree[node] == 1 {
				t.soleChild[node], t.soleByte[node] = child, content[i]
			} else {
				t.soleChild[node] = 0
			}
		}
		node = child
	}
	t.ids[node] = int64(id)
	t.first[content[0]] = true
}

// longestAt returns the id and length of the longest token at text[p:].
func (t *addedTrie) longestAt(text string, p int) (id uint32, length int) {
	node := uint32(0)
	for i := p; i < len(text); i++ {
		if c := t.soleChild[node]; c != 0 {
			if t.soleByte[node] != text[i] {
				break
			}
			node = c
		} else if t.degree[node] == 0 {
			break
		} else if c, ok := t.children[node<<8|uint32(text[i])]; ok {
			node = c
		} else {
			break
		}
		if t.ids[node] >= 0 {
			id, length = uint32(t.ids[node]), i+1-p
		}
	}
	return id, length
}

// split calls segment for each stretch of text between tokens (never empty)
// and token for each token, in order.
func (t *addedTrie) split(text string, segment func(string), token func(uint32)) {
	if len(t.ids) == 1 {
		if text != "" {
			segment(text)
		}
		return
	}
	from := 0
	for p := 0; p < len(text); {
		if !t.first[text[p]] {
			p++
			continue
		}
		id, n := t.longestAt(text, p)
		if n == 0 {
			p++
			continue
		}
		if p > from {
			segment(text[from:p])
		}
		token(id)
		p += n
		from = p
	}
	if from < len(text) {
		segment(text[from:])
	}
}

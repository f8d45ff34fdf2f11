package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// fileJSON is a tokenizer.json document. Components stay raw until their
// "type" says which shape to decode them into.
type fileJSON struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   json.RawMessage `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	// The decoder only turns ids back into text; encoding never uses it.
	Decoder json.RawMessage `json:"decoder"`
	Model   json.RawMessage `json:"model"`
}

type addedTokenJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type bpeJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// Load parses a Hugging Face tokenizer.json and returns a Tokenizer that
// reproduces its ids exactly, or an error that names the first field whose
// value it cannot reproduce (errors.Is ErrUnsupported), that is malformed
// (ErrInvalid) or that is over a limit (ErrLimit). Zero limits take the
// defaults.
func Load(data []byte, limits Limits) (*Tokenizer, error) {
	limits = limits.withDefaults()
	if len(data) > limits.MaxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrLimit, len(data), limits.MaxFileBytes)
	}
	var f fileJSON
	if err := decodeStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	t := &Tokenizer{limits: limits}
	steps := []func() error{
		func() error { return checkAbsent("truncation", f.Truncation) },
		func() error { return checkAbsent("padding", f.Padding) },
		func() (err error) { t.nfc, err = loadNormalizer("normalizer", f.Normalizer); return err },
		func() (err error) { t.split, err = loadPreTokenizer(f.PreTokenizer); return err },
		func() (err error) { t.bpe, err = loadModel(f.Model, limits); return err },
		func() error { return t.loadAddedTokens(f.AddedTokens) },
		func() error { return t.loadPostProcessor(f.PostProcessor, limits) },
		t.buildDecodeTable,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// decodeStrict decodes one JSON value, refusing fields v does not declare:
// an unknown option may change the ids.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func isNull(raw json.RawMessage) bool {
	trimmed := bytes.TrimSpace(raw)
	return len(trimmed) == 0 || string(trimmed) == "null"
}

func unsupported(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrUnsupported, field, fmt.Sprintf(format, args...))
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

func checkAbsent(field string, raw json.RawMessage) error {
	if !isNull(raw) {
		return unsupported(field, "must be null (it changes the ids of a single sequence)")
	}
	return nil
}

// typeOf reads a component's "type".
func typeOf(field string, raw json.RawMessage) (string, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", invalid(field, "%v", err)
	}
	return head.Type, nil
}

// loadNormalizer accepts no normalizer, NFC, or a Sequence of those, and
// reports whether NFC applies.
func loadNormalizer(field string, raw json.RawMessage) (nfc bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	kind, err := typeOf(field, raw)
	if err != nil {
		return false, err
	}
	switch kind {
	case "NFC":
		var n struct {
			Type string `json:"type"`
		}
		if err := decodeStrict(raw, &n); err != nil {
			return false, invalid(field, "%v", err)
		}
		return true, nil
	case "Sequence":
		var seq struct {
			Type        string            `json:"type"`
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := decodeStrict(raw, &seq); err != nil {
			return false, invalid(field, "%v", err)
		}
		for i, inner := range seq.Normalizers {
			innerNFC, err := loadNormalizer(fmt.Sprintf("%s.normalizers[%d]", field, i), inner)
			if err != nil {
				return false, err
			}
			nfc = nfc || innerNFC
		}
		return nfc, nil
	}
	return false, unsupported(field+".type", "%q is not supported (only NFC)", kind)
}

type splitJSON struct {
	Type    string `json:"type"`
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
}

type byteLevelJSON struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       bool   `json:"use_regex"`
}

// loadPreTokenizer accepts exactly the families' pre-tokenizer: a Sequence
// of a Split by one of the known patterns (Isolated, not inverted) and a
// ByteLevel that neither adds a prefix space nor splits again.
func loadPreTokenizer(raw json.RawMessage) (splitPattern, error) {
	const field = "pre_tokenizer"
	if isNull(raw) {
		return splitPattern{}, unsupported(field, "null is not supported (a Split and a ByteLevel are required)")
	}
	var seq struct {
		Type          string            `json:"type"`
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	kind, err := typeOf(field, raw)
	if err != nil {
		return splitPattern{}, err
	}
	if kind != "Sequence" {
		return splitPattern{}, unsupported(field+".type", "%q is not supported (only Sequence[Split, ByteLevel])", kind)
	}
	if err := decodeStrict(raw, &seq); err != nil {
		return splitPattern{}, invalid(field, "%v", err)
	}
	if len(seq.Pretokenizers) != 2 {
		return splitPattern{}, unsupported(field+".pretokenizers", "%d entries are not supported (only [Split, ByteLevel])", len(seq.Pretokenizers))
	}
	sp, err := loadSplit(field+".pretokenizers[0]", seq.Pretokenizers[0])
	if err != nil {
		return splitPattern{}, err
	}
	return sp, loadByteLevel(field+".pretokenizers[1]", seq.Pretokenizers[1])
}

func loadSplit(field string, raw json.RawMessage) (splitPattern, error) {
	var s splitJSON
	if kind, err := typeOf(field, raw); err != nil {
		return splitPattern{}, err
	} else if kind != "Split" {
		return splitPattern{}, unsupported(field+".type", "%q is not supported (only Split)", kind)
	}
	if err := decodeStrict(raw, &s); err != nil {
		return splitPattern{}, invalid(field, "%v", err)
	}
	if s.Pattern.Regex == nil {
		return splitPattern{}, unsupported(field+".pattern", "only a Regex pattern is supported")
	}
	sp, ok := splitPatterns[*s.Pattern.Regex]
	if !ok {
		return splitPattern{}, unsupported(field+".pattern.Regex", "%q is not a known pattern (only the Llama-3 and Qwen2 patterns)", *s.Pattern.Regex)
	}
	if s.Behavior != "Isolated" {
		return splitPattern{}, unsupported(field+".behavior", "%q is not supported (only Isolated)", s.Behavior)
	}
	if s.Invert {
		return splitPattern{}, unsupported(field+".invert", "true is not supported")
	}
	return sp, nil
}

func loadByteLevel(field string, raw json.RawMessage) error {
	var b byteLevelJSON
	if kind, err := typeOf(field, raw); err != nil {
		return err
	} else if kind != "ByteLevel" {
		return unsupported(field+".type", "%q is not supported (only ByteLevel)", kind)
	}
	if err := decodeStrict(raw, &b); err != nil {
		return invalid(field, "%v", err)
	}
	if b.AddPrefixSpace {
		return unsupported(field+".add_prefix_space", "true is not supported")
	}
	if b.UseRegex {
		return unsupported(field+".use_regex", "true is not supported (the Split before it is the pattern)")
	}
	return nil
}

// loadModel checks the BPE options and builds the model on raw bytes.
func loadModel(raw json.RawMessage, limits Limits) (*bpeModel, error) {
	var m bpeJSON
	if isNull(raw) {
		return nil, invalid("model", "missing")
	}
	if err := decodeStrict(raw, &m); err != nil {
		return nil, invalid("model", "%v", err)
	}
	checks := []struct {
		bad   bool
		field string
		why   string
	}{
		{m.Type != "BPE", "model.type", fmt.Sprintf("%q is not supported (only BPE)", m.Type)},
		{m.Dropout != nil, "model.dropout", "must be null (dropout makes ids random)"},
		{m.ByteFallback, "model.byte_fallback", "true is not supported"},
		{m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "", "model.continuing_subword_prefix", "must be null or empty"},
		{m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "", "model.end_of_word_suffix", "must be null or empty"},
	}
	for _, c := range checks {
		if c.bad {
			return nil, unsupported(c.field, "%s", c.why)
		}
	}
	model := &bpeModel{ignoreMerges: m.IgnoreMerges, cache: newWordCache(limits.CacheEntries)}
	others, err := model.loadVocab(m.Vocab, limits)
	if err != nil {
		return nil, err
	}
	if err := model.loadMerges(m.Merges, others, limits); err != nil {
		return nil, err
	}
	return model, nil
}

// loadVocab reads model.vocab into the raw-byte vocabulary. Keys outside
// the byte-level alphabet can never match a word; they are returned apart
// so merges may still name them.
func (m *bpeModel) loadVocab(raw json.RawMessage, limits Limits) (others map[string]uint32, err error) {
	const field = "model.vocab"
	m.vocab = map[string]uint32{}
	others = map[string]uint32{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return nil, invalid(field, "%v", err)
	}
	for dec.More() {
		if len(m.vocab)+len(others) >= limits.MaxVocab {
			return nil, fmt.Errorf("%w: %s has more than %d entries", ErrLimit, field, limits.MaxVocab)
		}
		key, id, err := vocabEntry(dec, limits)
		if err != nil {
			return nil, invalid(field, "%v", err)
		}
		if len(key) > limits.MaxTokenBytes {
			return nil, fmt.Errorf("%w: %s key %.32q... has %d bytes, limit %d", ErrLimit, field, key, len(key), limits.MaxTokenBytes)
		}
		if rawKey, ok := fromByteLevel(key); ok {
			m.vocab[rawKey] = id
		} else {
			others[key] = id
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, unsupported(field, "no entry for byte 0x%02x (%q): not a complete byte-level vocabulary", b, byteRunes[b])
		}
		m.byteIDs[b] = id
	}
	return others, nil
}

func vocabEntry(dec *json.Decoder, limits Limits) (string, uint32, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", 0, err
	}
	key, _ := tok.(string)
	if tok, err = dec.Token(); err != nil {
		return "", 0, err
	}
	num, ok := tok.(json.Number)
	if !ok {
		return "", 0, fmt.Errorf("id of %q is not a number", key)
	}
	id, err := parseID(string(num), limits)
	if err != nil {
		return "", 0, fmt.Errorf("id of %q: %v", key, err)
	}
	return key, id, nil
}

// parseID reads a token id; ids are bounded so the decode table is.
func parseID(s string, limits Limits) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a token id", s)
	}
	if id >= uint64(maxID(limits)) {
		return 0, fmt.Errorf("%d is over the largest id allowed, %d", id, maxID(limits)-1)
	}
	return uint32(id), nil
}

func maxID(limits Limits) int { return limits.MaxVocab + limits.MaxAddedTokens }

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, found %v", want, tok)
	}
	return nil
}

// loadMerges reads model.merges in either form ("a b" or ["a", "b"]) and
// ranks them by position. Hugging Face's library refuses a merge whose
// parts or result are not in the vocabulary; so does this. A pair listed
// twice is refused: which rank wins is not a documented behaviour.
func (m *bpeModel) loadMerges(raw json.RawMessage, others map[string]uint32, limits Limits) error {
	const field = "model.merges"
	m.merges = newPairTable()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := expectDelim(dec, '['); err != nil {
		return invalid(field, "%v", err)
	}
	for rank := 0; dec.More(); rank++ {
		if rank >= limits.MaxMerges {
			return fmt.Errorf("%w: %s has more than %d entries", ErrLimit, field, limits.MaxMerges)
		}
		left, right, err := mergeEntry(dec)
		if err != nil {
			return invalid(fmt.Sprintf("%s[%d]", field, rank), "%v", err)
		}
		if err := m.addMerge(left, right, rank, others); err != nil {
			return invalid(fmt.Sprintf("%s[%d]", field, rank), "%v", err)
		}
	}
	return nil
}

func (m *bpeModel) addMerge(left, right string, rank int, others map[string]uint32) error {
	leftID, leftByteLevel, ok := m.lookup(left, others)
	if !ok {
		return fmt.Errorf("%q is not in the vocabulary", left)
	}
	rightID, rightByteLevel, ok := m.lookup(right, others)
	if !ok {
		return fmt.Errorf("%q is not in the vocabulary", right)
	}
	mergedID, _, ok := m.lookup(left+right, others)
	if !ok {
		return fmt.Errorf("%q is not in the vocabulary", left+right)
	}
	if !leftByteLevel || !rightByteLevel {
		return nil // names a token no byte-level word can hold: never applies
	}
	if m.merges.has(leftID, rightID) {
		return fmt.Errorf("the pair %q %q is listed twice", left, right)
	}
	m.merges.put(leftID, rightID, uint32(rank), mergedID)
	return nil
}

// lookup finds a vocabulary key as tokenizer.json spells it.
func (m *bpeModel) lookup(key string, others map[string]uint32) (id uint32, byteLevel, ok bool) {
	if raw, isByteLevel := fromByteLevel(key); isByteLevel {
		id, ok = m.vocab[raw]
		return id, true, ok
	}
	id, ok = others[key]
	return id, false, ok
}

func mergeEntry(dec *json.Decoder) (left, right string, err error) {
	tok, err := dec.Token()
	if err != nil {
		return "", "", err
	}
	switch v := tok.(type) {
	case string:
		if strings.Count(v, " ") != 1 {
			return "", "", fmt.Errorf("%q is not two tokens separated by one space", v)
		}
		left, right, _ = strings.Cut(v, " ")
		return left, right, nil
	case json.Delim:
		if v != '[' {
			break
		}
		var pair [2]string
		for i := range pair {
			tok, err := dec.Token()
			if err != nil {
				return "", "", err
			}
			s, ok := tok.(string)
			if !ok {
				return "", "", fmt.Errorf("a merge pair holds %v, not a string", tok)
			}
			pair[i] = s
		}
		if err := expectDelim(dec, ']'); err != nil {
			return "", "", fmt.Errorf("a merge pair must hold two strings: %v", err)
		}
		return pair[0], pair[1], nil
	}
	return "", "", fmt.Errorf("a merge is %v, not a string or a pair", tok)
}

// loadAddedTokens reads added_tokens into the trie. The families mark every
// added token single_word, lstrip, rstrip and normalized false; other
// values are refused rather than approximated.
func (t *Tokenizer) loadAddedTokens(raw json.RawMessage) error {
	const field = "added_tokens"
	t.added = newAddedTrie()
	if isNull(raw) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := expectDelim(dec, '['); err != nil {
		return invalid(field, "%v", err)
	}
	for i := 0; dec.More(); i++ {
		if i >= t.limits.MaxAddedTokens {
			return fmt.Errorf("%w: %s has more than %d entries", ErrLimit, field, t.limits.MaxAddedTokens)
		}
		at := fmt.Sprintf("%s[%d]", field, i)
		var tok addedTokenJSON
		dec.DisallowUnknownFields()
		if err := dec.Decode(&tok); err != nil {
			return invalid(at, "%v", err)
		}
		if err := t.checkAddedToken(at, tok); err != nil {
			return err
		}
		t.added.insert(tok.Content, tok.ID)
		t.addedList = append(t.addedList, addedToken{content: tok.Content, id: tok.ID})
	}
	return nil
}

func (t *Tokenizer) checkAddedToken(at string, tok addedTokenJSON) error {
	flags := []struct {
		set  bool
		name string
	}{{tok.SingleWord, "single_word"}, {tok.LStrip, "lstrip"}, {tok.RStrip, "rstrip"}, {tok.Normalized, "normalized"}}
	for _, f := range flags {
		if f.set {
			return unsupported(at+"."+f.name, "true is not supported (token %q)", tok.Content)
		}
	}
	switch {
	case tok.Content == "":
		return invalid(at+".content", "empty")
	case len(tok.Content) > t.limits.MaxTokenBytes:
		return fmt.Errorf("%w: %s.content has %d bytes, limit %d", ErrLimit, at, len(tok.Content), t.limits.MaxTokenBytes)
	case int(tok.ID) >= maxID(t.limits):
		return invalid(at+".id", "%d is over the largest id allowed, %d", tok.ID, maxID(t.limits)-1)
	}
	return nil
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID     string `json:"id"`
		TypeID uint32 `json:"type_id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID     string `json:"id"`
		TypeID uint32 `json:"type_id"`
	} `json:"Sequence"`
}

type templateJSON struct {
	Type          string              `json:"type"`
	Single        []templatePieceJSON `json:"single"`
	Pair          json.RawMessage     `json:"pair"` // pairs are never encoded
	SpecialTokens map[string]struct {
		ID     string   `json:"id"`
		IDs    []uint32 `json:"ids"`
		Tokens []string `json:"tokens"`
	} `json:"special_tokens"`
}

// specialTemplate is what a post-processor adds around a single sequence.
type specialTemplate struct{ prefix, suffix []uint32 }

func (t *Tokenizer) loadPostProcessor(raw json.RawMessage, limits Limits) error {
	tmpl, err := loadPostProcessor("post_processor", raw, limits)
	if err == nil && tmpl != nil {
		t.prefix, t.suffix = tmpl.prefix, tmpl.suffix
	}
	return err
}

// loadPostProcessor returns the special tokens added around a single
// sequence, or nil for none. ByteLevel only adjusts offsets, so it adds
// nothing; one TemplateProcessing gives the ids; a Sequence combines them.
func loadPostProcessor(field string, raw json.RawMessage, limits Limits) (*specialTemplate, error) {
	if isNull(raw) {
		return nil, nil
	}
	kind, err := typeOf(field, raw)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "ByteLevel":
		var b byteLevelJSON
		if err := decodeStrict(raw, &b); err != nil {
			return nil, invalid(field, "%v", err)
		}
		return nil, nil
	case "TemplateProcessing":
		return loadTemplate(field, raw, limits)
	case "Sequence":
		return loadPostSequence(field, raw, limits)
	}
	return nil, unsupported(field+".type", "%q is not supported (only ByteLevel, TemplateProcessing and a Sequence of them)", kind)
}

func loadPostSequence(field string, raw json.RawMessage, limits Limits) (*specialTemplate, error) {
	var seq struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
	}
	if err := decodeStrict(raw, &seq); err != nil {
		return nil, invalid(field, "%v", err)
	}
	var found *specialTemplate
	for i, inner := range seq.Processors {
		at := fmt.Sprintf("%s.processors[%d]", field, i)
		if kind, err := typeOf(at, inner); err == nil && kind == "Sequence" {
			return nil, unsupported(at+".type", "a nested Sequence is not supported")
		}
		tmpl, err := loadPostProcessor(at, inner, limits)
		if err != nil {
			return nil, err
		}
		if tmpl != nil && found != nil {
			return nil, unsupported(at, "a second TemplateProcessing is not supported")
		}
		if tmpl != nil {
			found = tmpl
		}
	}
	return found, nil
}

func loadTemplate(field string, raw json.RawMessage, limits Limits) (*specialTemplate, error) {
	var tp templateJSON
	if err := decodeStrict(raw, &tp); err != nil {
		return nil, invalid(field, "%v", err)
	}
	if len(tp.Single) > limits.MaxAddedTokens || len(tp.SpecialTokens) > limits.MaxAddedTokens {
		return nil, fmt.Errorf("%w: %s has more than %d pieces or special tokens", ErrLimit, field, limits.MaxAddedTokens)
	}
	tmpl := &specialTemplate{}
	sequences := 0
	for i, piece := range tp.Single {
		at := fmt.Sprintf("%s.single[%d]", field, i)
		switch {
		case piece.Sequence != nil && piece.SpecialToken == nil:
			if piece.Sequence.ID != "A" {
				return nil, unsupported(at+".Sequence.id", "%q is not supported in a single template (only A)", piece.Sequence.ID)
			}
			sequences++
		case piece.SpecialToken != nil && piece.Sequence == nil:
			ids, err := templateIDs(at, tp, piece.SpecialToken.ID, limits)
			if err != nil {
				return nil, err
			}
			if sequences == 0 {
				tmpl.prefix = append(tmpl.prefix, ids...)
			} else {
				tmpl.suffix = append(tmpl.suffix, ids...)
			}
		default:
			return nil, invalid(at, "a piece must be exactly one of SpecialToken and Sequence")
		}
	}
	if sequences != 1 {
		return nil, unsupported(field+".single", "the template must hold the sequence A exactly once, not %d times", sequences)
	}
	return tmpl, nil
}

func templateIDs(at string, tp templateJSON, name string, limits Limits) ([]uint32, error) {
	special, ok := tp.SpecialTokens[name]
	if !ok {
		return nil, invalid(at+".SpecialToken.id", "%q is not in special_tokens", name)
	}
	if len(special.IDs) > limits.MaxAddedTokens {
		return nil, fmt.Errorf("%w: %s has more than %d ids", ErrLimit, at, limits.MaxAddedTokens)
	}
	for _, id := range special.IDs {
		if int(id) >= maxID(limits) {
			return nil, invalid(at, "id %d is over the largest id allowed, %d", id, maxID(limits)-1)
		}
	}
	return special.IDs, nil
}

// buildDecodeTable maps every id to its bytes: vocabulary entries through
// the byte-level alphabet, added tokens as written.
func (t *Tokenizer) buildDecodeTable() error {
	size := 0
	grow := func(id uint32) {
		if int(id)+1 > size {
			size = int(id) + 1
		}
	}
	for _, id := range t.bpe.vocab {
		grow(id)
	}
	for _, a := range t.addedList {
		grow(a.id)
	}
	t.idBytes = make([]string, size)
	t.known = make([]bool, size)
	for raw, id := range t.bpe.vocab {
		t.idBytes[id], t.known[id] = raw, true
	}
	for _, a := range t.addedList {
		t.idBytes[a.id], t.known[a.id] = a.content, true
	}
	t.addedList = nil
	return nil
}

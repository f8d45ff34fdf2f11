package worker

// words are the fake vocabulary: one word per generated token.
var words = [...]string{
	"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
	"india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa",
}

// tokenText is the i-th token of a request whose prompt had promptTokens
// tokens: the same request always produces the same text, and tokens after
// the first carry a leading space so the pieces concatenate into words.
func tokenText(promptTokens, i int) string {
	w := words[(promptTokens+i*7)%len(words)]
	if i == 0 {
		return w
	}
	return " " + w
}

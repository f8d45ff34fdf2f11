// Times Hugging Face's tokenizers library (npm "tokenizers", the Rust library
// with a prebuilt Node binary) encoding the inputs of router/tokenizer's
// BenchmarkEncode, so the benchmark can print both throughputs side by side.
//
//   node hack/tokenizer-bench.js ORACLE_DIR TOKENIZER_JSON MIN_SECONDS < inputs.json
//
// inputs.json is a JSON object from an input's name to its text. Each text is
// encoded without special tokens, twice untimed (the library's word cache is
// then warm, as the Go benchmark's is), then repeatedly for at least
// MIN_SECONDS and three times. Prints one JSON object from each name to
// {"ns_per_op": ..., "ops": ..., "tokens": ...}.
"use strict";
const fs = require("fs");
const path = require("path");

async function timeEncode(tokenizer, text, minSeconds) {
  const options = { addSpecialTokens: false };
  let tokens = 0;
  for (let i = 0; i < 2; i++) {
    tokens = (await tokenizer.encode(text, null, options)).getIds().length;
  }
  const minNanos = BigInt(Math.round(minSeconds * 1e9));
  const start = process.hrtime.bigint();
  let ops = 0;
  let elapsed = 0n;
  while (ops < 3 || elapsed < minNanos) {
    await tokenizer.encode(text, null, options);
    ops++;
    elapsed = process.hrtime.bigint() - start;
  }
  return { ns_per_op: Number(elapsed) / ops, ops, tokens };
}

async function main() {
  const [oracleDir, tokenizerFile, minSeconds] = process.argv.slice(2);
  if (!oracleDir || !tokenizerFile || !(Number(minSeconds) > 0)) {
    throw new Error("usage: tokenizer-bench.js ORACLE_DIR TOKENIZER_JSON MIN_SECONDS < inputs.json");
  }
  const { Tokenizer } = require(path.join(oracleDir, "node_modules", "tokenizers"));
  const tokenizer = Tokenizer.fromFile(tokenizerFile);
  const inputs = JSON.parse(fs.readFileSync(0, "utf8"));
  const out = {};
  for (const [name, text] of Object.entries(inputs)) {
    out[name] = await timeEncode(tokenizer, text, Number(minSeconds));
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + "\n");
  process.exit(1);
});

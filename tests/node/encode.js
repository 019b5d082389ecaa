// Encodes corpus files with npm tiktoken, the reference for parley's BPE.
//   node encode.js [--encodings=a,b] OUT_DIR FILE...   writes OUT_DIR/<basename>.<encoding>.ids (little-endian
//   uint32) for cl100k_base and o200k_base, and OUT_DIR/specs.json (pat_str, special tokens).
// Files are read as bytes and decoded with TextDecoder (invalid UTF-8 -> U+FFFD, the WHATWG
// rule parley documents). A file named *.special.txt is encoded with every special token
// allowed; others with none (special tokens as plain text).
// Results are cached by content hash in OUT_DIR/../cache, because tiktoken is quadratic on
// long words and the inputs rarely change.
"use strict";
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");
const { get_encoding } = require("tiktoken");
const version = JSON.parse(
  fs.readFileSync(path.join(path.dirname(require.resolve("tiktoken")), "package.json"), "utf8"),
).version;

let args = process.argv.slice(2);
let names = ["cl100k_base", "o200k_base"];
if (args.length && args[0].startsWith("--encodings=")) {
  names = args[0].slice("--encodings=".length).split(",");
  args = args.slice(1);
}
const [outDir, ...files] = args;
const cacheDir = path.join(outDir, "..", "cache");
fs.mkdirSync(outDir, { recursive: true });
fs.mkdirSync(cacheDir, { recursive: true });

const encodings = Object.fromEntries(names.map((n) => [n, get_encoding(n)]));
const specs = {};
for (const n of names) {
  const json = require(`tiktoken/encoders/${n}.json`);
  specs[n] = { pat_str: json.pat_str, special_tokens: json.special_tokens };
}
fs.writeFileSync(path.join(outDir, "specs.json"), JSON.stringify(specs));

const decoder = new TextDecoder("utf-8");
for (const file of files) {
  const bytes = fs.readFileSync(file);
  const text = decoder.decode(bytes);
  const special = file.endsWith(".special.txt");
  for (const n of names) {
    const key = crypto.createHash("sha256").update(`${version}\0${n}\0${special}\0`).update(bytes).digest("hex");
    const cached = path.join(cacheDir, key);
    let out;
    if (fs.existsSync(cached)) {
      out = fs.readFileSync(cached);
    } else {
      const ids = special ? encodings[n].encode(text, "all") : encodings[n].encode(text, [], []);
      out = Buffer.from(new Uint32Array(ids).buffer);
      fs.writeFileSync(cached + ".tmp", out);
      fs.renameSync(cached + ".tmp", cached);
    }
    fs.writeFileSync(path.join(outDir, `${path.basename(file)}.${n}.ids`), out);
  }
}

// The whole-process peer of `parley tokens FILE`: load npm `tiktoken`, read the file, count.
//   node count.js ENCODING FILE     prints the count
"use strict";
const fs = require("fs");
const { get_encoding } = require("tiktoken");

const [encodingName, file] = process.argv.slice(2);
const encoding = get_encoding(encodingName);
console.log(encoding.encode(fs.readFileSync(file, "utf8"), [], []).length);

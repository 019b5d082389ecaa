// The node peer of one non-streamed `parley ask` turn: a process that starts, loads the official
// `openai` SDK, sends one chat completion to the same server and prints the reply.
//   node ask.mjs BASE_URL MODEL PROMPT
import OpenAI from "openai";
const [baseURL, model, prompt] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "sk-bench" });
const reply = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: prompt }],
});
process.stdout.write(reply.choices[0].message.content + "\n");

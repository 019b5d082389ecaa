// The node peers of parley's tool loop (bench/tool_loop_bench.cpp), against the same server:
// a fresh run each turn of a prompt, the model's tool call, the tool, the model's answer.
//   node peer.mjs agents|ai BASE_URL chat|responses TURNS
// Prints one JSON line like tool_loop_bench's: CPU of the whole process (process.cpuUsage())
// and wall time per turn, after an unmeasured warm-up of a tenth of the turns (at least 3).
import { readFileSync } from 'node:fs';
import { z } from 'zod';

const [peer, baseURL, protocol, turnsArg] = process.argv.slice(2);
const turns = Number(turnsArg);
if (!['agents', 'ai'].includes(peer) || !['chat', 'responses'].includes(protocol) || !(turns >= 1)) {
  console.error('usage: node peer.mjs agents|ai BASE_URL chat|responses TURNS');
  process.exit(2);
}
const prompt = 'What is the weather in Oslo?';
const weather = async ({ city }) => JSON.stringify({ city, sky: 'sunny', celsius: 21 });
const description = 'The weather of a city';
// A package's version from its installed package.json (not every package exports that file).
const version = (pkg) =>
  JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))).version;

let turn;
let name;
if (peer === 'agents') {
  const { Agent, run, tool, setTracingDisabled, OpenAIChatCompletionsModel, OpenAIResponsesModel } =
    await import('@openai/agents');
  const { default: OpenAI } = await import('openai');
  setTracingDisabled(true);  // no exporter: nothing leaves the machine
  const client = new OpenAI({ baseURL, apiKey: 'sk-bench', maxRetries: 0 });
  const model = protocol === 'chat' ? new OpenAIChatCompletionsModel(client, 'gpt-4o-mini')
                                    : new OpenAIResponsesModel(client, 'gpt-4o-mini');
  const agent = new Agent({
    name: 'bench',
    model,
    tools: [tool({ name: 'get_weather', description, parameters: z.object({ city: z.string() }),
                   execute: weather })],
  });
  name = `@openai/agents ${version('@openai/agents')}`;
  turn = async () => (await run(agent, prompt)).finalOutput;
} else {
  const { generateText, tool, stepCountIs } = await import('ai');
  const { createOpenAI } = await import('@ai-sdk/openai');
  const provider = createOpenAI({ baseURL, apiKey: 'sk-bench' });
  const model = protocol === 'chat' ? provider.chat('gpt-4o-mini') : provider.responses('gpt-4o-mini');
  const tools = { get_weather: tool({ description, inputSchema: z.object({ city: z.string() }), execute: weather }) };
  name = `ai ${version('ai')}`;
  turn = async () =>
    (await generateText({ model, tools, prompt, stopWhen: stepCountIs(5), maxRetries: 0 })).text;
}

const checked = async () => {
  const answer = await turn();
  if (!String(answer).includes('sunny')) throw new Error(`the answer did not use the tool result: ${answer}`);
};
for (let i = 0; i < Math.max(3, Math.floor(turns / 10)); ++i) await checked();
const cpu0 = process.cpuUsage();
const wall0 = process.hrtime.bigint();
for (let i = 0; i < turns; ++i) await checked();
const wallMs = Number(process.hrtime.bigint() - wall0) / 1e6;
const cpu = process.cpuUsage(cpu0);
console.log(JSON.stringify({ peer: name, protocol, turns, cpu_ms_per_turn: (cpu.user + cpu.system) / 1e3 / turns,
                             wall_ms_per_turn: wallMs / turns }));

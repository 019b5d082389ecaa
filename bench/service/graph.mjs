// The trivial graph the LangGraph API server serves in bench/service/run.sh: one node that asks
// the model (ChatOpenAI against the same `parley mock` that `parley serve` asks) and adds its
// reply, as `parley serve` does with a thread's run.
import { END, MessagesAnnotation, START, StateGraph } from '@langchain/langgraph';
import { ChatOpenAI } from '@langchain/openai';

const model = new ChatOpenAI({
  model: 'gpt-4o-mini',
  apiKey: 'sk-bench',
  maxRetries: 0,
  configuration: { baseURL: process.env.PARLEY_BENCH_MODEL_URL },
});

export const graph = new StateGraph(MessagesAnnotation)
  .addNode('agent', async (state) => ({ messages: [await model.invoke(state.messages)] }))
  .addEdge(START, 'agent')
  .addEdge('agent', END)
  .compile();

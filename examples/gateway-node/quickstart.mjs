// The gateway quick start (README.md, docs/gateway.md): the official OpenAI SDK, unmodified but for its
// base URL and key, through spendgate gateway. The key's budget holds one
// call a month, so the first call succeeds and the second is denied with a
// 429 that names the budget.
//
//   SPENDGATE_KEY=sgk_... node quickstart.mjs      (GATEWAY_URL defaults to http://127.0.0.1:8080/v1)
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.GATEWAY_URL ?? 'http://127.0.0.1:8080/v1',
  apiKey: process.env.SPENDGATE_KEY,
});
const ask = () => client.chat.completions.create({
  model: 'gpt-4o-mini',
  messages: [{ role: 'user', content: 'Say hi' }],
  max_tokens: 300,
});

const first = await ask();
console.log('first call:', first.choices[0].message.content, `(${first.usage.total_tokens} tokens)`);
try {
  await ask();
  console.log('second call: admitted');
  process.exitCode = 1;
} catch (err) {
  if (!(err instanceof OpenAI.RateLimitError)) throw err;
  // err.message starts with the status; the API's own message is err.error.message.
  console.log(`second call: denied, ${err.status} ${err.code}: ${err.error?.message ?? err.message}`);
  console.log(`retry after ${err.headers.get('retry-after')} s`);
}

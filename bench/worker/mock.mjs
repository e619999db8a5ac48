// bench/worker/mock.mjs: a fast stand-in for the LLM of bench/worker/run
// (LLM_MOCK=node), for drains where test/mockllm.py (one Python process, which
// logs and checks each request) answers later than asked under load.  It
// speaks OpenAI's Chat Completions only, checks the key, and answers every
// request with the same short summary after --delay-ms, never failing.
//
//   node mock.mjs --key KEY --port-file FILE --delay-ms N
import fs from "node:fs";
import http from "node:http";

const args = {};
for (let i = 2; i + 1 < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const delay = Number(args["delay-ms"] || 0);
const text = "The user deployed the billing services to /srv/app and asked to check error E4242.";

function send(res, status, body) {
  const data = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions"))
      return send(res, 404, { error: { message: "no such route" } });
    if (req.headers.authorization !== "Bearer " + args.key)
      return send(res, 401, { error: { message: "Incorrect API key provided." } });
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return send(res, 400, { error: { message: "We could not parse the JSON body of your request." } });
    }
    const prompt = JSON.stringify(body.messages || []).length;
    setTimeout(() => send(res, 200, {
      id: "chatcmpl-bench", object: "chat.completion", created: 1700000000,
      model: String(body.model || "mock") + "-2024-07-18",
      choices: [{ index: 0, message: { role: "assistant", content: text, refusal: null },
                  logprobs: null, finish_reason: "stop" }],
      usage: { prompt_tokens: Math.max(1, Math.floor(prompt / 4)), completion_tokens: Math.floor(text.length / 4),
               total_tokens: Math.max(1, Math.floor(prompt / 4)) + Math.floor(text.length / 4) },
    }), delay);
  });
});
server.keepAliveTimeout = 30000;
server.listen(0, "127.0.0.1", () => fs.writeFileSync(args["port-file"], String(server.address().port)));

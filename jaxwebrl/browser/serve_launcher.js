// One browser for one client connection of `python -m jaxwebrl.browser.serve` (serve.py).
// Reads one JSON line on stdin, {"package": <playwright-core dir>, "options": <launchServer options>}: the
// options (Chromium path, flags, loopback host, random wsPath) come from serve.py, never from the client,
// and travel on stdin so the wsPath is not on a command line. Prints {"ws": <endpoint>, "pid": <chromium pid>}
// or {"error": <message>}. When stdin closes (serve.py is done with the connection, or died) the browser
// is closed; when the browser dies this process exits.
const readline = require('readline');

let server = null;
const lines = readline.createInterface({ input: process.stdin });
lines.once('line', async (line) => {
  try {
    const { package: pkg, options } = JSON.parse(line);
    const { chromium } = require(pkg);
    server = await chromium.launchServer(options);
    server.on('close', () => process.exit(0));
    process.stdout.write(JSON.stringify({ ws: server.wsEndpoint(), pid: server.process().pid }) + '\n');
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: String((e && e.message) || e) }) + '\n');
    process.exit(1);
  }
});
lines.on('close', async () => {
  if (server) await server.close();
  process.exit(0);
});

// Calls one tool with the TypeScript SDK 1.x client (@modelcontextprotocol/sdk) and a
// progress callback, with a request time-out that only progress keeps from firing
// (resetTimeoutOnProgress). Prints one JSON line per progress notification as it comes,
//   {"progress": 1, "message": "..."}
// then one line with the result: {"result": {...}} (or {"error": "..."}).
// Usage: node call_tool_waiting_v1.mjs <url> <api-key> <tool> <arguments-json> <timeout-ms>
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, key, tool, args, timeoutMs] = process.argv.slice(2);
if (!url || !key || !tool || !args || !timeoutMs) {
    console.error('usage: node call_tool_waiting_v1.mjs <url> <api-key> <tool> <arguments-json> <timeout-ms>');
    process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
});
const client = new Client({ name: 'crank-test-sdk-v1', version: '1.0.0' });
await client.connect(transport);
let line;
try {
    const result = await client.callTool({ name: tool, arguments: JSON.parse(args) }, undefined, {
        timeout: Number(timeoutMs),
        resetTimeoutOnProgress: true,
        onprogress: ({ progress, message }) => console.log(JSON.stringify({ progress, message }))
    });
    line = { result };
} catch (error) {
    line = { error: String(error) };
}
console.log(JSON.stringify(line));
await transport.terminateSession();
await client.close();

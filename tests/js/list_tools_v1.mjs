// Connects with the TypeScript SDK 1.x client (@modelcontextprotocol/sdk), lists the tools,
// ends the session with DELETE and prints one JSON line:
//   {"sdk": "...", "protocolVersion": "...", "sessionId": "...", "tools": ["..."]}
// Usage: node list_tools_v1.mjs <url> <api-key>
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, key] = process.argv.slice(2);
if (!url || !key) {
    console.error('usage: node list_tools_v1.mjs <url> <api-key>');
    process.exit(2);
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
});
const client = new Client({ name: 'crank-test-sdk-v1', version: '1.0.0' });
await client.connect(transport);
const listed = await client.listTools();
const sessionId = transport.sessionId;
const protocolVersion = transport.protocolVersion;
// The 1.x transport's close() only aborts its streams: ending the session is an explicit DELETE.
await transport.terminateSession();
await client.close();
console.log(
    JSON.stringify({
        sdk: 'v1',
        protocolVersion,
        sessionId,
        terminatedSessionId: transport.sessionId ?? null,
        tools: listed.tools.map(tool => tool.name)
    })
);

// Connects with the TypeScript SDK 2.x client (@modelcontextprotocol/client), lists the tools and
// prints one JSON line:
//   {"sdk": "v2", "mode": "...", "era": "...", "protocolVersion": "...", "sessionId": ..., "tools": ["..."]}
// Usage: node list_tools_v2.mjs <url> <api-key> [auto|legacy|2026-07-28]
// "auto" (the default here) probes server/discover first and falls back to initialize; "legacy"
// is the plain 2025 handshake; a version string pins the modern era at that revision.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const [url, key, modeArg = 'auto'] = process.argv.slice(2);
if (!url || !key) {
    console.error('usage: node list_tools_v2.mjs <url> <api-key> [auto|legacy|<version>]');
    process.exit(2);
}
const mode = modeArg === 'auto' || modeArg === 'legacy' ? modeArg : { pin: modeArg };

const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } }
});
const client = new Client(
    { name: 'crank-test-sdk-v2', version: '1.0.0' },
    { versionNegotiation: { mode } }
);
await client.connect(transport);
const listed = await client.listTools();
const sessionId = transport.sessionId ?? null;
const output = {
    sdk: 'v2',
    mode: modeArg,
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    sessionId,
    tools: listed.tools.map(tool => tool.name)
};
if (sessionId !== null) {
    // A legacy session: end it on the server, as a well-behaved client does.
    await transport.terminateSession();
}
await client.close();
console.log(JSON.stringify(output));

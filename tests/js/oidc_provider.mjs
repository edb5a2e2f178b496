// A real OpenID provider for the identity tests (tests/support/oidc.py starts it): oidc-provider
// on 127.0.0.1, in memory, with what an MCP client needs of an authorization server.
//
// - issuer exactly http://127.0.0.1:<port>, no trailing slash (the MCP Python SDK compares
//   issuers byte for byte);
// - open dynamic client registration; public clients (token_endpoint_auth_method "none") with
//   PKCE S256, which oidc-provider requires of every public client;
// - devInteractions: the login form accepts any login name (the password is ignored) and the
//   consent form grants what was asked; both are plain HTML forms posted over HTTP;
// - resource indicators (RFC 8707): any http://127.0.0.1 URL is a resource server; its access
//   tokens are RFC 9068 JWTs (typ at+jwt) whose aud is that URL, carrying the scopes of
//   --scopes that were asked for, and the account's name, email and groups;
// - a refresh token for every client registered with the refresh_token grant, rotated on use;
// - signing keys from the JWKS file --jwks (private JWKs): access and ID tokens are signed
//   with its first key, with that key's alg. Restarting with another file rotates the keys.
//
// State (clients, grants, refresh tokens) lives in memory: a restart forgets it.
// Prints "ready <issuer>" on stdout once it listens; exits on SIGTERM or SIGINT.
//
// Usage: node oidc_provider.mjs --port <port> --jwks <file> [--scopes "crank:read crank:write"]
//          [--accounts '{"alice": {"name": "Alice", "email": "alice@example.test",
//                        "groups": ["approvers"]}}'] [--access-token-ttl <seconds>]
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { Provider, errors } from 'oidc-provider';

const { values: options } = parseArgs({
    options: {
        port: { type: 'string' },
        jwks: { type: 'string' },
        scopes: { type: 'string', default: '' },
        accounts: { type: 'string', default: '{}' },
        'access-token-ttl': { type: 'string', default: '600' }
    }
});
if (!options.port || !options.jwks) {
    console.error('usage: node oidc_provider.mjs --port <port> --jwks <file> [--scopes ...] [--accounts ...]');
    process.exit(2);
}

const port = Number(options.port);
const issuer = `http://127.0.0.1:${port}`;
const jwks = JSON.parse(readFileSync(options.jwks, 'utf8'));
const alg = jwks.keys[0]?.alg;
if (!alg) {
    console.error(`${options.jwks}: the first key has no "alg"`);
    process.exit(2);
}
const resourceScopes = options.scopes.split(' ').filter(Boolean);
const accounts = JSON.parse(options.accounts);
const accessTokenTTL = Number(options['access-token-ttl']);

// A login name not in the table still signs in: its claims derive from the name.
function profile(login) {
    const known = accounts[login] ?? {};
    return {
        name: known.name ?? login,
        email: known.email ?? `${login}@example.test`,
        groups: known.groups ?? []
    };
}

function isLoopbackResource(indicator) {
    try {
        const url = new URL(indicator);
        return url.protocol === 'http:' && url.hostname === '127.0.0.1';
    } catch {
        return false;
    }
}

const provider = new Provider(issuer, {
    jwks,
    clientDefaults: { id_token_signed_response_alg: alg },
    // Random per run: a restart also ends every sign-in session, as a real restart would.
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    // The resource scopes too: a client may register with them (the MCP SDK does), and
    // registration accepts only scopes the provider lists.
    scopes: ['openid', 'offline_access', 'profile', 'email', 'groups', ...resourceScopes],
    claims: { openid: ['sub'], profile: ['name'], email: ['email'], groups: ['groups'] },
    async findAccount(_ctx, sub) {
        return { accountId: sub, async claims() { return { sub, ...profile(sub) }; } };
    },
    // Who the caller is travels in the access token itself (the gateway validates it locally).
    async extraTokenClaims(_ctx, token) {
        return token.accountId ? profile(token.accountId) : undefined;
    },
    // oidc-provider keeps offline_access only with prompt=consent, which MCP clients do not
    // send; like most hosted providers, issue refresh tokens to whoever registered the grant.
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    expiresWithSession: async () => false,
    rotateRefreshToken: () => true,
    ttl: { AccessToken: accessTokenTTL, IdToken: 600, RefreshToken: 86400, Grant: 86400 },
    features: {
        devInteractions: { enabled: true },
        registration: { enabled: true },
        revocation: { enabled: true },
        resourceIndicators: {
            enabled: true,
            // A token request without "resource" gets the one the authorization granted.
            useGrantedResource: async () => true,
            async getResourceServerInfo(_ctx, indicator) {
                if (!isLoopbackResource(indicator)) {
                    throw new errors.InvalidTarget(`${indicator} is not an http://127.0.0.1 resource`);
                }
                return {
                    audience: indicator,
                    scope: resourceScopes.join(' '),
                    accessTokenTTL,
                    accessTokenFormat: 'jwt',
                    jwt: { sign: { alg } }
                };
            }
        }
    }
});

const server = provider.listen(port, '127.0.0.1', () => {
    console.log(`ready ${issuer}`);
});

function stop() {
    server.close(() => process.exit(0));
    // Keep-alive connections would hold close() open; a test harness must not wait on them.
    server.closeAllConnections();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

// Ferrule balancer for NGINX builds with njs (0.7.9) but no Lua.
//
//   api(r)      js_content on the unix-socket configuration server
//   authorize(r) js_content of auth_request before the C module's metrics dump
//   peer(r)     js_set $ferrule_peer: "addr:port" for proxy_pass, "" -> 503
//   sslCert(r)  js_set $ferrule_ssl_cert: PEM for "ssl_certificate data:..."
//   sslKey(r)   js_set $ferrule_ssl_key:  PEM for "ssl_certificate_key data:..."
//
// State lives in files under $ferrule_state_dir (see ferrule/store.js and
// njs/README.md); the token comes from js_preload_object ferrule_token.
import validate from 'ferrule/validate.js';
import expr from 'ferrule/expr.js';
import balance from 'ferrule/balance.js';
import store from 'ferrule/store.js';
import pem from 'ferrule/pem.js';
import fs from 'fs';
import nodeCrypto from 'crypto';

var LOCK_WAIT_MS = 5000;

// ---------------------------------------------------------------- configuration API

function reply(r, status, body) {
    r.headersOut['Content-Type'] = 'application/json';
    r.headersOut['Cache-Control'] = 'no-store';
    r.return(status, (typeof body === 'string' ? body : JSON.stringify(body)) + '\n');
}

function fail(r, status, msg) {
    reply(r, status, {error: msg});
}

// Defence in depth: only ever answer on a unix socket.
function onUnixSocket(r) {
    var addr = r.variables.server_addr || '';
    var port = r.variables.server_port || '';
    return addr.indexOf('unix:') === 0 && port === '';
}

function expectedToken() {
    /* global ferrule_token */
    if (typeof ferrule_token === 'undefined' || ferrule_token === null ||
        typeof ferrule_token.token !== 'string') {
        return '';
    }
    return ferrule_token.token.trim();
}

function secureEquals(a, b) {
    if (typeof a !== 'string' || typeof b !== 'string' || a.length !== b.length) {
        return false;
    }
    var acc = 0;
    for (var i = 0; i < a.length; i++) {
        acc |= a.charCodeAt(i) ^ b.charCodeAt(i);
    }
    return acc === 0;
}

function authorized(r) {
    var token = expectedToken();
    if (token === '') {
        return false; // fail closed
    }
    var h = r.headersIn.Authorization;
    if (typeof h !== 'string') {
        return false;
    }
    var m = /^[Bb][Ee][Aa][Rr][Ee][Rr]\s+(\S+)\s*$/.exec(h);
    return m !== null && secureEquals(m[1], token);
}

function stateDir(r) {
    var d = r.variables.ferrule_state_dir;
    if (!d) {
        throw new Error('$ferrule_state_dir is not set (js_var $ferrule_state_dir /path;)');
    }
    return d;
}

function readBody(r) {
    var text;
    try {
        text = r.requestText;
    } catch (e) {
        // the body went to a temporary file (larger than client_body_buffer_size)
        var file = r.variables.request_body_file;
        if (!file) {
            return {err: 'cannot read request body: ' + e.message};
        }
        text = fs.readFileSync(file, 'utf8');
    }
    if (!text) {
        return {err: 'empty request body'};
    }
    try {
        return {ok: JSON.parse(text)};
    } catch (e) {
        return {err: 'invalid JSON: ' + e.message};
    }
}

function hashParts(b) {
    return b.upstream_hash_by ? expr.parse(b.upstream_hash_by).ok : null;
}

// Run fn() (synchronous file writes) under the state lock; the lock is only
// contended when two workers handle POSTs at the same moment. fn returns the
// answer, which is sent only after the lock is released: a client that saw the
// answer never sees the lock (nor can a later writer's lock be unlinked by it).
function withLock(r, dir, fn) {
    var deadline = Date.now() + LOCK_WAIT_MS;
    function attempt() {
        var got;
        try {
            store.ensureDirs(dir);
            got = store.tryLock(dir);
        } catch (e) {
            r.error('ferrule: cannot lock state in ' + dir + ': ' + e.message);
            return fail(r, 500, 'cannot lock state: ' + e.message);
        }
        if (!got) {
            if (Date.now() > deadline) {
                return fail(r, 503, 'state is locked by another writer; retry');
            }
            setTimeout(attempt, 2);
            return;
        }
        var answer;
        try {
            answer = fn();
        } finally {
            store.unlock(dir);
        }
        answer();
    }
    attempt();
}

function writeFailed(r, what, e) {
    r.error('ferrule: POST ' + what + ': ' + e.message);
    // ENOSPC/EDQUOT: the state directory is full, as the Lua store's 507
    var full = /ENOSPC|EDQUOT|No space|quota/i.test(String(e.code) + ' ' + e.message);
    fail(r, full ? 507 : 500, 'writing state failed: ' + e.message);
}

function postBackends(r) {
    var body = readBody(r);
    if (body.err) {
        return fail(r, 400, body.err);
    }
    var p = validate.backendsPayload(body.ok);
    if (p.err) {
        return fail(r, 400, p.err);
    }
    var dir = stateDir(r);
    withLock(r, dir, function () {
        var gen;
        try {
            gen = store.writeBackends(dir, p.ok, hashParts);
        } catch (e) {
            return function () { writeFailed(r, 'backends', e); };
        }
        return function () {
            reply(r, 201, {version: p.ok.version, generation: gen,
                           changed: p.ok.backends.length, removed: p.ok.removed.length});
        };
    });
}

function getBackends(r) {
    var dir = stateDir(r);
    var meta = store.readMeta(dir);
    var head = {version: meta ? meta.backends.version : null,
                generation: meta ? meta.backends.generation : 0};
    var all = store.allBackends(dir);
    if (r.args.names === '1') {
        // names only (the controller's adoption), as the Lua API
        head.names = all.map(function (rec) { return rec.backend.name; }).sort();
    } else {
        head.backends = all.map(function (rec) {
            return {generation: rec.generation, backend: rec.backend};
        });
    }
    reply(r, 200, head);
}

function getBackend(r, name) {
    var rec = store.readBackend(stateDir(r), name);
    if (!rec) {
        return fail(r, 404, 'no backend named ' + name);
    }
    reply(r, 200, {generation: rec.generation, backend: rec.backend});
}

async function postCertificates(r) {
    var body = readBody(r);
    if (body.err) {
        return fail(r, 400, body.err);
    }
    var p = validate.certificatesPayload(body.ok);
    if (p.err) {
        return fail(r, 400, p.err);
    }
    // the message names the pair as Lua's does
    var pairs = p.ok.certificates.map(function (c, i) {
        return {where: 'certificates[' + i + ']: ' + c.host, pair: c};
    });
    if (p.ok.default) {
        pairs.push({where: 'default', pair: p.ok.default});
    }
    // Each distinct pair is checked once, as it is stored once: hosts sharing
    // a Secret repeat it (270 hosts naming one 128 KiB pair took ~10 s and
    // ~1 GiB of the worker, which frees nothing before the request ends).
    var passed = {};
    for (var i = 0; i < pairs.length; i++) {
        var digest = store.pairDigest(pairs[i].pair.cert, pairs[i].pair.key);
        if (passed[digest] === true) {
            continue;
        }
        var problem = await pem.check(pairs[i].pair.cert, pairs[i].pair.key);
        if (problem) {
            return fail(r, 400, pairs[i].where + ': ' + problem);
        }
        passed[digest] = true;
    }
    var dir = stateDir(r);
    withLock(r, dir, function () {
        var gen;
        try {
            gen = store.writeCertificates(dir, p.ok);
        } catch (e) {
            return function () { writeFailed(r, 'certificates', e); };
        }
        return function () {
            reply(r, 201, {version: p.ok.version, generation: gen,
                           changed: p.ok.certificates.length, removed: p.ok.removed.length,
                           default: p.ok.default !== null});
        };
    });
}

function getCertificates(r) {
    var dir = stateDir(r);
    var meta = store.readMeta(dir);
    var h = store.certHosts(dir);
    reply(r, 200, {version: meta ? meta.certificates.version : null,
                   hosts: h.hosts, default: h.hasDefault});
}

function getVersion(r) {
    var meta = store.readMeta(stateDir(r));
    reply(r, 200, {
        backends: {
            version: meta ? meta.backends.version : null,
            generation: meta ? meta.backends.generation : 0,
            // no per-worker state: every worker reads the state files on
            // every request, so a 201 means "live in all workers"
            workers: null,
        },
        certificates: {
            version: meta ? meta.certificates.version : null,
            generation: meta ? meta.certificates.generation : 0,
        },
        balancer: 'njs',
    });
}

async function api(r) {
    try {
        if (!onUnixSocket(r)) {
            r.error('ferrule: configuration API reached on ' + r.variables.server_addr + ':' +
                    r.variables.server_port + '; it must only listen on a unix socket');
            return fail(r, 403, 'the configuration API is only served on its unix socket');
        }
        if (!authorized(r)) {
            r.headersOut['WWW-Authenticate'] = 'Bearer realm="ferrule"';
            return fail(r, 401, 'missing or wrong bearer token');
        }
        var method = r.method;
        var uri = r.uri;
        var prefix = '/configuration/backends/';
        if (uri === '/configuration/backends') {
            if (method === 'POST') {
                return postBackends(r);
            } else if (method === 'GET') {
                return getBackends(r);
            }
        } else if (uri.indexOf(prefix) === 0 && uri.length > prefix.length) {
            if (method === 'GET') {
                return getBackend(r, uri.slice(prefix.length));
            }
        } else if (uri === '/configuration/certificates') {
            if (method === 'POST') {
                return await postCertificates(r);
            } else if (method === 'GET') {
                return getCertificates(r);
            }
        } else if (uri === '/configuration/version') {
            if (method === 'GET') {
                return getVersion(r);
            }
        } else {
            return fail(r, 404, 'unknown configuration endpoint ' + uri);
        }
        r.headersOut.Allow = uri === '/configuration/backends' ||
            uri === '/configuration/certificates' ? 'GET, POST' : 'GET';
        return fail(r, 405, 'method ' + method + ' not allowed on ' + uri);
    } catch (e) {
        r.error('ferrule: configuration API: ' + e.stack);
        return fail(r, 500, 'internal error: ' + e.message);
    }
}

// The API's checks for a location njs does not answer itself: GET
// /configuration/metrics, served by the C module (ferrule_metrics_dump) once this
// says 204 through auth_request, which passes a 401 or 403 (and its
// WWW-Authenticate) on to the client.
function authorize(r) {
    try {
        if (!onUnixSocket(r)) {
            r.error('ferrule: configuration API reached on ' + r.variables.server_addr + ':' +
                    r.variables.server_port + '; it must only listen on a unix socket');
            return r.return(403);
        }
        if (!authorized(r)) {
            r.headersOut['WWW-Authenticate'] = 'Bearer realm="ferrule"';
            return r.return(401);
        }
        return r.return(204);
    } catch (e) {
        // fail closed: auth_request turns this into a 500, never a dump
        r.error('ferrule: configuration API authorization: ' + e.stack);
        return r.return(500);
    }
}

// ---------------------------------------------------------------- peer selection

function unavailable(r, msg, name) {
    r.warn('ferrule: ' + msg + ' "' + (name || '') + '", returning 503');
    return '';
}

// $ferrule_affinity_scope, "namespace/name /path": the location's Ingress and the
// cookie's default Path (ingress-nginx's: the Ingress path). Without it (a
// hand-written configuration): no Ingress, and Path=/.
function affinityScope(r) {
    var scope = r.variables.ferrule_affinity_scope || '';
    var sp = scope.indexOf(' ');
    return sp < 0 ? {ingress: '', path: undefined}
        : {ingress: scope.slice(0, sp), path: scope.slice(sp + 1)};
}

// Whether a location of `ingress` sets `aff`'s cookie: that Ingress asked for
// affinity, or the backend names no Ingress (every location).
function cookieHere(aff, ingress) {
    return !aff.ingresses || aff.ingresses.indexOf(ingress) >= 0;
}

function addSetCookie(r, cookie) {
    var existing = r.headersOut['Set-Cookie'];
    if (Array.isArray(existing) && existing.length > 0) {
        r.headersOut['Set-Cookie'] = existing.concat([cookie]);
    } else {
        r.headersOut['Set-Cookie'] = cookie;
    }
}

// The C module's request metrics label a request with the canary backend it went
// to: $ferrule_canary, which the module declares with its ferrule_metrics_zone.
// Without the zone the variable does not exist and nothing would read it.
function nameCanary(r, name) {
    try {
        r.variables.ferrule_canary = name;
    } catch (e) {
        // no ferrule_metrics_zone: request metrics are not counted
    }
}

// The value of an affinity's cookie in the request, if any.
function cookieOf(r, affinity) {
    return r.variables['cookie_' + affinity.cookie_name];
}

// The first 32 bits of md5(s): the key hash of upstream_hash_by and of balanced
// affinity.
function md5u32(s) {
    var d = nodeCrypto.createHash('md5').update(s).digest();
    return (((d[0] << 24) | (d[1] << 16) | (d[2] << 8) | d[3]) >>> 0);
}

// A balanced affinity cookie's tag for backend `name` (balance.js).
function affinityTag(name) {
    return nodeCrypto.createHash('md5').update(name).digest('hex').slice(0, 8);
}

// The endpoint index of rec's backend that an affinity cookie value stands for
// under affinity settings aff (rec's own, or the primary's on a canary side), or -1.
function stuckIndex(rec, aff, value) {
    if (!aff) {
        return -1;
    }
    if (aff.affinity_mode === 'balanced') {
        return balance.balancedIndex(rec.ids, affinityTag(rec.backend.name), value, md5u32);
    }
    return balance.stickyIndex(rec.ids, value);
}

// js_set $ferrule_peer. Evaluated once per request (js_set values are cached
// for the request): first by "if ($ferrule_peer = "")" in the rewrite phase,
// then reused by proxy_pass.
function peer(r) {
    try {
        var name = r.variables.ferrule_backend;
        if (!name) {
            return unavailable(r, '$ferrule_backend is empty', name);
        }
        var dir = stateDir(r);
        var rec = store.readBackend(dir, name);
        if (!rec) {
            return unavailable(r, 'unknown backend', name);
        }
        var aff = rec.backend.affinity;
        var i = -1; // the endpoint an affinity cookie names, once found
        var c = rec.backend.canary;
        if (c) {
            // A request stuck to an endpoint stays on its side before any canary
            // rule; the canary side's affinity is the primary's (sticky, the
            // default) or the canary backend's own (legacy), as in lua/.
            i = stuckIndex(rec, aff, aff ? cookieOf(r, aff) : undefined);
            var crec = i < 0 ? store.readBackend(dir, c.backend) : null;
            // an unknown or empty canary backend falls back to the primary
            // (ingress-nginx behaviour)
            if (crec && crec.backend.endpoints.length > 0) {
                var caff = c.legacy_affinity ? crec.backend.affinity : aff;
                var j = stuckIndex(crec, caff, caff ? cookieOf(r, caff) : undefined);
                var hv = c.header ? r.variables[balance.headerVar(c.header)] : undefined;
                var cv = c.cookie ? r.variables['cookie_' + c.cookie] : undefined;
                if (j >= 0 || balance.canary(c, hv, cv, Math.random)) {
                    rec = crec;
                    aff = caff;
                    i = j;
                    nameCanary(r, crec.backend.name);
                }
            }
        }
        var b = rec.backend;
        var n = b.endpoints.length;
        if (n === 0) {
            return unavailable(r, 'no endpoints for backend', b.name);
        }
        if (aff) {
            if (i < 0) {
                i = stuckIndex(rec, aff, cookieOf(r, aff));
            }
            if (i < 0) {
                var value;
                if (aff.affinity_mode === 'balanced') {
                    // the session goes where its key maps, as the key is all it keeps
                    value = balance.balancedValue(affinityTag(b.name), Math.random);
                    i = balance.hashIndex(md5u32(value), rec.ids);
                } else {
                    i = balance.rrIndex(n, r.variables.connection, r.variables.connection_requests);
                    value = rec.ids[i];
                }
                var scope = affinityScope(r);
                if (cookieHere(aff, scope.ingress)) {
                    addSetCookie(r, balance.setCookie(aff, value,
                                                      scope.path,
                                                      r.variables.https === 'on',
                                                      Math.floor(Date.now() / 1000),
                                                      r.headersIn['User-Agent']));
                }
            }
        } else if (rec.hash) {
            var key = expr.evaluate(rec.hash, function (v) { return r.variables[v]; });
            var size = b.upstream_hash_by_subset_size;
            i = size ? balance.subsetIndex(md5u32(key), rec.ids, size, Math.random)
                : balance.hashIndex(md5u32(key), rec.ids);
        } else {
            // round_robin, and ewma (no per-worker statistics in njs 0.7.9)
            i = balance.rrIndex(n, r.variables.connection, r.variables.connection_requests);
        }
        return balance.peer(b.endpoints[i]);
    } catch (e) {
        r.error('ferrule: peer selection failed: ' + e.stack);
        return '';
    }
}

// ---------------------------------------------------------------- certificates
// js_set in "ssl_certificate data:$ferrule_ssl_cert" runs in the TLS
// handshake (a fake request per handshake, the same for the certificate and
// the key), so both variables come from one lookup, which reads one pair file
// holding both: a rotation landing between the two js_sets (or between the
// reads of the lookup) cannot pair a new certificate with an old key.
var chosen = null; // per request (per handshake): njs clones the VM per request

function lookupCertificate(r) {
    if (chosen) {
        return chosen;
    }
    var dir = stateDir(r);
    var host = validate.host(r.variables.ssl_server_name || '');
    var rec = null;
    if (host && host.indexOf('*') < 0) {
        rec = store.readCertPair(dir, host);
        var dot = host.indexOf('.');
        if (!rec && dot > 0) {
            rec = store.readCertPair(dir, '*.' + host.slice(dot + 1));
        }
    }
    if (!rec) {
        rec = store.readCertPair(dir, '#default');
    }
    if (!rec) {
        // the static fallback the renderer writes (as ssl_certificate for Lua)
        rec = {cert: fs.readFileSync(r.variables.ferrule_default_cert, 'utf8'),
               key: fs.readFileSync(r.variables.ferrule_default_key, 'utf8')};
    }
    chosen = rec;
    return rec;
}

function sslCert(r) {
    try {
        return lookupCertificate(r).cert;
    } catch (e) {
        r.error('ferrule: certificate lookup failed: ' + e.message);
        return '';
    }
}

function sslKey(r) {
    try {
        return lookupCertificate(r).key;
    } catch (e) {
        r.error('ferrule: certificate lookup failed: ' + e.message);
        return '';
    }
}

// js_set $ferrule_tls_redirect: "1" when a plain-HTTP request must be redirected to
// HTTPS: the location allows the ssl-redirect ($ferrule_redirect_host is its server's
// host key) and a certificate is posted for exactly that key, so a host gaining or
// losing TLS needs no reload. Evaluated through a map on $ferrule_scheme: HTTPS requests
// never run it.
function tlsRedirect(r) {
    try {
        var host = validate.host(r.variables.ferrule_redirect_host || '');
        return host && store.readCert(stateDir(r), host) ? '1' : '';
    } catch (e) {
        r.error('ferrule: ssl-redirect check failed: ' + e.message);
        return '';
    }
}

// The request URI escaped as a query parameter's value (auth-signin's redirect
// carries the original URL; Lua's ngx.escape_uri does the same).
function escapedRequestUri(r) {
    return encodeURIComponent(r.variables.request_uri || '');
}

export default {api, authorize, peer, sslCert, sslKey, tlsRedirect, escapedRequestUri};

// Validation and normalisation of configuration API payloads (pure).
// A port of lua/ferrule/validate.lua: same rules, same messages, so the
// controller sees the same 400s whichever balancer runs. The rules are
// balancer/API.md; balancer/cases/ holds both validators to them.
//
// Every function returns {ok: value} or {err: "clear message"}.
import expr from 'ferrule/expr.js';

var MAX_NAME = 1024;
// The most bytes a certificate and its key may have together.
var MAX_PEM = 128 * 1024;

function isNull(v) {
    return v === null || v === undefined;
}

function isEmpty(v) {
    for (var k in v) {
        return false;
    }
    return true;
}

// A JSON object, or an empty array: the Lua balancer's decoder cannot tell [] from
// {}, and both balancers take one for the other (balancer/API.md).
function isObject(v) {
    return typeof v === 'object' && v !== null && (!Array.isArray(v) || v.length === 0);
}

// A JSON array as a list (an empty object is an empty one), or null.
function list(v) {
    if (Array.isArray(v)) {
        return v;
    }
    return isObject(v) && isEmpty(v) ? [] : null;
}

function isInt(v, min, max) {
    return typeof v === 'number' && Number.isInteger(v) && v >= min && v <= max;
}

// strings may not contain control characters: header/cookie values end up
// in response headers, names in file contents and log lines.
// (Hand-written scans instead of regular expressions on the per-item paths:
// njs 0.7.9 has no garbage collector, every regexp match allocates until the
// request ends, and a full resync validates tens of thousands of items.)
function cleanString(v, allowEmpty) {
    if (typeof v !== 'string') {
        return false;
    }
    if (!allowEmpty && v === '') {
        return false;
    }
    for (var i = 0; i < v.length; i++) {
        var c = v.charCodeAt(i);
        if (c < 32 || c === 127) {
            return false;
        }
    }
    return true;
}

// Limits are in bytes of UTF-8, as Lua counts them (s.length counts UTF-16
// units). njs keeps strings in UTF-8, so Buffer.byteLength reads their size
// instead of scanning them in JavaScript (a POST of 270 hosts sharing a
// 128 KiB pair spent most of its time here).
function byteLength(s) {
    return Buffer.byteLength(s);
}

// A name as the API takes it (backends, canary backends, removed).
function nameOk(v) {
    return cleanString(v) && byteLength(v) <= MAX_NAME;
}

function q(s) {
    return JSON.stringify(String(s));
}

function str(v) {
    if (v === undefined) {
        return 'nil';
    }
    if (typeof v === 'object') {
        return JSON.stringify(v);
    }
    return String(v);
}

function ipv4(a) {
    var parts = 0;
    var digits = 0;
    var value = 0;
    for (var i = 0; i <= a.length; i++) {
        var c = i < a.length ? a.charCodeAt(i) : 46; // a final '.'
        if (c >= 48 && c <= 57) {
            value = value * 10 + (c - 48);
            if (++digits > 3) {
                return false;
            }
        } else if (c === 46) {
            if (digits === 0 || value > 255) {
                return false;
            }
            parts++;
            digits = 0;
            value = 0;
        } else {
            return false;
        }
    }
    return parts === 4;
}

function isHex(c) {
    return (c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102);
}

// How many colon-separated groups of 1 to 4 hex digits a[from..to) holds, -1
// unless well formed ("" holds 0: one side of a "::").
function hexGroups(a, from, to) {
    if (from === to) {
        return 0;
    }
    var n = 0;
    var digits = 0;
    for (var i = from; i <= to; i++) {
        var c = i < to ? a.charCodeAt(i) : 58; // a final ':'
        if (c === 58) {
            if (digits === 0) {
                return -1;
            }
            n++;
            digits = 0;
        } else if (!isHex(c) || ++digits > 4) {
            return -1;
        }
    }
    return n;
}

// RFC 4291 section 2.2 text forms only: eight groups, or fewer around a single
// "::" (which stands for at least one group), the last two groups possibly
// written as a dotted IPv4 address. No zone ("%eth0"), port or brackets: an
// address NGINX cannot connect to fails the request with 500 instead of being
// retried (a loose check let "1:2" and "fe80::1%eth0" through).
function ipv6(a) {
    if (a.length < 2 || a.length > 45 || a.indexOf(':') < 0) {
        return false;
    }
    var dotted = false;
    for (var i = 0; i < a.length; i++) {
        var c = a.charCodeAt(i);
        if (c === 46) {
            dotted = true;
        } else if (c !== 58 && !isHex(c)) {
            return false;
        }
    }
    if (dotted) {
        var last = a.lastIndexOf(':');
        if (!ipv4(a.slice(last + 1))) {
            return false;
        }
        a = a.slice(0, last + 1) + '0:0'; // its two groups' worth
    }
    var dbl = a.indexOf('::');
    if (dbl < 0) {
        return hexGroups(a, 0, a.length) === 8;
    }
    if (a.indexOf('::', dbl + 1) >= 0) {
        return false;
    }
    var left = hexGroups(a, 0, dbl);
    var right = hexGroups(a, dbl + 2, a.length);
    return left >= 0 && right >= 0 && left + right <= 7;
}

function bracketed(a) {
    return a.length >= 2 && a.charCodeAt(0) === 91 && a.charCodeAt(a.length - 1) === 93;
}

// IPv4 or IPv6 literal, IPv6 optionally bracketed. No host names.
function address(a) {
    if (typeof a !== 'string') {
        return false;
    }
    if (bracketed(a)) {
        return ipv6(a.slice(1, -1));
    }
    return ipv4(a) || ipv6(a);
}

// RFC 6265 cookie-name token
function cookieNameOk(s) {
    return cleanString(s) && !/[ ()<>@,;:\\"\/\[\]?={}]/.test(s);
}

// HTTP header field-name token
function headerNameOk(s) {
    return cleanString(s) && /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/.test(s);
}

function pathOk(s) {
    return cleanString(s) && s.indexOf(';') < 0;
}

function fail(where, msg) {
    return {err: where + ': ' + msg};
}

// Returns the endpoint or an error message (a string).
function endpoint(v) {
    if (!isObject(v)) {
        return 'must be an object';
    }
    if (!address(v.address)) {
        return 'address must be an IPv4 or IPv6 literal, got ' + str(v.address);
    }
    if (!isInt(v.port, 1, 65535)) {
        return 'port must be an integer in 1..65535, got ' + str(v.port);
    }
    return {address: bracketed(v.address) ? v.address.slice(1, -1) : v.address, port: v.port};
}

// affinity.ingresses: "namespace/name" of each Ingress whose locations set the cookie
function ingressListOk(x) {
    if (!Array.isArray(x) || x.length > 10000) {
        return false;
    }
    for (var i = 0; i < x.length; i++) {
        var s = x[i];
        if (!cleanString(s) || byteLength(s) < 3 || byteLength(s) > 507) {
            return false;
        }
        var slash = s.indexOf('/');
        if (slash <= 0 || slash === s.length - 1 || s.indexOf('/', slash + 1) >= 0) {
            return false;
        }
    }
    return true;
}

function affinity(v, where) {
    if (isNull(v)) {
        return {ok: null};
    }
    if (!isObject(v)) {
        return fail(where, 'must be an object or null');
    }
    if (v.mode !== 'cookie') {
        return fail(where, 'mode must be "cookie", got ' + str(v.mode));
    }
    if (!cookieNameOk(v.cookie_name)) {
        return fail(where, 'cookie_name must be a valid cookie name');
    }
    // null is persistent: what a balancer did before the field existed (as lua/)
    var out = {mode: 'cookie', affinity_mode: 'persistent', cookie_name: v.cookie_name,
               max_age: null, path: null,
               secure: null, samesite: null, conditional_samesite_none: null,
               expires: null, domain: null, change_on_failure: null};
    if (!isNull(v.affinity_mode)) {
        if (v.affinity_mode !== 'balanced' && v.affinity_mode !== 'persistent') {
            return fail(where, 'affinity_mode must be "balanced", "persistent" or null');
        }
        out.affinity_mode = v.affinity_mode;
    }
    if (!isNull(v.max_age)) {
        if (!isInt(v.max_age, 0, 2147483647)) {
            return fail(where, 'max_age must be a non-negative integer or null');
        }
        out.max_age = v.max_age;
    }
    if (!isNull(v.path)) {
        if (!pathOk(v.path)) {
            return fail(where, "path must be a string without ';' or control characters");
        }
        out.path = v.path;
    }
    if (!isNull(v.secure)) {
        if (typeof v.secure !== 'boolean') {
            return fail(where, 'secure must be true, false or null');
        }
        out.secure = v.secure;
    }
    if (!isNull(v.samesite)) {
        if (v.samesite !== 'None' && v.samesite !== 'Lax' && v.samesite !== 'Strict') {
            return fail(where, 'samesite must be "None", "Lax", "Strict" or null');
        }
        out.samesite = v.samesite;
    }
    if (!isNull(v.conditional_samesite_none)) {
        if (typeof v.conditional_samesite_none !== 'boolean') {
            return fail(where, 'conditional_samesite_none must be true, false or null');
        }
        out.conditional_samesite_none = v.conditional_samesite_none;
    }
    if (!isNull(v.expires)) {
        if (!isInt(v.expires, 1, 2147483647)) {
            return fail(where, 'expires must be a positive integer (seconds) or null');
        }
        out.expires = v.expires;
    }
    if (!isNull(v.domain)) {
        // a host name as certificates take it, no wildcard, perhaps after one dot
        var d = typeof v.domain === 'string' ? v.domain.replace(/^\./, '') : null;
        if (d === null || !host(d) || d.indexOf('*') >= 0) {
            return fail(where, 'domain must be a domain name, optionally with a leading dot');
        }
        out.domain = v.domain;
    }
    if (!isNull(v.change_on_failure)) {
        if (typeof v.change_on_failure !== 'boolean') {
            return fail(where, 'change_on_failure must be true, false or null');
        }
        out.change_on_failure = v.change_on_failure;
    }
    if (!isNull(v.ingresses)) {
        if (!ingressListOk(v.ingresses)) {
            return fail(where, 'ingresses must be an array of at most 10000 namespace/name strings or null');
        }
        out.ingresses = v.ingresses; // absent when null: bodies from before the field
    }
    return {ok: out};
}

function canary(v, where, selfName) {
    if (isNull(v)) {
        return {ok: null};
    }
    if (!isObject(v)) {
        return fail(where, 'must be an object or null');
    }
    if (!nameOk(v.backend)) {
        return fail(where, 'backend must be a backend name');
    }
    if (v.backend === selfName) {
        return fail(where, 'backend must not name the backend itself');
    }
    var out = {backend: v.backend, weight: null, weight_total: 100, header: null,
               header_value: null, header_pattern: null, cookie: null,
               legacy_affinity: false};
    if (!isNull(v.weight_total)) {
        if (!isInt(v.weight_total, 1, 2147483647)) {
            return fail(where, 'weight_total must be a positive integer or null');
        }
        out.weight_total = v.weight_total;
    }
    if (!isNull(v.weight)) {
        if (!isInt(v.weight, 0, out.weight_total)) {
            return fail(where, 'weight must be an integer in 0..weight_total (' +
                        out.weight_total + ')');
        }
        out.weight = v.weight;
    }
    if (!isNull(v.header)) {
        if (!headerNameOk(v.header)) {
            return fail(where, 'header must be a valid HTTP header name');
        }
        out.header = v.header;
    }
    if (!isNull(v.header_value)) {
        if (!cleanString(v.header_value)) {
            return fail(where, 'header_value must be a non-empty string');
        }
        out.header_value = v.header_value;
    }
    if (!isNull(v.header_pattern)) {
        // compiled by balance.canary: a pattern the engine refuses never matches
        if (!cleanString(v.header_pattern) || byteLength(v.header_pattern) > 1024) {
            return fail(where, 'header_pattern must be a non-empty string of at most 1024 bytes');
        }
        out.header_pattern = v.header_pattern;
    }
    if (!isNull(v.cookie)) {
        if (!cookieNameOk(v.cookie)) {
            return fail(where, 'cookie must be a valid cookie name');
        }
        out.cookie = v.cookie;
    }
    // whose affinity the canary side uses (affinity-canary-behavior)
    var behavior = isNull(v.affinity_behavior) ? 'sticky' : v.affinity_behavior;
    if (behavior !== 'sticky' && behavior !== 'legacy') {
        return fail(where, 'affinity_behavior must be "sticky", "legacy" or null');
    }
    out.legacy_affinity = behavior === 'legacy';
    return {ok: out};
}

function endpointKey(address, port) {
    return (address.indexOf(':') >= 0 ? '[' + address + ']' : address) + ':' + port;
}

// One backend object -> the normalised backend. index: its position in the
// payload (for messages), or undefined.
function backend(v, index) {
    var where = index === undefined ? 'backend' : 'backends[' + index + ']';
    if (!isObject(v)) {
        return fail(where, 'must be an object');
    }
    if (!nameOk(v.name)) {
        return fail(where, 'name must be a non-empty string (max ' + MAX_NAME +
                    ' chars, no control characters)');
    }
    var name = v.name;
    var at = function (msg) { // the message prefix is only built on failure
        return fail(where + ' ' + q(name), msg);
    };
    var out = {name: v.name, endpoints: [], load_balance: 'round_robin',
               upstream_hash_by: null, upstream_hash_by_subset_size: null, affinity: null,
               canary: null};

    if (!isNull(v.endpoints)) {
        var eps = list(v.endpoints);
        if (eps === null) {
            return at('endpoints must be an array');
        }
        var seen = eps.length > 16 ? {} : null; // small: a linear scan allocates nothing
        for (var i = 0; i < eps.length; i++) {
            var e = endpoint(eps[i]);
            if (typeof e === 'string') {
                return at('endpoints[' + i + ']: ' + e);
            }
            // duplicates are harmless; keep one
            if (seen !== null) {
                var key = 'k:' + e.port + '/' + e.address;
                if (seen[key] !== true) {
                    seen[key] = true;
                    out.endpoints.push(e);
                }
                continue;
            }
            var dup = false;
            for (var j = 0; j < out.endpoints.length && !dup; j++) {
                dup = out.endpoints[j].port === e.port && out.endpoints[j].address === e.address;
            }
            if (!dup) {
                out.endpoints.push(e);
            }
        }
    }

    var lb = isNull(v.load_balance) ? 'round_robin' : v.load_balance;
    if (lb !== 'round_robin' && lb !== 'ewma') {
        return at('load_balance must be "round_robin" or "ewma", got ' + str(lb));
    }
    out.load_balance = lb;

    if (!isNull(v.upstream_hash_by)) {
        if (!cleanString(v.upstream_hash_by)) {
            return at('upstream_hash_by must be a non-empty string or null');
        }
        var p = expr.parse(v.upstream_hash_by);
        if (p.err) {
            return at('upstream_hash_by: ' + p.err);
        }
        out.upstream_hash_by = v.upstream_hash_by;
    }
    if (!isNull(v.upstream_hash_by_subset_size)) {
        if (!isInt(v.upstream_hash_by_subset_size, 1, 2147483647)) {
            return at('upstream_hash_by_subset_size must be a positive integer or null');
        }
        out.upstream_hash_by_subset_size = v.upstream_hash_by_subset_size;
    }

    var a = affinity(v.affinity, 'affinity');
    if (a.err) {
        return at(a.err);
    }
    out.affinity = a.ok;

    var c = canary(v.canary, 'canary', v.name);
    if (c.err) {
        return at(c.err);
    }
    out.canary = c.ok;
    return {ok: out};
}

function version(v) {
    if (!isInt(v, 0, 9007199254740992)) {
        return {err: 'version must be a non-negative integer'};
    }
    return {ok: v};
}

// POST /configuration/backends
function backendsPayload(body) {
    if (!isObject(body)) {
        return {err: 'body must be a JSON object'};
    }
    var ver = version(body.version);
    if (ver.err) {
        return ver;
    }
    var out = {version: ver.ok, backends: [], removed: []};
    var names = {};
    if (!isNull(body.backends)) {
        var backends = list(body.backends);
        if (backends === null) {
            return {err: 'backends must be an array'};
        }
        for (var i = 0; i < backends.length; i++) {
            var b = backend(backends[i], i);
            if (b.err) {
                return b;
            }
            if (names['n:' + b.ok.name] === true) {
                return {err: 'backends[' + i + ']: duplicate backend name ' + q(b.ok.name)};
            }
            names['n:' + b.ok.name] = true;
            out.backends.push(b.ok);
        }
    }
    if (!isNull(body.removed)) {
        var removed = list(body.removed);
        if (removed === null) {
            return {err: 'removed must be an array of backend names'};
        }
        for (var j = 0; j < removed.length; j++) {
            var name = removed[j];
            if (!nameOk(name)) {
                return {err: 'removed[' + j + '] must be a backend name'};
            }
            if (names['n:' + name] === true) {
                return {err: 'removed[' + j + ']: ' + q(name) + ' is also in backends'};
            }
            out.removed.push(name);
        }
    }
    return {ok: out};
}

// lower-case, no trailing dot; "*.example.com" allowed (one leading label).
// Also used on the client's SNI before it becomes part of a file name.
function host(h) {
    if (typeof h !== 'string' || h === '' || h.length > 253) {
        return null;
    }
    h = h.toLowerCase().replace(/\.$/, '');
    var rest = h.indexOf('*.') === 0 ? h.slice(2) : h;
    var labels = rest.split('.');
    for (var i = 0; i < labels.length; i++) {
        if (!/^[a-z0-9_-]{1,63}$/.test(labels[i])) {
            return null;
        }
    }
    return h;
}

function pemPair(v, where) {
    if (!isObject(v)) {
        return fail(where, 'must be an object');
    }
    if (typeof v.cert !== 'string' || v.cert.indexOf('-----BEGIN ') < 0) {
        return fail(where, 'cert must be a PEM string');
    }
    if (typeof v.key !== 'string' || v.key.indexOf('-----BEGIN ') < 0) {
        return fail(where, 'key must be a PEM string');
    }
    // the controller's bound (model/src/build/tls.rs MAX_TLS_PEM)
    var bytes = byteLength(v.cert) + byteLength(v.key);
    if (bytes > MAX_PEM) {
        return fail(where, 'cert and key: ' + bytes + ' bytes together, more than the ' +
                    MAX_PEM + ' allowed');
    }
    return {ok: {cert: v.cert, key: v.key}};
}

// POST /configuration/certificates, structure only: the PEM contents are
// checked by pem.check (asynchronous, WebCrypto) in the handler.
// Returns {ok: {version, certificates: [{host, cert, key}], removed,
// default: {cert, key} | null}}.
function certificatesPayload(body) {
    if (!isObject(body)) {
        return {err: 'body must be a JSON object'};
    }
    var ver = version(body.version);
    if (ver.err) {
        return ver;
    }
    var out = {version: ver.ok, certificates: [], removed: [], default: null};
    var seen = {};
    if (!isNull(body.certificates)) {
        var certificates = list(body.certificates);
        if (certificates === null) {
            return {err: 'certificates must be an array'};
        }
        for (var i = 0; i < certificates.length; i++) {
            var where = 'certificates[' + i + ']';
            var c = certificates[i];
            if (!isObject(c)) {
                return fail(where, 'must be an object');
            }
            var h = host(c.host);
            if (!h) {
                return fail(where, 'host must be a DNS name or *.wildcard, got ' + str(c.host));
            }
            if (seen['h:' + h] === true) {
                return fail(where, 'duplicate host ' + q(h));
            }
            seen['h:' + h] = true;
            var pair = pemPair(c, where + ' ' + h);
            if (pair.err) {
                return pair;
            }
            pair.ok.host = h;
            out.certificates.push(pair.ok);
        }
    }
    if (!isNull(body.removed)) {
        var removed = list(body.removed);
        if (removed === null) {
            return {err: 'removed must be an array of hosts'};
        }
        for (var j = 0; j < removed.length; j++) {
            var rh = host(removed[j]);
            if (!rh) {
                return {err: 'removed[' + j + '] must be a host'};
            }
            if (seen['h:' + rh] === true) {
                return {err: 'removed[' + j + ']: ' + q(rh) + ' is also in certificates'};
            }
            out.removed.push(rh);
        }
    }
    if (!isNull(body.default)) {
        var d = pemPair(body.default, 'default');
        if (d.err) {
            return d;
        }
        out.default = d.ok;
    }
    return {ok: out};
}

export default {address, backend, backendsPayload, certificatesPayload, host, endpointKey,
                cleanString};

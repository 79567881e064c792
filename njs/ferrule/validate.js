// Validation and normalisation of configuration API payloads (pure).
// A port of lua/ferrule/validate.lua: same rules, same messages, so the
// controller sees the same 400s whichever balancer runs.
//
// Every function returns {ok: value} or {err: "clear message"}.
import expr from 'ferrule/expr.js';

var MAX_NAME = 1024;
// The most bytes a certificate and its key may have together.
var MAX_PEM = 128 * 1024;

function isNull(v) {
    return v === null || v === undefined;
}

function isObject(v) {
    return typeof v === 'object' && v !== null && !Array.isArray(v);
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

function ipv6(a) {
    if (a.length < 2 || a.length > 45 || a.indexOf(':') < 0) {
        return false;
    }
    for (var i = 0; i < a.length; i++) {
        var c = a.charCodeAt(i);
        var ok = (c >= 48 && c <= 58) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102) || c === 46;
        if (!ok) {
            return false;
        }
    }
    if (a.indexOf(':::') >= 0) {
        return false;
    }
    var first = a.indexOf('::');
    return first < 0 || a.indexOf('::', first + 1) < 0;
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
    return cleanString(s) && !/[\s()<>@,;:\\"\/\[\]?={}]/.test(s);
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
    var out = {mode: 'cookie', cookie_name: v.cookie_name, max_age: null, path: null,
               secure: null, samesite: null, expires: null, domain: null};
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
    return {ok: out};
}

function canary(v, where, selfName) {
    if (isNull(v)) {
        return {ok: null};
    }
    if (!isObject(v)) {
        return fail(where, 'must be an object or null');
    }
    if (!cleanString(v.backend) || v.backend.length > MAX_NAME) {
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
        if (!cleanString(v.header_pattern) || v.header_pattern.length > 1024) {
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
    if (!cleanString(v.name) || v.name.length > MAX_NAME) {
        return fail(where, 'name must be a non-empty string (max ' + MAX_NAME +
                    ' chars, no control characters)');
    }
    var name = v.name;
    var at = function (msg) { // the message prefix is only built on failure
        return fail(where + ' ' + q(name), msg);
    };
    var out = {name: v.name, endpoints: [], load_balance: 'round_robin',
               upstream_hash_by: null, affinity: null, canary: null};

    if (!isNull(v.endpoints)) {
        if (!Array.isArray(v.endpoints)) {
            return at('endpoints must be an array');
        }
        var eps = v.endpoints;
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
        if (!Array.isArray(body.backends)) {
            return {err: 'backends must be an array'};
        }
        for (var i = 0; i < body.backends.length; i++) {
            var b = backend(body.backends[i], i);
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
        if (!Array.isArray(body.removed)) {
            return {err: 'removed must be an array of backend names'};
        }
        for (var j = 0; j < body.removed.length; j++) {
            var name = body.removed[j];
            if (!cleanString(name) || name.length > MAX_NAME) {
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
    // the controller's bound (model/src/build/tls.rs MAX_TLS_PEM); JSON strings of
    // PEM are ASCII: characters are bytes
    if (v.cert.length + v.key.length > MAX_PEM) {
        return fail(where, 'cert and key: ' + (v.cert.length + v.key.length) +
                    ' bytes together, more than the ' + MAX_PEM + ' allowed');
    }
    return {ok: {cert: v.cert, key: v.key}};
}

// POST /configuration/certificates, structure only: the PEM contents are
// checked by pem.check (asynchronous, WebCrypto) in the handler.
// Returns {ok: {version, certificates: [{host, cert, key, where}], removed,
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
        if (!Array.isArray(body.certificates)) {
            return {err: 'certificates must be an array'};
        }
        for (var i = 0; i < body.certificates.length; i++) {
            var where = 'certificates[' + i + ']';
            var c = body.certificates[i];
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
            pair.ok.where = where + ': ' + h;
            out.certificates.push(pair.ok);
        }
    }
    if (!isNull(body.removed)) {
        if (!Array.isArray(body.removed)) {
            return {err: 'removed must be an array of hosts'};
        }
        for (var j = 0; j < body.removed.length; j++) {
            var rh = host(body.removed[j]);
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
        d.ok.where = 'default';
        out.default = d.ok;
    }
    return {ok: out};
}

export default {address, backend, backendsPayload, certificatesPayload, host, endpointKey,
                cleanString};

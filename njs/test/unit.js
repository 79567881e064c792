// Unit tests of the pure njs modules, run inside nginx (GET /t/unit on the
// test-only unix socket; there is no njs CLI in Debian's libnginx-mod-http-js).
// Output: "ok <name>" / "not ok <name>: <why>" lines; 200 if all pass.
// The validator's tests are the API's case files (balancer/cases/, read from
// $ferrule_repo), which the Lua unit tests run too.
import fs from 'fs';
import validate from 'ferrule/validate.js';
import expr from 'ferrule/expr.js';
import balance from 'ferrule/balance.js';
import pem from 'ferrule/pem.js';
import nodeCrypto from 'crypto';

function md5hex(s) {
    return nodeCrypto.createHash('md5').update(s).digest('hex');
}

function md5u32(s) {
    var d = nodeCrypto.createHash('md5').update(s).digest();
    return ((d[0] << 24) | (d[1] << 16) | (d[2] << 8) | d[3]) >>> 0;
}

function eq(a, b, what) {
    var sa = JSON.stringify(a);
    var sb = JSON.stringify(b);
    if (sa !== sb) {
        throw new Error((what ? what + ': ' : '') + 'expected ' + sb + ', got ' + sa);
    }
}

function ok(v, what) {
    if (!v) {
        throw new Error(what || 'assertion failed');
    }
}

var tests = {
    'expr: parse and evaluate': function () {
        eq(expr.parse('$request_uri').ok, [{v: 'request_uri'}]);
        eq(expr.parse('$arg_user$http_x_a').ok, [{v: 'arg_user'}, {v: 'http_x_a'}]);
        eq(expr.parse('${Host}-x').ok, [{v: 'host'}, {l: '-x'}]);
        eq(expr.parse('pre$a.b').ok, [{l: 'pre'}, {v: 'a'}, {l: '.b'}]);
        ok(expr.parse('${host').err);
        ok(expr.parse('$').err);
        ok(expr.parse('$-x').err);
        var vars = {a: '1', b: undefined};
        eq(expr.evaluate(expr.parse('x$a-$b-${a}').ok, function (n) { return vars[n]; }), 'x1--1');
    },
    'round robin: one connection visits every endpoint in turn': function () {
        var seen = [];
        for (var k = 1; k <= 8; k++) {
            seen.push(balance.rrIndex(4, 12345, k));
        }
        var first = seen[0];
        for (var j = 0; j < 8; j++) {
            eq(seen[j], (first + j) % 4, 'request ' + (j + 1));
        }
    },
    'round robin: one-shot connections spread evenly (any stride)': function () {
        [1, 2, 3, 7].forEach(function (stride) {
            var counts = [0, 0, 0, 0, 0];
            for (var c = 0; c < 1000; c++) {
                counts[balance.rrIndex(5, 1000 + c * stride, 1)]++;
            }
            counts.forEach(function (n) {
                ok(n >= 180 && n <= 220, 'stride ' + stride + ': ' + JSON.stringify(counts));
            });
        });
    },
    'consistent hash: stable, spread, minimal movement': function () {
        var eps = ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.3:80'];
        var ids = eps.map(md5hex);
        var rev = ids.slice().reverse();
        var before = {};
        var counts = [0, 0, 0];
        for (var u = 0; u < 3000; u++) {
            var h = md5u32('user' + u);
            var i = balance.hashIndex(h, ids);
            before[u] = eps[i];
            counts[i]++;
            eq(eps[2 - balance.hashIndex(h, rev)], eps[i], 'order independent');
        }
        counts.forEach(function (n) { ok(n > 850 && n < 1150, 'spread ' + JSON.stringify(counts)); });
        var eps4 = eps.concat(['10.0.0.4:80']);
        var ids4 = eps4.map(md5hex);
        var moved = 0;
        for (var v = 0; v < 3000; v++) {
            var now = eps4[balance.hashIndex(md5u32('user' + v), ids4)];
            if (now !== before[v]) {
                moved++;
                eq(now, '10.0.0.4:80', 'moved keys go to the new peer');
            }
        }
        ok(moved > 600 && moved < 900, 'moved ' + moved + '/3000 (ideal 750)');
    },
    'affinity: balanced keys map by the hash, tagged by backend': function () {
        var tag = md5hex('demo-app-80').slice(0, 8);
        var eps2 = ['10.0.0.1:80', '10.0.0.2:80'];
        var eps4 = eps2.concat(['10.0.0.3:80', '10.0.0.4:80']);
        var ids2 = eps2.map(md5hex);
        var ids4 = eps4.map(md5hex);
        var ids3 = [ids4[0], ids4[2], ids4[3]]; // 10.0.0.2 goes
        var moved = 0;
        var counts = [0, 0];
        for (var k = 0; k < 400; k++) {
            var v = balance.balancedValue(tag, Math.random);
            ok(/^[0-9a-f]{16}\.[0-9a-f]{8}$/.test(v), v);
            eq(v.slice(17), tag);
            var i = balance.balancedIndex(ids2, tag, v, md5u32);
            eq(i, balance.hashIndex(md5u32(v), ids2), 'the value maps by the hash');
            counts[i]++;
            // two endpoints more: a session stays or moves to a new one
            var now = eps4[balance.balancedIndex(ids4, tag, v, md5u32)];
            if (now !== eps2[i]) {
                moved++;
                ok(now === '10.0.0.3:80' || now === '10.0.0.4:80', 'moved to a new one: ' + now);
            }
            // one goes: its sessions move, every other one stays
            var later = eps4[[0, 2, 3][balance.balancedIndex(ids3, tag, v, md5u32)]];
            if (now === '10.0.0.2:80') {
                ok(later !== now, 'left the removed endpoint');
            } else {
                eq(later, now, 'stays');
            }
        }
        ok(moved > 120 && moved < 280, 'moved ' + moved + '/400 (ideal 200)');
        ok(counts[0] > 140 && counts[1] > 140, 'new sessions spread ' + JSON.stringify(counts));
        var v1 = balance.balancedValue(tag, function () { return 0.5; });
        eq(v1, '8000000080000000.' + tag);
        eq(balance.balancedValue(tag, function () { return 0; }), '0000000000000000.' + tag);
        // another backend's tag, a persistent id, junk, nothing, no endpoints: -1
        eq(balance.balancedIndex(ids2, md5hex('demo-canary-80').slice(0, 8), v1, md5u32), -1);
        eq(balance.balancedIndex(ids2, tag, ids2[0], md5u32), -1);
        eq(balance.balancedIndex(ids2, tag, v1 + '0', md5u32), -1);
        eq(balance.balancedIndex(ids2, tag, 'x' + v1.slice(1), md5u32), -1);
        eq(balance.balancedIndex(ids2, tag, undefined, md5u32), -1);
        eq(balance.balancedIndex([], tag, v1, md5u32), -1);
        // a persistent lookup does not take a balanced value
        eq(balance.stickyIndex(ids2, v1), -1);
    },
    'consistent hash subset: the best-scoring endpoints, one changed on a scale': function () {
        var eps7 = ['1', '2', '3', '4', '5', '6', '7'].map(function (d) { return '10.0.0.' + d + ':80'; });
        var ids7 = eps7.map(md5hex);
        var ids6 = ids7.slice(0, 6);
        var at = function (x) { return function () { return x; }; };
        for (var u = 0; u < 200; u++) {
            var h = md5u32('user' + u);
            var sub = [0, 0.34, 0.67, 0.99].map(function (x) {
                return balance.subsetIndex(h, ids6, 3, at(x));
            });
            eq(sub[0], balance.hashIndex(h, ids6), 'the key\'s own endpoint first');
            eq(sub[3], sub[2]);
            var set = {};
            sub.slice(0, 3).forEach(function (i) { set[eps7[i]] = true; });
            eq(Object.keys(set).length, 3, 'three distinct endpoints');
            eq(balance.subsetIndex(h, ids6.slice().reverse(), 3, at(0.5)),
               5 - sub[1], 'order independent');
            var all = {};
            [0, 0.2, 0.4, 0.6, 0.8, 0.99].forEach(function (x) {
                all[balance.subsetIndex(h, ids6, 10, at(x))] = true;
            });
            eq(Object.keys(all).length, 6, 'all of them when fewer');
            var lost = 0;
            [0, 0.34, 0.67].forEach(function (x) {
                var ep = eps7[balance.subsetIndex(h, ids7, 3, at(x))];
                if (!set[ep]) {
                    lost++;
                    eq(ep, '10.0.0.7:80', 'replaced by the new endpoint');
                }
            });
            ok(lost <= 1, 'user' + u + ': ' + lost + ' replaced');
        }
    },
    'canary: ingress-nginx precedence': function () {
        var never = function () { return 0.999; };
        var always = function () { return 0; };
        var p = {header: 'X-Canary', header_value: null, cookie: 'c', weight: 0, weight_total: 100};
        eq(balance.canary(p, 'always', undefined, never), true);
        eq(balance.canary(p, 'never', 'always', always), false);
        eq(balance.canary(p, 'other', 'always', never), true);
        eq(balance.canary(p, undefined, 'never', always), false);
        eq(balance.canary(p, undefined, undefined, always), false, 'weight 0');
        var v = {header: 'X-Canary', header_value: 'yes', cookie: null, weight: 0};
        eq(balance.canary(v, 'yes', undefined, never), true);
        eq(balance.canary(v, 'always', undefined, always), false);
        eq(balance.canary(v, 'Yes', undefined, always), false);
        var w = {weight: 20, weight_total: 100};
        eq(balance.canary(w, undefined, undefined, function () { return 0.19; }), true);
        eq(balance.canary(w, undefined, undefined, function () { return 0.2; }), false);
        eq(balance.canary({weight: 100, weight_total: 100}, undefined, undefined, never), true);
        eq(balance.headerVar('X-Canary-By'), 'http_x_canary_by');
        // header_pattern: a match routes, no match falls through, header_value wins
        var pat = {header: 'X-Canary', header_pattern: '^(beta|alpha)-\\d+$', weight: 0};
        eq(balance.canary(pat, 'beta-12', undefined, never), true);
        eq(balance.canary(pat, 'always', undefined, never), false);
        eq(balance.canary({header: 'X-Canary', header_pattern: '^b', weight: 100, weight_total: 100},
                          'x', undefined, never), true);
        eq(balance.canary({header: 'X-Canary', header_value: 'v', header_pattern: '^b', weight: 0},
                          'beta', undefined, never), false);
        eq(balance.canary({header: 'X-Canary', header_pattern: '(', weight: 100, weight_total: 100},
                          'x', undefined, never), false, 'an unusable pattern keeps the primary');
        eq(balance.canary({header: 'X-Canary', header_pattern: '^(a|aa)+$', weight: 100, weight_total: 100},
                          'a'.repeat(60) + 'b', undefined, never), false, 'a match past the limit');
    },
    'affinity: cookie ids and Set-Cookie': function () {
        var ids = ['127.0.0.2:80', '[::1]:80'].map(md5hex);
        eq(balance.stickyIndex(ids, ids[1]), 1);
        eq(balance.stickyIndex(ids, 'nope'), -1);
        eq(balance.stickyIndex(ids, undefined), -1);
        eq(balance.setCookie({cookie_name: 'route', max_age: 60, path: '/a'}, 'abc'),
           'route=abc; Path=/a; Max-Age=60; HttpOnly');
        eq(balance.setCookie({cookie_name: 'route', max_age: null, path: null}, 'abc'),
           'route=abc; Path=/; HttpOnly');
        eq(balance.setCookie({cookie_name: 'route', max_age: null, path: null}, 'abc', '/shop'),
           'route=abc; Path=/shop; HttpOnly');
        eq(balance.setCookie({cookie_name: 'route', max_age: null, path: '/a'}, 'abc', '/shop'),
           'route=abc; Path=/a; HttpOnly');
        eq(balance.setCookie({cookie_name: 'r', max_age: null, path: null}, 'abc', '/shop', true, 0),
           'r=abc; Path=/shop; Secure; HttpOnly');
        eq(balance.setCookie({cookie_name: 'r', secure: false}, 'abc', null, true, 0),
           'r=abc; Path=/; HttpOnly');
        eq(balance.setCookie({cookie_name: 'r', secure: true}, 'abc', null, false, 0),
           'r=abc; Path=/; Secure; HttpOnly');
        eq(balance.setCookie({cookie_name: 'r', domain: '.example.com', expires: 86400,
                              max_age: 60, samesite: 'Lax'}, 'abc', null, false, 1000000000),
           'r=abc; Path=/; Domain=.example.com; Expires=Mon, 10-Sep-01 01:46:40 GMT; ' +
           'Max-Age=60; HttpOnly; SameSite=Lax');
        eq(balance.setCookie({cookie_name: 'r', expires: 1}, 'abc', null, false, 2200000000),
           'r=abc; Path=/; Expires=Sun, 18-Sep-2039 23:06:41 GMT; HttpOnly');
        eq(balance.peer({address: '::1', port: 8080}), '[::1]:8080');
        eq(balance.peer({address: '10.1.2.3', port: 80}), '10.1.2.3:80');
    },
    'pem: PEM blocks and DER checks': function () {
        var b = pem.blocks('junk\n-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n');
        eq(b.length, 1);
        eq(b[0].type, 'CERTIFICATE');
        eq(Array.prototype.slice.call(b[0].der), [0x30, 3, 2, 1, 1]);
        var threw = false;
        try {
            pem.blocks('-----BEGIN CERTIFICATE-----\nAA*A\n-----END CERTIFICATE-----');
        } catch (e) {
            threw = true;
        }
        ok(threw, 'bad base64 rejected');
        threw = false;
        try {
            pem.certificateKey(Buffer.from([0x30, 0x05, 0x30, 0x01]));
        } catch (e) {
            threw = true;
        }
        ok(threw, 'truncated DER rejected');
    },
};

// Where `actual` differs from `expected`, field by field (null when equal): the
// validator's value must hold every field of the case, nulls included, and no other.
function differs(actual, expected, path) {
    if (expected === null || typeof expected !== 'object') {
        return actual === expected ? null
            : path + ': expected ' + JSON.stringify(expected) + ', got ' + JSON.stringify(actual);
    }
    if (actual === null || typeof actual !== 'object' ||
        Array.isArray(actual) !== Array.isArray(expected)) {
        return path + ': expected ' + JSON.stringify(expected) + ', got ' + JSON.stringify(actual);
    }
    var keys = Object.keys(expected);
    for (var i = 0; i < keys.length; i++) {
        var d = differs(actual[keys[i]], expected[keys[i]], path + '.' + keys[i]);
        if (d !== null) {
            return d;
        }
    }
    var extra = Object.keys(actual).filter(function (k) { return !(k in expected); });
    return extra.length ? path + ': unexpected ' + extra.join(', ') : null;
}

// cert_and_key_bytes: the first certificate's PEM padded to that many bytes with
// its key, in the body and in the accepted value alike.
function pad(c) {
    [c.body, c.accepted].forEach(function (v) {
        if (c.cert_and_key_bytes !== undefined && v !== undefined) {
            var first = v.certificates[0];
            first.cert += 'x'.repeat(c.cert_and_key_bytes - first.cert.length - first.key.length);
        }
    });
}

// One test per case of balancer/cases/FILE, run through `validator`.
function caseTests(root, file, validator) {
    var out = {};
    var path = root + '/balancer/cases/' + file;
    var cases;
    try {
        cases = JSON.parse(fs.readFileSync(path, 'utf8'));
    } catch (e) {
        out[file + ': readable'] = function () { throw new Error(path + ': ' + e.message); };
        return out;
    }
    cases.forEach(function (c, i) {
        var name = file + ': ' + c.name;
        out[out[name] ? name + ' #' + (i + 1) : name] = function () {
            ok((c.error === undefined) !== (c.accepted === undefined),
               'a case holds either accepted or error');
            pad(c);
            var got = validator(c.body);
            if (c.error !== undefined) {
                eq(got.ok, undefined, 'accepted a body it must refuse');
                eq(got.err, c.error);
            } else {
                eq(got.err, undefined, 'refused');
                var d = differs(got.ok, c.accepted, 'accepted');
                ok(d === null, d);
            }
        };
    });
    return out;
}

// Where the validated `value` lost or changed a field the controller `sent` (null
// when it kept them all). The one field the validator renames is
// canary.affinity_behavior, kept as legacy_affinity.
function dropped(sent, value, path) {
    if (sent === null) {
        return null;
    }
    if (typeof sent !== 'object') {
        return value === sent ? null
            : path + ': sent ' + JSON.stringify(sent) + ', validated ' + JSON.stringify(value);
    }
    if (value === null || typeof value !== 'object') {
        return path + ': sent ' + JSON.stringify(sent) + ', validated ' + JSON.stringify(value);
    }
    var keys = Object.keys(sent);
    for (var i = 0; i < keys.length; i++) {
        var k = keys[i];
        var d = k === 'affinity_behavior'
            ? dropped(sent[k] === 'legacy', value.legacy_affinity, path + '.legacy_affinity')
            : dropped(sent[k], value[k], path + '.' + k);
        if (d !== null) {
            return d;
        }
    }
    return null;
}

// The API's validation of each path; certificates are parsed as the handler does.
var SENT_TO = {
    '/configuration/backends': function (body) {
        return validate.backendsPayload(body);
    },
    '/configuration/certificates': async function (body) {
        var p = validate.certificatesPayload(body);
        var pairs = p.ok ? p.ok.certificates.concat(p.ok.default ? [p.ok.default] : []) : [];
        for (var i = 0; i < pairs.length; i++) {
            var problem = await pem.check(pairs[i].cert, pairs[i].key);
            if (problem) {
                return {err: (pairs[i].host || 'default') + ': ' + problem};
            }
        }
        return p;
    },
};

// What the controller posts (recorded by controller/src/balancer/contract_tests.rs)
// must be accepted, every field kept.
function sentTests(root) {
    var out = {};
    var path = root + '/balancer/cases/sent.json';
    var sent;
    try {
        sent = JSON.parse(fs.readFileSync(path, 'utf8'));
    } catch (e) {
        out['sent.json: readable'] = function () { throw new Error(path + ': ' + e.message); };
        return out;
    }
    sent.forEach(function (post, i) {
        out['sent.json: ' + (i + 1) + ' ' + post.sync + ', ' + post.path] = async function () {
            var validator = SENT_TO[post.path];
            ok(validator, 'no such path');
            var got = await validator(post.body);
            eq(got.err, undefined, 'refused');
            var d = dropped(post.body, got.ok, 'body');
            ok(d === null, d);
        };
    });
    return out;
}

// Which browsers keep a cookie saying SameSite=None (conditional_samesite_none), from
// balancer/cases/samesite.json, and the cookie that follows from it.
function sameSiteTests(root) {
    var out = {};
    var path = root + '/balancer/cases/samesite.json';
    var cases;
    try {
        cases = JSON.parse(fs.readFileSync(path, 'utf8'));
    } catch (e) {
        out['samesite.json: readable'] = function () { throw new Error(path + ': ' + e.message); };
        return out;
    }
    var aff = {cookie_name: 'r', max_age: null, path: null, samesite: 'None',
               conditional_samesite_none: true};
    cases.forEach(function (c) {
        out['samesite.json: ' + c.name] = function () {
            var ua = c.user_agent === null ? undefined : c.user_agent;
            eq(balance.takesSameSiteNone(ua), c.takes_none);
            eq(balance.setCookie(aff, 'abc', null, false, 0, ua),
               'r=abc; Path=/; HttpOnly' + (c.takes_none ? '; SameSite=None' : ''));
        };
    });
    return out;
}

async function run(r) {
    var out = [];
    var failed = 0;
    var all = Object.assign({}, tests,
        caseTests(r.variables.ferrule_repo, 'backends.json', validate.backendsPayload),
        caseTests(r.variables.ferrule_repo, 'certificates.json', validate.certificatesPayload),
        sentTests(r.variables.ferrule_repo),
        sameSiteTests(r.variables.ferrule_repo));
    var names = Object.keys(all);
    for (var i = 0; i < names.length; i++) {
        try {
            await all[names[i]]();
            out.push('ok ' + names[i]);
        } catch (e) {
            failed++;
            out.push('not ok ' + names[i] + ': ' + e.message);
        }
    }
    out.push('# ' + (names.length - failed) + '/' + names.length + ' passed (njs ' + njs.version + ')');
    r.return(failed ? 500 : 200, out.join('\n') + '\n');
}

export default {run};

// Peer selection (pure: no file or request access, so njs/test/unit.js can
// test it). njs 0.7.9 keeps no JavaScript state between requests (every
// request runs in a fresh clone of the VM), so every choice here is a
// function of the stored backend and the request alone. See njs/README.md.

// ---------------------------------------------------------------- round robin
// Without per-worker memory there is no counter to advance. Instead:
//  * requests on one client connection go round robin, using nginx's
//    $connection_requests (1, 2, 3, ...);
//  * each connection starts at an offset taken from $connection (nginx's
//    connection serial number, one counter shared by all workers) through
//    a golden-ratio (Weyl) sequence, which spreads consecutive connection
//    numbers evenly over the endpoints whatever the stride between them.
// So a keep-alive client is spread exactly evenly and a stream of one-shot
// connections almost evenly (low-discrepancy, not random).
var PHI = 0.6180339887498949;

function rrIndex(n, connection, requests) {
    if (n <= 1) {
        return 0;
    }
    var c = Number(connection) % 1000000007;
    var k = Number(requests);
    if (!(c >= 0)) {
        c = 0;
    }
    if (!(k >= 1)) {
        k = 1;
    }
    var x = c * PHI;
    var start = Math.floor((x - Math.floor(x)) * n);
    return (start + (k - 1) % n) % n;
}

// ---------------------------------------------------------------- consistent hash
// Rendezvous (highest random weight) hashing: score(key, endpoint) =
// fmix32(h(key) xor h(endpoint)); the endpoint with the highest score wins.
// h() is the first 32 bits of md5 (h(endpoint) is stored with the backend as
// the first 8 hex digits of its affinity id), so the mapping depends only on
// the key and the endpoint set: it is the same in every worker and across
// reloads, independent of endpoint order, and adding one peer to N moves
// ~1/(N+1) of the keys, all of them to the new peer. No ring is stored or
// built, so a request costs one md5 and N integer mixes.
function fmix32(h) {
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0;
}

// keyHash: uint32; ids: array of 32-hex-digit endpoint ids. Returns an index.
function hashIndex(keyHash, ids) {
    var best = -1;
    var bestScore = -1;
    for (var i = 0; i < ids.length; i++) {
        var s = fmix32((keyHash ^ parseInt(ids[i].slice(0, 8), 16)) >>> 0);
        // ties (practically never) go to the smaller id: still order-independent
        if (s > bestScore || (s === bestScore && ids[i] < ids[best])) {
            best = i;
            bestScore = s;
        }
    }
    return best;
}

// upstream_hash_by_subset_size: the key's subset is its `size` best-scoring
// endpoints (all of them when there are fewer), so adding or removing one changes
// a subset by at most one member; a request goes to one of them at random (as
// ingress-nginx, which cuts the endpoints into fixed groups instead). rand(): a
// float in [0, 1) (Math.random). Returns an index.
function subsetIndex(keyHash, ids, size, rand) {
    var scored = ids.map(function (id, i) {
        return {i: i, s: fmix32((keyHash ^ parseInt(id.slice(0, 8), 16)) >>> 0)};
    });
    scored.sort(function (a, b) {
        return b.s - a.s || (ids[a.i] < ids[b.i] ? -1 : ids[a.i] > ids[b.i] ? 1 : 0);
    });
    var k = Math.min(size, ids.length);
    return scored[Math.floor(rand() * k)].i;
}

// ---------------------------------------------------------------- canary
// ingress-nginx semantics, identical to lua/ferrule/canary.lua.
// policy: {header, header_value, header_pattern, cookie, weight, weight_total}
// headerVal / cookieVal: the request's values (or undefined)
// rand(): a float in [0, 1) (Math.random)
function canary(policy, headerVal, cookieVal, rand) {
    if (policy.header && headerVal !== undefined && headerVal !== null) {
        if (policy.header_value) {
            if (headerVal === policy.header_value) {
                return true;
            }
            // any other value: ignored, fall through to cookie and weight
        } else if (policy.header_pattern) {
            var matched;
            try {
                matched = new RegExp(policy.header_pattern).test(headerVal);
            } catch (e) {
                // as ingress-nginx: a pattern that does not compile, or a match
                // past PCRE's limit, keeps the primary
                return false;
            }
            if (matched) {
                return true;
            }
            // no match: fall through to cookie and weight
        } else if (headerVal === 'always') {
            return true;
        } else if (headerVal === 'never') {
            return false;
        }
    }
    if (policy.cookie && cookieVal !== undefined && cookieVal !== null) {
        if (cookieVal === 'always') {
            return true;
        } else if (cookieVal === 'never') {
            return false;
        }
    }
    var w = policy.weight || 0;
    if (w > 0) {
        var total = policy.weight_total || 100;
        if (w >= total) {
            return true;
        }
        return Math.floor(rand() * total) + 1 <= w;
    }
    return false;
}

// "X-Canary" -> "http_x_canary" (the nginx variable name)
function headerVar(header) {
    return 'http_' + header.toLowerCase().replace(/-/g, '_');
}

// ---------------------------------------------------------------- affinity
// Two modes (affinity-mode), with the cookie values of lua/'s sticky:
//  * persistent: md5("addr:port") in hex, the same in every worker, across
//    reloads and across both balancers; it stops matching when its endpoint goes.
//  * balanced: "<16 hex digits>.<tag>", a random key and the first 8 hex digits
//    of md5(backend name); the endpoint is where hashIndex maps the whole value,
//    so adding endpoints moves some sessions to them (only to them) and removing
//    one moves its sessions, all without a new cookie. The tag tells a primary's
//    sessions from its canary's (one cookie, affinity-canary-behavior sticky).
//    The hash is rendezvous here and a ring in lua/: a balanced session maps to
//    different endpoints in the two balancers.

// persistent: the index of the endpoint whose id is the cookie's value, or -1
function stickyIndex(ids, cookieVal) {
    if (!cookieVal) {
        return -1;
    }
    for (var i = 0; i < ids.length; i++) {
        if (ids[i] === cookieVal) {
            return i;
        }
    }
    return -1;
}

var BALANCED_VALUE = /^[0-9a-fA-F]{16}\.([0-9a-fA-F]{8})$/;

// balanced: the index the cookie's value maps to, or -1 for no value, one of the
// other mode or of another backend (tag: this backend's). hash(s) -> uint32,
// the first 32 bits of md5(s), as for upstream_hash_by.
function balancedIndex(ids, tag, cookieVal, hash) {
    if (!cookieVal || ids.length === 0) {
        return -1;
    }
    var m = BALANCED_VALUE.exec(cookieVal);
    if (!m || m[1] !== tag) {
        return -1;
    }
    return hashIndex(hash(cookieVal), ids);
}

// balanced: a new session's cookie value; rand(): a float in [0, 1) (Math.random).
function balancedValue(tag, rand) {
    var hex8 = function () {
        var h = Math.floor(rand() * 4294967296).toString(16);
        return '00000000'.slice(h.length) + h;
    };
    return hex8() + hex8() + '.' + tag;
}

// defaultPath: the Ingress path ($ferrule_affinity_scope), as ingress-nginx sets
// it when session-cookie-path is not; "/" where the location has none. https:
// the request came over TLS (Secure then, unless affinity.secure says
// otherwise); now: seconds since the epoch, for Expires. As lua/'s sticky.
// userAgent: the request's, for conditional_samesite_none.
function setCookie(affinity, id, defaultPath, https, now, userAgent) {
    var parts = [affinity.cookie_name + '=' + id,
                 'Path=' + (affinity.path || defaultPath || '/')];
    if (affinity.domain) {
        parts.push('Domain=' + affinity.domain);
    }
    if (affinity.expires) {
        parts.push('Expires=' + cookieTime(now + affinity.expires));
    }
    if (affinity.max_age !== null && affinity.max_age !== undefined) {
        parts.push('Max-Age=' + affinity.max_age);
    }
    var secure = affinity.secure;
    if (secure === null || secure === undefined) {
        secure = https;
    }
    if (secure) {
        parts.push('Secure');
    }
    parts.push('HttpOnly');
    var samesite = affinity.samesite;
    if (samesite === 'None' && affinity.conditional_samesite_none
        && !takesSameSiteNone(userAgent)) {
        samesite = null;
    }
    if (samesite) {
        parts.push('SameSite=' + samesite);
    }
    return parts.join('; ');
}

// Whether a browser keeps a cookie that says SameSite=None, by its User-Agent:
// as lua/'s sticky.takes_samesite_none (balancer/cases/samesite.json holds the
// cases both run).
function takesSameSiteNone(userAgent) {
    if (typeof userAgent !== 'string') {
        return true;
    }
    var m = /Chrome\/(\d+)/.exec(userAgent);
    var chrome = m ? Number(m[1]) : null;
    if (chrome !== null && chrome >= 40 && chrome <= 69) {
        return false;
    }
    if (userAgent.indexOf('CPU iPhone OS 12_') >= 0
        || userAgent.indexOf('iPad; CPU OS 12_') >= 0) {
        return false;
    }
    var macSafari = userAgent.indexOf('Macintosh') >= 0
        && userAgent.indexOf('Intel Mac OS X 10_14') >= 0
        && userAgent.indexOf('Safari') >= 0
        && userAgent.indexOf('Chrome') < 0;
    return !macSafari;
}

var DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
var MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct',
              'Nov', 'Dec'];

// NGINX's cookie date ("Mon, 10-Sep-01 01:46:40 GMT": a two-digit year up to
// 2037, as ngx.cookie_time), so both balancers send the same header.
function cookieTime(seconds) {
    var d = new Date(seconds * 1000);
    var two = function (n) { return (n < 10 ? '0' : '') + n; };
    var y = d.getUTCFullYear();
    return DAYS[d.getUTCDay()] + ', ' + two(d.getUTCDate()) + '-' + MONTHS[d.getUTCMonth()] +
        '-' + (y > 2037 ? String(y) : two(y % 100)) + ' ' + two(d.getUTCHours()) + ':' +
        two(d.getUTCMinutes()) + ':' + two(d.getUTCSeconds()) + ' GMT';
}

// "addr:port" as proxy_pass wants it (IPv6 bracketed)
function peer(ep) {
    var a = ep.address;
    return (a.indexOf(':') >= 0 ? '[' + a + ']' : a) + ':' + ep.port;
}

export default {rrIndex, fmix32, hashIndex, subsetIndex, canary, headerVar, stickyIndex, balancedIndex,
                balancedValue, setCookie, takesSameSiteNone, peer};

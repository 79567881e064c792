// NGINX variable expressions such as "$request_uri", "$arg_user$http_x_a" or
// "${host}-x" (pure; same grammar as lua/ferrule/expr.lua).
// parse() runs when a backend is posted (the parts are stored with it);
// evaluate() runs per request.

// Returns {ok: [{l: "literal"} | {v: "name"}, ...]} or {err: "message"}.
function parse(s) {
    if (typeof s !== 'string') {
        return {err: 'expression must be a string'};
    }
    var parts = [];
    var i = 0;
    var n = s.length;
    while (i < n) {
        var d = s.indexOf('$', i);
        if (d < 0) {
            parts.push({l: s.slice(i)});
            break;
        }
        if (d > i) {
            parts.push({l: s.slice(i, d)});
        }
        var name = null;
        var stop;
        if (s.charAt(d + 1) === '{') {
            var close = s.indexOf('}', d + 2);
            if (close < 0) {
                return {err: 'unterminated ${ in ' + s};
            }
            name = s.slice(d + 2, close);
            stop = close;
        } else {
            var m = /^[A-Za-z0-9_]+/.exec(s.slice(d + 1));
            if (m) {
                name = m[0];
                stop = d + m[0].length;
            }
        }
        if (name === null || !/^[A-Za-z0-9_]+$/.test(name)) {
            return {err: 'invalid variable name after $ in ' + s};
        }
        parts.push({v: name.toLowerCase()});
        i = stop + 1;
    }
    return {ok: parts};
}

// get(name) returns the variable's value or undefined (which becomes "").
function evaluate(parts, get) {
    var out = '';
    for (var k = 0; k < parts.length; k++) {
        var p = parts[k];
        if (p.v !== undefined) {
            var v = get(p.v);
            if (v !== undefined && v !== null) {
                out += v;
            }
        } else {
            out += p.l;
        }
    }
    return out;
}

export default {parse, evaluate};

-- ferrule.ocsp's pure parts: what a certificate's responder URL may be, the
-- answer's parsing and the log's escaping. Fetches against real responders:
-- controller/tests/it/ocsp.rs.
local ocsp = require("ferrule.ocsp")

local T = {}

local function refused(url)
    local host, why = ocsp.parse_url(url)
    return host == nil and why
end

T["responder URLs: only a plain path of at most MAX_PATH bytes"] = function(t)
    t.eq(select(3, ocsp.parse_url("http://ocsp.example.com/a-b_c.d~e/%2F;x=1?y")),
         "/a-b_c.d~e/%2F;x=1?y")
    t.eq(select(3, ocsp.parse_url("http://ocsp.example.com?x")), "/?x")
    t.eq(refused("http://127.0.0.1/a\r\nX-Injected: 1"), "a byte in the path that is not allowed")
    t.eq(refused("http://127.0.0.1/a b"), "a byte in the path that is not allowed")
    t.eq(refused("http://127.0.0.1/a\0"), "a byte in the path that is not allowed")
    t.eq(refused("http://127.0.0.1/\xC3\xA9"), "a byte in the path that is not allowed")
    t.eq(refused("http://127.0.0.1/a#b"), "a byte in the path that is not allowed")
    t.eq(refused("http://127.0.0.1/%4"), "a % in the path that is not an escape")
    t.eq(refused("http://127.0.0.1/%g0"), "a % in the path that is not an escape")
    local max = "http://h/" .. string.rep("a", ocsp.MAX_PATH - 1)
    t.ok(ocsp.parse_url(max), "a path of MAX_PATH bytes")
    t.eq(refused(max .. "a"), "a path of more than " .. ocsp.MAX_PATH .. " bytes")
end

T["responder URLs: a host name, an IPv4 or a bracketed IPv6 address"] = function(t)
    t.eq(ocsp.parse_url("http://OCSP.Example.com./"), "ocsp.example.com")
    t.eq(ocsp.parse_url("http://[::ffff:127.0.0.1]:8080/"), "::ffff:127.0.0.1")
    t.eq(refused("http://[12345::]/"), "not an IPv6 address in brackets")
    t.eq(refused("http://[::g]/"), "not a host name or address")
    t.eq(refused("http://[1::2::3]/"), "not an IPv6 address in brackets")
    t.eq(refused("http://[1.2.3.4::]/"), "not an IPv6 address in brackets")
    for _, host in ipairs({ "1.2.3", "256.1.1.1", "2130706433", "a.123", "-a.b", "a-.b",
                            "a..b", "a_b.c", string.rep("a", 64) .. ".b", "" }) do
        t.eq(refused("http://" .. host .. "/"), "not a host name or address", host)
    end
    t.eq(refused("http://h:0/"), "a port that is not 1 to 65535")
end

T["answers: status, length, and what may still come"] = function(t)
    local ok = "HTTP/1.0 200 OK\r\nContent-Type: application/ocsp-response\r\n"
    t.eq(ocsp.answer_body(ok .. "Content-Length: 3\r\n\r\nabcdef", false), "abc")
    t.eq(ocsp.answer_body(ok .. "\r\nabc", true), "abc")
    t.eq(ocsp.answer_body("HTTP/1.1 200 OK\nContent-Length: 2\n\nab", false), "ab")
    local body, why, more = ocsp.answer_body(ok .. "Content-Length: 3\r\n\r\nab", false)
    t.ok(body == nil and more, why)
    body, why, more = ocsp.answer_body(ok .. "Content-Length: 3\r\n\r\nab", true)
    t.ok(body == nil and not more, why)
    body, why, more = ocsp.answer_body(ok .. "X-Endless: aaaa", false)
    t.ok(body == nil and more and why == "no end of the headers")
    t.eq(select(2, ocsp.answer_body("HTTP/1.0 500 \r\nOops\r\n\r\n", true)),
         "the responder answered HTTP/1.0 500 ")
    t.eq(select(2, ocsp.answer_body("HTTP/1.0 302 \27[31m\r\n\r\n", true)),
         "the responder answered HTTP/1.0 302 \\x1B[31m")
    t.eq(select(2, ocsp.answer_body(ok .. "Transfer-Encoding: chunked\r\n\r\n", false)),
         "an answer with Transfer-Encoding")
    t.eq(select(2, ocsp.answer_body(ok .. "Content-Length: 1\r\nContent-Length: 2\r\n\r\n", false)),
         "Content-Length 2")
    t.eq(select(2, ocsp.answer_body(ok .. "Content-Length: -1\r\n\r\n", false)),
         "Content-Length -1")
end

T["the log: control bytes, non-ASCII and backslashes escaped, long text cut"] = function(t)
    t.eq(ocsp.escape("a\r\nb\0\\c\127\200"), "a\\x0D\\x0Ab\\x00\\x5Cc\\x7F\\xC8")
    t.eq(ocsp.escape(string.rep("a", 10), 4), "aaaa...")
    t.eq(ocsp.escape("http://h/p?q=1&r=~"), "http://h/p?q=1&r=~")
end

return T

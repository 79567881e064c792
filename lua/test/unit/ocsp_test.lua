-- ferrule.ocsp's pure parts: what a certificate's responder URL may be, which
-- addresses are local, the DNS messages, the answer's parsing and the log's
-- escaping. Fetches against real responders: controller/tests/it/ocsp.rs.
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

T["local addresses: the rule endpoints follow"] = function(t)
    local cases = {
        ["127.0.0.1"] = "loopback", ["127.255.0.9"] = "loopback", ["::1"] = "loopback",
        ["::ffff:127.0.0.1"] = "loopback", ["::ffff:7f00:2"] = "loopback",
        ["0.0.0.0"] = "unspecified", ["0.1.2.3"] = "unspecified", ["::"] = "unspecified",
        ["169.254.169.254"] = "link-local", ["fe80::1"] = "link-local",
        ["febf:ffff::1"] = "link-local", ["::ffff:169.254.0.1"] = "link-local",
        ["10.0.0.1"] = false, ["192.0.2.1"] = false, ["fec0::1"] = false,
        ["2001:db8::1"] = false, ["::ffff:10.1.2.3"] = false, ["fd00::a"] = false,
        ["1.2.3.4"] = false, ["::2"] = false,
    }
    for ip, want in pairs(cases) do
        t.eq(ocsp.local_address(ip) or false, want, ip)
    end
end

-- An answer to `q` (a query made by dns_query) with `records`, each
-- { type, rdata }, named by a pointer to the question's name.
local function answer(q, rcode, records)
    local out = { q:sub(1, 2), string.char(0x81, 0x80 + rcode), "\0\1", "\0" .. string.char(#records),
                  "\0\0\0\0", q:sub(13) }
    for _, r in ipairs(records) do
        out[#out + 1] = "\192\12\0" .. string.char(r[1]) .. "\0\1\0\0\0\60\0"
            .. string.char(#r[2]) .. r[2]
    end
    return table.concat(out)
end

T["DNS: the query, and the addresses of its answer"] = function(t)
    local q = ocsp.dns_query(0x1234, "ocsp.example.com", 1)
    t.eq(q, "\18\52\1\0\0\1\0\0\0\0\0\0\4ocsp\7example\3com\0\0\1\0\1")
    local cname = "\3cdn\7example\3net\0"
    local a = answer(q, 0, { { 5, cname }, { 1, "\10\0\0\9" }, { 1, "\192\0\2\1" } })
    local addrs = ocsp.dns_answer(a, 0x1234, 1)
    t.eq(table.concat(addrs, " "), "10.0.0.9 192.0.2.1")
    local q6 = ocsp.dns_query(7, "h", 28)
    local v6 = answer(q6, 0, { { 28, "\254\128" .. string.rep("\0", 13) .. "\1" } })
    t.eq(ocsp.dns_answer(v6, 7, 28)[1], "fe80:0:0:0:0:0:0:1")
    t.eq(#ocsp.dns_answer(answer(q, 0, {}), 0x1234, 1), 0)
    t.eq(select(2, ocsp.dns_answer(answer(q, 3, {}), 0x1234, 1)), "no such name")
    t.eq(select(2, ocsp.dns_answer(a, 0x1235, 1)), "not an answer to the query")
    t.eq(select(2, ocsp.dns_answer(q, 0x1234, 1)), "not an answer to the query")
    t.eq(select(2, ocsp.dns_answer(a:sub(1, #a - 2), 0x1234, 1)), "malformed DNS answer")
    -- a name of labels that never ends
    local loop = q:sub(1, 2) .. "\129\128\0\1\0\0\0\0\0\0" .. string.rep("\1a", 200)
    t.eq(select(2, ocsp.dns_answer(loop, 0x1234, 1)), "malformed DNS answer")
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

T["configure: off without options, local addresses and nameservers as given"] = function(t)
    local saved = { ocsp.enabled, ocsp.allow_local, ocsp.resolvers }
    ocsp.configure({ allow_local = true, resolvers = { "10.96.0.10", "[fd00::a]" } })
    t.ok(ocsp.enabled and ocsp.allow_local)
    t.eq(table.concat(ocsp.resolvers, " "), "10.96.0.10 fd00::a")
    ocsp.configure({})
    t.ok(ocsp.enabled and not ocsp.allow_local and #ocsp.resolvers == 0)
    ocsp.configure(nil)
    t.ok(not ocsp.enabled)
    ocsp.enabled, ocsp.allow_local, ocsp.resolvers = saved[1], saved[2], saved[3]
end

return T

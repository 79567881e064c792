-- ferrule.ocsp's pure parts: the answer's parsing and the log's escaping.
-- Fetches against real responders: controller/tests/it/ocsp.rs.
local ocsp = require("ferrule.ocsp")

local T = {}

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

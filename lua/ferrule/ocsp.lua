-- OCSP stapling (ConfigMap enable-ocsp): the handshake staples the response the
-- certificate's responder last gave, fetched in the background.
--
-- NGINX's own ssl_stapling works only for certificates it loads at start, and
-- Ferrule's come from the store (ferrule.certificate). So, as ingress-nginx does:
-- a handshake whose pair has no fresh response starts a timer that asks the
-- responder named in the certificate (its Authority Information Access), checks
-- the answer against the chain and keeps it in the certificate store:
--   o:<digest>   the DER response, kept for MAX_AGE
--   of:<digest>  present while the response is fresh or a fetch is due to wait;
--                when it expires, the next handshake fetches again (and staples
--                the old response meanwhile)
--   ol:<digest>  present while a fetch for the pair runs, in any worker
-- Every write is a safe_*: an OCSP response never evicts a certificate.
-- A response that does not validate (a revoked certificate, a responder that
-- signs for another issuer) is dropped, and nothing is stapled.
--
-- The responder's URL comes from a tenant's certificate, and so does the
-- responder: what a fetch may cost is bounded, whatever either says.
--   * The URL is http://host[:port]/path, at most MAX_PATH bytes of path in a
--     plain alphabet (no CR, LF, blank or control byte reaches the request).
--   * A host name is looked up here (the nameservers NGINX is given), and an
--     address that is loopback, link-local or unspecified is refused, as
--     endpoints are, unless --allow-local-endpoints (allow_local).
--   * One fetch, from the lookup to the answer's last byte, ends at DEADLINE_MS,
--     and reads at most MAX_ANSWER bytes (status line, headers and body).
--   * One fetch per pair at a time (ol:), at most MAX_FETCHES per worker.
--   * What the certificate or the responder wrote is escaped in the log.
local ngx_ocsp = require("ngx.ocsp")
local ssl = require("ngx.ssl")
local bit = require("bit")

local ngx = ngx
local byte = string.byte
local char = string.char
local concat = table.concat
local find = string.find
local format = string.format
local gsub = string.gsub
local lower = string.lower
local match = string.match
local sub = string.sub
local band = bit.band
local rshift = bit.rshift

local _M = {}

_M.enabled = false
-- --allow-local-endpoints: loopback, link-local and unspecified responders too
_M.allow_local = false
-- nameservers for responders named by host name ("10.96.0.10", "[fd00::a]")
_M.resolvers = {}
-- seconds: a response is fetched again after FRESH, and served at most MAX_AGE
-- (responders' answers are valid for days; this bounds a revocation's delay)
_M.FRESH = 3600
_M.MAX_AGE = 2 * 3600
-- a failed fetch waits this long before the next one
_M.RETRY = 30
-- one fetch, from the name's lookup to the answer's last byte
_M.DEADLINE_MS = 5000
-- one DNS query (then the next nameserver is asked), within the deadline
_M.DNS_TIMEOUT_MS = 2000
-- the whole answer: status line, headers and body (a response is a few KB)
_M.MAX_ANSWER = 64 * 1024
-- fetches one worker runs at once: started (timer pending) and not ended
_M.MAX_FETCHES = 8
-- bytes of the URL's path (responders' paths are a few bytes, often "/")
_M.MAX_PATH = 256
-- bytes of a URL shown in the log
local SHOWN = 256

local function dict()
    return ngx.shared.ferrule_certificates
end

-- `s` for the error log: bytes other than printable ASCII, and the backslash,
-- as \xHH; at most `max` bytes of it.
local function escape(s, max)
    s = tostring(s)
    local cut = ""
    if max and #s > max then
        s, cut = sub(s, 1, max), "..."
    end
    return (gsub(s, "[%c\\\128-\255]", function(c)
        return format("\\x%02X", byte(c))
    end)) .. cut
end
_M.escape = escape

local function show(url)
    return escape(url, SHOWN)
end

-- "a.b.c.d" -> its four octets, or nil when it is not an IPv4 address in
-- dotted-decimal form.
local function ipv4(s)
    local a, b, c, d = match(s, "^(%d%d?%d?)%.(%d%d?%d?)%.(%d%d?%d?)%.(%d%d?%d?)$")
    if not a then
        return nil
    end
    local o = { tonumber(a), tonumber(b), tonumber(c), tonumber(d) }
    for i = 1, 4 do
        if o[i] > 255 then
            return nil
        end
    end
    return o
end

-- An IPv6 address (RFC 4291 text, with :: and a trailing dotted quad) -> its
-- eight 16-bit groups, or nil.
local function ipv6(s)
    if #s > 45 or not match(s, "^[%x:.]+$") then
        return nil
    end
    local groups = {}
    -- the fields of `part` into `out`; a dotted quad only at the very end
    local function parse(part, out, last)
        if part == "" then
            return true
        end
        local fields = {}
        for f in (part .. ":"):gmatch("([^:]*):") do
            fields[#fields + 1] = f
        end
        for i, f in ipairs(fields) do
            local v4 = last and i == #fields and find(f, ".", 1, true) and ipv4(f)
            if v4 then
                out[#out + 1] = v4[1] * 256 + v4[2]
                out[#out + 1] = v4[3] * 256 + v4[4]
            elseif match(f, "^%x%x?%x?%x?$") then
                out[#out + 1] = tonumber(f, 16)
            else
                return false
            end
        end
        return true
    end
    local head, tail = match(s, "^(.-)::(.*)$")
    if head then
        if find(tail, "::", 1, true) then
            return nil
        end
        local h, t = {}, {}
        if not parse(head, h, false) or not parse(tail, t, true) or #h + #t > 7 then
            return nil
        end
        for _, g in ipairs(h) do
            groups[#groups + 1] = g
        end
        for _ = 1, 8 - #h - #t do
            groups[#groups + 1] = 0
        end
        for _, g in ipairs(t) do
            groups[#groups + 1] = g
        end
    elseif not parse(s, groups, true) or #groups ~= 8 then
        return nil
    end
    return groups
end

-- Why the address `ip` (text) must not be asked, or nil: loopback (127.0.0.0/8,
-- ::1), link-local (169.254.0.0/16, fe80::/10), unspecified (0.0.0.0/8, ::),
-- also as IPv4-mapped IPv6: the rule endpoints follow (--allow-local-endpoints).
local function local_address(ip)
    local o = ipv4(ip)
    if not o then
        local g = ipv6(ip)
        if not g then
            return "not an address"
        end
        local zero = true
        for i = 1, 5 do
            zero = zero and g[i] == 0
        end
        if zero and g[6] == 0xffff then -- ::ffff:a.b.c.d
            o = { rshift(g[7], 8), band(g[7], 255), rshift(g[8], 8), band(g[8], 255) }
        elseif zero and g[6] == 0 and g[7] == 0 and g[8] <= 1 then
            return g[8] == 1 and "loopback" or "unspecified"
        elseif band(g[1], 0xffc0) == 0xfe80 then
            return "link-local"
        else
            return nil
        end
    end
    if o[1] == 127 then
        return "loopback"
    elseif o[1] == 0 then
        return "unspecified"
    elseif o[1] == 169 and o[2] == 254 then
        return "link-local"
    end
    return nil
end
_M.local_address = local_address

-- A host name as DNS has it: letters, digits and hyphens in labels of 1 to 63
-- bytes, at most 253 bytes, not all digits in its last label (no IPv4 address
-- in another spelling).
local function hostname(s)
    s = gsub(s, "%.$", "")
    if #s == 0 or #s > 253 then
        return nil
    end
    local last
    for label in (s .. "."):gmatch("([^.]*)%.") do
        if #label > 63 or not match(label, "^%w$") and not match(label, "^%w[%w-]*%w$") then
            return nil
        end
        last = label
    end
    if match(last, "^%d+$") then
        return nil
    end
    return lower(s)
end

-- "http://host[:port]/path" -> host, port, path, Host header (host an address
-- or a name, an IPv6 one without brackets); nil and why for anything else: OCSP
-- is plain HTTP (the response is signed), and only a path of MAX_PATH bytes of
-- RFC 3986's unreserved and sub-delims characters, ":", "@", "/", "?" and
-- %-escapes goes into the request.
local function parse_url(url)
    if type(url) ~= "string" then
        return nil, "no URL"
    end
    local authority, path = match(url, "^[Hh][Tt][Tt][Pp]://([^/?#]*)(.*)$")
    if not authority then
        return nil, "not http://host[:port]/path"
    end
    if path == "" then
        path = "/"
    end
    if sub(path, 1, 1) ~= "/" then
        path = "/" .. path -- "http://host?x"
    end
    if #path > _M.MAX_PATH then
        return nil, "a path of more than " .. _M.MAX_PATH .. " bytes"
    end
    if not match(path, "^[%w%-%._~!%$&'%(%)%*%+,;=:@/%?%%]*$") then
        return nil, "a byte in the path that is not allowed"
    end
    for esc in path:gmatch("%%(.?.?)") do
        if not match(esc, "^%x%x$") then
            return nil, "a % in the path that is not an escape"
        end
    end
    local host, port = match(authority, "^%[([%x:.]+)%]:?(%d*)$")
    if host then
        if not ipv6(host) then
            return nil, "not an IPv6 address in brackets"
        end
    else
        host, port = match(authority, "^([%w.-]+):?(%d*)$")
        if host and not ipv4(host) then
            host = hostname(host)
        end
    end
    if not host then
        return nil, "not a host name or address"
    end
    port = tonumber(port ~= "" and port or "80")
    if not port or port < 1 or port > 65535 then
        return nil, "a port that is not 1 to 65535"
    end
    return host, port, path, authority
end
_M.parse_url = parse_url

local function now_ms()
    ngx.update_time()
    return ngx.now() * 1000
end

local function u16(s, i)
    local a, b = byte(s, i, i + 1)
    return a * 256 + b
end

-- A DNS query for `name` (already checked by hostname()) of type `qtype`.
local function dns_query(id, name, qtype)
    local parts = { char(rshift(id, 8), band(id, 255), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0) }
    for label in gsub(name, "%.$", ""):gmatch("[^.]+") do
        parts[#parts + 1] = char(#label) .. label
    end
    parts[#parts + 1] = char(0, 0, qtype, 0, 1)
    return concat(parts)
end
_M.dns_query = dns_query

-- The position after the name at `pos` of the message `m`, or nil.
local function skip_name(m, pos)
    for _ = 1, 128 do
        local len = byte(m, pos)
        if not len then
            return nil
        elseif len == 0 then
            return pos + 1
        elseif len >= 0xC0 then -- a pointer ends the name
            return pos + 2
        elseif len > 63 then
            return nil
        end
        pos = pos + 1 + len
    end
    return nil
end

-- The addresses of type `qtype` (1: A, 28: AAAA) in the answer `m` to the
-- query `id`, as text; nil and why when it is no such answer.
local function dns_answer(m, id, qtype)
    if #m < 12 or u16(m, 1) ~= id or band(byte(m, 3), 0x80) == 0 then
        return nil, "not an answer to the query"
    end
    local rcode = band(byte(m, 4), 0x0F)
    if rcode ~= 0 then
        return nil, rcode == 3 and "no such name" or "DNS error " .. rcode
    end
    local pos = 13
    for _ = 1, u16(m, 5) do
        pos = skip_name(m, pos)
        if not pos then
            return nil, "malformed DNS answer"
        end
        pos = pos + 4
    end
    local out = {}
    for _ = 1, u16(m, 7) do
        pos = skip_name(m, pos)
        if not pos or pos + 9 > #m then
            return nil, "malformed DNS answer"
        end
        local rtype, len = u16(m, pos), u16(m, pos + 8)
        local data = pos + 10
        if data + len - 1 > #m then
            return nil, "malformed DNS answer"
        end
        if rtype == qtype and rtype == 1 and len == 4 then
            out[#out + 1] = format("%d.%d.%d.%d", byte(m, data, data + 3))
        elseif rtype == qtype and rtype == 28 and len == 16 then
            local g = {}
            for i = 0, 7 do
                g[#g + 1] = format("%x", u16(m, data + 2 * i))
            end
            out[#out + 1] = concat(g, ":")
        end
        pos = data + len
    end
    return out
end
_M.dns_answer = dns_answer

-- The addresses of `name` (A, else AAAA), asked of the nameservers one after
-- the other until `deadline` (ms); nil and why when none answers with one.
local function resolve(name, deadline)
    if #_M.resolvers == 0 then
        return nil, "no nameserver to look " .. name .. " up"
    end
    local why = "no answer"
    for _, qtype in ipairs({ 1, 28 }) do
        for _, ns in ipairs(_M.resolvers) do
            local left = deadline - now_ms()
            if left < 1 then
                return nil, "looking " .. name .. " up: deadline"
            end
            local id = math.random(0, 65535)
            local udp = ngx.socket.udp()
            udp:settimeout(math.min(left, _M.DNS_TIMEOUT_MS))
            local ok, err = udp:setpeername(ns, 53)
            if ok then
                ok, err = udp:send(dns_query(id, name, qtype))
            end
            local answer
            if ok then
                answer, err = udp:receive()
            end
            udp:close()
            if answer then
                local addrs
                addrs, err = dns_answer(answer, id, qtype)
                if addrs and #addrs > 0 then
                    return addrs
                elseif err == "no such name" then
                    return nil, "looking " .. name .. " up: " .. err
                end
                err = err or "no address"
            end
            why = tostring(err)
        end
    end
    return nil, "looking " .. name .. " up: " .. why
end

-- The address to connect to for `host` (an address or a name): the first one
-- the rule above allows; nil and why when there is none.
local function target(host, deadline)
    local addrs
    if ipv4(host) or ipv6(host) then
        addrs = { host }
    else
        local err
        addrs, err = resolve(host, deadline)
        if not addrs then
            return nil, err
        end
    end
    local why
    for _, a in ipairs(addrs) do
        local bad = not _M.allow_local and local_address(a)
        if not bad then
            return a
        end
        why = format("%s address %s (--allow-local-endpoints allows it)", bad, a)
    end
    return nil, why
end

-- The body of the HTTP/1.0 answer `buf` (bounded), or nil, why, and whether
-- more bytes could complete it (unless the responder `closed`).
local function answer_body(buf, closed)
    local s, e = find(buf, "\r?\n\r?\n")
    if not s then
        return nil, "no end of the headers", not closed
    end
    local head = sub(buf, 1, s)
    local status = match(head, "^([^\r\n]*)")
    local code = tonumber(match(status, "^HTTP/1%.[01] (%d%d%d)"))
    if code ~= 200 then
        return nil, "the responder answered " .. escape(status, 64)
    end
    local length
    for line in head:gmatch("\n([^\r\n]*)") do
        local name, value = match(line, "^([^:]*):[ \t]*(.-)[ \t]*$")
        name = name and lower(name)
        if name == "transfer-encoding" then
            return nil, "an answer with Transfer-Encoding"
        elseif name == "content-length" then
            local n = match(value, "^%d+$") and tonumber(value)
            if not n or (length and n ~= length) then
                return nil, "Content-Length " .. escape(value, 32)
            end
            length = n
        end
    end
    local body = sub(buf, e + 1)
    if length and #body >= length then
        return sub(body, 1, length)
    elseif length then
        return nil, "closed after " .. #body .. " of " .. length .. " bytes of the body",
            not closed
    elseif not closed then
        return nil, "no end of the body", true
    end
    return body
end
_M.answer_body = answer_body

-- POSTs `body` to the responder at `url`, all of it by `deadline` (ms); the
-- response body, or nil and why.
local function post(url, body, deadline)
    local host, port, path, authority = parse_url(url)
    if not host then
        return nil, "refused: " .. port
    end
    local addr, terr = target(host, deadline)
    if not addr then
        return nil, "refused: " .. terr
    end
    local sock = ngx.socket.tcp()
    -- before each step: the time left to the deadline
    local function arm()
        local left = deadline - now_ms()
        if left < 1 then
            return false
        end
        sock:settimeouts(left, left, left)
        return true
    end
    if not arm() then
        return nil, "deadline before connecting"
    end
    local ok, err = sock:connect(find(addr, ":", 1, true) and "[" .. addr .. "]" or addr, port)
    if not ok then
        return nil, "connect " .. addr .. ": " .. tostring(err)
    end
    if not arm() then
        sock:close()
        return nil, "deadline before sending"
    end
    ok, err = sock:send(concat({
        "POST ", path, " HTTP/1.0\r\nHost: ", authority,
        "\r\nContent-Type: application/ocsp-request\r\nContent-Length: ", #body,
        "\r\n\r\n", body,
    }))
    if not ok then
        sock:close()
        return nil, "send: " .. tostring(err)
    end
    -- The answer as it comes, never more than MAX_ANSWER bytes of it, until it
    -- is complete, the responder closes or the deadline.
    local buf = ""
    while true do
        local resp, why, more = answer_body(buf, false)
        if resp or not more then
            sock:close()
            return resp, why
        end
        if not arm() then
            sock:close()
            return nil, "no complete answer within " .. _M.DEADLINE_MS .. " ms ("
                .. #buf .. " bytes)"
        end
        local data, rerr = sock:receiveany(_M.MAX_ANSWER + 1 - #buf)
        if not data then
            sock:close()
            if rerr == "closed" then
                return answer_body(buf, true)
            elseif rerr == "timeout" then
                return nil, "no complete answer within " .. _M.DEADLINE_MS .. " ms ("
                    .. #buf .. " bytes)"
            end
            return nil, "read: " .. tostring(rerr)
        end
        buf = buf .. data
        if #buf > _M.MAX_ANSWER then
            sock:close()
            return nil, "an answer of more than " .. _M.MAX_ANSWER .. " bytes"
        end
    end
end

local function fetch(digest, der)
    local d = dict()
    local deadline = now_ms() + _M.DEADLINE_MS
    local url, err = ngx_ocsp.get_ocsp_responder_from_der_chain(der)
    if not url then
        ngx.log(ngx.WARN, "ferrule: OCSP: no responder in the certificate: ", err)
        return
    end
    local req
    req, err = ngx_ocsp.create_ocsp_request(der)
    if not req then
        ngx.log(ngx.WARN, "ferrule: OCSP request for ", show(url), ": ", err)
        return
    end
    local resp
    resp, err = post(url, req, deadline)
    if not resp then
        ngx.log(ngx.WARN, "ferrule: OCSP responder ", show(url), ": ", err)
        return
    end
    local ok, verr = ngx_ocsp.validate_ocsp_response(resp, der)
    if not ok then
        ngx.log(ngx.WARN, "ferrule: OCSP response of ", show(url), " not stapled: ", verr)
        d:delete("o:" .. digest)
        return
    end
    ok, err = d:safe_set("o:" .. digest, resp, _M.MAX_AGE)
    if not ok then
        ngx.log(ngx.WARN, "ferrule: OCSP response not kept: ", err)
        return
    end
    d:safe_set("of:" .. digest, true, _M.FRESH)
end

local running = 0 -- this worker's fetches: timers started and not ended

local function run(premature, digest, der)
    if not premature then
        local d = dict()
        -- one fetch per pair at a time, in every worker; its lock outlives it
        -- only if the worker dies
        local lock = "ol:" .. digest
        if d:safe_add(lock, true, _M.DEADLINE_MS / 1000 + 1) then
            local ok, err = pcall(fetch, digest, der)
            d:delete(lock)
            if not ok then
                ngx.log(ngx.ERR, "ferrule: OCSP fetch: ", err)
            end
        end
    end
    running = running - 1
end

-- In ssl_certificate_by_lua, once the pair is set: staples its response, and
-- starts a fetch when there is none or it is due. `pem` is the chain's PEM.
function _M.staple(digest, pem)
    if not _M.enabled or not digest then
        return
    end
    local d = dict()
    local resp = d:get("o:" .. digest)
    if resp then
        local ok, err = ngx_ocsp.set_ocsp_status_resp(resp)
        if not ok then
            ngx.log(ngx.WARN, "ferrule: OCSP staple: ", err)
        end
    end
    -- Every slot of this worker taken: a later handshake starts it.
    if running >= _M.MAX_FETCHES then
        return
    end
    -- none while the response is fresh, nor within RETRY of the last try
    if d:safe_add("of:" .. digest, true, _M.RETRY) then
        local der, err = ssl.cert_pem_to_der(pem)
        if not der then
            ngx.log(ngx.WARN, "ferrule: OCSP: ", err)
            return
        end
        local ok, terr = ngx.timer.at(0, run, digest, der)
        if ok then
            running = running + 1
        else
            ngx.log(ngx.WARN, "ferrule: OCSP fetch not started: ", terr)
        end
    end
end

-- opts: nil (off), or { allow_local = bool, resolvers = { "10.96.0.10", "[fd00::a]" } }
-- (init_by_lua, from --allow-local-endpoints and the pod's nameservers).
function _M.configure(opts)
    _M.enabled = opts ~= nil and opts ~= false
    opts = type(opts) == "table" and opts or {}
    _M.allow_local = opts.allow_local == true
    local resolvers = {}
    for _, r in ipairs(opts.resolvers or {}) do
        resolvers[#resolvers + 1] = match(r, "^%[(.*)%]$") or r
    end
    _M.resolvers = resolvers
end

-- The pair `digest` left the store: its response goes with it.
function _M.forget(digest)
    local d = dict()
    d:delete("o:" .. digest)
    d:delete("of:" .. digest)
end

return _M

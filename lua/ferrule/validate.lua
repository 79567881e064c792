-- Validation and normalisation of configuration API payloads.
-- Pure: takes decoded JSON (cjson) tables, returns normalised plain tables or
-- (nil, "clear message"). Nothing here touches shared dicts or the request.
-- The rules are balancer/API.md; balancer/cases/ holds this and the njs port
-- (njs/ferrule/validate.js) to them, message for message.
local cjson = require("cjson.safe")
local expr = require("ferrule.expr")
local util = require("ferrule.util")

local null = cjson.null
local type = type
local floor = math.floor
local tostring = tostring
local find = string.find
local format = string.format

local _M = {}

local MAX_NAME = 1024

local function is_null(v)
    return v == nil or v == null
end

local function is_int(v, min, max)
    return type(v) == "number" and v == floor(v) and v >= min and v <= max
end

-- strings may not contain control characters: names are joined with "\n" in
-- the change log, and header/cookie values end up in response headers.
local function clean_string(v, allow_empty)
    if type(v) ~= "string" then
        return false
    end
    if not allow_empty and v == "" then
        return false
    end
    return not find(v, "[%z\1-\31\127]")
end

local function is_array(v)
    if type(v) ~= "table" then
        return false
    end
    local n = 0
    for k in pairs(v) do
        if type(k) ~= "number" then
            return false
        end
        n = n + 1
    end
    return n == #v
end

-- A JSON object. cjson decodes [] and {} alike, so an empty array counts too; a
-- non-empty array does not.
local function is_object(v)
    return type(v) == "table" and not (is_array(v) and next(v) ~= nil)
end

local function ipv4_ok(a)
    local o = { a:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$") }
    if #o ~= 4 then
        return false
    end
    for i = 1, 4 do
        if #o[i] > 3 or tonumber(o[i]) > 255 then
            return false
        end
    end
    return true
end

-- Colon-separated groups of 1 to 4 hex digits; nil unless well formed
-- ("" counts 0 groups: one side of a "::").
local function hex_groups(s)
    if s == "" then
        return 0
    end
    local n = 0
    for g in (s .. ":"):gmatch("([^:]*):") do
        if not g:match("^%x%x?%x?%x?$") then
            return nil
        end
        n = n + 1
    end
    return n
end

-- RFC 4291 section 2.2 text forms only: eight groups, or fewer around a single
-- "::" (which stands for at least one group), the last two groups possibly
-- written as a dotted IPv4 address. No zone ("%eth0"), port or brackets:
-- anything else would pass here and then fail in set_current_peer, which
-- ends the request with 500 instead of trying another peer.
local function ipv6_ok(a)
    if #a < 2 or #a > 45 or not find(a, ":", 1, true) or find(a, "[^%x:%.]") then
        return false
    end
    if find(a, ".", 1, true) then
        local v4 = a:match(":([%d%.]+)$")
        if not v4 or not ipv4_ok(v4) then
            return false
        end
        a = a:sub(1, #a - #v4) .. "0:0" -- its two groups' worth
    end
    local dbl = find(a, "::", 1, true)
    if not dbl then
        return hex_groups(a) == 8
    end
    if find(a, "::", dbl + 1, true) then
        return false
    end
    local left, right = hex_groups(a:sub(1, dbl - 1)), hex_groups(a:sub(dbl + 2))
    return left ~= nil and right ~= nil and left + right <= 7
end

function _M.address(a)
    if type(a) ~= "string" then
        return false
    end
    local inner = a:match("^%[(.*)%]$")
    if inner then
        return ipv6_ok(inner)
    end
    return ipv4_ok(a) or ipv6_ok(a)
end

-- RFC 6265 cookie-name token
local function cookie_name_ok(s)
    return clean_string(s) and not find(s, "[%s%(%)<>@,;:\\\"/%[%]%?=%{%}]")
end

-- HTTP header field-name token
local function header_name_ok(s)
    return clean_string(s) and not find(s, "[^%w!#%$%%&'%*%+%-%.%^_`|~]")
end

local function path_ok(s)
    return clean_string(s) and not find(s, ";", 1, true)
end

local function err(where, msg, ...)
    return nil, where .. ": " .. format(msg, ...)
end

local function endpoint(v, where)
    if not is_object(v) then
        return err(where, "must be an object")
    end
    if not _M.address(v.address) then
        return err(where, "address must be an IPv4 or IPv6 literal, got %s",
                   tostring(v.address))
    end
    if not is_int(v.port, 1, 65535) then
        return err(where, "port must be an integer in 1..65535, got %s", tostring(v.port))
    end
    local address = v.address:match("^%[(.*)%]$") or v.address
    return { address = address, port = v.port }
end


-- Copies the optional fields of `v` listed in `fields` ({ name, ok, what it must
-- be }) to `out` when `ok` takes them; the first it refuses is the error, naming it.
local function optional(v, out, fields, where)
    for _, f in ipairs(fields) do
        local name, ok, must = f[1], f[2], f[3]
        local x = v[name]
        if not is_null(x) then
            if not ok(x) then
                return err(where, "%s must be %s", name, must)
            end
            out[name] = x
        end
    end
    return out
end

local function is_bool(x)
    return type(x) == "boolean"
end

-- affinity.ingresses: "namespace/name" of each Ingress whose locations set the cookie
local function ingress_list_ok(x)
    if not is_array(x) or #x > 10000 then
        return false
    end
    for _, s in ipairs(x) do
        if not clean_string(s) or #s < 3 or #s > 507 then
            return false
        end
        local slash = find(s, "/", 1, true)
        if not slash or slash == 1 or slash == #s or find(s, "/", slash + 1, true) then
            return false
        end
    end
    return true
end

local AFFINITY_FIELDS = {
    { "affinity_mode", function(x) return x == "balanced" or x == "persistent" end,
      "\"balanced\", \"persistent\" or null" },
    { "max_age", function(x) return is_int(x, 0, 2^31 - 1) end, "a non-negative integer or null" },
    { "path", path_ok, "a string without ';' or control characters" },
    { "secure", is_bool, "true, false or null" },
    { "samesite", function(x) return x == "None" or x == "Lax" or x == "Strict" end,
      "\"None\", \"Lax\", \"Strict\" or null" },
    { "conditional_samesite_none", is_bool, "true, false or null" },
    { "expires", function(x) return is_int(x, 1, 2^31 - 1) end,
      "a positive integer (seconds) or null" },
    -- a host name as certificates take it, no wildcard, perhaps after one dot
    { "domain", function(x)
        local d = type(x) == "string" and x:gsub("^%.", "", 1)
        return d and _M.host(d) and not find(d, "*", 1, true)
    end, "a domain name, optionally with a leading dot" },
    { "change_on_failure", is_bool, "true, false or null" },
    { "ingresses", ingress_list_ok, "an array of at most 10000 namespace/name strings or null" },
}

local function affinity(v, where)
    if is_null(v) then
        return nil
    end
    if not is_object(v) then
        return err(where, "must be an object or null")
    end
    if v.mode ~= "cookie" then
        return err(where, "mode must be \"cookie\", got %s", tostring(v.mode))
    end
    if not cookie_name_ok(v.cookie_name) then
        return err(where, "cookie_name must be a valid cookie name")
    end
    -- null is persistent: what a balancer did before the field existed, so that a
    -- body without it (a stored one, one posted by hand) keeps its cookies working
    return optional(v, { mode = "cookie", affinity_mode = "persistent", cookie_name = v.cookie_name },
                    AFFINITY_FIELDS, where)
end

local CANARY_FIELDS = {
    { "header", header_name_ok, "a valid HTTP header name" },
    { "header_value", clean_string, "a non-empty string" },
    -- compiled by canary.decide (ngx.re): a pattern PCRE refuses never matches
    { "header_pattern", function(x) return clean_string(x) and #x <= 1024 end,
      "a non-empty string of at most 1024 bytes" },
    { "cookie", cookie_name_ok, "a valid cookie name" },
}

local function canary(v, where, self_name)
    if is_null(v) then
        return nil
    end
    if not is_object(v) then
        return err(where, "must be an object or null")
    end
    if not clean_string(v.backend) or #v.backend > MAX_NAME then
        return err(where, "backend must be a backend name")
    end
    if v.backend == self_name then
        return err(where, "backend must not name the backend itself")
    end
    local out = { backend = v.backend }
    local total = 100
    if not is_null(v.weight_total) then
        if not is_int(v.weight_total, 1, 2^31 - 1) then
            return err(where, "weight_total must be a positive integer or null")
        end
        total = v.weight_total
    end
    out.weight_total = total
    if not is_null(v.weight) then
        if not is_int(v.weight, 0, total) then
            return err(where, "weight must be an integer in 0..weight_total (%d)", total)
        end
        out.weight = v.weight
    end
    local _, ferr = optional(v, out, CANARY_FIELDS, where)
    if ferr then
        return nil, ferr
    end
    -- whose affinity the canary side uses (affinity-canary-behavior)
    local behavior = v.affinity_behavior
    if is_null(behavior) then
        behavior = "sticky"
    elseif behavior ~= "sticky" and behavior ~= "legacy" then
        return err(where, "affinity_behavior must be \"sticky\", \"legacy\" or null")
    end
    out.legacy_affinity = behavior == "legacy"
    return out
end

-- Validate one backend object; returns the normalised backend.
function _M.backend(v, where)
    where = where or "backend"
    if not is_object(v) then
        return err(where, "must be an object")
    end
    if not clean_string(v.name) or #v.name > MAX_NAME then
        return err(where, "name must be a non-empty string (max %d chars, no control characters)",
                   MAX_NAME)
    end
    where = where .. " " .. format("%q", v.name)
    local out = { name = v.name, endpoints = util.array() }

    if not is_null(v.endpoints) then
        if not is_array(v.endpoints) then
            return err(where, "endpoints must be an array")
        end
        local seen = {}
        for i, e in ipairs(v.endpoints) do
            local ep, e_err = endpoint(e, format("endpoints[%d]", i - 1))
            if not ep then
                return err(where, "%s", e_err)
            end
            local key = util.endpoint_key(ep.address, ep.port)
            if not seen[key] then -- duplicates are harmless; keep one
                seen[key] = true
                out.endpoints[#out.endpoints + 1] = ep
            end
        end
    end

    local lb = v.load_balance
    if is_null(lb) then
        lb = "round_robin"
    end
    if lb ~= "round_robin" and lb ~= "ewma" then
        return err(where, "load_balance must be \"round_robin\" or \"ewma\", got %s",
                   tostring(lb))
    end
    out.load_balance = lb

    if not is_null(v.upstream_hash_by) then
        if not clean_string(v.upstream_hash_by) then
            return err(where, "upstream_hash_by must be a non-empty string or null")
        end
        local ok, p_err = expr.parse(v.upstream_hash_by)
        if not ok then
            return err(where, "upstream_hash_by: %s", p_err)
        end
        out.upstream_hash_by = v.upstream_hash_by
    end
    if not is_null(v.upstream_hash_by_subset_size) then
        if not is_int(v.upstream_hash_by_subset_size, 1, 2^31 - 1) then
            return err(where, "upstream_hash_by_subset_size must be a positive integer or null")
        end
        out.upstream_hash_by_subset_size = v.upstream_hash_by_subset_size
    end

    local a, a_err = affinity(v.affinity, "affinity")
    if a_err then
        return err(where, "%s", a_err)
    end
    out.affinity = a

    local c, c_err = canary(v.canary, "canary", v.name)
    if c_err then
        return err(where, "%s", c_err)
    end
    out.canary = c
    return out
end

local function version(v)
    if not is_int(v, 0, 2^53) then
        return nil, "version must be a non-negative integer"
    end
    return v
end

-- POST /configuration/backends
function _M.backends_payload(body)
    if not is_object(body) then
        return nil, "body must be a JSON object"
    end
    local ver, v_err = version(body.version)
    if not ver then
        return nil, v_err
    end
    local out = { version = ver, backends = {}, removed = {} }
    local names = {}
    if not is_null(body.backends) then
        if not is_array(body.backends) then
            return nil, "backends must be an array"
        end
        for i, b in ipairs(body.backends) do
            local nb, b_err = _M.backend(b, format("backends[%d]", i - 1))
            if not nb then
                return nil, b_err
            end
            if names[nb.name] then
                return nil, format("backends[%d]: duplicate backend name %q", i - 1, nb.name)
            end
            names[nb.name] = true
            out.backends[#out.backends + 1] = nb
        end
    end
    if not is_null(body.removed) then
        if not is_array(body.removed) then
            return nil, "removed must be an array of backend names"
        end
        for i, name in ipairs(body.removed) do
            if not clean_string(name) or #name > MAX_NAME then
                return nil, format("removed[%d] must be a backend name", i - 1)
            end
            if names[name] then
                return nil, format("removed[%d]: %q is also in backends", i - 1, name)
            end
            out.removed[#out.removed + 1] = name
        end
    end
    return out
end

-- lower-case, no trailing dot; "*.example.com" allowed (one leading label).
function _M.host(h)
    if type(h) ~= "string" or h == "" or #h > 253 then
        return nil
    end
    h = h:lower():gsub("%.$", "")
    local rest = h:match("^%*%.(.+)$") or h
    for label in (rest .. "."):gmatch("([^.]*)%.") do
        if label == "" or #label > 63 or find(label, "[^%w_%-]") then
            return nil
        end
    end
    return h
end

-- The most bytes a certificate and its key may have together: the controller's
-- bound (model/src/build/tls.rs MAX_TLS_PEM), so that one pair cannot take the
-- store every host's TLS shares.
_M.MAX_PEM = 128 * 1024

local function pem_pair(v, where)
    if not is_object(v) then
        return err(where, "must be an object")
    end
    if type(v.cert) ~= "string" or not find(v.cert, "-----BEGIN ", 1, true) then
        return err(where, "cert must be a PEM string")
    end
    if type(v.key) ~= "string" or not find(v.key, "-----BEGIN ", 1, true) then
        return err(where, "key must be a PEM string")
    end
    if #v.cert + #v.key > _M.MAX_PEM then
        return err(where, "cert and key: %d bytes together, more than the %d allowed",
                   #v.cert + #v.key, _M.MAX_PEM)
    end
    return { cert = v.cert, key = v.key }
end

-- POST /configuration/certificates. `check(cert, key)` (optional) parses the
-- PEM and returns (true) or (nil, err).
function _M.certificates_payload(body, check)
    if not is_object(body) then
        return nil, "body must be a JSON object"
    end
    local ver, v_err = version(body.version)
    if not ver then
        return nil, v_err
    end
    local out = { version = ver, certificates = {}, removed = {} }
    local seen = {}
    if not is_null(body.certificates) then
        if not is_array(body.certificates) then
            return nil, "certificates must be an array"
        end
        for i, c in ipairs(body.certificates) do
            local where = format("certificates[%d]", i - 1)
            if not is_object(c) then
                return err(where, "must be an object")
            end
            local host = _M.host(c.host)
            if not host then
                return err(where, "host must be a DNS name or *.wildcard, got %s", tostring(c.host))
            end
            if seen[host] then
                return err(where, "duplicate host %q", host)
            end
            seen[host] = true
            local pair, p_err = pem_pair(c, where .. " " .. host)
            if not pair then
                return nil, p_err
            end
            if check then
                local ok, c_err = check(pair.cert, pair.key)
                if not ok then
                    return err(where, "%s: %s", host, c_err)
                end
            end
            pair.host = host
            out.certificates[#out.certificates + 1] = pair
        end
    end
    if not is_null(body.removed) then
        if not is_array(body.removed) then
            return nil, "removed must be an array of hosts"
        end
        for i, h in ipairs(body.removed) do
            local host = _M.host(h)
            if not host then
                return nil, format("removed[%d] must be a host", i - 1)
            end
            if seen[host] then
                return nil, format("removed[%d]: %q is also in certificates", i - 1, host)
            end
            out.removed[#out.removed + 1] = host
        end
    end
    if not is_null(body.default) then
        local pair, p_err = pem_pair(body.default, "default")
        if not pair then
            return nil, p_err
        end
        if check then
            local ok, c_err = check(pair.cert, pair.key)
            if not ok then
                return nil, "default: " .. c_err
            end
        end
        out.default = pair
    end
    return out
end

return _M

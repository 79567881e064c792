-- ssl_certificate_by_lua: serve certificates from the ferrule_certificates
-- shared dict without a reload.
--
-- Shared dict layout:
--   c:<host>   the digest of the host's pair; host may be "*.example.com";
--              the default certificate uses the reserved host "#default"
--              (a JSON pair itself when an older Ferrule wrote it)
--   p:<digest> JSON {"cert": PEM, "key": PEM}, stored once however many hosts
--              name it (hosts share a wildcard or a tenant's Secret)
--   n:<digest> how many c: entries name that pair (it goes with the last)
--   v:<host>   unique generation of that entry (changes on every rotation)
--   o:, of:, ol:  the pair's OCSP response, when to fetch it, a fetch running
--              (ferrule.ocsp)
--   g          generation counter;   cv  last controller "version"
local ssl = require("ngx.ssl")
local lrucache = require("resty.lrucache")
local cjson = require("cjson.safe")
local store = require("ferrule.store")
local fast = require("ferrule.fast")
local ocsp = require("ferrule.ocsp")

local ngx = ngx
local find = string.find
local sub = string.sub
local lower = string.lower

local _M = {}

_M.DICT = "ferrule_certificates"
_M.DEFAULT = "#default"
_M.CACHE_SIZE = 1000

local cache -- per worker: host -> { v = generation, cert = cdata, key = cdata }
local parsed_pairs -- per worker: digest -> { cert = cdata, key = cdata }

local function dict()
    local d = ngx.shared[_M.DICT]
    if not d then
        error("lua_shared_dict " .. _M.DICT .. " is not declared")
    end
    return d
end
_M.dict = dict

-- "a.b.example.com" -> "*.b.example.com"; nil when there is no parent label.
function _M.wildcard(host)
    local dot = find(host, ".", 1, true)
    if not dot or dot == #host then
        return nil
    end
    return "*" .. sub(host, dot)
end

-- Candidate keys in lookup order: exact, wildcard (one label), default.
function _M.candidates(server_name)
    local out = {}
    if server_name and server_name ~= "" then
        local host = lower(server_name):gsub("%.$", "")
        out[#out + 1] = host
        local w = _M.wildcard(host)
        if w then
            out[#out + 1] = w
        end
    end
    out[#out + 1] = _M.DEFAULT
    return out
end

-- Whether a certificate is posted for exactly this host key ("*.example.com" for
-- a wildcard server): the server has TLS, so its ssl-redirect applies.
function _M.configured(host)
    return dict():get("v:" .. host) ~= nil
end

-- Returns host key and its generation, or nil.
local function find_entry(d, server_name)
    for _, h in ipairs(_M.candidates(server_name)) do
        local v = d:get("v:" .. h)
        if v then
            return h, v
        end
    end
end

local function parse(pem)
    local cert, err = ssl.parse_pem_cert(pem.cert)
    if not cert then
        return nil, "cert: " .. (err or "?")
    end
    local key, kerr = ssl.parse_pem_priv_key(pem.key)
    if not key then
        return nil, "key: " .. (kerr or "?")
    end
    return cert, key
end
_M.parse = parse

-- Does the private key belong to the first (leaf) certificate of the chain?
-- Uses OpenSSL through the FFI (symbols of the libcrypto NGINX links);
-- returns nil when that is not available, in which case the check is skipped.
local key_matches
do
    local ok_ffi, ffi = pcall(require, "ffi")
    if ok_ffi then
        local ok = pcall(ffi.cdef, [[
            void *OPENSSL_sk_value(const void *st, int i);
            int X509_check_private_key(const void *x509, const void *pkey);
            void ERR_clear_error(void);
        ]])
        if ok and pcall(function() return ffi.C.X509_check_private_key end) then
            key_matches = function(chain, pkey)
                local leaf = ffi.C.OPENSSL_sk_value(chain, 0)
                if leaf == nil then
                    return false
                end
                local r = ffi.C.X509_check_private_key(leaf, pkey) == 1
                ffi.C.ERR_clear_error()
                return r
            end
        end
    end
end

-- Validation hook for the configuration API: PEM must parse and the key
-- must match the certificate.
function _M.check(cert, key)
    local c, k = parse({ cert = cert, key = key })
    if not c then
        return nil, k
    end
    if key_matches and not key_matches(c, k) then
        return nil, "the private key does not match the certificate"
    end
    return true
end

local function lookup(server_name)
    local d = dict()
    local host, v = find_entry(d, server_name)
    if not host then
        return nil
    end
    if not cache then
        cache = lrucache.new(_M.CACHE_SIZE)
    end
    local hit = cache:get(host)
    if hit and hit.v == v then
        return hit
    end
    if not parsed_pairs then
        parsed_pairs = lrucache.new(_M.CACHE_SIZE)
    end
    -- twice: a rotation may release the pair between the reads of c: and p:
    local pair
    for _ = 1, 2 do
        local s = d:get("c:" .. host)
        if not s then
            return nil
        end
        local digest, json = s, nil
        if sub(s, 1, 1) == "{" then
            digest, json = nil, s
        end
        pair = digest and parsed_pairs:get(digest)
        if pair then
            break
        end
        json = json or d:get("p:" .. digest)
        if json then
            local pem, derr = cjson.decode(json)
            if not pem then
                return nil, "decode " .. host .. ": " .. tostring(derr)
            end
            local cert, key = parse(pem)
            if not cert then
                return nil, host .. ": " .. key
            end
            pair = { cert = cert, key = key, digest = digest }
            if ocsp.enabled then
                pair.pem = pem.cert -- what the OCSP request is made of
            end
            if digest then
                parsed_pairs:set(digest, pair)
            end
            break
        end
    end
    if not pair then
        return nil, host .. ": its certificate is not in the store"
    end
    hit = { v = v, cert = pair.cert, key = pair.key, host = host, digest = pair.digest, pem = pair.pem }
    cache:set(host, hit)
    return hit
end
_M.lookup = lookup

function _M.call()
    local name = ssl.server_name()
    local entry, err = lookup(name)
    if not entry then
        if err then
            ngx.log(ngx.ERR, "ferrule: certificate for ", name or "(no SNI)", ": ", err)
        end
        return -- keep the static fallback certificate
    end
    local ok, cerr = ssl.clear_certs()
    if not ok then
        ngx.log(ngx.ERR, "ferrule: clear_certs: ", cerr)
        return ngx.exit(ngx.ERROR)
    end
    ok, cerr = ssl.set_cert(entry.cert)
    if ok then
        ok, cerr = ssl.set_priv_key(entry.key)
    end
    if not ok then
        ngx.log(ngx.ERR, "ferrule: set certificate ", entry.host, ": ", cerr)
        return ngx.exit(ngx.ERROR)
    end
    ocsp.staple(entry.digest, entry.pem)
end

-- The digest a pair is stored under (p:, n:).
local function pair_digest(pair)
    return ngx.encode_base64(ngx.sha1_bin(pair.cert .. "\0" .. pair.key))
end
_M.pair_digest = pair_digest

-- Drops one c: entry's reference to the pair `digest` (the value c: held), and the
-- pair with the last one. Nothing for a pair of the older layout (c: held it).
local function release(d, digest)
    if not digest or sub(digest, 1, 1) == "{" then
        return
    end
    local n = d:incr("n:" .. digest, -1)
    if not n or n <= 0 then
        d:delete("p:" .. digest)
        d:delete("n:" .. digest)
        ocsp.forget(digest)
    end
end

-- Takes a reference to the stored copy of `pair`, storing it when it is new.
local function acquire(d, digest, pair)
    if d:incr("n:" .. digest, 1) then
        return true
    end
    local ok, err = d:safe_add("p:" .. digest, cjson.encode({ cert = pair.cert, key = pair.key }))
    if not ok and err ~= "exists" then
        return nil, err
    end
    ok, err = d:safe_add("n:" .. digest, 1)
    if not ok then
        d:delete("p:" .. digest)
        return nil, err
    end
    return true
end

-- The certificate store's writes (see write below for the lock).
local function write_locked(payload)
    local d = dict()
    local function put(host, pair)
        local digest = pair_digest(pair)
        local ckey = "c:" .. host
        local old = d:get(ckey)
        if old ~= digest then
            local ok, err = acquire(d, digest, pair)
            if not ok then
                return nil, err
            end
        end
        -- a lost c: with its v: still there hides the wildcard and the default
        -- for that host (the lookup stops at v:): keep the old pair on failure
        local ok, err = store.replace(d, ckey, digest, function()
            -- the generation moves only once c: is written
            d:safe_add("g", 0)
            local g, gerr = d:incr("g", 1)
            if not g then
                return nil, gerr
            end
            return d:safe_set("v:" .. host, g)
        end)
        if old ~= digest then
            -- the pair no longer named: the old one, or the new one on failure
            if ok then
                release(d, old)
            else
                release(d, digest)
            end
        end
        return ok, err
    end
    -- removals first: they make room for what follows
    for _, h in ipairs(payload.removed) do
        d:delete("v:" .. h) -- readers check v: first
        local old = d:get("c:" .. h)
        d:delete("c:" .. h)
        release(d, old)
        if h ~= _M.DEFAULT then
            fast.tls(h, false)
        end
    end
    for _, c in ipairs(payload.certificates) do
        local ok, err = put(c.host, c)
        if not ok then
            return nil, "shared dict " .. _M.DICT .. ": " .. tostring(err) .. " (at " .. c.host .. ")"
        end
        fast.tls(c.host, true)
    end
    if payload.default then
        local ok, err = put(_M.DEFAULT, payload.default)
        if not ok then
            return nil, "shared dict " .. _M.DICT .. ": " .. tostring(err) .. " (default)"
        end
    end
    d:safe_set("cv", payload.version)
    return d:get("g") or 0
end

-- The store's size and its free space, in bytes (nil where this lua-nginx-module
-- cannot tell: before 0.10.11). Free space counts whole free pages only: small
-- entries may still fit in the slots of used ones.
function _M.usage()
    local d = dict()
    if not d.capacity or not d.free_space then
        return nil
    end
    return d:capacity(), d:free_space()
end

-- Writer used by the configuration API (payload already validated), under the
-- store's writer lock: the fast path's copy of the hosts follows in the same order.
function _M.write(payload)
    return store.locked(function()
        store.fast_written()
        return write_locked(payload)
    end)
end

function _M.hosts()
    local d = dict()
    local out = {}
    local has_default = false
    for _, k in ipairs(d:get_keys(0)) do
        if sub(k, 1, 2) == "v:" then
            local h = sub(k, 3)
            if h == _M.DEFAULT then
                has_default = true
            else
                out[#out + 1] = h
            end
        end
    end
    table.sort(out)
    return out, has_default
end

return _M

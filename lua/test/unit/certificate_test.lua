local certificate = require("ferrule.certificate")

local T = {}

T["wildcard replaces exactly one label"] = function(t)
    t.eq(certificate.wildcard("a.example.com"), "*.example.com")
    t.eq(certificate.wildcard("a.b.example.com"), "*.b.example.com")
    t.eq(certificate.wildcard("localhost"), nil)
end

T["lookup order: exact, wildcard, default"] = function(t)
    local c = certificate.candidates("A.Example.com.")
    t.eq(#c, 3)
    t.eq(c[1], "a.example.com")
    t.eq(c[2], "*.example.com")
    t.eq(c[3], certificate.DEFAULT)
    t.eq(#certificate.candidates(nil), 1)
end

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

-- lua-nginx-module frees an entry before it allocates a replacement of another
-- size: a failed rotation must leave the old pair, or the host's v: entry stops
-- the lookup before the wildcard and the default (static fallback served).
T["a rotation that runs out of memory keeps serving the previous certificate"] = function(t)
    local full = require("test.full_dict")
    local prefix = ngx.config.prefix():gsub("/*$", "/")
    local cert, key = read(prefix .. "conf/default.crt"), read(prefix .. "conf/default.key")
    -- unique per run: the worker's parsed-certificate cache is keyed by host
    local host = "full-" .. ngx.worker.pid() .. "-" .. math.floor(ngx.now() * 1000) .. ".example.com"
    full.with_small_dict(certificate, function(d)
        t.ok(certificate.write({ version = 1, removed = {},
                                 certificates = { { host = host, cert = cert, key = key } } }))
        local old = d:get("c:" .. host)
        t.ok(old)
        full.fill(d)
        local gen, werr = certificate.write({ version = 2, removed = {},
            certificates = { { host = host, cert = cert:rep(3), key = key } } })
        t.eq(gen, nil)
        t.ok(werr:find("no memory", 1, true) and werr:find(host, 1, true), werr)
        t.eq(d:get("c:" .. host), old)
        local entry, lerr = certificate.lookup(host)
        t.ok(entry, "no certificate served: " .. tostring(lerr))
        t.eq(entry.host, host)
    end)
end

local function count(d, prefix)
    local n = 0
    for _, k in ipairs(d:get_keys(0)) do
        if k:sub(1, #prefix) == prefix then
            n = n + 1
        end
    end
    return n
end

-- One tenant's Secret named by many hosts took a copy per host: 270 hosts of a 1 MB
-- pair filled a 256 MB store. A pair is stored once, and goes with its last host.
T["hosts that name the same pair store it once"] = function(t)
    local prefix = ngx.config.prefix():gsub("/*$", "/")
    local cert, key = read(prefix .. "conf/default.crt"), read(prefix .. "conf/default.key")
    local big = cert:rep(20) -- a long chain of the same certificate
    local tag = ngx.worker.pid() .. "-" .. math.floor(ngx.now() * 1000)
    local host = function(i) return "h" .. i .. "-" .. tag .. ".example.com" end
    require("test.full_dict").with_small_dict(certificate, function(d)
        local hosts = {}
        for i = 1, 100 do
            hosts[i] = { host = host(i), cert = big, key = key }
        end
        -- 100 copies of this pair would not fit the 256 KiB dict
        t.ok(#big * 100 > 256 * 1024)
        t.ok(certificate.write({ version = 1, removed = {}, certificates = hosts }))
        t.eq(count(d, "p:"), 1, "stored pairs")
        local digest = certificate.pair_digest({ cert = big, key = key })
        t.eq(d:get("n:" .. digest), 100, "hosts naming it")
        for i = 1, 100, 33 do
            local entry, err = certificate.lookup(host(i))
            t.ok(entry, tostring(err))
            t.eq(entry.host, host(i))
        end
        -- a rotation of one host stores its new pair, the old stays for the others
        t.ok(certificate.write({ version = 2, removed = {},
            certificates = { { host = host(1), cert = cert, key = key } } }))
        t.eq(count(d, "p:"), 2)
        t.eq(d:get("n:" .. digest), 99)
        -- the same pair again changes nothing stored
        t.ok(certificate.write({ version = 3, removed = {},
            certificates = { { host = host(2), cert = big, key = key } } }))
        t.eq(d:get("n:" .. digest), 99)
        local removed = {}
        for i = 1, 100 do
            removed[i] = host(i)
        end
        t.ok(certificate.write({ version = 4, removed = removed, certificates = {} }))
        t.eq(count(d, "p:"), 0, "pairs left")
        t.eq(count(d, "n:"), 0, "counts left")
        t.eq(count(d, "c:"), 0, "hosts left")
        local capacity, free = certificate.usage()
        t.eq(capacity, 256 * 1024)
        t.ok(free > 0 and free <= capacity, tostring(free))
    end)
end

-- An NGINX that an older Ferrule wrote to (and a reload kept) holds the pair in c:.
T["a pair of the older layout is served and replaced"] = function(t)
    local prefix = ngx.config.prefix():gsub("/*$", "/")
    local cert, key = read(prefix .. "conf/default.crt"), read(prefix .. "conf/default.key")
    local host = "old-" .. ngx.worker.pid() .. "-" .. math.floor(ngx.now() * 1000) .. ".example.com"
    require("test.full_dict").with_small_dict(certificate, function(d)
        d:set("c:" .. host, require("cjson").encode({ cert = cert, key = key }))
        d:set("v:" .. host, 7)
        local entry, err = certificate.lookup(host)
        t.ok(entry, tostring(err))
        t.ok(certificate.write({ version = 1, removed = {},
            certificates = { { host = host, cert = cert, key = key } } }))
        t.eq(count(d, "p:"), 1)
        t.ok(certificate.write({ version = 2, removed = { host }, certificates = {} }))
        t.eq(count(d, "p:") + count(d, "n:") + count(d, "c:"), 0)
    end)
end

-- The OCSP responder comes from a tenant's certificate: only plain
-- http://host[:port]/path is asked (the response is signed), never a URL with
-- credentials or another scheme.
T["OCSP responder URLs: http with a host, a port and a path only"] = function(t)
    local ocsp = require("ferrule.ocsp")
    local function parsed(url)
        local host, port, path, authority = ocsp.parse_url(url)
        return host and table.concat({ host, tostring(port), path, authority }, " ")
    end
    t.eq(parsed("http://ocsp.example.com"), "ocsp.example.com 80 / ocsp.example.com")
    t.eq(parsed("HTTP://127.0.0.1:8888/ocsp?x"), "127.0.0.1 8888 /ocsp?x 127.0.0.1:8888")
    t.eq(parsed("http://[::1]:81/"), "::1 81 / [::1]:81")
    t.eq(parsed("https://ocsp.example.com/"), nil)
    t.eq(parsed("http://user@ocsp.example.com/"), nil)
    t.eq(parsed("http://ocsp.example.com:99999/"), nil)
    t.eq(parsed("http://a b/"), nil)
    t.eq(parsed("file:///etc/passwd"), nil)
end

return T

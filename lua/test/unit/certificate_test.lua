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

return T

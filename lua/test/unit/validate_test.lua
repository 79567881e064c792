local validate = require("ferrule.validate")
local cjson = require("cjson.safe")

local function payload(json)
    return validate.backends_payload(assert(cjson.decode(json)))
end

local T = {}

T["full example is accepted and normalised"] = function(t)
    local p, err = payload([[{"version": 7,
      "backends": [
        {"name": "default-echo-80",
         "endpoints": [{"address": "127.0.0.2", "port": 8080}, {"address": "::1", "port": 8081}],
         "load_balance": "round_robin", "upstream_hash_by": null, "affinity": null,
         "canary": {"backend": "default-echo-canary-80", "weight": 20, "weight_total": 100,
                    "header": "X-Canary", "header_value": null, "cookie": "canary",
                    "affinity_behavior": "legacy"}},
        {"name": "b2", "endpoints": [], "load_balance": "ewma", "upstream_hash_by": "$arg_user$http_x_a",
         "affinity": {"mode": "cookie", "cookie_name": "route", "max_age": null, "path": null,
                      "secure": false, "samesite": "None", "expires": 3600, "domain": ".example.com",
                      "change_on_failure": true}}],
      "removed": ["old-backend-name"]}]])
    t.ok(p, err)
    t.eq(p.version, 7)
    t.eq(#p.backends, 2)
    local b = p.backends[1]
    t.eq(#b.endpoints, 2)
    t.eq(b.endpoints[2].address, "::1")
    t.eq(b.canary.weight, 20)
    t.eq(b.canary.header_value, nil)
    t.eq(b.canary.legacy_affinity, true)
    t.eq(b.affinity, nil)
    t.eq(p.backends[2].affinity.cookie_name, "route")
    t.eq(p.backends[2].affinity.max_age, nil)
    t.eq(p.backends[2].affinity.secure, false)
    t.eq(p.backends[2].affinity.samesite, "None")
    t.eq(p.backends[2].affinity.expires, 3600)
    t.eq(p.backends[2].affinity.domain, ".example.com")
    t.eq(p.backends[2].affinity.change_on_failure, true)
    t.eq(p.backends[2].load_balance, "ewma")
    t.eq(p.removed[1], "old-backend-name")
end

T["defaults: load_balance round_robin, weight_total 100"] = function(t)
    local p = payload([[{"version": 1, "backends": [{"name": "a", "endpoints": null,
        "canary": {"backend": "c"}}]}]])
    t.eq(p.backends[1].load_balance, "round_robin")
    t.eq(#p.backends[1].endpoints, 0)
    t.eq(p.backends[1].canary.weight_total, 100)
    t.eq(p.backends[1].canary.legacy_affinity, false)
end

T["bad inputs are rejected with a clear message"] = function(t)
    local cases = {
        { '[1]', "body must be a JSON object" },
        { '"text"', "body must be a JSON object" },
        { '{"backends": []}', "version" },
        { '{"version": -1}', "version" },
        { '{"version": 1, "backends": {}}', nil }, -- {} decodes as an empty table: accepted
        { '{"version": 1, "backends": [{"name": ""}]}', "name must be" },
        { '{"version": 1, "backends": [{"name": "a\\nb"}]}', "name must be" },
        { '{"version": 1, "backends": [{"name": "a", "endpoints": [{"address": "example.com", "port": 80}]}]}',
          "address must be an IPv4 or IPv6 literal" },
        { '{"version": 1, "backends": [{"name": "a", "endpoints": [{"address": "10.0.0.300", "port": 80}]}]}',
          "address" },
        { '{"version": 1, "backends": [{"name": "a", "endpoints": [{"address": "10.0.0.1", "port": 0}]}]}',
          "port must be" },
        { '{"version": 1, "backends": [{"name": "a", "endpoints": [{"address": "10.0.0.1", "port": 1.5}]}]}',
          "port must be" },
        { '{"version": 1, "backends": [{"name": "a", "load_balance": "random"}]}', "load_balance" },
        { '{"version": 1, "backends": [{"name": "a", "upstream_hash_by": "$"}]}', "upstream_hash_by" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "header"}}]}', "mode must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "secure": "yes"}}]}', "secure must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "samesite": "lax"}}]}', "samesite must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "expires": 0}}]}', "expires must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "domain": "a.com; Secure"}}]}', "domain must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "domain": "a..com"}}]}', "domain must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "domain": "."}}]}', "domain must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "change_on_failure": 1}}]}', "change_on_failure must be" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "a b"}}]}',
          "cookie_name" },
        { '{"version": 1, "backends": [{"name": "a", "affinity": {"mode": "cookie", "cookie_name": "r", "path": "/;x"}}]}',
          "path" },
        { '{"version": 1, "backends": [{"name": "a", "canary": {"backend": "c", "weight": 101}}]}', "weight" },
        { '{"version": 1, "backends": [{"name": "a", "canary": {"backend": "a"}}]}', "itself" },
        { '{"version": 1, "backends": [{"name": "a", "canary": {"backend": "c", "header": "X Y"}}]}', "header" },
        { '{"version": 1, "backends": [{"name": "a", "canary": {"backend": "c", "affinity_behavior": "Legacy"}}]}', "affinity_behavior" },
        { '{"version": 1, "backends": [{"name": "a"}, {"name": "a"}]}', "duplicate" },
        { '{"version": 1, "backends": [{"name": "a"}], "removed": ["a"]}', "also in backends" },
        { '{"version": 1, "removed": [1]}', "removed" },
    }
    for _, c in ipairs(cases) do
        local p, err = payload(c[1])
        if c[2] == nil then
            t.ok(p, c[1] .. " should be accepted: " .. tostring(err))
        else
            t.ok(not p, c[1] .. " should be rejected")
            t.ok(err:find(c[2], 1, true), c[1] .. ": message " .. err .. " lacks " .. c[2])
        end
    end
end

T["addresses"] = function(t)
    for _, a in ipairs({ "127.0.0.1", "::1", "fd00::1:2", "[::1]", "::ffff:10.0.0.1", "::",
                         "1:2:3:4:5:6:7:8", "FD00:0DB8:0000:0000:0000:0000:0000:0001",
                         "1::", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3::7:8",
                         "1:2:3:4:5:6:10.0.0.1", "::10.0.0.1", "64:ff9b::192.0.2.33",
                         "[2001:db8::1]" }) do
        t.ok(validate.address(a), a .. " should be accepted")
    end
    for _, a in ipairs({ "", "1.2.3", "1.2.3.4.5", "256.1.1.1", "host", ":::1", "1::2::3",
                         "fe80::1%eth0", "1:2", "1.2.3.4:80", "[1.2.3.4]", "[::1]:80", "::1:80:",
                         "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7:8::", "::1:2:3:4:5:6:7:8",
                         "12345::1", ":1:2:3:4:5:6:7", "1:2:3:4:5:6:7:", "1:::2", "::1.2.3",
                         "1:2:3:4:5:6:7:1.2.3.4", "1.2.3.4::", "::1.2.3.4:5", "::ffff:1.2.3.256",
                         "[::1", "::1]", "[[::1]]", "g::1", " ::1" }) do
        t.ok(not validate.address(a), a .. " should be rejected")
    end
end

-- A loose check let "1:2" through to set_current_peer, which fails the request
-- with 500 instead of trying another peer: it must be a 400 naming the field.
T["an endpoint that is not an address is rejected naming the field"] = function(t)
    local p, err = payload([[{"version": 1, "backends": [{"name": "ok", "endpoints": []},
        {"name": "web", "endpoints": [{"address": "10.0.0.1", "port": 80}, {"address": "1:2", "port": 80}]}]}]])
    t.eq(p, nil)
    t.eq(err, 'backends[1] "web": endpoints[1]: address must be an IPv4 or IPv6 literal, got 1:2')
end

T["hosts"] = function(t)
    t.eq(validate.host("A.Example.COM."), "a.example.com")
    t.eq(validate.host("*.example.com"), "*.example.com")
    t.eq(validate.host("a.*.example.com"), nil)
    t.eq(validate.host("*"), nil)
    t.eq(validate.host("a..b"), nil)
    t.eq(validate.host(""), nil)
end

T["certificates payload"] = function(t)
    local pem = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    local key = "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n"
    local body = { version = 3, certificates = { { host = "*.Example.com", cert = pem, key = key } },
                   removed = { "b.example.com" }, default = { cert = pem, key = key } }
    local p, err = validate.certificates_payload(body)
    t.ok(p, err)
    t.eq(p.certificates[1].host, "*.example.com")
    t.eq(p.removed[1], "b.example.com")
    t.ok(p.default)
    local _, e2 = validate.certificates_payload({ version = 1, certificates = { { host = "a", cert = "x", key = key } } })
    t.ok(e2 and e2:find("cert must be a PEM"), e2)
    local _, e3 = validate.certificates_payload(body, function() return nil, "bad pem" end)
    t.ok(e3 and e3:find("bad pem"), e3)
    -- at most 128 KiB of certificate and key together
    local pad = function(n) return pem .. ("x"):rep(n - #pem - #key) end
    t.ok(validate.certificates_payload({ version = 1,
        certificates = { { host = "a", cert = pad(128 * 1024), key = key } } }))
    local _, e4 = validate.certificates_payload({ version = 1,
        certificates = { { host = "a", cert = pad(128 * 1024 + 1), key = key } } })
    t.ok(e4 and e4:find("131073 bytes together, more than the 131072", 1, true), e4)
end

return T

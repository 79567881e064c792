-- The API's case files (balancer/cases/, described in balancer/API.md), run
-- through this balancer's validator. njs/test/unit.js runs the same files: a
-- case holds for both balancers or the contract is broken.
local cjson = require("cjson.safe")
local certificate = require("ferrule.certificate")
local validate = require("ferrule.validate")

-- The repository (or run.sh's copy of its parts) holds this file as
-- lua/test/unit/contract_test.lua; the runner loads it by its absolute path
-- (lua/test/test-only.conf), so its source names it.
local ROOT = debug.getinfo(1, "S").source:match("^@(.*)/lua/test/unit/[^/]+$")

local function read_cases(name)
    local path = assert(ROOT, "cannot tell the repository from this file's path")
        .. "/balancer/cases/" .. name
    local f = assert(io.open(path, "rb"))
    local text = f:read("*a")
    f:close()
    return assert(cjson.decode(text), path .. ": not JSON")
end

local null = cjson.null

local function show(v)
    return type(v) == "table" and (cjson.encode(v) or "<table>") or tostring(v)
end

-- Where `actual` differs from `expected` (nil when equal). A table cannot hold
-- nil, so the validator leaves absent fields out: a null expected matches an
-- absent value, and an extra field of `actual` must be null to match.
local function differs(actual, expected, path)
    if expected == null or expected == nil then
        if actual ~= nil and actual ~= null then
            return path .. ": expected null, got " .. show(actual)
        end
        return nil
    end
    if type(expected) ~= "table" then
        if actual ~= expected then
            return path .. ": expected " .. show(expected) .. ", got " .. show(actual)
        end
        return nil
    end
    if type(actual) ~= "table" then
        return path .. ": expected " .. show(expected) .. ", got " .. show(actual)
    end
    for k, v in pairs(expected) do
        local d = differs(actual[k], v, path .. "." .. tostring(k))
        if d then
            return d
        end
    end
    for k, v in pairs(actual) do
        if expected[k] == nil and v ~= null then
            return path .. "." .. tostring(k) .. ": unexpected " .. show(v)
        end
    end
    return nil
end

-- cert_and_key_bytes: the first certificate's PEM padded to that many bytes with
-- its key, in the body and in the accepted value alike.
local function pad(case)
    local n = case.cert_and_key_bytes
    if not n then
        return
    end
    for _, v in ipairs({ case.body, case.accepted }) do
        if v ~= nil then
            local c = v.certificates[1]
            c.cert = c.cert .. ("x"):rep(n - #c.cert - #c.key)
        end
    end
end

local function check(t, case, validator)
    pad(case)
    local value, err = validator(case.body)
    if case.error ~= nil then
        t.eq(value, nil, "accepted a body it must refuse")
        t.eq(err, case.error)
    else
        t.ok(value, "refused: " .. tostring(err))
        local d = differs(value, case.accepted, "accepted")
        t.ok(d == nil, d)
    end
end

-- Where the validated `value` lost or changed a field the controller `sent` (nil
-- when it kept them all). The one field the validator renames is
-- canary.affinity_behavior, kept as legacy_affinity.
local function dropped(sent, value, path)
    if sent == null then
        return nil
    end
    if type(sent) ~= "table" then
        if value ~= sent then
            return path .. ": sent " .. show(sent) .. ", validated " .. show(value)
        end
        return nil
    end
    if type(value) ~= "table" then
        return path .. ": sent " .. show(sent) .. ", validated " .. show(value)
    end
    for k, v in pairs(sent) do
        local d
        if k == "affinity_behavior" then
            d = dropped(v == "legacy", value.legacy_affinity, path .. ".legacy_affinity")
        else
            d = dropped(v, value[k], path .. "." .. tostring(k))
        end
        if d then
            return d
        end
    end
    return nil
end

-- The API's validation of each path, certificates parsed as the handler does.
local SENT_TO = {
    ["/configuration/backends"] = validate.backends_payload,
    ["/configuration/certificates"] = function(body)
        return validate.certificates_payload(body, certificate.check)
    end,
}

local T = {}

-- What the controller posts (recorded by controller/src/balancer/contract_tests.rs)
-- must be accepted, every field kept.
local ok_sent, sent = pcall(read_cases, "sent.json")
if not ok_sent then
    T["sent.json: readable"] = function() error(sent) end
else
    for i, post in ipairs(sent) do
        T[("sent.json: %d %s, %s"):format(i, tostring(post.sync), tostring(post.path))] = function(t)
            local validator = SENT_TO[post.path]
            t.ok(validator, "no such path")
            local value, err = validator(post.body)
            t.ok(value, "refused: " .. tostring(err))
            local d = dropped(post.body, value, "body")
            t.ok(d == nil, d)
        end
    end
end

-- Which browsers keep a cookie saying SameSite=None (conditional_samesite_none).
local ok_samesite, samesite = pcall(read_cases, "samesite.json")
if not ok_samesite then
    T["samesite.json: readable"] = function() error(samesite) end
else
    local sticky = require("ferrule.algorithms.sticky")
    for _, case in ipairs(samesite) do
        T["samesite.json: " .. tostring(case.name)] = function(t)
            local ua = case.user_agent
            if ua == cjson.null then
                ua = nil
            end
            t.eq(sticky.takes_samesite_none(ua), case.takes_none)
        end
    end
end

for _, file in ipairs({
    { "backends.json", validate.backends_payload },
    { "certificates.json", function(body) return validate.certificates_payload(body) end },
}) do
    local ok, cases = pcall(read_cases, file[1])
    if not ok then
        T[file[1] .. ": readable"] = function() error(cases) end
    else
        for i, case in ipairs(cases) do
            local name = file[1] .. ": " .. tostring(case.name)
            if T[name] then
                name = name .. " #" .. i
            end
            T[name] = function(t)
                t.ok((case.error == nil) ~= (case.accepted == nil),
                     "a case holds either accepted or error")
                check(t, case, file[2])
            end
        end
    end
end

return T

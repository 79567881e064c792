-- Exercises ferrule.store against a private shared dict (ferrule_test).
local store = require("ferrule.store")
local cjson = require("cjson.safe")

local T = {}

local function with_dict(fn)
    local saved = store.DICT
    store.DICT = "ferrule_test"
    ngx.shared.ferrule_test:flush_all()
    local ok, err = pcall(fn)
    store.DICT = saved
    ngx.shared.ferrule_test:flush_all()
    if not ok then
        error(err, 0)
    end
end

local function backend(name, port)
    return { name = name, endpoints = { { address = "10.0.0.1", port = port } },
             load_balance = "round_robin" }
end

T["one change among 10k backends decodes one backend"] = function(t)
    with_dict(function()
        local all = {}
        for i = 1, 10000 do
            all[i] = backend("b" .. i, 80)
        end
        t.ok(store.write({ version = 1, backends = all, removed = {} }))
        local installed = {}
        local apply = function(name, b) installed[name] = b end
        local state = { versions = {} }
        t.eq(store.sync(state, apply), 10000) -- first load (worker start)
        t.eq(store.sync(state, apply), 0)     -- nothing changed: no decode

        t.ok(store.write({ version = 2, backends = { backend("b42", 81) }, removed = {} }))
        t.eq(store.sync(state, apply), 1)
        t.eq(installed.b42.endpoints[1].port, 81)

        t.ok(store.write({ version = 3, backends = {}, removed = { "b7" } }))
        t.eq(store.sync(state, apply), 0)
        t.eq(installed.b7, nil)
        t.eq(state.full_syncs, 1)

        -- several generations behind: union of the changes, each decoded once
        t.ok(store.write({ version = 4, backends = { backend("b1", 82) }, removed = {} }))
        t.ok(store.write({ version = 5, backends = { backend("b1", 83), backend("b2", 83) }, removed = {} }))
        t.eq(store.sync(state, apply), 2)
        t.eq(installed.b1.endpoints[1].port, 83)
        t.eq(store.controller_version(), 5)
        t.eq(state.full_syncs, 1)
    end)
end

T["touch moves the generation and decodes nothing"] = function(t)
    with_dict(function()
        local installed = {}
        local apply = function(name, b) installed[name] = b end
        t.ok(store.write({ version = 7, backends = { backend("a", 1) }, removed = {} }))
        local state = { versions = {} }
        t.eq(store.sync(state, apply), 1)
        local before = store.generation()
        t.eq(store.touch(), before + 1)
        t.eq(store.generation(), before + 1)
        t.eq(store.sync(state, apply), 0) -- read the empty log entry, no scan
        t.eq(state.gen, before + 1)
        t.eq(state.full_syncs, 1)
        t.eq(installed.a.endpoints[1].port, 1)
        t.eq(store.controller_version(), 7) -- the backends' version is untouched
    end)
end

T["a missing log entry falls back to a scan that only decodes what differs"] = function(t)
    with_dict(function()
        local apply_count = 0
        local installed = {}
        local apply = function(name, b) installed[name] = b; apply_count = apply_count + 1 end
        t.ok(store.write({ version = 1, backends = { backend("a", 1), backend("b", 1) }, removed = {} }))
        local state = { versions = {} }
        store.sync(state, apply)
        t.ok(store.write({ version = 2, backends = { backend("a", 2) }, removed = { "b" } }))
        ngx.shared.ferrule_test:delete("l:" .. store.generation())
        apply_count = 0
        t.eq(store.sync(state, apply), 1)
        t.eq(apply_count, 2) -- a re-decoded, b removed
        t.eq(installed.a.endpoints[1].port, 2)
        t.eq(installed.b, nil)
        t.eq(state.full_syncs, 2)
    end)
end

T["stored JSON round-trips with empty endpoint arrays"] = function(t)
    with_dict(function()
        local util = require("ferrule.util")
        t.ok(store.write({ version = 1, backends = { { name = "e", endpoints = util.array() } }, removed = {} }))
        local s = store.get_raw("e")
        t.ok(s:find('"endpoints":[]', 1, true), s)
        t.eq(cjson.decode(s).name, "e")
    end)
end

-- lua-nginx-module frees an entry before it allocates a replacement of another
-- size: a failed write must not lose the backend a reloaded worker would load.
T["a write that runs out of memory keeps the previous backend"] = function(t)
    local full = require("test.full_dict")
    full.with_small_dict(store, function(d)
        local installed = {}
        local apply = function(name, b) installed[name] = b end
        t.ok(store.write({ version = 1, backends = { backend("a", 80) }, removed = {} }))
        local old = store.get_raw("a")
        local running = { versions = {} }
        t.eq(store.sync(running, apply), 1)
        full.fill(d)

        local big = backend("a", 81)
        for i = 2, 400 do
            big.endpoints[i] = { address = "10.0.1." .. (i % 250), port = 1000 + i }
        end
        local gen, werr, status = store.write({ version = 2, backends = { big }, removed = {} })
        t.eq(gen, nil)
        t.eq(status, 507)
        t.ok(werr:find("no memory", 1, true) and werr:find('"a"', 1, true), werr)
        t.eq(store.get_raw("a"), old)

        -- a new backend that does not fit leaves nothing behind
        local nb = backend("z", 80)
        nb.endpoints = big.endpoints
        t.eq(store.write({ version = 3, backends = { nb }, removed = {} }), nil)
        t.eq(store.get_raw("z"), nil)
        t.eq(d:get("v:z"), nil)

        -- a running worker and one started by a reload both keep serving it
        store.sync(running, apply)
        t.eq(installed.a.endpoints[1].port, 80)
        installed = {}
        store.sync({ versions = {} }, apply)
        t.ok(installed.a, "a new worker does not find the backend")
        t.eq(installed.a.endpoints[1].port, 80)
        t.eq(installed.z, nil)
    end)
end

return T

-- Layout of the ferrule_backends shared dict and the per-worker sync.
--
--   g          global generation, bumped once per accepted POST
--   cv         last "version" sent by the controller
--   b:<name>   the backend as normalised JSON
--   v:<name>   generation at which <name> last changed
--   l:<gen>    change log: names changed at <gen>, "\n"-joined ("\n" if none)
--   lock       writer mutex (POSTs from different workers)
--   w:<pid>    generation applied by worker <pid> (refreshed every second)
--
-- A worker remembers the generation it has applied. When `g` moves, it reads
-- the log entries after its generation and decodes only the names listed
-- there (O(changed), not O(all)). If a log entry is missing (trimmed, or a
-- failed write) it falls back to a full scan, which still only decodes the
-- backends whose v:<name> differs from what the worker holds.
local cjson = require("cjson.safe")
local util = require("ferrule.util")
local fast = require("ferrule.fast")

local ngx = ngx
local tostring = tostring

local _M = {}

_M.DICT = "ferrule_backends"
_M.LOG_KEEP = 1024 -- generations kept in the change log

local function dict()
    local d = ngx.shared[_M.DICT]
    if not d then
        error("lua_shared_dict " .. _M.DICT .. " is not declared")
    end
    return d
end
_M.dict = dict

-- Writer lock shared by all workers. The critical section never yields.
local function lock(d)
    for _ = 1, 500 do
        local ok, err = d:safe_add("lock", ngx.worker.pid(), 10)
        if ok then
            return true
        end
        if err ~= "exists" then
            return nil, err
        end
        ngx.sleep(0.002)
    end
    return nil, "timed out waiting for the configuration lock"
end

local function unlock(d)
    d:delete("lock")
end

local function unlocked(d, ok, ...)
    unlock(d)
    if not ok then
        return nil, ...
    end
    return ...
end

-- Runs fn() under the writer lock (writers of either store and the fast path's
-- resync): its results, or nil, err.
function _M.locked(fn)
    local d = dict()
    local ok, err = lock(d)
    if not ok then
        return nil, err
    end
    return unlocked(d, pcall(fn))
end

-- Puts back what a key held before a failed write (nil: the key was new).
-- The space is there: lua-nginx-module freed the old entry before trying to
-- allocate the new one, which is why the key is gone in the first place.
local function restore(d, key, old)
    if old == nil then
        d:delete(key)
        return true
    end
    local ok, err = d:safe_set(key, old)
    if not ok then
        ngx.log(ngx.ERR, "ferrule: shared dict: could not restore ", key,
                " after a failed write: ", err)
    end
    return ok, err
end

-- safe_set that leaves the previous value in place when it fails ("no
-- memory"): a failed update must not turn into a removal, which workers
-- started by a reload would apply. `then_version()`, when given, writes the
-- entry's version next (ok, err): the value must not change without it (running
-- workers would keep the old one, workers started by a reload would load the new
-- one), so its failure puts the previous value back too. Returns true; or nil, err.
function _M.replace(d, key, value, then_version)
    local old = d:get(key)
    local ok, err = d:safe_set(key, value)
    if ok and then_version then
        ok, err = then_version()
    end
    if not ok then
        local rok, rerr = restore(d, key, old)
        if not rok then
            err = tostring(err) .. " (and the previous value is lost: " .. tostring(rerr) .. ")"
        end
        return nil, err
    end
    return true
end

-- Apply a validated payload (see ferrule.validate.backends_payload).
-- Returns the new generation, or nil, err, status.
function _M.write(payload)
    local d = dict()
    -- encode first, outside the lock
    local blobs = {}
    for i, b in ipairs(payload.backends) do
        local s, err = util.json_encode(b)
        if not s then
            return nil, "cannot encode backend " .. b.name .. ": " .. tostring(err), 400
        end
        blobs[i] = s
    end

    local ok, lerr = lock(d)
    if not ok then
        return nil, lerr, 503
    end
    _M.fast_written()
    local gen = (d:get("g") or 0) + 1
    local names = {}
    local failed
    for i, b in ipairs(payload.backends) do
        local okb, err = _M.replace(d, "b:" .. b.name, blobs[i], function()
            return d:safe_set("v:" .. b.name, gen)
        end)
        if not okb then
            failed = string.format("shared dict %s: %s (at backend %q)", _M.DICT, tostring(err), b.name)
            -- the store may have lost it (restore can fail too): Lua decides
            fast.remove(b.name)
            break
        end
        -- under the lock, so that the C side sees writes in the store's order
        fast.put(b)
        names[#names + 1] = b.name
    end
    if not failed then
        for _, name in ipairs(payload.removed) do
            d:delete("b:" .. name)
            d:delete("v:" .. name)
            fast.remove(name)
            names[#names + 1] = name
        end
        local okl, err = d:safe_set("l:" .. gen, #names > 0 and table.concat(names, "\n") or "\n")
        if not okl then
            failed = "shared dict " .. _M.DICT .. ": " .. tostring(err)
        end
    end
    d:delete("l:" .. (gen - _M.LOG_KEEP))
    -- Even on failure, publish the generation: without a log entry for it the
    -- workers do a full scan and converge on whatever was written.
    if failed then
        d:delete("l:" .. gen)
    elseif payload.version ~= nil then
        d:safe_set("cv", payload.version)
    end
    -- numbers replace numbers in place: no allocation, no eviction
    local okg, gerr = d:safe_set("g", gen)
    unlock(d)
    if not okg then
        return nil, "shared dict " .. _M.DICT .. ": " .. tostring(gerr), 507
    end
    if failed then
        return nil, failed, 507
    end
    return gen
end

-- Moves the generation without changing any backend (an empty log entry, the
-- backends' version untouched). The certificate writer calls it: workers check `g`
-- on every request, and what they derive from the certificates (which hosts have
-- TLS) is dropped when `g` moves.
function _M.touch()
    return _M.write({ backends = {}, removed = {} })
end

function _M.generation()
    return dict():get("g") or 0
end

function _M.controller_version()
    return dict():get("cv")
end

-- Records which fast-path zone the next write goes to (under the writer lock,
-- before the write: a write that fails halfway is noticed too); -1 for none.
function _M.fast_written()
    dict():safe_set("fe", fast.epoch() or -1)
end

function _M.fast_epoch()
    return dict():get("fe")
end

-- A stored backend as a table (nil if absent or undecodable).
function _M.decoded(name)
    local s = dict():get("b:" .. name)
    return s and cjson.decode(s) or nil
end

function _M.get_raw(name)
    local d = dict()
    return d:get("b:" .. name), d:get("v:" .. name)
end

-- Each worker reports the generation it has applied (w:<pid>, short TTL) so
-- the controller can tell when every worker runs a change.
_M.REPORT_TTL = 3

function _M.report(pid, gen)
    dict():safe_set("w:" .. pid, gen, _M.REPORT_TTL)
end

function _M.workers()
    local d = dict()
    local out = {}
    for _, k in ipairs(d:get_keys(0)) do
        if k:sub(1, 2) == "w:" then
            local v = d:get(k)
            if v then
                out[k:sub(3)] = v
            end
        end
    end
    return out
end

-- All backend names (for debugging endpoints and the full resync).
function _M.names()
    local keys = dict():get_keys(0)
    local out = {}
    for _, k in ipairs(keys) do
        if k:sub(1, 2) == "b:" then
            out[#out + 1] = k:sub(3)
        end
    end
    table.sort(out)
    return out
end

-- Per-worker sync. `state` = { gen = n|nil, versions = { [name] = v } }.
-- `apply(name, backend_table_or_nil, version)` installs or removes one
-- backend. Returns the number of backends decoded.
local function apply_one(d, state, name, apply)
    local v = d:get("v:" .. name) -- read v before b: b is written first
    if v == nil then
        if state.versions[name] ~= nil then
            state.versions[name] = nil
            apply(name, nil)
        end
        return 0
    end
    if state.versions[name] == v then
        return 0
    end
    local s = d:get("b:" .. name)
    if not s then
        state.versions[name] = nil
        apply(name, nil)
        return 0
    end
    local b, err = cjson.decode(s)
    if not b then
        ngx.log(ngx.ERR, "ferrule: cannot decode backend ", name, ": ", err)
        return 0
    end
    state.versions[name] = v
    apply(name, b, v)
    return 1
end

function _M.full_sync(state, apply)
    local d = dict()
    local gen = d:get("g") or 0
    local present = {}
    local decoded = 0
    for _, name in ipairs(_M.names()) do
        present[name] = true
        decoded = decoded + apply_one(d, state, name, apply)
    end
    for name in pairs(state.versions) do
        if not present[name] then
            state.versions[name] = nil
            apply(name, nil)
        end
    end
    state.gen = gen
    state.full_syncs = (state.full_syncs or 0) + 1
    return decoded
end

function _M.sync(state, apply)
    local d = dict()
    local gen = d:get("g") or 0
    local have = state.gen
    if have == gen then
        return 0
    end
    if have == nil or gen < have or gen - have > _M.LOG_KEEP then
        return _M.full_sync(state, apply)
    end
    local changed, order = {}, {}
    for g = have + 1, gen do
        local entry = d:get("l:" .. g)
        if not entry then
            return _M.full_sync(state, apply)
        end
        for _, name in ipairs(util.split_lines(entry)) do
            if not changed[name] then
                changed[name] = true
                order[#order + 1] = name
            end
        end
    end
    local decoded = 0
    for _, name in ipairs(order) do
        decoded = decoded + apply_one(d, state, name, apply)
    end
    state.gen = gen
    return decoded
end

return _M

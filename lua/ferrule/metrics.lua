-- Per-request metrics (ingress-nginx's nginx_ingress_controller_requests and its
-- histograms), read by the controller at each scrape through the configuration
-- API (GET /configuration/metrics): never one message per request.
--
-- Two sources, one format (the dump; controller/src/scrape.rs states it):
--   "module": Ferrule's C module counts in its own log-phase handler into a shared
--             zone (nginx-module/, ferrule_metrics); this file only dumps it.
--   "lua":    without the module, log() (log_by_lua) adds each request to this
--             worker's table, flushed every FLUSH_INTERVAL (and when the worker
--             exits) into lua_shared_dict ferrule_metrics, which keeps its counts
--             across reloads.
-- An entry is one (location labels, canary, method, status); its counters follow
-- the layout of nginx-module/ngx_http_ferrule_metrics.c: for each histogram its sum
-- (ms or bytes) then its buckets (non-cumulative, +Inf last).
local ffi = require("ffi")

local ngx = ngx
local ngx_var = ngx.var
local tonumber = tonumber
local floor = math.floor
local pairs = pairs
local concat = table.concat
local fmt = string.format
local gmatch = string.gmatch

local _M = {}

_M.FLUSH_INTERVAL = 1
local SEP = "\31" -- between an entry's key and a counter's index in the dict

pcall(ffi.cdef, [[
long ngx_http_ferrule_metrics_bound(void);
long ngx_http_ferrule_metrics_dump(unsigned char *buf, size_t size);
]])

local conf -- { source = "module"|"lua", time, length, size (bound lists as text) }
local bounds = {} -- kind -> array of numbers
local slot_len, offsets
local pending, npending = {}, 0
local dict

local METHODS = {
    GET = true, HEAD = true, POST = true, PUT = true, DELETE = true, MKCOL = true,
    COPY = true, MOVE = true, OPTIONS = true, PROPFIND = true, PROPPATCH = true,
    LOCK = true, UNLOCK = true, PATCH = true, TRACE = true, CONNECT = true,
}

local function parse_bounds(text)
    local out = {}
    for v in gmatch(text, "[^,]+") do
        out[#out + 1] = tonumber(v)
    end
    return out
end

local function layout()
    return conf.time .. " " .. conf.length .. " " .. conf.size
end

-- init_by_lua (master, at start and at every reload). `opts`: nil (no metrics)
-- or { source = "module"|"lua", time = "0.005,...", length = ..., size = ... }.
function _M.init(opts)
    conf = opts
    if not conf then
        return
    end
    for _, kind in ipairs({ "time", "length", "size" }) do
        bounds[kind] = parse_bounds(conf[kind])
    end
    local nt, nl, ns = #bounds.time, #bounds.length, #bounds.size
    offsets = {
        request = 0, response = nt + 2, connect = 2 * (nt + 2), header = 3 * (nt + 2),
        request_size = 4 * (nt + 2), response_size = 4 * (nt + 2) + nl + 2,
        bytes_sent = 4 * (nt + 2) + 2 * (nl + 2),
    }
    slot_len = 4 * (nt + 2) + 2 * (nl + 2) + ns + 1
    if conf.source == "lua" then
        dict = ngx.shared.ferrule_metrics
        if not dict then
            error("ferrule.metrics: lua_shared_dict ferrule_metrics is not declared")
        end
        -- counters are only ever read with the layout they were written in
        if dict:get("layout") ~= layout() then
            dict:flush_all()
            dict:flush_expired()
            dict:set("layout", layout())
        end
    end
end

function _M.enabled()
    return conf ~= nil
end

-- Whether the C module counts (the Lua balancer then names a canary in
-- $ferrule_canary, which the module declares).
function _M.module()
    return conf ~= nil and conf.source == "module"
end

local function bucket(b, v)
    for i = 1, #b do
        if v <= b[i] then
            return i
        end
    end
    return #b + 1
end

local function add(vec, i, v)
    vec[i] = (vec[i] or 0) + v
end

-- histogram at 0-based offset `off`: sum at off, buckets from off + 1 (1-based
-- indexes in `vec` are offset + 1)
local function observe(vec, off, b, v, scale)
    add(vec, off + 1, v)
    add(vec, off + 1 + bucket(b, v / scale), 1)
end

-- "0.001, 0.002 : 0.003" (an attempt per comma, a hop per colon), "-" for none:
-- the sum in ms, or nil without a number
local function upstream_ms(s)
    if not s then
        return nil
    end
    local total
    for v in gmatch(s, "[%d%.]+") do
        total = (total or 0) + tonumber(v)
    end
    return total and floor(total * 1000 + 0.5)
end

-- log_by_lua (the "lua" source): `labels` is the location's
-- "namespace\tingress\tservice\tpath\thost", rendered by the controller.
function _M.log(labels)
    if not dict then
        return
    end
    local method = ngx.req.get_method()
    if not METHODS[method] then
        method = "OTHER"
    end
    local canary = ngx.ctx.ferrule_canary or ""
    local key = labels .. "\t" .. canary .. "\t" .. method .. "\t" .. fmt("%03d", ngx.status or 0)
    local vec = pending[key]
    if not vec then
        vec = {}
        pending[key] = vec
        npending = npending + 1
    end
    local tb = bounds.time
    local rt = tonumber(ngx_var.request_time) or 0
    observe(vec, offsets.request, tb, floor(rt * 1000 + 0.5), 1000)
    if ngx_var.upstream_addr then
        observe(vec, offsets.response, tb, upstream_ms(ngx_var.upstream_response_time) or 0, 1000)
        observe(vec, offsets.connect, tb, upstream_ms(ngx_var.upstream_connect_time) or 0, 1000)
        observe(vec, offsets.header, tb, upstream_ms(ngx_var.upstream_header_time) or 0, 1000)
    end
    local lb = bounds.length
    observe(vec, offsets.request_size, lb, tonumber(ngx_var.request_length) or 0, 1)
    local sent = tonumber(ngx_var.bytes_sent) or 0
    observe(vec, offsets.response_size, lb, sent, 1)
    add(vec, offsets.bytes_sent + bucket(bounds.size, sent), 1)
end

-- One counter into the dict without evicting anything (incr with an initial
-- value would push the least recently used counters out when it is full).
local function put(k, v)
    local _, err = dict:incr(k, v)
    if not err then
        return true
    end
    local ok, aerr = dict:safe_add(k, v)
    if ok then
        return true
    end
    if aerr == "exists" then
        -- another worker added it meanwhile
        return dict:incr(k, v) ~= nil
    end
    return false
end

function _M.flush()
    if npending == 0 or not dict then
        return
    end
    local batch = pending
    pending, npending = {}, 0
    local dropped = 0
    for key, vec in pairs(batch) do
        local requests = 0
        for i = offsets.request + 2, offsets.request + #bounds.time + 2 do
            requests = requests + (vec[i] or 0)
        end
        local ok = true
        for i, v in pairs(vec) do
            if not put(key .. SEP .. (i - 1), v) then
                ok = false
            end
        end
        if not ok then
            dropped = dropped + requests
        end
    end
    if dropped > 0 then
        dict:incr("dropped", dropped, 0)
        ngx.log(ngx.WARN, "ferrule: metrics: lua_shared_dict ferrule_metrics is full, ",
                dropped, " requests not counted")
    end
end

local function timer(premature)
    -- premature: the worker exits (a reload): what it counted goes in now
    _M.flush()
    if premature then
        return
    end
end

function _M.init_worker()
    if dict then
        local ok, err = ngx.timer.every(_M.FLUSH_INTERVAL, timer)
        if not ok then
            ngx.log(ngx.ERR, "ferrule: metrics timer: ", err)
        end
    end
end

local function header(dropped)
    return "ferrule-metrics 1\ntime " .. conf.time .. "\nlength " .. conf.length
        .. "\nsize " .. conf.size .. "\ndropped " .. tostring(dropped) .. "\n"
end

local function dump_dict()
    _M.flush()
    local entries = {}
    for _, k in ipairs(dict:get_keys(0)) do
        local entry, i = k:match("^(.*)" .. SEP .. "(%d+)$")
        if entry then
            local v = dict:get(k)
            if v then
                local vec = entries[entry]
                if not vec then
                    vec = {}
                    entries[entry] = vec
                end
                vec[tonumber(i) + 1] = v
            end
        end
    end
    local out = { header(dict:get("dropped") or 0) }
    for entry, vec in pairs(entries) do
        local vals = {}
        for i = 1, slot_len do
            vals[i] = fmt("%d", vec[i] or 0)
        end
        out[#out + 1] = entry .. "\t" .. concat(vals, " ") .. "\n"
    end
    return concat(out)
end

local function dump_module()
    local C = ffi.C
    for _ = 1, 4 do
        local size = tonumber(C.ngx_http_ferrule_metrics_bound())
        if size < 0 then
            return nil, "the C module has no metrics zone"
        end
        local buf = ffi.new("unsigned char[?]", size)
        local n = tonumber(C.ngx_http_ferrule_metrics_dump(buf, size))
        if n >= 0 then
            return ffi.string(buf, n)
        end
        if n ~= -5 then
            return nil, "metrics dump failed: " .. n
        end
        -- entries came between the two calls: again, with the new bound
    end
    return nil, "metrics dump: the zone keeps growing"
end

-- The dump (GET /configuration/metrics): text, or nil and why not.
function _M.dump()
    if not conf then
        return nil, "per-request metrics are off"
    end
    if conf.source == "module" then
        return dump_module()
    end
    return dump_dict()
end

return _M

-- The C fast path (nginx-module/ngx_http_ferrule_module.c): plain backends are
-- mirrored into its shared zone so that their requests are balanced without
-- entering Lua. Everything else stays here. Without the module (or without its
-- zone) every function is a no-op and balancer_by_lua takes every request.
local ffi = require("ffi")
local util = require("ferrule.util")

local ngx = ngx
local ipairs = ipairs
local concat = table.concat

local _M = {}

-- A repeated cdef (a module loaded twice in one VM) fails harmlessly.
pcall(ffi.cdef, [[
int ngx_http_ferrule_fast_set(const char *name, size_t name_len,
    const char *peers, size_t peers_len);
int ngx_http_ferrule_fast_delete(const char *name, size_t name_len);
int ngx_http_ferrule_fast_get(const char *name, size_t name_len,
    unsigned char *buf, size_t size);
int ngx_http_ferrule_fast_tls(const char *host, size_t host_len, int on);
int ngx_http_ferrule_fast_synced(int set);
int ngx_http_ferrule_fast_epoch(void);
int ngx_http_ferrule_fast_reset(void);
]])

-- ffi.C resolves through every library loaded with RTLD_GLOBAL, which NGINX's
-- load_module is.
local C
if pcall(function() return ffi.C.ngx_http_ferrule_fast_set end) then
    C = ffi.C
end

local OK, NO_ZONE, BUSY = 0, -1, -6
local REASONS = {
    [-2] = "bad input", [-3] = "zone full", [-5] = "buffer too small",
    [-6] = "zone lock stuck (every request goes to Lua)",
}

-- Whether the module and its zone are there (unknown until the first call).
local zone = C ~= nil

-- Round robin without canary, affinity, hash or EWMA: all the C side knows.
function _M.plain(b)
    return b.canary == nil and b.affinity == nil and b.upstream_hash_by == nil
        and b.load_balance ~= "ewma"
end

-- Logs a failed call; returns false when the zone cannot be trusted to hold the
-- store any more (its lock is stuck), true otherwise: any other failure leaves
-- the name out of the zone, and the Lua balancer serves it, as it can.
local function checked(rc, name)
    if rc == NO_ZONE then
        zone = false
    elseif rc ~= OK then
        ngx.log(ngx.WARN, "ferrule: fast path: \"", name, "\" stays on Lua: ",
                REASONS[rc] or rc)
    end
    return rc ~= BUSY
end

-- After the store took backend `b` (validated): the zone follows.
function _M.put(b)
    if not zone then
        return true
    end
    local name = b.name
    if not _M.plain(b) or #b.endpoints == 0 then
        -- (no endpoints: Lua answers the 503)
        return checked(C.ngx_http_ferrule_fast_delete(name, #name), name)
    end
    local keys = {}
    for i, e in ipairs(b.endpoints) do
        keys[i] = util.endpoint_key(e.address, e.port)
    end
    local peers = concat(keys, " ")
    return checked(C.ngx_http_ferrule_fast_set(name, #name, peers, #peers), name)
end

function _M.remove(name)
    if zone then
        checked(C.ngx_http_ferrule_fast_delete(name, #name), name)
    end
end

-- After the certificate store took (or dropped) `host`'s certificate: the C side
-- leaves that host's plain HTTP requests to Lua, whose ssl-redirect applies.
function _M.tls(host, on)
    if zone then
        checked(C.ngx_http_ferrule_fast_tls(host, #host, on and 1 or 0), host)
    end
end

-- Which zone this worker writes to (nil: none). Writers record it in the store
-- (ferrule.store.fast_written), so that workers of a new zone notice a write an
-- old worker made to the old one during a reload.
function _M.epoch()
    if not zone then
        return nil
    end
    local e = C.ngx_http_ferrule_fast_epoch()
    return e >= 0 and e or nil
end

-- Whether the zone mirrors the whole store (nil: no zone). A new zone does not
-- (the shared dicts outlive it across a reload), nor one a host did not fit in;
-- until it does, the C side sends every request to Lua.
function _M.synced()
    if not zone then
        return nil
    end
    local rc = C.ngx_http_ferrule_fast_synced(-1)
    if rc == NO_ZONE then
        zone = false
        return nil
    end
    return rc == 1
end

-- Mirrors the whole store into the zone, then marks it complete: `names` of the
-- backends, `backend_of(name)` their validated tables, `hosts` with a certificate.
-- The caller holds the store's lock, so that no write interleaves.
-- It starts from an empty zone (ngx_http_ferrule_fast_reset), so that nothing the
-- store no longer has stays behind.
function _M.resync(names, backend_of, hosts)
    if not zone or C.ngx_http_ferrule_fast_reset() ~= OK then
        return false
    end
    for _, name in ipairs(names) do
        local b = backend_of(name)
        if b and not _M.put(b) then
            return false
        end
    end
    for _, h in ipairs(hosts) do
        if C.ngx_http_ferrule_fast_tls(h, #h, 1) ~= OK then
            ngx.log(ngx.WARN, "ferrule: fast path: the certificates' hosts do not fit",
                    " (or its lock is stuck): every request stays on Lua")
            return false
        end
    end
    return C.ngx_http_ferrule_fast_synced(1) == 1
end

-- The peers the C side holds for `name` (debugging): an array of "address:port",
-- or nil when the Lua balancer serves it.
function _M.peers(name, n)
    if not zone then
        return nil
    end
    local size = 64 * (n + 1)
    local buf = ffi.new("unsigned char[?]", size)
    local len = C.ngx_http_ferrule_fast_get(name, #name, buf, size)
    if len < 0 then
        return nil
    end
    local out = util.array()
    for p in ffi.string(buf, len):gmatch("%S+") do
        out[#out + 1] = p
    end
    return out
end

return _M

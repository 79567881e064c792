-- Small helpers shared by the Ferrule Lua modules. No NGINX I/O here.
local cjson = require("cjson.safe")

local type = type
local tostring = tostring
local find = string.find
local sub = string.sub
local byte = string.byte

local _M = {}

-- lua-cjson 2.1.0 (Debian) has no array_mt / empty_array: an empty Lua table
-- encodes as {}. Tables marked with this metatable encode as [] when empty.
_M.array_mt = { __ferrule_array = true }
local EMPTY_MARK = "\1ferrule-empty-array\1"

local function mark_empty(v)
    if type(v) ~= "table" then
        return v
    end
    if getmetatable(v) == _M.array_mt and next(v) == nil then
        return EMPTY_MARK
    end
    local out = {}
    for k, x in pairs(v) do
        out[k] = mark_empty(x)
    end
    return out
end

-- JSON encode with [] for empty arrays marked with util.array_mt.
-- Safe because validated strings never contain control characters.
function _M.json_encode(v)
    local s, err = cjson.encode(mark_empty(v))
    if not s then
        return nil, err
    end
    return (s:gsub('"\\u0001ferrule%-empty%-array\\u0001"', "[]"))
end

function _M.array(t)
    return setmetatable(t or {}, _M.array_mt)
end

function _M.trim(s)
    return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- "addr:port" identity of an endpoint; IPv6 addresses are bracketed so the
-- key is unambiguous and directly usable by ngx.balancer.set_current_peer.
function _M.is_ipv6(address)
    return find(address, ":", 1, true) ~= nil
end

function _M.peer_host(address)
    if _M.is_ipv6(address) and byte(address, 1) ~= 91 then -- '['
        return "[" .. address .. "]"
    end
    return address
end

function _M.endpoint_key(address, port)
    return _M.peer_host(address) .. ":" .. tostring(port)
end

-- Parse a comma separated nginx list such as $upstream_response_time
-- ("0.001, 0.002 : 0.003") into an array of strings, in order.
function _M.split_upstream_list(s)
    local out = {}
    if not s or s == "" then
        return out
    end
    for item in s:gmatch("[^,:]+") do
        out[#out + 1] = _M.trim(item)
    end
    return out
end

-- Constant-time-ish string comparison (length leak only).
function _M.secure_equals(a, b)
    if type(a) ~= "string" or type(b) ~= "string" or #a ~= #b then
        return false
    end
    local bxor = require("bit").bxor
    local bor = require("bit").bor
    local acc = 0
    for i = 1, #a do
        acc = bor(acc, bxor(byte(a, i), byte(b, i)))
    end
    return acc == 0
end

-- Split on a single-character separator, keeping no empty items.
function _M.split_lines(s)
    local out = {}
    if not s then
        return out
    end
    local start = 1
    while true do
        local i = find(s, "\n", start, true)
        local item = sub(s, start, (i or 0) - 1)
        if item ~= "" then
            out[#out + 1] = item
        end
        if not i then
            break
        end
        start = i + 1
    end
    return out
end

return _M

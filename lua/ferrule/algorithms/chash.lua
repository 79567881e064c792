-- Consistent hashing (ketama-like ring with virtual nodes). Pure apart from
-- the hash function, which defaults to ngx.md5_bin and can be injected.
--
-- Every endpoint contributes `vnodes` points derived only from its own key
-- ("addr:port"), so the ring does not depend on endpoint order and adding one
-- peer to N moves only ~1/(N+1) of the keys (all of them to the new peer).
--
-- The ring is built lazily in the balancer phase, so a request pays for it
-- (the previous build, with a string and an md5 per four points, a table per
-- point and table.sort with a Lua comparator, took 250 ms for 1,000
-- endpoints). Now:
--   * one md5 per endpoint seeds a xorshift128 generator (bit operations
--     only: exact, JIT-compiled, no math.random) whose outputs are the points;
--   * each point is packed with the endpoint's index into one double,
--     point * 2^20 + index, exact since point < 2^32 and index < 2^20, so the
--     ring is one array of numbers and a lookup is a binary search on it;
--   * indexes follow the endpoints sorted by key, so equal points (about 27
--     pairs are expected among 480,000) order the same whatever order the
--     endpoints came in;
--   * the array is put in numeric order by a radix sort on the point:
--     table.sort runs in C outside the JIT at ~350 ns per element (56 ms for
--     1,000 endpoints by itself), two counting passes take a few ms.
local bit = require("bit")
local new_tab = require("table.new")

local bxor = bit.bxor
local lshift = bit.lshift
local rshift = bit.rshift
local byte = string.byte
local floor = math.floor
local sort = table.sort

local _M = {}
local mt = { __index = _M }

_M.VNODES = 160 -- points per endpoint

local SLOT = 1048576 -- 2^20: room for the endpoint index below the point
local U32 = 4294967296 -- 2^32
_M.MAX_ENDPOINTS = SLOT - 1

local function u32(d, o)
    local b1, b2, b3, b4 = byte(d, o, o + 3)
    return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end

local DIGIT = 65536

-- One stable counting pass on the 16-bit digit floor(v / div) % 2^16.
local function radix_pass(src, dst, n, count, div)
    for d = 1, DIGIT do
        count[d] = 0
    end
    for j = 1, n do
        local d = floor(src[j] / div) % DIGIT + 1
        count[d] = count[d] + 1
    end
    local sum = 0
    for d = 1, DIGIT do
        local c = count[d]
        count[d] = sum
        sum = sum + c
    end
    for j = 1, n do
        local v = src[j]
        local d = floor(v / div) % DIGIT + 1
        local p = count[d] + 1
        count[d] = p
        dst[p] = v
    end
end

-- Sorts packed values by point, low half then high half. The passes are
-- stable and the values arrive in index order, so equal points stay in
-- index order: the result is the plain numeric order of the packed values.
local function sort_ring(ring, n)
    local tmp = new_tab(n, 0)
    local count = new_tab(DIGIT, 0)
    radix_pass(ring, tmp, n, count, SLOT)
    radix_pass(tmp, ring, n, count, SLOT * DIGIT)
end

-- opts: { vnodes = n, md5_bin = fn }
function _M.new(endpoints, opts)
    opts = opts or {}
    return setmetatable({
        endpoints = endpoints,
        n = #endpoints,
        vnodes = opts.vnodes or _M.VNODES,
        md5_bin = opts.md5_bin or ngx.md5_bin,
    }, mt)
end

-- Built lazily on first use so a backend update only pays for it if the
-- backend actually receives traffic in this worker.
function _M.build(self)
    local md5_bin = self.md5_bin
    local vnodes = self.vnodes
    if vnodes < 1 then
        vnodes = 1
    end
    local keys, by_key = {}, {}
    for _, ep in ipairs(self.endpoints) do
        if not by_key[ep.key] then
            keys[#keys + 1] = ep.key
        end
        by_key[ep.key] = ep
    end
    -- LuaJIT compares strings bytewise (no locale): the same order in every worker
    sort(keys)
    local n = #keys
    if n > _M.MAX_ENDPOINTS then
        error("consistent hash: more than " .. _M.MAX_ENDPOINTS .. " endpoints")
    end
    local order, ring = new_tab(n, 0), new_tab(n * vnodes, 0)
    local k = 0
    for i = 1, n do
        local key = keys[i]
        order[i] = by_key[key]
        local d = md5_bin(key)
        local x, y, z, w = u32(d, 1), u32(d, 5), u32(d, 9), u32(d, 13)
        if x == 0 and y == 0 and z == 0 and w == 0 then
            w = 1 -- the one state xorshift never leaves
        end
        for _ = 1, vnodes do
            local t = bxor(x, lshift(x, 11))
            x, y, z = y, z, w
            w = bxor(w, rshift(w, 19), t, rshift(t, 8))
            k = k + 1
            ring[k] = (w % U32) * SLOT + i -- bit ops answer signed 32-bit values
        end
    end
    sort_ring(ring, k)
    self.order, self.ring = order, ring
    return self
end

function _M.hash(self, key)
    return u32(self.md5_bin(key), 1)
end

-- first ring index whose point is >= h (wrapping). Packed values of point h
-- are h * SLOT + index with index >= 1, so they all compare above h * SLOT.
local function search(ring, h)
    local target = h * SLOT
    local lo, hi = 1, #ring
    if target > ring[hi] then
        return 1
    end
    while lo < hi do
        local mid = floor((lo + hi) / 2)
        if ring[mid] < target then
            lo = mid + 1
        else
            hi = mid
        end
    end
    return lo
end

-- The ring, its endpoints and the index of `key`'s point on the ring; nothing
-- when there are no endpoints.
local function locate(self, key)
    if self.n == 0 then
        return nil
    end
    if not self.ring then
        self:build()
    end
    return self.ring, self.order, search(self.ring, self:hash(key))
end

-- key: the resolved hash key (string); tried: optional set of keys to avoid.
function _M.pick(self, key, tried)
    local ring, order, i = locate(self, key)
    if not ring then
        return nil
    end
    local total = #ring
    if not tried or not next(tried) then
        return order[ring[i] % SLOT]
    end
    -- retry: walk the ring to the next distinct, untried endpoint
    for _ = 1, total do
        local ep = order[ring[i] % SLOT]
        if not tried[ep.key] then
            return ep
        end
        i = i % total + 1
    end
    return order[ring[i] % SLOT]
end

-- upstream_hash_by_subset_size: the key's subset is the first `size` distinct
-- endpoints on the ring from its point (all of them when there are fewer), so
-- adding or removing an endpoint changes a key's subset by at most one member
-- (ingress-nginx cuts the endpoints into fixed groups instead, which a scale
-- reshuffles). Returns an array of endpoints.
function _M.subset(self, key, size)
    local ring, order, i = locate(self, key)
    if not ring then
        return {}
    end
    local total = #ring
    local want = size < #order and size or #order
    local out, seen = {}, {}
    for _ = 1, total do
        local ep = order[ring[i] % SLOT]
        if not seen[ep.key] then
            seen[ep.key] = true
            out[#out + 1] = ep
            if #out >= want then
                break
            end
        end
        i = i % total + 1
    end
    return out
end

-- A request for key spread over its subset at random (as ingress-nginx), avoiding
-- the peers tried; once the whole subset failed, the ring's next untried peer.
-- rand: math.random's signature, injectable for tests.
function _M.pick_subset(self, key, size, tried, rand)
    local sub = self:subset(key, size)
    local open = sub
    if tried and next(tried) then
        open = {}
        for _, ep in ipairs(sub) do
            if not tried[ep.key] then
                open[#open + 1] = ep
            end
        end
    end
    if #open == 0 then
        return self:pick(key, tried)
    end
    return open[(rand or math.random)(#open)]
end

return _M

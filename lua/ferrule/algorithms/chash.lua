-- Consistent hashing (ketama-like ring with virtual nodes). Pure apart from
-- the hash function, which defaults to ngx.md5_bin and can be injected.
--
-- Every endpoint contributes `vnodes` points derived only from its own key
-- ("addr:port"), so the ring does not depend on endpoint order and adding one
-- peer to N moves only ~1/(N+1) of the keys (all of them to the new peer).
local byte = string.byte
local floor = math.floor
local sort = table.sort

local _M = {}
local mt = { __index = _M }

_M.VNODES = 160 -- points per endpoint (4 per md5 digest, as ketama)

local function u32(d, o)
    local b1, b2, b3, b4 = byte(d, o, o + 3)
    return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
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
    local pts = {}
    local eps = self.endpoints
    local per = floor(self.vnodes / 4)
    if per < 1 then
        per = 1
    end
    for i = 1, #eps do
        local key = eps[i].key
        for r = 0, per - 1 do
            local d = md5_bin(key .. "-" .. r)
            for o = 1, 13, 4 do
                pts[#pts + 1] = { u32(d, o), i, key }
            end
        end
    end
    sort(pts, function(a, b)
        if a[1] ~= b[1] then
            return a[1] < b[1]
        end
        return a[3] < b[3] -- deterministic across workers on collisions
    end)
    local points, owners = {}, {}
    for k = 1, #pts do
        points[k] = pts[k][1]
        owners[k] = pts[k][2]
    end
    self.points, self.owners = points, owners
    return self
end

function _M.hash(self, key)
    return u32(self.md5_bin(key), 1)
end

-- first ring index whose point is >= h (wrapping)
local function search(points, h)
    local lo, hi = 1, #points
    if h > points[hi] then
        return 1
    end
    while lo < hi do
        local mid = floor((lo + hi) / 2)
        if points[mid] < h then
            lo = mid + 1
        else
            hi = mid
        end
    end
    return lo
end

-- key: the resolved hash key (string); tried: optional set of keys to avoid.
function _M.pick(self, key, tried)
    if self.n == 0 then
        return nil
    end
    if not self.points then
        self:build()
    end
    local points, owners, eps = self.points, self.owners, self.endpoints
    local total = #points
    local i = search(points, self:hash(key))
    if not tried or not next(tried) then
        return eps[owners[i]]
    end
    -- retry: walk the ring to the next distinct, untried endpoint
    for _ = 1, total do
        local ep = eps[owners[i]]
        if not tried[ep.key] then
            return ep
        end
        i = i % total + 1
    end
    return eps[owners[i]]
end

return _M

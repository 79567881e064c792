-- EWMA: latency-weighted choice with "power of two choices", modelled on
-- ingress-nginx. Latency statistics are per worker and keyed by endpoint so
-- they survive backend updates. Pure: clock, random and the stats table are
-- injectable for tests.
local exp = math.exp

local _M = {}
local mt = { __index = _M }

_M.DECAY_TIME = 10 -- seconds

-- default per-worker state: [key] = { ewma = seconds, t = when, inflight = n }
_M.stats = {}

local function stat(stats, key)
    local s = stats[key]
    if not s then
        s = { ewma = 0, t = 0, inflight = 0 }
        stats[key] = s
    end
    return s
end

local function decayed(s, now)
    if s.t == 0 then
        return 0
    end
    local td = now - s.t
    if td <= 0 then
        return s.ewma
    end
    return s.ewma * exp(-td / _M.DECAY_TIME)
end

local function score(stats, key, now)
    local s = stats[key]
    if not s then
        return 0
    end
    return decayed(s, now) * (s.inflight + 1)
end

-- opts: { stats = table, rand = fn(n), now = fn() }
function _M.new(endpoints, opts)
    opts = opts or {}
    return setmetatable({
        endpoints = endpoints,
        n = #endpoints,
        stats = opts.stats or _M.stats,
        rand = opts.rand or math.random,
        now = opts.now or ngx.now,
    }, mt)
end

function _M.pick(self, tried)
    local n, eps = self.n, self.endpoints
    if n == 0 then
        return nil
    end
    if n == 1 then
        return eps[1]
    end
    local cands = eps
    if tried and next(tried) then
        cands = {}
        for i = 1, n do
            if not tried[eps[i].key] then
                cands[#cands + 1] = eps[i]
            end
        end
        if #cands == 0 then
            cands = eps
        elseif #cands == 1 then
            return cands[1]
        end
    end
    local m = #cands
    local rand = self.rand
    local a = rand(m)
    local b = rand(m - 1)
    if b >= a then
        b = b + 1
    end
    local now = self.now()
    local pa, pb = cands[a], cands[b]
    if score(self.stats, pb.key, now) < score(self.stats, pa.key, now) then
        return pb
    end
    return pa
end

function _M.started(key, stats)
    local s = stat(stats or _M.stats, key)
    s.inflight = s.inflight + 1
end

function _M.finished(key, stats)
    local s = (stats or _M.stats)[key]
    if s and s.inflight > 0 then
        s.inflight = s.inflight - 1
    end
end

-- Record one observed latency (seconds) for an endpoint.
function _M.observe(key, rtt, now, stats)
    local s = stat(stats or _M.stats, key)
    if s.t == 0 then
        s.ewma = rtt
    else
        local td = now - s.t
        if td < 0 then
            td = 0
        end
        local w = exp(-td / _M.DECAY_TIME)
        s.ewma = s.ewma * w + rtt * (1 - w)
    end
    s.t = now
end

-- Forget endpoints not touched for `age` seconds (called from a timer).
function _M.prune(now, age, stats)
    stats = stats or _M.stats
    for key, s in pairs(stats) do
        if s.inflight == 0 and now - s.t > age then
            stats[key] = nil
        end
    end
end

return _M

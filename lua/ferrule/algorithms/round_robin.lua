-- Round robin over a backend's endpoints. Pure (random offset injectable).
-- endpoints: array of { key = "addr:port", ... }
local _M = {}
local mt = { __index = _M }

function _M.new(endpoints, rand)
    local n = #endpoints
    local self = { endpoints = endpoints, n = n, idx = 0 }
    if n > 0 then
        -- start at a random offset so workers do not move in lock-step
        self.idx = (rand or math.random)(n) - 1
    end
    return setmetatable(self, mt)
end

-- tried: optional set { [key] = true } of peers to avoid (retries).
function _M.pick(self, tried)
    local n = self.n
    if n == 0 then
        return nil
    end
    local eps = self.endpoints
    for _ = 1, n do
        local i = self.idx % n + 1
        self.idx = i
        local ep = eps[i]
        if not tried or not tried[ep.key] then
            return ep
        end
    end
    -- every peer was tried already: keep rotating
    local i = self.idx % n + 1
    self.idx = i
    return eps[i]
end

return _M

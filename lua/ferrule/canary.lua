-- Canary decision, ingress-nginx semantics. Pure but for ngx.re (header_pattern).
-- policy: { header, header_value, header_pattern, cookie, weight, weight_total }
-- header_val / cookie_val: the request's values (or nil)
-- rand(n): integer in 1..n (math.random)
local _M = {}

-- header_pattern errors already logged by this worker
local logged = {}

function _M.decide(policy, header_val, cookie_val, rand)
    if policy.header and header_val then
        if policy.header_value then
            if header_val == policy.header_value then
                return true
            end
            -- any other value: ignored, fall through to cookie and weight
        elseif policy.header_pattern then
            -- compiled once per worker ("o"), JIT ("j")
            local from, _, err = ngx.re.find(header_val, policy.header_pattern, "jo")
            if from then
                return true
            elseif err then
                -- as ingress-nginx: an unusable pattern keeps the primary
                if not logged[policy.header_pattern] then
                    -- once per pattern and worker: a client must not flood the log
                    logged[policy.header_pattern] = true
                    ngx.log(ngx.ERR, "ferrule: canary header_pattern ", policy.header_pattern,
                            ": ", err, " (the primary serves; logged once)")
                end
                return false
            end
            -- no match: fall through to cookie and weight
        elseif header_val == "always" then
            return true
        elseif header_val == "never" then
            return false
        end
    end
    if policy.cookie and cookie_val then
        if cookie_val == "always" then
            return true
        elseif cookie_val == "never" then
            return false
        end
    end
    local w = policy.weight or 0
    if w > 0 then
        local total = policy.weight_total or 100
        if w >= total then
            return true
        end
        return (rand or math.random)(total) <= w
    end
    return false
end

-- "X-Canary" -> "http_x_canary" (the nginx variable name)
function _M.header_var(header)
    return "http_" .. header:lower():gsub("-", "_")
end

return _M
